"""Stateful streaming queries on ``local-cluster[2,1,1024]`` (two executor JVMs), one executor
SIGKILLed in the middle of a batch of each; the queries carry on without a restart.

    python tests/jobs/executor_loss_job.py SPEC.json

SPEC.json: ``{"workdir", "budget" (a spillstore memoryBudget, or null for the default),
"trials": [{"shape", "seed", "checkpoint_format" (optional: 2 runs spillstore's query with
checkpoint format v2, Spark 4.x)}]}``. Every
trial writes its input (``inputs(shape, seed)``) into ``<workdir>/<i>/input/<source>``, runs
its query with ``availableNow`` and ``maxFilesPerTrigger=1`` (file i of each source is batch i),
kills one executor once at least
``kill_after`` batches are committed and a job of the next one is running, and writes each
batch's rows to ``<workdir>/<i>/output`` (``harness.batch_writer``). Shapes whose exact output
plain Python does not model (``REFERENCE_SHAPES``: session windows and a stream-stream join,
whose output depends on the watermark) first run without a kill with Spark's default provider
into ``<workdir>/<i>/reference``. The last stdout line is a JSON report of the kills: which
executor and process, what Spark recorded about it, and spillstore's per-JVM directories on
disk at the end of the trial and after the application stopped. The test
(test_executor_loss.py) compares the outputs with ``expected_outputs`` or the reference.
"""

from __future__ import annotations

import json
import os
import random
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for harness
import harness  # noqa: E402
import spillstore  # noqa: E402

SCHEMA = "id LONG, key STRING, value LONG"
EVENTS_SCHEMA = "id LONG, key STRING, value LONG, t LONG"
FILES = 7
ROWS_PER_FILE = 10_000
IDS = 30_000  # drawn with repetition: about a third of a batch's ids were seen before
KEYS = 3_000
SHAPES = ("agg", "dedup_agg", "session", "join")
# Compared with a run of the default provider, not with plain Python.
REFERENCE_SHAPES = ("session", "join")
# Event time: batch b's rows are in [b * STEP_S, b * STEP_S + SPREAD_S) seconds, so every batch
# has rows behind the watermark (10 s behind the max event time) and sessions and join ranges
# that span batches.
STEP_S = 20
SPREAD_S = 35
JOIN_KEYS = 2_000
EXECUTOR_CLASS = "org.apache.spark.executor.CoarseGrainedExecutorBackend"


def input_batches(seed: int) -> list[list[tuple[int, str, int]]]:
    """FILES batches of rows (id, key, value); key and value are functions of id, so the
    duplicates of an id are identical rows and dropDuplicates(id) keeps the same row whichever
    one it sees first."""
    rnd = random.Random(seed)
    return [
        [(i, f"k{i % KEYS}", i % 97) for i in (rnd.randrange(IDS) for _ in range(ROWS_PER_FILE))]
        for _ in range(FILES)
    ]


def inputs(shape: str, seed: int) -> dict[str, tuple[str, list[list[tuple[Any, ...]]]]]:
    """Source name -> (schema, FILES batches of rows) of a shape."""
    if shape not in REFERENCE_SHAPES:
        return {"events": (SCHEMA, input_batches(seed))}
    rnd = random.Random(seed)

    def timed(b: int) -> int:
        return b * STEP_S + rnd.randrange(SPREAD_S)

    if shape == "session":
        return {"events": (EVENTS_SCHEMA, [
            [(i, f"k{rnd.randrange(KEYS)}", i % 97, timed(b))
             for i in range(b * ROWS_PER_FILE, (b + 1) * ROWS_PER_FILE)]
            for b in range(FILES)])}
    half = ROWS_PER_FILE // 2
    return {
        "impressions": ("imp_id LONG, imp_key STRING, t LONG", [
            [(i, f"k{rnd.randrange(JOIN_KEYS)}", timed(b)) for i in range(b * half, (b + 1) * half)]
            for b in range(FILES)]),
        "clicks": ("click_id LONG, click_key STRING, t LONG", [
            [(i, f"k{rnd.randrange(JOIN_KEYS)}", timed(b)) for i in range(b * half, (b + 1) * half)]
            for b in range(FILES)]),
    }


