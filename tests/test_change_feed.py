"""Spark's state data source reads a spillstore checkpoint's history as it reads the HDFS
provider's: the change feed (``readChangeFeed``) of the same queries over the same input.

Spark 4.0+ (3.5 has no state data source). The HDFS provider logs every put and remove of a
batch (an aggregation updates a window, then evicts it); spillstore's journal keeps each key's
last change of the batch. So what must be equal is each batch's last change per key.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import harness
import pytest
from harness import DEFAULT, SPILLSTORE, Run

FullRun = Callable[[str, str], Run]

pytestmark = pytest.mark.skipif(harness.SPARK_LINE < (4, 0),
                                reason="Spark 3.5 has no state data source")

QUERIES = ["agg_update_window", "dedup", "dedup_then_count", "session_window",
           "join_left_outer"]


def _change_feed(spark: Any, run: Run, store: dict[str, str]) -> list[tuple[Any, ...]]:
    """(batch, partition, key, change type, value) in the order the reader gives: each
    partition's records in the order its files hold them."""
    last = harness.committed_batches(run.checkpoint)[-1]
    reader = (spark.read.format("statestore").option("path", str(run.checkpoint))
              .option("readChangeFeed", True).option("changeStartBatchId", 0)
              .option("changeEndBatchId", last))
    for name, value in store.items():
        reader = reader.option(name, value)
    return [(r["batch_id"], r["partition_id"], harness.canonical(r["key"]), r["change_type"],
             None if r["value"] is None else harness.canonical(r["value"]))
            for r in reader.load().collect()]


def _last_change_per_key(feed: list[tuple[Any, ...]]) -> dict[tuple[Any, ...], tuple[Any, ...]]:
    last: dict[tuple[Any, ...], tuple[Any, ...]] = {}
    for batch, partition, key, change, value in feed:
        last[(batch, partition, key)] = (change, value)
    return last


def _stores(query: str) -> list[dict[str, str]]:
    if query.startswith("join"):
        return [{"storeName": f"{side}-{kind}"} for side in ("left", "right")
                for kind in ("keyToNumValues", "keyWithIndexToValue")]
    if query == "dedup_then_count":
        return [{"operatorId": "0"}, {"operatorId": "1"}]
    return [{}]


@pytest.mark.parametrize("query", QUERIES)
def test_change_feed_has_each_batchs_last_change_per_key(
        spark: Any, full_run: FullRun, query: str) -> None:
    """Every key the HDFS provider last updated in a batch, spillstore updated to the same
    value; every key it last deleted, spillstore deleted or (added and removed within the
    batch) never wrote; and spillstore wrote nothing else, once per key."""
    for store in _stores(query):
        got = _change_feed(spark, full_run(query, SPILLSTORE), store)
        hdfs = _last_change_per_key(_change_feed(spark, full_run(query, DEFAULT), store))
        spill = _last_change_per_key(got)
        assert got and len(spill) == len(got), f"{query} {store}: {len(got)} records"
        for key, (change, value) in hdfs.items():
            if change == "update":
                assert spill.get(key) == (change, value), f"{query} {store} {key}"
        for key, change in spill.items():
            assert key in hdfs and (change == hdfs[key] or change[0] == hdfs[key][0] == "delete"), (
                f"{query} {store} {key}: spillstore {change}, HDFS {hdfs.get(key)}")
