"""A streaming query on spillstore with the Spark UI on, for the browser test.

Run by test_ui_browser.py as ``python ui_worker.py PORT CHECKPOINT_DIR`` in its own process (the
tests' shared session has the UI off, and a process has one SparkContext). It starts a count
per key over a rate stream with a heap budget small enough that part of the state spills,
waits for ``MIN_BATCHES`` batches with state, prints one JSON line ``{"ui", "app_id",
"run_id", "name"}`` and keeps the query running until its stdin is closed.
"""

from __future__ import annotations

import json
import os
import sys
import time

import spillstore

MIN_BATCHES = 4
QUERY_NAME = "spillstore_ui_test"


def main(port: str, checkpoint: str) -> int:
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    os.environ["PYSPARK_PYTHON"] = sys.executable
    builder = (
        SparkSession.builder.master("local[2]")
        .appName("spillstore-ui-test")
        .config("spark.ui.enabled", "true")
        .config("spark.ui.port", port)
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", "1g")
        .config("spark.sql.shuffle.partitions", "2")
    )
    # Half the rows hit 1000 hot keys, half 20000 others: 1 MB holds the hot keys (~120
    # bytes each) but not all 21000, so hot lookups hit the heap and the others mostly miss.
    spark = spillstore.configure(builder, memoryBudget="1m").getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    try:
        query = (
            spark.readStream.format("rate").option("rowsPerSecond", 4000).load()
            .select(F.when(F.col("value") % 2 == 0, F.col("value") % 1000)
                    .otherwise(1000 + F.col("value") % 20000).alias("key"))
            .groupBy("key").count()
            .writeStream.outputMode("update").format("noop")
            .queryName(QUERY_NAME)
            .option("checkpointLocation", checkpoint)
            .trigger(processingTime="1 second")
            .start()
        )
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            with_state = [p for p in query.recentProgress if p["stateOperators"]
                          and p["stateOperators"][0]["numRowsTotal"] > 0]
            if len(with_state) >= MIN_BATCHES:
                break
            if query.exception() is not None:
                raise RuntimeError(f"query failed: {query.exception()}")
            time.sleep(0.5)
        else:
            raise RuntimeError(f"fewer than {MIN_BATCHES} batches with state in 90 s")
        print(json.dumps({
            "ui": spark.sparkContext.uiWebUrl,
            "app_id": spark.sparkContext.applicationId,
            "run_id": str(query.runId),
            "name": QUERY_NAME,
        }), flush=True)
        sys.stdin.read()  # until the test closes our stdin
        query.stop()
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