def expected_outputs(shape: str, batches: list[list[tuple[int, str, int]]]) -> harness.Outputs:
    """What each batch of the update-mode query outputs, computed in plain Python: every key
    the batch changed, with its count and sum over all batches so far (after dropping ids seen
    before, for ``dedup_agg``)."""
    assert shape in SHAPES and shape not in REFERENCE_SHAPES
    state: dict[str, list[int]] = {}
    seen: set[int] = set()
    out: harness.Outputs = {}
    for b, rows in enumerate(batches):
        touched = set()
        for i, key, value in rows:
            if shape == "dedup_agg":
                if i in seen:
                    continue
                seen.add(i)
            n_total = state.setdefault(key, [0, 0])
            n_total[0] += 1
            n_total[1] += value
            touched.add(key)
        out[b] = sorted(
            json.dumps({"key": k, "n": state[k][0], "total": state[k][1]}, sort_keys=True)
            for k in touched
        )
    return out


def output_mode(shape: str) -> str:
    return "append" if shape in REFERENCE_SHAPES else "update"


def query(spark: Any, shape: str, sources: dict[str, tuple[Path, str]]) -> Any:
    """The shape's query over ``sources`` (source name -> (input dir, schema))."""
    from pyspark.sql import functions as F

    streams = {
        source: spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).json(str(path))
        for source, (path, schema) in sources.items()
    }
    if shape == "session":
        return (
            streams["events"].withColumn("ts", F.timestamp_seconds("t"))
            .withWatermark("ts", "10 seconds")
            .groupBy(F.session_window("ts", "5 seconds"), "key")
            .agg(F.count("*").alias("n"), F.sum("value").alias("total"))
        )
    if shape == "join":
        imps = streams["impressions"].withColumn("imp_ts", F.timestamp_seconds("t")).drop("t")
        clicks = streams["clicks"].withColumn("click_ts", F.timestamp_seconds("t")).drop("t")
        return imps.withWatermark("imp_ts", "10 seconds").join(
            clicks.withWatermark("click_ts", "10 seconds"),
            F.expr("imp_key = click_key AND click_ts >= imp_ts "
                   "AND click_ts <= imp_ts + interval 10 seconds"))
    df = streams["events"]
    if shape == "dedup_agg":
        df = df.dropDuplicates(["id"])  # no watermark: the dedup state only grows
    return df.groupBy("key").agg(F.count("*").alias("n"), F.sum("value").alias("total"))


# --------------------------------------------------------------------------------------------
# The executors of this application and what Spark knows about them


def executor_processes(app_id: str) -> dict[str, int]:
    """Executor id -> pid of the executor JVMs below this process (the driver JVM launches
    them in local-cluster mode) that belong to application ``app_id``."""
    found = {}
    for pid in harness.descendants(os.getpid()):
        try:
            args = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
        except OSError:
            continue
        if EXECUTOR_CLASS in args and args[args.index("--app-id") + 1] == app_id:
            found[args[args.index("--executor-id") + 1]] = pid
    return found


def spark_executors(spark: Any) -> dict[str, dict[str, Any]]:
    """Every executor the application ever had (from Spark's status store), driver excluded."""
    seq = spark.sparkContext._jsc.sc().statusStore().executorList(False)
    out = {}
    for n in range(seq.size()):
        e = seq.apply(n)
        if e.id() == "driver":
            continue
        reason = e.removeReason()
        out[e.id()] = {
            "active": e.isActive(),
            "remove_reason": reason.get() if reason.isDefined() else None,
            "active_tasks": e.activeTasks(),
            "failed_tasks": e.failedTasks(),
            "completed_tasks": e.completedTasks(),
        }
    return out


def busy_executors(spark: Any, among: Iterable[str]) -> list[str]:
    """Executors of ``among`` that Spark shows running a task (its view may lag by ~100 ms)."""
    return sorted(e for e, s in spark_executors(spark).items()
                  if s["active_tasks"] and e in among)


def wait_for_executors(spark: Any, count: int, timeout_s: float = 120) -> None:
    app_id = spark.sparkContext.applicationId
    deadline = time.monotonic() + timeout_s
    while True:
        active = [k for k, e in spark_executors(spark).items() if e["active"]]
        if len(active) >= count and len(executor_processes(app_id)) >= count:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"{len(active)} of {count} executors after {timeout_s} s")
        time.sleep(0.2)


def local_roots(pid: int, local_dir: Path) -> list[str]:
    """The executor's own local directories (``spark-<uuid>`` under the worker's app dir,
    deleted by a shutdown hook) that its open files are in."""
    roots = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = Path(os.readlink(fd))
        except OSError:
            continue
        if target.is_relative_to(local_dir):
            # <local dir>/spark-<driver>/executor-<app dir>/spark-<this executor>/...
            roots.update(str(p) for p in target.parents
                         if p.name.startswith("spark-") and p.parent.name.startswith("executor-"))
    return sorted(roots)


