"""A stateful query with ``spark.speculation=true`` and one deliberately slow task: Spark runs a
speculative copy of it, the copy's success ends the batch, and the query's output stays exact.

    python tests/jobs/speculation_job.py SPEC.json

SPEC.json: ``{"workdir", "budget" (a spillstore memoryBudget, or null), "shape" (one of
executor_loss_job.REFERENCE_SHAPES), "seed", "slow_batch", "checkpoint_formats" (spillstore's
runs, one per format: [1], or [1, 2] on Spark 4.x)}``.

Spark never runs a speculative copy on a host where an attempt of the task runs, and every
executor of ``local-cluster`` is on the driver's host; so this job starts a standalone master
on 127.0.0.1 and two workers of one core each on 127.0.0.2 and 127.0.0.3 (two hosts on the
loopback interface), as children of this process (``harness.run_job`` kills its process group).

The query runs first without the slow task with Spark's default provider (the reference,
``<workdir>/reference``), then with spillstore once per checkpoint format into
``<workdir>/v<format>/output``, in the same application; before spillstore's batch
``slow_batch`` runs the driver arms that run's marker file, and the first attempt (attempt
number 0) of one partition of that batch's stateful stage that finds it takes it and sleeps
``SLOW_S`` in a UDF over the stateful operator's output (the same task: both attempts load and
write the same state version; whether the slow one commits before it sleeps depends on how
far ahead its rows were sent to the Python worker). The last stdout line is a JSON report:
per format the query's error, committed batches, the most
entries in the cold tier, which task slept, and from Spark's status store every attempt of
that task.

| state                          | owner                                                     |
|--------------------------------|-----------------------------------------------------------|
| ``<workdir>/v<f>/slow-armed``  | created by the driver before ``slow_batch`` of run v<f>;  |
|                                | renamed away by the first task attempt that sleeps (so    |
|                                | one attempt of that run sleeps)                           |
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for harness
import harness  # noqa: E402
import spillstore  # noqa: E402

from jobs import executor_loss_job as loss  # noqa: E402

SLOW_PARTITION = 0
SLOW_S = 60  # far beyond the speculation threshold; the copy's success kills this attempt
HOSTS = ("127.0.0.2", "127.0.0.3")
MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_cluster(workdir: Path) -> tuple[str, list[subprocess.Popen[bytes]]]:
    """A standalone master and one worker (1 core, 1 GB) per host of ``HOSTS``; the master's
    URL once both workers have registered."""
    home = Path(os.environ["SPARK_HOME"])
    port = free_port()
    url = f"spark://127.0.0.1:{port}"
    env = {**os.environ, "SPARK_DAEMON_MEMORY": "256m", "SPARK_LOCAL_DIRS": str(workdir / "local"),
           "SPARK_DAEMON_JAVA_OPTS": f"-Djava.io.tmpdir={workdir / 'tmp'} -XX:-UsePerfData",
           "SPARK_LOG_DIR": str(workdir / "logs")}
    logs = workdir / "logs"
    logs.mkdir()
    procs = []

    def launch(name: str, *args: str) -> None:
        with open(logs / f"{name}.log", "wb") as log:
            procs.append(subprocess.Popen([str(home / "bin" / "spark-class"), *args], env=env,
                                          stdout=log, stderr=subprocess.STDOUT))

    launch("master", MASTER_CLASS, "--host", "127.0.0.1", "--port", str(port),
           "--webui-port", str(free_port()))
    for n, host in enumerate(HOSTS):
        launch(f"worker-{n}", WORKER_CLASS, "--host", host, "--cores", "1", "--memory", "1g",
               "--webui-port", str(free_port()), "--work-dir", str(workdir / f"work-{n}"), url)
    deadline = time.monotonic() + 120
    while sum("Successfully registered with master" in (logs / f"worker-{n}.log").read_text()
              for n in range(len(HOSTS))) < len(HOSTS):
        if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
            raise RuntimeError("the standalone cluster did not come up: " + " / ".join(
                (logs / f"{name}.log").read_text()[-2000:]
                for name in ["master", *(f"worker-{n}" for n in range(len(HOSTS)))]))
        time.sleep(0.5)
    return url, procs


def slow_once(armed: str, taken: str) -> Any:
    """A UDF returning its argument; the first attempt of partition ``SLOW_PARTITION`` that
    finds ``armed`` takes it (a rename: one winner), writes its stage and partition into
    ``taken``, and sleeps ``SLOW_S`` first."""
    from pyspark.sql import functions as F

    def f(n: int) -> int:
        import os
        import time

        from pyspark import TaskContext

        tc = TaskContext.get()
        if tc.partitionId() == SLOW_PARTITION and tc.attemptNumber() == 0:
            try:
                os.rename(armed, taken)
            except FileNotFoundError:
                return n
            with open(taken, "w") as out:
                out.write(f"{tc.stageId()} {tc.partitionId()}")
            time.sleep(SLOW_S)
        return n

    return F.udf(f, "long")


def slow_query(armed: Path, taken: Path) -> Any:
    """A ``build`` for ``executor_loss_job.start``: the shape's query with :func:`slow_once`
    over its output column ``n``."""
    slow = slow_once(str(armed), str(taken))

    def build(spark: Any, shape: str, sources: Any) -> Any:
        return loss.query(spark, shape, sources).withColumn("n", slow("n"))

    return build


def task_attempts(spark: Any, stage: int, index: int) -> list[dict[str, Any]]:
    """Every attempt of task ``index`` in every attempt of ``stage``, from Spark's status store."""
    store = spark.sparkContext._jsc.sc().statusStore()
    out = []
    for stage_attempt in range(store.lastStageAttempt(stage).attemptId() + 1):
        tasks = store.taskList(stage, stage_attempt, 1_000_000)
        for t in range(tasks.size()):
            task = tasks.apply(t)
            if task.index() == index:
                out.append({"stage_attempt": stage_attempt, "attempt": task.attempt(),
                            "speculative": task.speculative(), "status": task.status(),
                            "executor": task.executorId(), "host": task.host(),
                            "duration_ms": (task.duration().get()
                                            if task.duration().isDefined() else None)})
    return out


