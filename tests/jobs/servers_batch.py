"""Parquet batches on the tests' servers, on command, in a JVM of its own (the s3a jars go on
``spark.jars``, which only a new JVM takes): for ``tests/test_servers.py``.

    python tests/jobs/servers_batch.py CONF.json

CONF.json: the session's conf (``{key: value}``, the servers' ``spark_conf``). Then reads
commands from stdin, one a line, and answers each with one line on stdout,
``result <JSON>``:

- ``write URL``: writes ``ROWS`` rows (``id LONG``, 0 until ``ROWS``) as parquet to URL
  (overwrite); answers ``{"ok": true, "seconds"}``.
- ``read URL``: reads URL's parquet; answers ``{"ok": true, "rows", "id_sum", "seconds"}``.

A command that fails answers ``{"ok": false, "error"}`` (the Java exception's first line) and
the session goes on. The job ends when stdin closes.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for harness
import harness  # noqa: E402

ROWS = 1000


def run(spark: Any, command: str, url: str) -> dict[str, Any]:
    if command == "write":
        spark.range(ROWS).repartition(2).write.mode("overwrite").parquet(url)
        return {"ok": True}
    if command == "read":
        rows = spark.read.parquet(url).selectExpr("count(*) AS n", "sum(id) AS s").first()
        return {"ok": True, "rows": rows["n"], "id_sum": rows["s"]}
    raise ValueError(f"unknown command {command!r}")


def main() -> None:
    from pyspark.sql import SparkSession

    conf = json.loads(Path(sys.argv[1]).read_text())
    builder = SparkSession.builder.master("local[2]").appName("servers-batch")
    for key, value in {"spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false",
                       **conf}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    try:
        for line in sys.stdin:
            command, url = line.split()
            started = time.monotonic()
            try:
                answer = run(spark, command, url)
            except Exception as e:  # Py4JJavaError, AnalysisException
                answer = {"ok": False, "error": harness.java_error(str(e)) or str(e)[:2000]}
            answer["seconds"] = round(time.monotonic() - started, 1)
            print("result " + json.dumps(answer), flush=True)
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
