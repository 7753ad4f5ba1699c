"""A Spark Connect client of the server tests/test_e2e_connect.py starts, set up by
``spillstore.configure`` as the README says: a streaming count over the input files (one per
batch) run to its end with ``processAllAvailable`` into a memory sink, then the server check
(``check_connect_server``) asking for a class the server lacks and for another version.

    python tests/jobs/connect_job.py SPEC.json

SPEC: ``url`` (the server's), ``input`` (JSON files of a ``key`` column), ``checkpoint`` and
``report``, where the job writes what the test checks: the builder's confs, every warning
raised, the sink's rows, each batch's progress, ``state_metrics`` of the query and the two
checks' messages.
"""

from __future__ import annotations

import json
import sys
import time
import warnings
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for harness
import harness  # noqa: E402
import spillstore  # noqa: E402
from spillstore import _config  # noqa: E402

SCHEMA = "key STRING"
BUDGET = "64m"
# What stands in for a server without spillstore's jar: a class no jar has.
MISSING_CLASS = "spillstore.NoBuildInfo"
OTHER_VERSION = "9.9.9"


def main() -> None:
    spec = json.loads(Path(sys.argv[1]).read_text())
    report: dict[str, Any] = {"error": None, "message": None}
    started = time.monotonic()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        builder = spillstore.configure(
            SparkSession.builder.remote(spec["url"]).config("spark.sql.shuffle.partitions", "2"),
            memoryBudget=BUDGET)
        report["builder"] = dict(builder._options)
        spark = builder.getOrCreate()
        try:
            count(spark, spec, report)
            report["without_jar"] = refusal(spark, "_BUILD_INFO_CLASS", MISSING_CLASS)
            report["other_version"] = refusal(spark, "__version__", OTHER_VERSION)
        finally:
            report["warnings"] = [f"{w.category.__name__}: {w.message}" for w in caught]
            harness.write_job_report(spark, report, spec["report"], started)


def count(spark: Any, spec: dict[str, Any], report: dict[str, Any]) -> None:
    """Count the rows per key of every input file, one file per batch, into ``report``."""
    counts = (spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(spec["input"])
              .groupBy("key").count())
    query = (counts.writeStream.outputMode("complete").format("memory").queryName("counts")
             .option("checkpointLocation", spec["checkpoint"]).start())
    try:
        query.processAllAvailable()
        report["query_metrics"] = spillstore.state_metrics(query)
        report["rows"] = sorted([r["key"], r["count"]] for r in spark.table("counts").collect())
    except Exception as e:  # the query's failure, from the server
        report["error"], report["message"] = harness.java_error(str(e)), str(e)[:6000]
    finally:
        report["progress"] = json.loads(json.dumps(query.recentProgress, default=str))
        query.stop()


def refusal(spark: Any, name: str, value: str) -> str:
    """``check_connect_server``'s message while ``spillstore._config.<name>`` is ``value``."""
    saved = getattr(_config, name)
    setattr(_config, name, value)
    try:
        spillstore.check_connect_server(spark)
    except spillstore.ConnectServerError as error:
        return str(error)
    finally:
        setattr(_config, name, saved)
    return "no error"


if __name__ == "__main__":
    main()
