"""Queries of ``harness.QUERIES`` with spillstore on ``local-cluster[2,1,1024]``: a driver JVM
and two executor JVMs (one core each), the provider jar reaching the executors through
``spark.jars`` as ``spillstore.configure`` sets it. For test_e2e_cluster.py.

    python tests/jobs/cluster_job.py SPEC.json

SPEC.json: ``{"workdir", "budgets": [[name, memoryBudget or null], ...], "queries": [...]}``.
One session runs every query at each budget in turn (``operators_job.run_one``, into
``<workdir>/<budget name>/<query>/``), the budgets in the order given: spillstore's memory
settings are executor-wide and the strictest of the loaded stores' apply, and this driver
cannot unload the executors' stores between budgets, so the smallest budget goes last.

After each budget the job reads spillstore's metrics through Spark's CSV sink, which every JVM
(driver and executors) writes to ``<workdir>/metrics``: each executor's ``spillstore`` source
and the driver's ``spillstore.executors`` sums, once they have settled. At the end it reads
each executor's directory: the jars it fetched, and its log for the cold tiers' native memory.

``<workdir>/report.json``, rewritten after each step: ``{"app_id", "session_start_s",
"driver_max_heap_mb", "executors": {id: {"pid", "max_heap_mb"}}, "budgets": {name: {"queries":
{query: operators_job's result}, "metrics": reading}}, "executor_dirs": {id: {"jars",
"cold_memory_mb": [MB, ...]}}, "seconds"}``; a reading is ``{"settled", "unsettled",
"executors": {id: {metric: value}}, "sums": {metric: value}}``.
"""

from __future__ import annotations

import json
import re
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for harness
import harness  # noqa: E402

from jobs import executor_loss_job, operators_job  # noqa: E402

MASTER = "local-cluster[2,1,1024]"
# Below the driver's 1g (harness.session_builder): a budget derived from a heap tells whose.
EXECUTOR_MEMORY_MB = 768
NAMESPACE = "app"  # spark.metrics.namespace: metric names without the random application id
REPORT_INTERVAL = "200ms"  # executors' reports to the driver's spillstore.executors source
# Twice as many partitions as executor cores, and no wait for a store's executor to be free:
# a store's next task may run in the other executor, which loads it from the checkpoint while
# the first keeps its copy (until Spark's maintenance unloads it; not within the job's minutes,
# so the stores open at the end tell how many moved).
PARTITIONS = 4
MAINTENANCE_INTERVAL = "30m"
_COLD_MEMORY = re.compile(r"spillstore's cold tiers share (\d+) MB")


