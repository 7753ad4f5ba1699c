"""The spill tier changes where state lives, never what a query outputs: every operator gives
the default provider's output batch by batch with a budget under which everything spills, and
with the default budget, under which nothing does."""

from __future__ import annotations

from collections.abc import Callable

import harness
import pytest
from harness import DEFAULT, QUERIES, SPILLSTORE, Run

FullRun = Callable[..., Run]


def _metric(run: Run, name: str) -> int:
    total = harness.metric_totals(run.progress, name)
    assert total is not None, f"{name} missing from the progress of {run.checkpoint}"
    return total


@pytest.mark.parametrize("query", sorted(QUERIES))
def test_same_output_when_everything_spills(full_run: FullRun, query: str) -> None:
    expected = full_run(query, DEFAULT)
    actual = full_run(query, SPILLSTORE, spill=True)
    difference = harness.describe_difference(
        actual.outputs, expected.outputs, "spillstore (everything spills)", "default")
    assert actual.outputs == expected.outputs, f"{query} differs:\n{difference}"
    assert _metric(actual, "spillstoreEvictions") > 0, "the tiny budget evicted nothing"


@pytest.mark.parametrize("query", sorted(QUERIES))
def test_nothing_spills_under_the_default_budget(full_run: FullRun, query: str) -> None:
    run = full_run(query, SPILLSTORE)
    assert _metric(run, "spillstoreEvictions") == 0
    assert _metric(run, "spillstoreCacheMisses") == 0
