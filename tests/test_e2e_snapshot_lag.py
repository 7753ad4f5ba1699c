"""Snapshot lag as Spark 4.1+ shows it for spillstore: each store's
``SnapshotLastUploaded.partition_<p>_<store>`` in query progress is the newest version its
provider wrote a snapshot of (-1 before its first), checked against the snapshot files the
query's maintenance wrote between batches."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import harness
import pytest

pytestmark = pytest.mark.skipif(harness.SPARK_LINE < (4, 1),
                                reason="state store instance metrics arrived in Spark 4.1")

PARTITIONS = 2  # spark.sql.shuffle.partitions of the tests' session
BATCHES = 4
# Maintenance snapshots every store with a journal after its newest snapshot, every 100 ms.
CONFS = {
    "spark.sql.streaming.stateStore.maintenanceInterval": "100ms",
    "spark.sql.streaming.stateStore.minDeltasForSnapshot": "1",
}


def _metric(partition: int) -> str:
    return f"SnapshotLastUploaded.partition_{partition}_default"


def _await_snapshots(checkpoint: Path, version: int) -> None:
    """Until maintenance has written every partition's snapshot of ``version``."""
    files = [checkpoint / "state" / "0" / str(p) / f"{version}.snapshot" for p in range(PARTITIONS)]
    deadline = time.monotonic() + 60
    while not all(f.exists() for f in files):
        assert time.monotonic() < deadline, f"maintenance wrote no snapshot of {version}: {files}"
        time.sleep(0.1)


def test_progress_shows_each_stores_last_snapshot(spark: Any, tmp_path: Path) -> None:
    input_dir, checkpoint = tmp_path / "input", tmp_path / "checkpoint"
    input_dir.mkdir()
    with harness.fresh_maintenance(spark, CONFS):
        query = (
            spark.readStream.schema("key STRING").json(str(input_dir))
            .groupBy("key").count()
            .writeStream.outputMode("update").format("noop")
            .option("checkpointLocation", str(checkpoint))
            .queryName(f"snapshot_lag_{tmp_path.name}")
            .start()
        )
        try:
            for batch in range(BATCHES):
                staged = tmp_path / f"batch-{batch}.json"
                staged.write_text("".join(json.dumps({"key": f"k{i}"}) + "\n" for i in range(10)))
                staged.rename(input_dir / staged.name)  # the source never sees half a file
                query.processAllAvailable()
                _await_snapshots(checkpoint, batch + 1)  # batch b commits version b + 1
            progress = [p for p in query.recentProgress if p["numInputRows"] > 0]
        finally:
            query.stop()
        assert query.exception() is None, query.exception()

    assert [p["batchId"] for p in progress] == list(range(BATCHES))
    for p in progress:
        batch = p["batchId"]
        (op,) = p["stateOperators"]
        lag = {k: v for k, v in op["customMetrics"].items()
               if k.startswith("SnapshotLastUploaded.")}
        assert set(lag) == {_metric(q) for q in range(PARTITIONS)}, lag
        # Before batch b, every store had written the snapshot of version b (b > 0); maintenance
        # may also have written b + 1, the version b committed, before b's metrics were taken.
        allowed = {-1, 1} if batch == 0 else {batch, batch + 1}
        assert set(lag.values()) <= allowed, (batch, lag)
