"""spillstore's metrics read back through the Python API with values known in advance: a run
where every lookup is answered from the heap (hit ratio 1) and one where, after the first
batch, none can be (hit ratio 0, every committed entry spilled); and the progress logger
attached to a real session."""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from typing import Any

import harness
import pytest
import spillstore
from conftest import EVERYTHING_SPILLS

KEYS = 20  # distinct keys, the same ones in every batch
BATCHES = 4
PARTITIONS = 2  # spark.sql.shuffle.partitions of the tests' session


def _run_count_per_key(spark: Any, workdir: Path,
                       options: dict[str, str] | None) -> list[dict[str, Any]]:
    """groupBy(key).count() in update mode, one input file per batch, each file holding every
    key once: each batch looks up (get) each of the KEYS keys exactly once, and from batch 1 on
    every one of them exists in the state (written by the previous batch)."""
    from pyspark.sql import functions as F

    input_dir = workdir / "input"
    input_dir.mkdir(parents=True)
    for batch in range(BATCHES):
        path = input_dir / f"part-{batch:04d}.json"
        path.write_text("".join(json.dumps({"key": f"k{i}"}) + "\n" for i in range(KEYS)))
        mtime = 1_700_000_000 + 10 * batch  # the file source orders files by mtime
        os.utime(path, (mtime, mtime))
    keys = [spillstore.option_key(k) for k in options or {}]
    previous = spark.conf.get(harness.PROVIDER_CONF, None)
    spark.conf.set(harness.PROVIDER_CONF, harness.SPILLSTORE)
    for key, value in zip(keys, (options or {}).values(), strict=True):
        spark.conf.set(key, value)
    try:
        query = (
            spark.readStream.schema("key STRING").option("maxFilesPerTrigger", 1)
            .json(str(input_dir))
            .groupBy("key").agg(F.count("*").alias("n"))
            .writeStream.outputMode("update").format("noop")
            .option("checkpointLocation", str(workdir / "checkpoint"))
            .trigger(availableNow=True)
            .queryName(f"count_per_key_{workdir.name}")
            .start()
        )
        try:
            assert query.awaitTermination(harness.QUERY_TIMEOUT_S), "query did not finish"
        finally:
            if query.isActive:
                query.stop()
        assert query.exception() is None, query.exception()
        progress = query.recentProgress
        # operator_metrics takes the StreamingQuery itself as well as its progress list
        assert spillstore.operator_metrics(query) == spillstore.operator_metrics(progress)
        return progress
    finally:
        if keys:
            harness.unload_state_stores(spark)
        for key in keys:
            spark.conf.unset(key)
        if previous is None:
            spark.conf.unset(harness.PROVIDER_CONF)
        else:
            spark.conf.set(harness.PROVIDER_CONF, previous)


def _check_every_custom_metric(progress: list[dict[str, Any]]) -> None:
    """Every spillstore metric in progress against what the operator's own counts say it must
    be: each is the whole operator's (both partitions'), and the ratio is a ratio."""
    for p in progress:
        (op,) = p["stateOperators"]
        custom = op["customMetrics"]
        assert set(spillstore.METRICS) <= set(custom), set(spillstore.METRICS) - set(custom)
        hits, misses = custom["spillstoreCacheHits"], custom["spillstoreCacheMisses"]
        assert hits + misses == KEYS  # every key is looked up once per batch
        assert custom["spillstoreCacheHitPermille"] == hits * 1000 // (hits + misses)
        # a key is in the heap, in the cold tier, or in both (a clean copy loaded back)
        heap, cold = custom["spillstoreHeapEntries"], custom["spillstoreColdEntries"]
        assert max(heap, cold) <= op["numRowsTotal"] == KEYS <= heap + cold
        assert custom["spillstoreHeapBytes"] == op["memoryUsedBytes"]
        assert custom["spillstoreWriteBacks"] <= custom["spillstoreEvictions"]
        if misses == 0:  # nothing read from RocksDB, so nothing loaded from it
            assert custom["spillstoreColdLoads"] == 0
        if custom["spillstoreColdEntries"] > 0:
            assert custom["spillstoreColdBytes"] > 0
        # each key's count changed once; nothing removed
        assert custom["spillstoreJournalRecords"] == op["numRowsUpdated"] == KEYS
        assert op["numRowsRemoved"] == 0
        assert custom["spillstoreJournalBytes"] > 0
        # journal writing is part of Spark's commit, timed around it
        assert 0 <= custom["spillstoreCommitTimeMs"] <= op["commitTimeMs"]
        assert custom["spillstoreSnapshotsRepaired"] == 0