def run_speculated(spark: Any, shape: str, sources: dict[str, Any], rundir: Path,
                   checkpoint_format: int, slow_batch: int) -> dict[str, Any]:
    """spillstore's run of the query in ``rundir`` with ``checkpoint_format``, one task of
    ``slow_batch`` slow once; its report."""
    spark.conf.set(loss.CHECKPOINT_FORMAT_CONF, str(checkpoint_format))
    rundir.mkdir(parents=True)
    armed, taken = rundir / "slow-armed", rundir / "slow-taken"
    build = slow_query(armed, taken)

    def arm(batch_id: int) -> None:
        if batch_id == slow_batch:
            armed.touch()

    report: dict[str, Any] = {"error": None}
    started = time.monotonic()
    handle = loss.start(spark, shape, sources, rundir / "checkpoint", rundir / "output",
                        build=build, before_batch=arm)
    try:
        if not handle.awaitTermination(harness.QUERY_TIMEOUT_S):
            report["error"] = f"not finished after {harness.QUERY_TIMEOUT_S} s"
    except Exception as e:  # StreamingQueryException
        report["error"] = str(e)[:4000]
    finally:
        if handle.isActive:
            handle.stop()
    report["query_s"] = round(time.monotonic() - started, 1)
    report["batch_ms"] = [p["durationMs"]["triggerExecution"] for p in handle.recentProgress]
    report["committed"] = harness.committed_batches(rundir / "checkpoint")
    report["cold_entries_max"] = max(
        (sum(op.cold_entries or 0 for op in spillstore.operator_metrics(p))
         for p in handle.recentProgress), default=0)
    # [stage, partition] of the task attempt that slept
    report["slept"] = [int(v) for v in taken.read_text().split()] if taken.exists() else None
    if report["slept"]:
        report["slept_task_attempts"] = task_attempts(spark, *report["slept"])
    return report


def main(spec_file: str) -> int:
    spec = json.loads(Path(spec_file).read_text())
    workdir = Path(spec["workdir"])
    shape = spec["shape"]
    assert shape in loss.REFERENCE_SHAPES
    options = {} if spec["budget"] is None else {"memoryBudget": spec["budget"]}
    harness.use_spark_home(workdir)
    (workdir / "tmp").mkdir(exist_ok=True)
    url, procs = start_cluster(workdir)
    report: dict[str, Any] = {"runs": {}}
    spark = None
    try:
        spark = (
            harness.session_builder(url, partitions=4, **options)
            .appName("spillstore-speculation")
            .config("spark.executor.memory", "512m")
            .config("spark.driver.host", "127.0.0.1")
            .config("spark.speculation", "true")
            .config("spark.speculation.interval", "100ms")
            .config("spark.speculation.quantile", "0.5")
            .config("spark.speculation.multiplier", "2")
            .config("spark.speculation.minTaskRuntime", "2s")
            # Speculate by run time alone, not by the task's rate of records.
            .config("spark.speculation.efficiency.enabled", "false")
            .getOrCreate()
        )
        spark.sparkContext.setLogLevel("ERROR")
        loss.wait_for_executors(spark, len(HOSTS))
        sources = {}
        for source, (schema, batches) in loss.inputs(shape, spec["seed"]).items():
            sources[source] = (workdir / "input" / source, schema)
            harness.write_batches(sources[source][0], schema, batches, range(loss.FILES))
        # The same plan as spillstore's runs (the UDF's column), never armed.
        loss.run_reference(spark, shape, sources, workdir,
                           build=slow_query(workdir / "never-armed", workdir / "never-taken"))
        for fmt in spec["checkpoint_formats"]:
            report["runs"][str(fmt)] = run_speculated(spark, shape, sources, workdir / f"v{fmt}",
                                                      fmt, spec["slow_batch"])
    finally:
        if spark is not None:
            spark.stop()
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(timeout=60)
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
