"""A streaming count over many more keys than the memory budget holds, in its own JVM with a
small driver heap. Prints one JSON line of results; exits non-zero on any wrong batch.

    python tests/jobs/spill_job.py KEYS ROWS_PER_BATCH BATCHES BUDGET DRIVER_MEMORY

The checkpoint is a temporary directory (under ``TMPDIR``), deleted at the end.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from pyspark.sql import functions as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for harness
import harness  # noqa: E402
import spillstore  # noqa: E402


def main() -> None:
    keys, per_batch, batches = (int(a) for a in sys.argv[1:4])
    budget, driver_memory = sys.argv[4], sys.argv[5]
    assert keys % per_batch == 0, "keys must be a multiple of rows per batch"
    builder = (
        harness.session_builder("local[2]", partitions=4, memoryBudget=budget)
        .appName("spillstore-heavy")
        .config("spark.driver.memory", driver_memory)
    )
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    with tempfile.TemporaryDirectory(prefix="spill-heavy-") as checkpoint:
        run(spark, keys, per_batch, batches, budget, driver_memory, checkpoint)


def run(spark: Any, keys: int, per_batch: int, batches: int, budget: str, driver_memory: str,
        checkpoint: str) -> None:
    """Run the count until ``batches`` batches are done, print the report, stop ``spark``."""
    jvm = spark.sparkContext._jvm
    errors: list[str] = []

    def check(batch: Any, batch_id: int) -> None:
        # Batch b reads values [b*R, (b+1)*R); key v % K has been seen v // K + 1 times.
        row = batch.agg(F.count("*").alias("n"), F.min("count").alias("lo"),
                        F.max("count").alias("hi"), F.sum("count").alias("s")).first()
        expected = batch_id * per_batch // keys + 1
        if (row.n, row.lo, row.hi) != (per_batch, expected, expected):
            errors.append(f"batch {batch_id}: got {row}, expected {per_batch} rows of {expected}")

    counts = (
        spark.readStream.format("rate-micro-batch").option("rowsPerBatch", per_batch).load()
        .select((F.col("value") % keys).alias("k")).groupBy("k").count()
    )
    start = time.time()
    query = (
        counts.writeStream.outputMode("update").foreachBatch(check)
        .option("checkpointLocation", checkpoint)
        .trigger(processingTime="0 seconds").start()
    )
    while query.lastProgress is None or query.lastProgress["batchId"] < batches - 1:
        if query.exception() is not None:
            raise SystemExit(f"query failed: {query.exception()}")
        time.sleep(0.5)
    query.stop()
    wall = time.time() - start
    progress = [p for p in query.recentProgress if p["numInputRows"] > 0]
    metrics = [spillstore.state_metrics(p) for p in progress]
    hits = sum(m.get("spillstoreCacheHits", 0) for m in metrics)
    misses = sum(m.get("spillstoreCacheMisses", 0) for m in metrics)
    mx = jvm.java.lang.management.ManagementFactory
    gc_ms = sum(b.getCollectionTime() for b in mx.getGarbageCollectorMXBeans())
    pid = jvm.java.lang.ProcessHandle.current().pid()
    with open(f"/proc/{pid}/status") as status:
        rss_kb = next(int(line.split()[1]) for line in status if line.startswith("VmHWM"))
    last = metrics[-1]
    print(json.dumps({
        "keys": keys, "rows": per_batch * batches, "budget": budget,
        "driver_memory": driver_memory,
        "max_heap_mb": mx.getMemoryMXBean().getHeapMemoryUsage().getMax() // (1 << 20),
        "wall_s": round(wall, 1), "gc_s": round(gc_ms / 1000, 1), "peak_rss_mb": rss_kb // 1024,
        "state_rows": sum(op["numRowsTotal"] for op in progress[-1]["stateOperators"]),
        "heap_entries": last.get("spillstoreHeapEntries"),
        "cold_entries": last.get("spillstoreColdEntries"),
        "heap_bytes": last.get("spillstoreHeapBytes"),
        "cold_bytes": last.get("spillstoreColdBytes"),
        # the budget in force at the end, as the executor's metrics source publishes it
        "budget_bytes":
            jvm.spillstore.ExecutorScope.current().stats().snapshot().apply("budgetBytes"),
        "evictions": sum(m.get("spillstoreEvictions", 0) for m in metrics),
        "heap_mb_per_batch": [m.get("spillstoreHeapBytes", 0) >> 20 for m in metrics],
        "hit_ratio": round(hits / (hits + misses), 4) if hits + misses else None,
        "errors": errors,
    }))
    spark.stop()
    if errors:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
