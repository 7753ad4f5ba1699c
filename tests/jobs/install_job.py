"""A streaming aggregation the way a user runs one with an installed spillstore, for
test_install.py. It imports nothing from the repository (the test copies it to a directory of
its own and runs it there):

    python install_job.py SPEC.json                  # spillstore installed (spec "configure")
    spark-submit --packages ... install_job.py SPEC.json   # the provider conf from spark-submit

SPEC.json: ``{"configure" (bool: call spillstore.configure), "input" (JSON files of
``key LONG``, one batch each), "checkpoint", "report"}``. The report (JSON): the error (null
if the query finished), the final counts ``[[key, count], ...]``, the last batch's custom state
metrics and, with "configure", the file the spillstore package was imported from.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession


def main(spec_file: str) -> int:
    spec = json.loads(Path(spec_file).read_text())
    report: dict[str, Any] = {"error": None}
    builder = SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
    if spec["configure"]:
        import spillstore

        report["spillstore_file"] = spillstore.__file__
        builder = spillstore.configure(builder)
    spark = builder.config("spark.sql.shuffle.partitions", "2").getOrCreate()
    try:
        counts = (spark.readStream.schema("key LONG").option("maxFilesPerTrigger", 1)
                  .json(spec["input"]).groupBy("key").count())
        query = (counts.writeStream.format("memory").queryName("counts")
                 .outputMode("complete").option("checkpointLocation", spec["checkpoint"])
                 .trigger(availableNow=True).start())
        try:
            if not query.awaitTermination(300):
                report["error"] = "not finished within 300 s"
        except Exception as e:  # the query's failure, as the user would see it
            report["error"] = str(e)[:6000]
        finally:
            if query.isActive:
                query.stop()
        progress = query.lastProgress or {}
        report["metrics"] = (progress.get("stateOperators") or [{}])[0].get("customMetrics", {})
        report["counts"] = sorted([r["key"], r["count"]] for r in spark.table("counts").collect())
    finally:
        spark.stop()
        Path(spec["report"]).write_text(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
