"""Every stateful operator gives the same output, batch by batch, with spillstore as with
Spark's default (HDFS-backed) state store provider, on the same multi-batch input. spillstore
runs every query in a fresh JVM (the first stores and the first spill of that JVM are the
first query's) at two memory budgets: the default one, under which nothing spills, and one
byte, under which every committed entry leaves the heap; the default provider's runs are in
the tests' own session.

The second half checks the reference (default provider) runs against hand-derived
expectations, so that the input really exercises what the comparison relies on: updates of
existing keys, new keys, state removed by the watermark, late rows, timeouts."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import harness
import pytest
from conftest import BUDGETS, FreshJvmRuns
from harness import DEFAULT, EVENTS, QUERIES, Run, rows_of

FullRun = Callable[[str, str], Run]


@pytest.mark.parametrize("budget", list(BUDGETS))
@pytest.mark.parametrize("query", sorted(QUERIES))
def test_same_output_as_default_provider(
    full_run: FullRun, fresh_jvm_runs: Callable[[str], FreshJvmRuns], query: str, budget: str
) -> None:
    harness.assert_same_output_as_default(fresh_jvm_runs(budget).run(query),
                                          full_run(query, DEFAULT), query,
                                          f"spillstore at {budget} (fresh JVM)")


# ---------------------------------------------------------------------------------------------
# The input exercises the state store


def _operator_sums(run: Run, field: str) -> list[int]:
    return [sum(op.get(field, 0) for op in p["stateOperators"]) for p in run.progress]


@pytest.mark.parametrize("query", sorted(QUERIES))
def test_input_exercises_state(full_run: FullRun, query: str) -> None:
    run = full_run(query, DEFAULT)
    assert harness.committed_batches(run.checkpoint)[-1] >= harness.NUM_BATCHES - 1
    updated = _operator_sums(run, "numRowsUpdated")
    assert sum(1 for n in updated if n > 0) >= 2, f"state written in < 2 batches: {updated}"
    if QUERIES[query].evicts:
        removed = _operator_sums(run, "numRowsRemoved")
        assert sum(removed) > 0, f"the watermark never removed state: {removed}"


# Watermark each batch runs with (seconds), see harness.EVENTS; a row with t <= it is late.
WATERMARK = [0, 0, 8, 23, 35]


def test_agg_update_by_key_final_values(full_run: FullRun) -> None:
    last: dict[str, dict[str, Any]] = {}
    outputs = full_run("agg_update_by_key", DEFAULT).outputs
    for batch in sorted(outputs):
        for row in rows_of({batch: outputs[batch]}):
            last[row["key"]] = row
    n: Counter[str] = Counter()
    total: Counter[str] = Counter()
    for rows in EVENTS:
        for _, key, value, _ in rows:
            n[key] += 1
            total[key] += value
    assert last == {k: {"key": k, "n": n[k], "total": total[k]} for k in n}


def test_dedup_drops_duplicates_and_late_rows(full_run: FullRun) -> None:
    seen: set[tuple[int, int]] = set()
    expected = []
    for batch, rows in enumerate(EVENTS):
        for id_, _, _, t in rows:
            if t > WATERMARK[batch] and (id_, t) not in seen:
                seen.add((id_, t))
                expected.append((id_, t))
    got = [(r["id"], r["t"]) for r in rows_of(full_run("dedup", DEFAULT).outputs)]
    assert sorted(got) == sorted(expected)
    assert (3, 5) in expected and (13, 4) not in expected  # a duplicate and a late row


def test_dedup_then_count_counts_each_kept_row_once(full_run: FullRun) -> None:
    seen: set[tuple[int, int]] = set()
    n: Counter[str] = Counter()
    total: Counter[str] = Counter()
    for batch, rows in enumerate(EVENTS):
        for id_, key, value, t in rows:
            if t > WATERMARK[batch] and (id_, t) not in seen:
                seen.add((id_, t))
                n[key] += 1
                total[key] += value
    last: dict[str, dict[str, Any]] = {}
    outputs = full_run("dedup_then_count", DEFAULT).outputs
    for batch in sorted(outputs):
        for row in rows_of({batch: outputs[batch]}):
            last[row["key"]] = row
    assert last == {k: {"key": k, "n": n[k], "total": total[k]} for k in n}
    # both operators kept state: the dedup dropped a duplicate, the count saw a key twice
    assert sum(n.values()) < sum(len(rows) for rows in EVENTS) and max(n.values()) > 1


def test_dedup_within_watermark_forgets_expired_ids(full_run: FullRun) -> None:
    got = Counter(r["id"] for r in rows_of(full_run("dedup_within_watermark", DEFAULT).outputs))
    assert got[7] == 1  # id 7 at t=15, 22, 40: the later ones within its watermark
    assert got[16] == 1  # twice in one batch
    assert got[1] == 2  # id 1 at t=1 expired at watermark 23, seen again at t=50
    assert 13 not in got and 19 not in got  # late


def test_apply_in_pandas_with_state_times_out_and_removes(full_run: FullRun) -> None:
    outputs = full_run("apply_in_pandas_with_state", DEFAULT).outputs
    h_rows = {b: [r for r in rows_of({b: rows}) if r["key"] == "h"] for b, rows in outputs.items()}
    assert h_rows[3] == [{"key": "h", "n": 1, "status": "expired", "total": 20}]
    # after the removal, h starts again from empty state
    assert h_rows[4] == [{"key": "h", "n": 1, "status": "active", "total": 21}]


def test_session_window_merges_across_batches(full_run: FullRun) -> None:
    rows = rows_of(full_run("session_window", DEFAULT).outputs)
    a_first = [r for r in rows if r["key"] == "a" and r["session_window"]["start"].endswith(":01")]
    # a@1, a@5 (batch 0), a@6, a@5 (batch 1) form one session; a@4 (batch 3) is behind the
    # watermark but the session is still in state then, so Spark merges it before evicting.
    assert a_first == [{"key": "a", "n": 5, "total": 25, "session_window": {
        "start": "1970-01-01T00:00:01", "end": "1970-01-01T00:00:11"}}]


def test_window_append_emits_each_window_once(full_run: FullRun) -> None:
    rows = rows_of(full_run("agg_append_window", DEFAULT).outputs)
    groups = Counter((r["key"], r["window"]["start"]) for r in rows)
    assert groups and max(groups.values()) == 1


def _pairs(run: Run) -> set[tuple[int, Any]]:
    return {(r["imp_id"], r["click_id"]) for r in rows_of(run.outputs)}


def test_join_inner_pairs(full_run: FullRun) -> None:
    assert _pairs(full_run("join_inner", DEFAULT)) == {
        (1, 101), (2, 102), (4, 103), (5, 105), (6, 107), (8, 108)}


def test_join_left_outer_emits_unmatched_rows(full_run: FullRun) -> None:
    assert _pairs(full_run("join_left_outer", DEFAULT)) == {
        (1, 101), (2, 102), (4, 103), (5, 105), (6, 107), (8, 108), (3, None), (7, None)}


def test_global_limit_takes_the_first_rows(full_run: FullRun) -> None:
    outputs = full_run("global_limit", DEFAULT).outputs
    assert [len(outputs[b]) for b in sorted(outputs)] == [5, 2, 0, 0, 0]
    assert sorted(r["id"] for r in rows_of(outputs)) == [1, 2, 3, 4, 5, 6, 20]