def _per_batch(progress: list[dict[str, Any]]) -> list[spillstore.OperatorMetrics]:
    assert [p["batchId"] for p in progress] == list(range(BATCHES))
    result = []
    for i in range(BATCHES):
        (op,) = spillstore.operator_metrics(progress[: i + 1])
        assert op.batch_id == i
        assert op.provider == "spillstore"
        result.append(op)
    return result


def test_every_lookup_hits_while_state_fits(spark: Any, tmp_path: Path) -> None:
    progress = _run_count_per_key(spark, tmp_path, options=None)
    ops = _per_batch(progress)
    for op in ops:
        assert op.operator == "stateStoreSave"
        assert (op.cache_hits, op.cache_misses) == (KEYS, 0), op
        assert op.hit_ratio == 1.0 and op.cumulative_hit_ratio == 1.0, op
        assert (op.evictions, op.write_backs, op.cold_loads) == (0, 0, 0), op
        assert (op.cold_entries, op.cold_bytes) == (0, 0), op
        assert op.heap_entries == KEYS and op.rows_total == KEYS, op
        assert op.heap_bytes > 0 and op.journal_bytes > 0, op
        assert op.journal_records == KEYS, op  # every key's count changed
    for p in progress:
        custom = p["stateOperators"][0]["customMetrics"]
        # the operator's ratio over its PARTITIONS stores, not a sum of per-store ratios
        assert custom["spillstoreCacheHitPermille"] == 1000, custom
        assert spillstore.cache_hit_ratio(spillstore.state_metrics(p)) == 1.0
    _check_every_custom_metric(progress)


def test_no_lookup_hits_when_everything_spills(spark: Any, tmp_path: Path) -> None:
    progress = _run_count_per_key(spark, tmp_path, options=EVERYTHING_SPILLS)
    first, *later = _per_batch(progress)
    # batch 0: the cold tier is empty, so a key absent from the heap is known absent: a hit
    assert (first.cache_hits, first.cache_misses, first.hit_ratio) == (KEYS, 0, 1.0), first
    for i, op in enumerate(later, start=1):
        # every key was evicted after the previous commit: each lookup reads RocksDB
        assert (op.cache_hits, op.cache_misses) == (0, KEYS), op
        assert op.hit_ratio == 0.0, op
        assert op.cumulative_hit_ratio == KEYS / (KEYS * (i + 1)), op
        assert op.cold_loads >= KEYS, op
        assert op.rows_total == KEYS, op
        custom = progress[i]["stateOperators"][0]["customMetrics"]
        assert custom["spillstoreCacheHitPermille"] == 0, custom
    # Every batch's KEYS puts were evicted before the next batch (its misses above). Most go as
    # the batch's store lets go and count in that batch; with the two partitions' tasks planning
    # relief rounds at once, some go by a shrink request honoured just after the release and count
    # in the next batch: so the sum, not each batch, is at least the puts of all batches but the
    # last.
    assert sum(op.evictions for op in [first, *later]) >= KEYS * (BATCHES - 1), later
    assert later[-1].cumulative_hit_ratio == 0.25
    assert spillstore.cache_hit_ratio(spillstore.state_metrics(progress[-1])) == 0.0
    _check_every_custom_metric(progress)


def _progress_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "spillstore.progress"]


def test_progress_logger_logs_each_batch(
    spark: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    listener = spillstore.ProgressLogger()
    spark.streams.addListener(listener)
    try:
        with caplog.at_level(logging.INFO, logger="spillstore.progress"):
            _run_count_per_key(spark, tmp_path, options=None)
            # Listener events arrive asynchronously, the last one possibly after the query
            # ended: the listener stays until it came (removed earlier, it never would).
            deadline = time.monotonic() + 30
            while len(_progress_lines(caplog)) < BATCHES and time.monotonic() < deadline:
                time.sleep(0.2)
    finally:
        spark.streams.removeListener(listener)
    lines = _progress_lines(caplog)
    assert len(lines) == BATCHES, lines
    for batch, line in enumerate(lines):
        assert line.startswith(f"count_per_key_{tmp_path.name} batch {batch}: {KEYS} rows"), line
        assert (f"stateStoreSave#0 hit 100.0% (cum 100.0%) hits {KEYS} misses 0 evicted 0"
                in line), line
