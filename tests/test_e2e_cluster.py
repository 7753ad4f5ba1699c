"""spillstore with executors apart from the driver: ``local-cluster[2,1,1024]``, two executor
JVMs of one core each, the provider jar reaching them through ``spark.jars`` as
``spillstore.configure`` sets it (tests/jobs/cluster_job.py, one session for the module).

One query per kind of stateful operator gives the same output, batch by batch, as with Spark's
default provider (in the tests' local session), at spillstore's default memory budget and at
one byte; the stores of both budgets run in both executor JVMs, each executor takes its budget
from its own heap (or the query's conf), and the driver's ``spillstore.executors`` source sums
what the two executors report."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import harness
import pytest
from conftest import BUDGETS, EVERYTHING_SPILLS, FreshJvmRuns
from harness import DEFAULT, Run

pytestmark = pytest.mark.cluster

JOB = harness.JOBS / "cluster_job.py"
# Aggregation and dedup (two operators in one query), applyInPandasWithState, session window,
# stream-stream join: every kind of state store user, few enough for minutes.
QUERIES = ["dedup_then_count", "apply_in_pandas_with_state", "session_window", "join_left_outer"]
# spillstore's default memoryBudgetFraction: the budget when no memoryBudget is set.
DEFAULT_FRACTION = 0.15


@dataclass
class Cluster:
    """What cluster_job.py did: its report (see the job) and the run of each query."""

    workdir: Path
    job: harness.JobRun
    report: dict[str, Any]
    seconds: float

    def runs(self, budget: str) -> FreshJvmRuns:
        """The queries run at ``budget`` (a name in BUDGETS)."""
        return FreshJvmRuns(budget, self.workdir / budget, self.job,
                            self.report.get("budgets", {}).get(budget, {}), self.seconds)

    def reading(self, budget: str) -> dict[str, Any]:
        """The metrics read after the queries at ``budget``; fails if the job never got there."""
        metrics = self.report.get("budgets", {}).get(budget, {}).get("metrics")
        assert metrics is not None, (
            f"cluster_job.py read no metrics at {budget} (exit {self.job.returncode}, "
            f"{harness.java_error(self.job.stderr)}):\n{self.job.stderr[-6000:]}")
        return metrics

    @property
    def executors(self) -> dict[str, dict[str, Any]]:
        assert "executors" in self.report, self.job.stderr[-6000:]
        return self.report["executors"]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Cluster:
    """The module's one cluster session, in a process group of its own (``harness.run_job``:
    the driver JVM and the executor JVMs it starts are killed if still alive when the job
    ends, fails or times out)."""
    workdir = tmp_path_factory.mktemp("cluster-")
    spec = workdir / "spec.json"
    budgets = [[name, value] for name, value in BUDGETS.items()]
    assert budgets[-1][1] == EVERYTHING_SPILLS["memoryBudget"]  # the smallest last (the job)
    spec.write_text(json.dumps({"workdir": str(workdir), "budgets": budgets, "queries": QUERIES}))
    started = time.monotonic()
    job = harness.run_job([str(JOB), str(spec)], workdir, timeout_s=900)
    seconds = time.monotonic() - started
    report_file = workdir / "report.json"
    report = json.loads(report_file.read_text()) if report_file.exists() else {}
    times = {b: {q: r["seconds"] for q, r in v["queries"].items()}
             for b, v in report.get("budgets", {}).items()}
    cluster = Cluster(workdir, job, report, seconds)
    print(f"\nlocal-cluster job: {seconds:.0f} s (session start {report.get('session_start_s')} "
          f"s; per query {times}); {_stores_moved(cluster)}")
    return cluster


def _stores_moved(cluster: Cluster) -> str:
    """How many stores moved from one executor to the other: the stores open in the executors
    at the end (the job's maintenance unloads none), less the queries' stores."""
    try:
        reading = cluster.reading(list(BUDGETS)[-1])
        stores = sum(op["numStateStoreInstances"] for budget in BUDGETS for query in QUERIES
                     for op in cluster.runs(budget).run(query).progress[-1]["stateOperators"])
    except AssertionError:
        return "stores: the job did not finish"
    return f"{reading['sums']['openStores'] - stores:.0f} of {stores} stores moved"


@pytest.mark.parametrize("budget", list(BUDGETS))
@pytest.mark.parametrize("query", QUERIES)
def test_same_output_as_default_provider(
    full_run: Callable[[str, str], Run], cluster: Cluster, query: str, budget: str
) -> None:
    harness.assert_same_output_as_default(cluster.runs(budget).run(query),
                                          full_run(query, DEFAULT), query,
                                          f"spillstore at {budget} on local-cluster")


@pytest.mark.parametrize("query", QUERIES)
def test_everything_spills_at_one_byte_only(cluster: Cluster, query: str) -> None:
    at_default = cluster.runs("default_budget").run(query).progress
    at_one_byte = cluster.runs("budget_1_byte").run(query).progress
    assert harness.metric_totals(at_default, "spillstoreEvictions") == 0
    assert harness.metric_totals(at_one_byte, "spillstoreEvictions") > 0
    # read back from the cold tiers (a session window's prefix scans count no lookups)
    assert harness.metric_totals(at_one_byte, "spillstoreColdLoads") > 0


def _commits_in_progress(cluster: Cluster, budget: str) -> int:
    """Store commits the queries at ``budget`` made: one per state store instance per batch."""
    runs = cluster.runs(budget)
    return sum(op["numStateStoreInstances"] for query in QUERIES
               for progress in runs.run(query).progress for op in progress["stateOperators"])


def test_stores_ran_in_both_executor_jvms(cluster: Cluster) -> None:
    executors = cluster.executors
    assert len(executors) == 2 and len({e["pid"] for e in executors.values()}) == 2, executors
    before = {e: 0.0 for e in executors}
    for budget in BUDGETS:
        reading = cluster.reading(budget)
        assert reading["executors"].keys() == executors.keys(), reading
        commits = {e: m["commits"] for e, m in reading["executors"].items()}
        # every executor committed stores of this budget's queries
        assert all(commits[e] > before[e] for e in executors), (budget, before, commits)
        assert sum(commits.values()) - sum(before.values()) == _commits_in_progress(
            cluster, budget), (budget, commits)
        before = commits
    for e, found in cluster.report["executor_dirs"].items():
        assert any(j.startswith("spillstore-spark") for j in found["jars"]), (
            f"executor {e} did not fetch the provider jar: {found}")


def test_budget_comes_from_each_executors_heap(cluster: Cluster) -> None:
    driver_mb = cluster.report["driver_max_heap_mb"]
    at_default = cluster.reading("default_budget")["executors"]
    for e, jvm in cluster.executors.items():
        heap = jvm["max_heap_mb"] << 20
        assert jvm["max_heap_mb"] < driver_mb * 0.9, (jvm, driver_mb)  # heaps tell apart
        # the JVM's max heap is -Xmx, or a survivor space less with some collectors
        budget = at_default[e]["budgetConfiguredBytes"]
        assert DEFAULT_FRACTION * heap * 0.9 <= budget <= DEFAULT_FRACTION * heap, (e, jvm, budget)
    at_one_byte = cluster.reading("budget_1_byte")["executors"]
    assert {e: m["budgetConfiguredBytes"] for e, m in at_one_byte.items()} == {
        e: float(EVERYTHING_SPILLS["memoryBudget"]) for e in cluster.executors}


def test_each_executor_sizes_its_cold_tiers_native_memory(cluster: Cluster) -> None:
    """Each executor JVM opened one shared block cache for its cold tiers, sized from the budget
    in force there: half of one byte, raised to the 16 MB floor."""
    found = {e: d["cold_memory_mb"] for e, d in cluster.report["executor_dirs"].items()}
    assert found == {e: [16] for e in cluster.executors}


@pytest.mark.parametrize("budget", list(BUDGETS))
def test_driver_sums_what_the_executors_report(cluster: Cluster, budget: str) -> None:
    reading = cluster.reading(budget)
    assert reading["settled"], (reading["unsettled"], reading)
    sums, executors = reading["sums"], reading["executors"]
    assert sums["reportingExecutors"] == len(cluster.executors) == 2
    names = set(sums) - {"reportingExecutors", "commitTimeMs"}
    assert "commits" in names and "budgetConfiguredBytes" in names and "coldBytes" in names
    for name in sorted(names):
        assert sums[name] == sum(m[name] for m in executors.values()), name
    assert sums["commits"] > 0 and sums["budgetConfiguredBytes"] > 0


def test_no_executor_jvm_outlives_the_job(cluster: Cluster) -> None:
    """The job's group had ended by itself within 60 s of the job (``harness.run_job`` kills
    what is left, and says what that was): no executor JVM of the application among it."""
    app_id = cluster.report["app_id"]
    assert cluster.executors, "the job reported no executors"
    left = [cmdline for cmdline in cluster.job.left_running if app_id in cmdline]
    assert not left, f"executor JVMs still running after the job ended: {left}"
    for e, jvm in cluster.executors.items():  # and none outside the job's group
        try:
            args = Path(f"/proc/{jvm['pid']}/cmdline").read_bytes().decode()
        except OSError:
            continue  # gone
        assert app_id not in args, f"executor {e} (pid {jvm['pid']}) still runs"
