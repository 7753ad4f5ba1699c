"""The spill tier is really used, or not, in the runs that test_e2e_operators.py compares
with the default provider (every query with spillstore in a fresh JVM per budget): under a
one-byte budget every query evicts entries to the cold tier; under the default budget no
entry leaves the heap and no lookup reads the cold tier."""

from __future__ import annotations

from collections.abc import Callable

import harness
import pytest
from conftest import FreshJvmRuns
from harness import QUERIES, Run

FreshRuns = Callable[[str], FreshJvmRuns]


def _metric(run: Run, name: str) -> int:
    total = harness.metric_totals(run.progress, name)
    assert total is not None, f"{name} missing from the progress of {run.checkpoint}"
    return total


@pytest.mark.parametrize("query", sorted(QUERIES))
def test_everything_spills_under_a_one_byte_budget(fresh_jvm_runs: FreshRuns, query: str) -> None:
    run = fresh_jvm_runs("budget_1_byte").run(query)
    assert _metric(run, "spillstoreEvictions") > 0, f"{query}: the tiny budget evicted nothing"


# One line: the default budget is the version-free core's, and every line checks that nothing
# spills at it in test_e2e_metrics.py; on the other lines this would cost a fresh JVM's run of
# every query (about 75 s) for no path of their own.
@pytest.mark.one_line
@pytest.mark.parametrize("query", sorted(QUERIES))
def test_nothing_spills_under_the_default_budget(fresh_jvm_runs: FreshRuns, query: str) -> None:
    run = fresh_jvm_runs("default_budget").run(query)
    assert _metric(run, "spillstoreEvictions") == 0
    assert _metric(run, "spillstoreCacheMisses") == 0
