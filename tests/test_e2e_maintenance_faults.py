"""A damaged file met by one store's maintenance fails nothing else, through Spark's own
maintenance thread. Spark answers an error that reaches that thread by unloading providers
(3.5: every provider of the executor; 4.x: that one), so the next batch would have to reload
the store from the checkpoint and meet the damaged journal. spillstore keeps the error: a WARN,
``spillstoreMaintenanceFailures``, and the loaded stores go on from their live state. The next
commit writes a snapshot of that state (``spillstoreSnapshotsRepaired``), so a restart of the
query loads past the damaged journal."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import harness
import spillstore

PARTITIONS = 2  # spark.sql.shuffle.partitions of the tests' session
CONFS = {
    "spark.sql.streaming.stateStore.maintenanceInterval": "200ms",
    "spark.sql.streaming.stateStore.minDeltasForSnapshot": "4",
}
KEYS = 20


def _batch_keys(batch: int) -> list[str]:
    return [f"k{i}" for i in range(KEYS)] + [f"only{batch}"]


def _provider_loaded(spark: Any, checkpoint: Path, run_id: str, partition: int) -> bool:
    state = spark._jvm.org.apache.spark.sql.execution.streaming.state
    store = state.StateStoreId(f"file:{checkpoint}/state", 0, partition, "default")
    provider = state.StateStoreProviderId(store, spark._jvm.java.util.UUID.fromString(run_id))
    return bool(state.StateStore.isLoaded(provider))


def test_damaged_journal_met_by_maintenance_leaves_the_query_running_exactly(
        spark: Any, tmp_path: Path) -> None:
    input_dir, checkpoint = tmp_path / "input", tmp_path / "checkpoint"
    input_dir.mkdir()
    name = f"maintenance_faults_{tmp_path.name}"

    def run_batch(batch: int) -> None:
        staged = tmp_path / f"batch-{batch}.json"
        staged.write_text("".join(json.dumps({"key": k}) + "\n" for k in _batch_keys(batch)))
        staged.rename(input_dir / staged.name)  # the source never sees half a file
        query.processAllAvailable()

    def start() -> Any:
        return (
            spark.readStream.schema("key STRING").json(str(input_dir))
            .groupBy("key").count()
            .writeStream.outputMode("complete").format("memory").queryName(name)
            .option("checkpointLocation", str(checkpoint))
            .start()
        )

    with harness.fresh_maintenance(spark, CONFS):
        query = start()
        try:
            for batch in range(2):
                run_batch(batch)  # versions 1 and 2
            journal = checkpoint / "state" / "0" / "0" / "2.journal"
            damaged = bytearray(journal.read_bytes())
            damaged[len(damaged) // 2] ^= 0x10  # bit rot the live state never reads again
            journal.write_bytes(bytes(damaged))
            for batch in range(2, 4):
                run_batch(batch)  # versions 3 and 4: both stores' snapshots of 4 are due
            # The undamaged store's snapshot shows maintenance ran past version 4; the damaged
            # one's merge fails each run, every 200 ms.
            other = checkpoint / "state" / "0" / "1" / "4.snapshot"
            deadline = time.monotonic() + 60
            while not other.exists():
                assert time.monotonic() < deadline, "maintenance wrote no snapshot of version 4"
                time.sleep(0.1)
            time.sleep(1)
            loaded = [_provider_loaded(spark, checkpoint, query.runId, p)
                      for p in range(PARTITIONS)]
            for batch in range(4, 6):
                run_batch(batch)
            progress = [p for p in query.recentProgress if p["numInputRows"] > 0]
        finally:
            query.stop()
        assert query.exception() is None, query.exception()
        query = start()  # a new run loads every store from the checkpoint
        try:
            run_batch(6)
            result = {r["key"]: r["count"] for r in spark.table(name).collect()}
        finally:
            query.stop()
        assert query.exception() is None, query.exception()

    assert loaded == [True] * PARTITIONS, (
        f"providers unloaded after the maintenance failure: {loaded}")
    expected: dict[str, int] = {}
    for batch in range(7):
        for key in _batch_keys(batch):
            expected[key] = expected.get(key, 0) + 1
    assert result == expected
    assert not (checkpoint / "state" / "0" / "0" / "4.snapshot").exists()
    assert (checkpoint / "state" / "0" / "0" / "5.snapshot").exists(), "the commit of 5 repairs"
    metrics = [spillstore.state_metrics(p) for p in progress]
    failures = harness.metric_totals(progress, "spillstoreMaintenanceFailures")
    assert failures is not None and failures > 0, metrics
    assert harness.metric_totals(progress, "spillstoreSnapshotsRepaired") == 1, metrics