def session(workdir: Path) -> Any:
    csv = "spark.metrics.conf.*.sink.csv."
    (workdir / "metrics").mkdir()
    spark = (
        harness.session_builder(MASTER, partitions=PARTITIONS,
                                metricsReportInterval=REPORT_INTERVAL)
        .appName("spillstore-cluster")
        .config("spark.locality.wait", "0")
        .config("spark.sql.streaming.stateStore.maintenanceInterval", MAINTENANCE_INTERVAL)
        .config("spark.executor.memory", f"{EXECUTOR_MEMORY_MB}m")
        .config("spark.metrics.namespace", NAMESPACE)
        .config(csv + "class", "org.apache.spark.metrics.sink.CsvSink")
        .config(csv + "period", "1")
        .config(csv + "unit", "seconds")
        .config(csv + "directory", str(workdir / "metrics"))
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    # Python workers import harness (applyInPandasWithState's function lives there).
    spark.sparkContext.addPyFile(harness.__file__)
    return spark


def max_heap_mb(pid: int) -> int:
    """The -Xmx of a running JVM, in MB."""
    args = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
    m = next(re.fullmatch(r"-Xmx(\d+)([mMgG])", a) for a in args if a.startswith("-Xmx"))
    return int(m.group(1)) * (1024 if m.group(2) in "gG" else 1)


def read_metrics(directory: Path) -> dict[str, Any]:
    """The latest value of every spillstore metric the CSV sink wrote: per executor (source
    ``spillstore``) and the driver's sums (source ``spillstore.executors``). A timer's file
    has more columns; its second is the count."""
    executors: dict[str, dict[str, float]] = {}
    sums: dict[str, float] = {}
    for path in directory.glob(f"{NAMESPACE}.*.spillstore.*.csv"):
        lines = path.read_text().strip().splitlines()
        if len(lines) < 2:
            continue
        value = float(lines[-1].split(",")[1])
        instance, rest = path.stem[len(NAMESPACE) + 1:].split(".spillstore.", 1)
        if rest.startswith("executors."):
            sums[rest[len("executors."):]] = value
        else:
            executors.setdefault(instance, {})[rest] = value
    return {"executors": executors, "sums": sums}


def _inconsistent(reading: dict[str, Any], executor_count: int) -> list[str]:
    """The figures in which the driver's sums and the executors' own disagree."""
    executors, sums = reading["executors"], reading["sums"]
    if len(executors) != executor_count or sums.get("reportingExecutors") != executor_count:
        return ["reportingExecutors"]
    return [name for name in next(iter(executors.values()))
            if name != "commitTime" and sums.get(name) != sum(e.get(name, 0)
                                                              for e in executors.values())]


def _flat(reading: dict[str, Any]) -> dict[str, float]:
    """A reading's figures by ``sums.<name>`` and ``<executor id>.<name>``."""
    return {**{f"sums.{n}": v for n, v in reading["sums"].items()},
            **{f"{e}.{n}": v for e, figures in reading["executors"].items()
               for n, v in figures.items()}}


def _changed(reading: dict[str, Any], previous: dict[str, Any] | None) -> list[str]:
    """The figures that changed since ``previous`` (all of them if there is none)."""
    if previous is None:
        return ["*"]
    now, before = _flat(reading), _flat(previous)
    return sorted(k for k in now.keys() | before.keys() if now.get(k) != before.get(k))


def settle(directory: Path, executor_count: int, timeout_s: float = 30) -> dict[str, Any]:
    """The metrics once two readings a sink period apart are the same and the driver's sums
    agree with the executors' own figures (each executor's report reached the driver and
    every sink wrote after it); the last reading, with ``settled`` false, after ``timeout_s``.
    ``unsettled`` lists, per reading taken, what changed and what disagreed."""
    previous = None
    unsettled: list[dict[str, list[str]]] = []
    deadline = time.monotonic() + timeout_s
    while True:
        time.sleep(1.2)  # longer than the sinks' period and many report intervals
        reading = read_metrics(directory)
        changed, inconsistent = _changed(reading, previous), _inconsistent(reading, executor_count)
        settled = not changed and not inconsistent
        if not settled:
            unsettled.append({"changed": changed, "inconsistent": inconsistent})
        if settled or time.monotonic() > deadline:
            return {"settled": settled, "unsettled": unsettled, **reading}
        previous = reading


def executor_dirs(home: Path, app_id: str) -> dict[str, dict[str, Any]]:
    """Per executor, from its directory in the worker: the jars it fetched from the driver
    and the native memory its cold tiers share, as its log states it."""
    found = {}
    for log in (home / "work" / app_id).glob("*/stderr"):
        found[log.parent.name] = {
            "jars": sorted(p.name for p in log.parent.glob("*.jar")),
            "cold_memory_mb": [int(m) for m in _COLD_MEMORY.findall(log.read_text())]}
    return found


def main(spec_file: str) -> int:
    spec = json.loads(Path(spec_file).read_text())
    workdir = Path(spec["workdir"])
    home = harness.use_spark_home(workdir)
    report: dict[str, Any] = {"budgets": {}}

    def save() -> None:
        tmp = workdir / ".report.json.tmp"
        tmp.write_text(json.dumps(report))
        tmp.replace(workdir / "report.json")

    started = time.monotonic()
    spark = session(workdir)
    try:
        executor_loss_job.wait_for_executors(spark, 2)
        app_id = spark.sparkContext.applicationId
        pids = executor_loss_job.executor_processes(app_id)
        report.update(
            app_id=app_id, session_start_s=round(time.monotonic() - started, 1),
            driver_max_heap_mb=spark.sparkContext._jvm.java.lang.Runtime.getRuntime()
            .maxMemory() >> 20,
            executors={e: {"pid": pid, "max_heap_mb": max_heap_mb(pid)} for e, pid in pids.items()})
        save()
        for name, budget in spec["budgets"]:
            options = {} if budget is None else {"memoryBudget": budget}
            results: dict[str, Any] = {}
            report["budgets"][name] = {"queries": results}
            for query in spec["queries"]:
                results[query] = operators_job.run_one(spark, workdir / name, query, options)
                print(f"{name} {query}: {results[query]}", file=sys.stderr, flush=True)
                save()
            report["budgets"][name]["metrics"] = settle(workdir / "metrics", len(pids))
            save()
        report["executor_dirs"] = executor_dirs(home, app_id)
    finally:
        spark.stop()
        report["seconds"] = round(time.monotonic() - started, 1)
        save()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
