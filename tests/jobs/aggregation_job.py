"""One streaming aggregation with spillstore in a fresh JVM: for the first-spill and the
many-partitions tests.

    python tests/jobs/aggregation_job.py SPEC.json

SPEC.json: ``{"master", "partitions" (spark.sql.shuffle.partitions), "budget" (a spillstore
memoryBudget), "shape", "input", "checkpoint", "output", "report", "read_state"}``. Shapes:

- ``mod3_count``: input ``value LONG``; ``groupBy(value % 3 AS k).count()``.
- ``key_count_sum``: input ``key LONG, value LONG``;
  ``groupBy(key).agg(count(*) AS n, sum(value) AS total)``.

The query runs in update mode with the file source (``maxFilesPerTrigger=1``,
``trigger(availableNow=True)``: file i is batch i) and writes each batch's rows with
``harness.batch_writer``. spillstore's local dir is left at its default (under Spark's local
dir). With ``read_state``, the final state is then read back through the state data source
(``spark.read.format("statestore")``) into ``<report dir>/state.json`` as
``[partition, key, [value fields...]]`` rows. The report (JSON) holds the error (the Java
exception's first line, or null), the message, the progress of every batch and the seconds
taken.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for harness
import harness  # noqa: E402

SCHEMAS = {"mod3_count": "value LONG", "key_count_sum": "key LONG, value LONG"}


def build(spark: Any, shape: str, input_dir: str) -> Any:
    """The streaming aggregation of ``shape`` over the JSON files in ``input_dir``."""
    from pyspark.sql import functions as F

    df = spark.readStream.schema(SCHEMAS[shape]).option("maxFilesPerTrigger", 1).json(input_dir)
    if shape == "mod3_count":
        return df.groupBy((F.col("value") % 3).alias("k")).count()
    return df.groupBy("key").agg(F.count("*").alias("n"), F.sum("value").alias("total"))


def read_state(spark: Any, checkpoint: str) -> list[list[Any]]:
    """Every state row of the query's (single) stateful operator, as of its last batch."""
    df = spark.read.format("statestore").load(checkpoint)
    return [[r["partition_id"], list(r["key"]), list(r["value"])] for r in df.collect()]


def main(spec_file: str) -> int:
    """Run the query of SPEC.json in a new session and write the report; 0 unless the
    session itself failed (the query's failure is in the report)."""
    spec = json.loads(Path(spec_file).read_text())
    report: dict[str, Any] = {"error": None, "message": None, "progress": []}
    started = time.monotonic()
    spark = (harness.session_builder(spec["master"], partitions=spec["partitions"],
                                     memoryBudget=spec["budget"])
             .appName("spillstore-aggregation-job").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    try:
        output = Path(spec["output"])
        output.mkdir(parents=True, exist_ok=True)
        handle = (
            build(spark, spec["shape"], spec["input"]).writeStream.outputMode("update")
            .foreachBatch(harness.batch_writer(output))
            .option("checkpointLocation", spec["checkpoint"])
            .trigger(availableNow=True)
            .start()
        )
        harness.await_query(handle, report, harness.QUERY_TIMEOUT_S)
        if report["error"] is None and spec["read_state"]:
            state = read_state(spark, spec["checkpoint"])
            Path(spec["report"]).with_name("state.json").write_text(json.dumps(state))
    finally:
        harness.write_job_report(spark, report, spec["report"], started)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
