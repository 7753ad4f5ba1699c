"""The state of the spillstore runs really went through spillstore: its files in the
checkpoint, its metrics in query progress, its options reaching the provider."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import harness
import pytest
import spillstore
from harness import DEFAULT, QUERIES, SPILLSTORE, Run

FullRun = Callable[[str, str], Run]

# one store per partition, four named stores per partition (join), prefix scans (session)
STORE_SHAPES = ["agg_update_window", "join_left_outer", "session_window"]


@pytest.mark.parametrize("query", STORE_SHAPES)
def test_checkpoint_holds_spillstore_journals(full_run: FullRun, query: str) -> None:
    run = full_run(query, SPILLSTORE)
    last_version = harness.committed_batches(run.checkpoint)[-1] + 1  # version = batch id + 1
    stores = harness.state_files(run.checkpoint)
    expected_stores = 2 * (4 if query.startswith("join") else 1)  # 2 shuffle partitions
    assert len(stores) == expected_stores, sorted(map(str, stores))
    for store, versions in stores.items():
        where = store.relative_to(run.checkpoint)
        assert set(versions) <= {"journal", "snapshot"}, f"{where}: {versions}"
        assert versions["journal"], f"{where}: no journal"
        assert max(max(v) for v in versions.values()) == last_version, f"{where}: {versions}"


def test_default_provider_checkpoint_has_no_journals(full_run: FullRun) -> None:
    """The check above can tell the providers apart."""
    stores = harness.state_files(full_run("agg_update_window", DEFAULT).checkpoint)
    assert stores and all(set(v) == {"delta"} for v in stores.values()), stores


@pytest.mark.parametrize("query", sorted(QUERIES))
def test_progress_reports_spillstore_metrics(full_run: FullRun, query: str) -> None:
    run = full_run(query, SPILLSTORE)
    for progress in run.progress:
        metrics = spillstore.state_metrics(progress)
        for op in progress["stateOperators"]:
            custom = op["customMetrics"]
            missing = [m for m in spillstore.metrics.METRICS if m not in custom]
            assert not missing, f"batch {progress['batchId']}: missing {missing} in {custom}"
        if progress["numInputRows"] and metrics.get("numRowsUpdated"):
            assert metrics["spillstoreJournalBytes"] > 0, (progress["batchId"], metrics)
            assert metrics["spillstoreJournalRecords"] > 0, (progress["batchId"], metrics)


def test_journal_records_cover_changed_keys(full_run: FullRun) -> None:
    run = full_run("agg_update_window", SPILLSTORE)
    for progress in run.progress:
        m = spillstore.state_metrics(progress)
        assert m["spillstoreJournalRecords"] >= m["numRowsUpdated"], (progress["batchId"], m)


def test_aggregation_lookups_are_counted(full_run: FullRun) -> None:
    """Streaming aggregation reads every key of a batch from the store (through the read store
    it then upgrades); from batch 1 on, some of those keys exist. Each lookup is a heap-tier hit
    or a miss, so the counters cannot both stay 0."""
    run = full_run("agg_update_by_key", SPILLSTORE)
    lookups = [
        (p["batchId"], spillstore.state_metrics(p).get("spillstoreCacheHits", 0)
         + spillstore.state_metrics(p).get("spillstoreCacheMisses", 0))
        for p in run.progress
        if p["numInputRows"]
    ]
    assert all(n > 0 for _, n in lookups), f"(batch, hits + misses): {lookups}"


def test_options_reach_the_provider(spark: Any, tmp_path: Path) -> None:
    """An option set through the spillstore prefix arrives in the provider, which rejects a
    name it does not know rather than silently ignoring it."""
    key = spillstore.option_key("no_such_option")
    inputs = harness.write_inputs(tmp_path, ("events",), range(1))
    spark.conf.set(key, "1")
    try:
        with pytest.raises(AssertionError, match="noSuchOption"):
            harness.run_query(spark, "agg_update_by_key", inputs, tmp_path / "checkpoint",
                              tmp_path / "output", SPILLSTORE)
    finally:
        spark.conf.unset(key)


def _state_rows(spark: Any, run: Run, **options: Any) -> list[str]:
    reader = spark.read.format("statestore")
    for key, value in options.items():
        reader = reader.option(key, str(value))
    return sorted(harness.canonical(r) for r in reader.load(str(run.checkpoint)).collect())


@harness.needs_state_reader
@pytest.mark.parametrize("query, options", [
    ("agg_update_window", {}),
    ("dedup", {}),
    ("session_window", {}),
    ("apply_in_pandas_with_state", {}),
    ("join_left_outer", {"joinSide": "left"}),
    ("join_left_outer", {"joinSide": "right"}),
])
def test_state_data_source_reads_the_same_state(
    spark: Any, full_run: FullRun, query: str, options: dict[str, str]
) -> None:
    """spark.read.format("statestore") loads each store with a new provider instance."""
    ours, theirs = full_run(query, SPILLSTORE), full_run(query, DEFAULT)
    batches = harness.committed_batches(theirs.checkpoint)
    if query != "agg_update_window":  # every version for one query, the latest for the others
        batches = batches[-1:]
    nonempty = 0
    for batch in batches:
        expected = _state_rows(spark, theirs, batchId=batch, **options)
        assert _state_rows(spark, ours, batchId=batch, **options) == expected, f"batch {batch}"
        nonempty += bool(expected)
    assert nonempty, "no state to compare"


@pytest.mark.skipif(harness.SPARK_LINE < (4, 0), reason="transformWithState is Spark 4.0+")
def test_transform_with_state_is_refused_naming_the_provider(spark: Any, tmp_path: Path) -> None:
    """Spark 4.2+ refuses any provider but RocksDB's for transformWithState (SPARK-54117),
    naming spillstore's class and the provider to use instead; on 4.0 and 4.1 spillstore
    refuses it at init (it has no column families), naming RocksDB's provider too."""
    import pandas as pd
    from pyspark.sql.streaming import StatefulProcessor, StatefulProcessorHandle
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    class Count(StatefulProcessor):
        def init(self, handle: StatefulProcessorHandle) -> None:
            self.count = handle.getValueState("count", StructType([StructField("c", LongType())]))

        def handleInputRows(self, key: Any, rows: Any, timerValues: Any) -> Any:
            n = (self.count.get()[0] if self.count.exists() else 0) + sum(len(r) for r in rows)
            self.count.update((n,))
            yield pd.DataFrame({"key": [key[0]], "n": [n]})

        def close(self) -> None:
            pass

    inputs = harness.write_inputs(tmp_path, ("events",), range(1))
    out = StructType([StructField("key", StringType()), StructField("n", LongType())])
    previous = spark.conf.get(harness.PROVIDER_CONF, None)
    spark.conf.set(harness.PROVIDER_CONF, SPILLSTORE)
    try:
        df = harness.streams(spark, inputs)["events"].groupBy("key").transformWithStateInPandas(
            Count(), out, "Update", "None")
        handle = (df.writeStream.format("noop").outputMode("update")
                  .option("checkpointLocation", str(tmp_path / "checkpoint"))
                  .trigger(availableNow=True).start())
        try:
            handle.awaitTermination(harness.QUERY_TIMEOUT_S)
        except Exception as e:  # the query's failure
            error = str(e)
        else:
            error = str(handle.exception())
        finally:
            handle.stop()
    finally:
        if previous is None:
            spark.conf.unset(harness.PROVIDER_CONF)
        else:
            spark.conf.set(harness.PROVIDER_CONF, previous)
    if harness.SPARK_LINE >= (4, 2):
        assert "STORE_BACKEND_NOT_SUPPORTED_FOR_TWS" in error, error
        assert SPILLSTORE in error, error
    else:
        assert "spillstore does not support column families (transformWithState)" in error, error
    assert "RocksDBStateStoreProvider" in error, error
