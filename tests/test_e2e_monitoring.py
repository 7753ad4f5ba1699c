"""spillstore's executor-wide metrics through Spark's metrics system: a spilling query in a
fresh JVM (tests/jobs/monitoring_job.py) with the PrometheusServlet and JMX sinks, each sink read
over its real interface (HTTP, the platform MBean server) after two and after four batches."""

from __future__ import annotations

import json
import re
from typing import Any

import harness
import pytest

JOB = harness.JOBS / "monitoring_job.py"

COUNTERS = ("cacheHits", "cacheMisses", "coldLoads", "evictions", "writeBacks", "commits",
            "journalBytes", "journalRecords", "snapshotBytes", "reliefRounds",
            "pressureInterventions")
GAUGES = ("budgetBytes", "budgetConfiguredBytes", "heapBytes", "heapEntries", "openStores",
          "coldBytes", "coldDiskBytes")
BUDGET = 256 * 1024


@pytest.fixture(scope="module")
def readings(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    workdir = tmp_path_factory.mktemp("monitoring")
    result = harness.run_job([str(JOB), str(workdir)], workdir, timeout_s=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-6000:]
    readings: list[dict[str, Any]] = json.loads(result.stdout.strip().splitlines()[-1])["readings"]
    assert len(readings) == 2
    return readings


def _prometheus(reading: dict[str, Any], source: str, metric: str, kind: str) -> float:
    # PrometheusServlet: metrics_<namespace>_<executor id>_<source>_<metric>_<kind>
    key = f"metrics_app_driver_{source.replace('.', '_')}_{metric}_{kind}"
    values: dict[str, float] = reading["prometheus"]
    assert key in values, (key, sorted(k for k in values if "spillstore" in k))
    return values[key]


def _jmx(reading: dict[str, Any], source: str, metric: str, attribute: str) -> float:
    key = f"app.driver.{source}.{metric}.{attribute}"
    values: dict[str, float] = reading["jmx"]
    assert key in values, (key, sorted(values))
    return values[key]


def test_every_metric_is_published_by_both_sinks(readings: list[dict[str, Any]]) -> None:
    for reading in readings:
        for metric in COUNTERS:
            own = _prometheus(reading, "spillstore", metric, "Count")
            assert _jmx(reading, "spillstore", metric, "Count") == own, metric
        for metric in GAUGES:
            own = _prometheus(reading, "spillstore", metric, "Value")
            assert _jmx(reading, "spillstore", metric, "Value") == own, metric
        assert _prometheus(reading, "spillstore", "commitTime", "Count") == \
            _prometheus(reading, "spillstore", "commits", "Count")
        assert _prometheus(reading, "spillstore", "commitTime", "Max") > 0  # nanoseconds
        for metric in COUNTERS + GAUGES + ("commitTimeMs", "reportingExecutors"):
            summed = _prometheus(reading, "spillstore.executors", metric, "Value")
            assert _jmx(reading, "spillstore.executors", metric, "Value") == summed, metric


def test_driver_sums_equal_the_executor_in_local_mode(readings: list[dict[str, Any]]) -> None:
    for reading in readings:
        assert _prometheus(reading, "spillstore.executors", "reportingExecutors", "Value") == 1
        for metric in COUNTERS:
            assert _prometheus(reading, "spillstore.executors", metric, "Value") == \
                _prometheus(reading, "spillstore", metric, "Count"), metric
        for metric in GAUGES:
            assert _prometheus(reading, "spillstore.executors", metric, "Value") == \
                _prometheus(reading, "spillstore", metric, "Value"), metric


def test_metrics_move_as_the_spilling_query_runs(readings: list[dict[str, Any]]) -> None:
    first, second = ({m: _prometheus(r, "spillstore", m, "Count") for m in COUNTERS}
                     for r in readings)
    for metric in ("cacheHits", "cacheMisses", "coldLoads", "evictions", "writeBacks",
                   "journalBytes", "journalRecords", "reliefRounds"):
        assert second[metric] > first[metric] > 0, metric
    assert (first["commits"], second["commits"]) == (4, 8)  # 2 batches x 2 partitions, twice
    assert second["snapshotBytes"] > 0  # maintenance every second, a snapshot per journal
    for reading in readings:
        gauges = {m: _prometheus(reading, "spillstore", m, "Value") for m in GAUGES}
        assert gauges["budgetConfiguredBytes"] == gauges["budgetBytes"] == BUDGET
        assert gauges["openStores"] == 2  # one store per shuffle partition
        assert gauges["coldBytes"] > 0 and gauges["coldDiskBytes"] > 0
        assert 0 < gauges["heapBytes"] <= BUDGET  # at rest, after the commits' evictions


def test_progress_agrees_with_the_executor_counters(readings: list[dict[str, Any]]) -> None:
    """The operator's hits, misses and evictions in query progress add up to the executor's
    counters: the same events counted twice."""
    totals = {"spillstoreCacheHits": 0, "spillstoreCacheMisses": 0, "spillstoreEvictions": 0}
    last = readings[-1]
    for progress in last["progress"]:  # every batch of the one query run
        for op in progress["stateOperators"]:
            for name in totals:
                totals[name] += op["customMetrics"].get(name, 0)
    assert totals["spillstoreCacheHits"] == _prometheus(last, "spillstore", "cacheHits", "Count")
    assert totals["spillstoreCacheMisses"] == _prometheus(last, "spillstore", "cacheMisses",
                                                          "Count")
    # evictions after a commit (the budget enforced at release) count in the next batch or not
    # at all in progress; the executor counts them all
    assert totals["spillstoreEvictions"] <= _prometheus(last, "spillstore", "evictions", "Count")


def test_the_grafana_dashboard_queries_published_metrics(readings: list[dict[str, Any]]) -> None:
    """Every series conf/grafana-spillstore.json asks Prometheus for is one the driver's
    PrometheusServlet publishes (the namespace variable set to the job's)."""
    dashboard = json.loads((JOB.parents[2] / "conf" / "grafana-spillstore.json").read_text())
    names = set()
    for panel in dashboard["panels"]:
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            found = re.findall(r'__name__=~"([^"]+)"', target["expr"])
            assert found, target["expr"]
            names.update(n.replace("${namespace}", "app") for n in found)
    published = set(readings[-1]["prometheus"])
    assert names <= published, sorted(names - published)
    assert len(names) >= 15