def cold_dirs(local_dir: Path) -> list[str]:
    return sorted(str(p) for p in local_dir.rglob("spillstore-*") if p.is_dir())


def du(path: str) -> int:
    return sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file())


# --------------------------------------------------------------------------------------------
# A trial


def killer(spark: Any, checkpoint: Path, local_dir: Path, rnd: random.Random,
           report: dict[str, Any], stop: threading.Event) -> None:
    """Once ``report['kill_after']`` batches are committed and a job runs, wait a seeded
    moment into it and SIGKILL a seeded one of the executors."""
    sc = spark.sparkContext
    tracker = sc.statusTracker()
    while not stop.is_set():
        done = harness.committed_batches(checkpoint)
        if len(done) >= report["kill_after"] and tracker.getActiveJobsIds():
            break
        time.sleep(0.01)
    else:
        return
    time.sleep(report["delay_s"])
    procs = executor_processes(sc.applicationId)
    # An executor running a task if there is one, so the kill loses a task in flight as well
    # as the stores and shuffle files the executor holds.
    busy = busy_executors(spark, procs)
    candidates = sorted(busy or procs)
    victim = candidates[rnd.randrange(len(candidates))]
    pid = procs[victim]
    report["victim_was_busy"] = victim in busy
    report["local_roots"] = local_roots(pid, local_dir)
    report["job_active_at_kill"] = bool(tracker.getActiveJobsIds())
    report["committed_at_kill"] = harness.committed_batches(checkpoint)
    os.kill(pid, signal.SIGKILL)
    report.update(victim=victim, pid=pid, killed_at=time.time())
    # What it had in its cold tiers, which no shutdown hook of its own deletes now.
    report["victim_cold_dirs_at_kill"] = sum(len(cold_dirs(Path(r)))
                                             for r in report["local_roots"])


CHECKPOINT_FORMAT_CONF = "spark.sql.streaming.stateStore.checkpointFormatVersion"


def start(spark: Any, shape: str, sources: dict[str, tuple[Path, str]], checkpoint: Path,
          output: Path, build: Callable[..., Any] = query,
          before_batch: Callable[[int], None] | None = None) -> Any:
    """Starts ``build(spark, shape, sources)`` (by default the shape's ``query``)."""
    output.mkdir(parents=True)
    return (
        build(spark, shape, sources).writeStream.outputMode(output_mode(shape))
        .foreachBatch(harness.batch_writer(output, before_batch=before_batch))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )


def run_reference(spark: Any, shape: str, sources: dict[str, tuple[Path, str]],
                  trial_dir: Path, build: Callable[..., Any] = query) -> None:
    """The shape's query (see ``start``) without a kill, its state kept by Spark's default
    provider (with checkpoint format v1, the only one it supports)."""
    checkpoint_format = spark.conf.get(CHECKPOINT_FORMAT_CONF, None)
    spark.conf.set(harness.PROVIDER_CONF, harness.DEFAULT)
    spark.conf.set(CHECKPOINT_FORMAT_CONF, "1")
    try:
        handle = start(spark, shape, sources, trial_dir / "reference-checkpoint",
                       trial_dir / "reference", build)
        if not handle.awaitTermination(harness.QUERY_TIMEOUT_S):
            handle.stop()
            raise TimeoutError(f"reference run not finished after {harness.QUERY_TIMEOUT_S} s")
        if handle.exception() is not None:
            raise RuntimeError(f"reference run failed: {handle.exception()}")
    finally:
        spark.conf.set(harness.PROVIDER_CONF, harness.SPILLSTORE)
        if checkpoint_format is None:
            spark.conf.unset(CHECKPOINT_FORMAT_CONF)
        else:
            spark.conf.set(CHECKPOINT_FORMAT_CONF, checkpoint_format)


def jvm_dirs(local_dir: Path) -> list[dict[str, Any]]:
    """spillstore's per-JVM directories (``<parent>/jvm-<pid>-<random>``, LocalDirs.scala) under
    ``local_dir``: where, whose process, and whether it still runs."""
    found = []
    for d in sorted(local_dir.rglob("jvm-*")):
        if d.is_dir():
            pid = int(d.name.split("-")[1])
            found.append({"path": str(d), "pid": pid, "alive": not _gone(pid, timeout_s=0),
                          "cold_dirs": len(cold_dirs(d))})
    return found


