"""Checkpoint format v2 (``spark.sql.streaming.stateStore.checkpointFormatVersion=2``, Spark
4.x): every commit attempt names its files by a checkpoint id that Spark records in its commit
log. Queries on spillstore with v2 survive a crash between the state's commit and the batch's
(the retried batch commits under a new id beside the failed attempt's files) and a restart,
with exactly the results of Spark's default provider; the state data source (4.1+) reads the
lineage Spark recorded; complete output mode (4.0 iterates a store after its commit) works."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import harness
import pytest
from harness import DEFAULT, NUM_BATCHES, QUERIES, SPILLSTORE, Run

FullRun = Callable[[str, str], Run]

pytestmark = pytest.mark.skipif(harness.SPARK_LINE < (4, 0),
                                reason="Spark 3.5 has no checkpoint format v2")

FORMAT_CONF = "spark.sql.streaming.stateStore.checkpointFormatVersion"


@contextmanager
def _format_v2(spark: Any) -> Iterator[None]:
    spark.conf.set(FORMAT_CONF, "2")
    try:
        yield
    finally:
        spark.conf.unset(FORMAT_CONF)


def _state_file_names(checkpoint: Path) -> list[str]:
    return [p.name for p in (checkpoint / "state").rglob("*")
            if p.is_file() and p.suffix in (".journal", ".snapshot")]


def _commit_log_ids(checkpoint: Path) -> dict[int, Any]:
    """Batch id -> the state checkpoint ids its commit-log entry records."""
    ids = {}
    for batch in harness.committed_batches(checkpoint):
        entry = json.loads((checkpoint / "commits" / str(batch)).read_text().splitlines()[1])
        ids[batch] = entry.get("stateUniqueIds")
    return ids


@pytest.mark.parametrize("query", ["agg_update_window", "join_left_outer"])
def test_v2_crash_between_state_and_batch_commit_then_restart_is_exact(
        spark: Any, full_run: FullRun, tmp_path: Path, query: str) -> None:
    """Batch 2 commits its state (under a checkpoint id) and fails before its batch commit; the
    restart runs batch 2 again, whose commit gets another id: both attempts' files are there,
    and only the one the commit log records is read from then on."""
    inputs = harness.write_inputs(tmp_path, QUERIES[query].sources, range(NUM_BATCHES))
    checkpoint, output = tmp_path / "checkpoint", tmp_path / "output"
    with _format_v2(spark):
        harness.run_query(spark, query, inputs, checkpoint, output, SPILLSTORE, crash_at=2)
        assert harness.committed_batches(checkpoint) == [0, 1]
        resumed = harness.run_query(spark, query, inputs, checkpoint, output, SPILLSTORE)
    harness.assert_same_output_as_default(resumed, full_run(query, DEFAULT), query,
                                          "spillstore v2")
    assert harness.names_by_checkpoint_ids(checkpoint)
    names = _state_file_names(checkpoint)
    # Version 3 (batch 2) has two journals per store: the failed attempt's and the retry's.
    assert len([n for n in names if n.startswith("3_")]) > len(
        [n for n in names if n.startswith("2_")]), names
    ids = _commit_log_ids(checkpoint)
    assert ids and all(ids.values()), f"commit log without checkpoint ids: {ids}"


@pytest.mark.skipif(harness.SPARK_LINE < (4, 1),
                    reason="Spark 4.0's state data source passes no checkpoint ids")
def test_v2_state_data_source_reads_the_recorded_lineage(
        spark: Any, full_run: FullRun, tmp_path: Path) -> None:
    """The state and the change feed of a v2 checkpoint, whose batch 2 ran twice, equal those of
    the same query on spillstore with format v1."""
    query = "agg_update_window"
    inputs = harness.write_inputs(tmp_path, QUERIES[query].sources, range(NUM_BATCHES))
    checkpoint, output = tmp_path / "checkpoint", tmp_path / "output"
    with _format_v2(spark):
        harness.run_query(spark, query, inputs, checkpoint, output, SPILLSTORE, crash_at=2)
        harness.run_query(spark, query, inputs, checkpoint, output, SPILLSTORE)
    v1 = full_run(query, SPILLSTORE)
    last = harness.committed_batches(checkpoint)[-1]
    assert last == harness.committed_batches(v1.checkpoint)[-1]

    def state(ckpt: Path, **options: Any) -> list[str]:
        reader = spark.read.format("statestore").option("path", str(ckpt))
        for name, value in options.items():
            reader = reader.option(name, value)
        return sorted(harness.canonical(r) for r in reader.load().collect())

    feed = {"readChangeFeed": True, "changeStartBatchId": 0, "changeEndBatchId": last}
    expected = {batch: state(v1.checkpoint, batchId=batch) for batch in (1, 3, last)}
    expected_feed = state(v1.checkpoint, **feed)
    # Spark 4.1 reads a v2 commit log only in a session set to format 2; 4.2+ in any session.
    with _format_v2(spark) if harness.SPARK_LINE == (4, 1) else contextlib.nullcontext():
        for batch, rows in expected.items():
            assert state(checkpoint, batchId=batch) == rows, batch
        assert state(checkpoint, **feed) == expected_feed


def test_v2_complete_output_mode_across_a_restart(spark: Any, tmp_path: Path) -> None:
    """Complete mode writes every group each batch: on 4.0 Spark iterates the state store
    after its commit, which then reads the version its own attempt committed."""
    from pyspark.sql import functions as F

    inputs = harness.write_inputs(tmp_path, ["events"], range(2))
    checkpoint = tmp_path / "checkpoint"
    results: dict[int, list[str]] = {}

    def run() -> None:
        df = harness.streams(spark, inputs)["events"].groupBy("key").agg(
            F.count("*").alias("n"), F.sum("value").alias("total"))
        handle = (df.writeStream.outputMode("complete")
                  .foreachBatch(lambda d, b: results.__setitem__(
                      b, sorted(harness.canonical(r) for r in d.collect())))
                  .option("checkpointLocation", str(checkpoint))
                  .trigger(availableNow=True).start())
        try:
            assert handle.awaitTermination(harness.QUERY_TIMEOUT_S)
            assert handle.exception() is None, handle.exception()
        finally:
            if handle.isActive:
                handle.stop()

    previous = spark.conf.get(harness.PROVIDER_CONF, None)
    spark.conf.set(harness.PROVIDER_CONF, SPILLSTORE)
    try:
        with _format_v2(spark):
            run()
            harness.write_inputs(tmp_path, ["events"], range(2, NUM_BATCHES))
            run()
    finally:
        if previous is None:
            spark.conf.unset(harness.PROVIDER_CONF)
        else:
            spark.conf.set(harness.PROVIDER_CONF, previous)
    expected: dict[str, list[int]] = {}
    for _, key, value, _ in (row for batch in harness.EVENTS for row in batch):
        expected.setdefault(key, []).append(value)
    assert results[max(results)] == sorted(
        json.dumps({"key": k, "n": len(v), "total": sum(v)}, sort_keys=True)
        for k, v in expected.items())
    assert harness.names_by_checkpoint_ids(checkpoint)