def run_trial(spark: Any, trial_dir: Path, shape: str, seed: int, local_dir: Path,
              checkpoint_format: int | None = None) -> dict[str, Any]:
    # The trials of one application run in turn, each query with its trial's format.
    if checkpoint_format is None:
        spark.conf.unset(CHECKPOINT_FORMAT_CONF)
    else:
        spark.conf.set(CHECKPOINT_FORMAT_CONF, str(checkpoint_format))
    rnd = random.Random(seed)
    checkpoint, output = trial_dir / "checkpoint", trial_dir / "output"
    sources = {}
    for source, (schema, batches) in inputs(shape, seed).items():
        sources[source] = (trial_dir / "input" / source, schema)
        harness.write_batches(sources[source][0], schema, batches, range(FILES))
    if shape in REFERENCE_SHAPES:
        run_reference(spark, shape, sources, trial_dir)
    report: dict[str, Any] = {
        "shape": shape, "seed": seed, "kill_after": rnd.randint(1, FILES - 3),
        "delay_s": round(rnd.uniform(0, 0.4), 3),
    }
    before = executor_processes(spark.sparkContext.applicationId)
    report.update(executors_before=sorted(before), pids_before=sorted(before.values()))
    stop = threading.Event()
    thread = threading.Thread(target=killer, args=(spark, checkpoint, local_dir, rnd, report, stop))
    started = time.monotonic()
    handle = start(spark, shape, sources, checkpoint, output)
    thread.start()
    error = None
    try:
        if not handle.awaitTermination(harness.QUERY_TIMEOUT_S):
            error = f"not finished after {harness.QUERY_TIMEOUT_S} s"
    except Exception as e:  # StreamingQueryException
        error = str(e)[:4000]
    finally:
        stop.set()
        thread.join()
        if handle.isActive:
            handle.stop()
    report["query_s"] = round(time.monotonic() - started, 1)
    report["error"] = error
    report["batches"] = [p["batchId"] for p in handle.recentProgress]
    report["batch_ms"] = [p["durationMs"]["triggerExecution"] for p in handle.recentProgress]
    report["committed"] = harness.committed_batches(checkpoint)
    report["cold_entries_max"] = max(
        (sum(op.cold_entries or 0 for op in spillstore.operator_metrics(p))
         for p in handle.recentProgress), default=0)
    if "pid" in report:
        report["pid_gone"] = _gone(report["pid"])
        wait_for_executors(spark, 2)  # the worker starts a replacement; the next trial needs it
        report["replaced_after_s"] = round(time.time() - report["killed_at"], 1)
    report["spark_executors"] = spark_executors(spark)
    report["executors_after"] = sorted(executor_processes(spark.sparkContext.applicationId))
    report["cold_dirs"] = cold_dirs(local_dir)
    report["jvm_dirs"] = jvm_dirs(local_dir)
    # What the dead executor left on disk: its local root (Spark's block manager dir, and
    # spillstore's per-JVM dir until an executor started later on its worker spills), until
    # the worker deletes the application's directories when the application ends.
    report["victim_roots_left"] = {r: {"bytes": du(r), "cold_dirs": len(cold_dirs(Path(r)))}
                                   for r in report.get("local_roots", []) if Path(r).exists()}
    return report


def _gone(pid: int, timeout_s: float = 30) -> bool:
    """The process no longer runs (reaped, or a zombie its parent has not reaped yet)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            return True
        if state in ("Z", "X"):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)


def main(spec_file: str) -> int:
    spec = json.loads(Path(spec_file).read_text())
    workdir = Path(spec["workdir"])
    local_dir = workdir / "local"
    options = {} if spec["budget"] is None else {"memoryBudget": spec["budget"]}
    harness.use_spark_home(workdir)
    spark = (
        harness.session_builder("local-cluster[2,1,1024]", partitions=4, **options)
        .appName("spillstore-executor-loss")
        .config("spark.executor.memory", "512m")
        .config("spark.local.dir", str(local_dir))
        # A fetch from the dead executor fails at once instead of after 3 retries 5 s apart.
        .config("spark.shuffle.io.maxRetries", "0")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    reports = []
    try:
        wait_for_executors(spark, 2)
        for n, trial in enumerate(spec["trials"]):
            report = run_trial(spark, workdir / str(n), trial["shape"], trial["seed"], local_dir,
                               trial.get("checkpoint_format"))
            print(json.dumps(report), file=sys.stderr, flush=True)
            reports.append(report)
        before_stop = {"executors": executor_processes(spark.sparkContext.applicationId),
                       "jvm_dirs": jvm_dirs(local_dir)}
    finally:
        spark.stop()
    print(json.dumps({"trials": reports, "before_stop": before_stop}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
