"""Shared machinery of the end-to-end tests: the test SparkSession, the deterministic
multi-batch input, the stateful queries under test, and running a query to completion.

Every query reads JSON files with the file source, ``maxFilesPerTrigger=1`` and
``trigger(availableNow=True)``: file ``i`` is micro-batch ``i`` in every run, whichever state
store provider keeps the state, so outputs can be compared batch by batch. The sink is a
``foreachBatch`` that writes each batch's rows (sorted, canonical JSON) to
``<output dir>/<batch id>.json``; a replayed batch overwrites its file, and a query continued
in another process (another JVM) writes to the same directory.

Also imported by job scripts in ``jobs/``, which the tests run in a fresh Python process and
JVM; such a script puts this directory on ``sys.path`` before importing it.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import decimal
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyspark
import pytest
import spillstore

SPILLSTORE = spillstore.PROVIDER_CLASS
# The Spark line the tests run on (each line's venv: Makefile, test-line-<line>).
SPARK_LINE = tuple(int(p) for p in pyspark.__version__.split(".")[:2])
# The state data source (format "statestore") arrived in Spark 4.0.
needs_state_reader = pytest.mark.skipif(
    SPARK_LINE < (4, 0), reason="the state data source (format statestore) arrived in Spark 4.0")
DEFAULT = "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"
PROVIDER_CONF = spillstore.PROVIDER_CLASS_CONF
QUERY_TIMEOUT_S = 180
# The job scripts the tests run in a process (and JVM) of their own.
JOBS = Path(__file__).resolve().parent / "jobs"

# --------------------------------------------------------------------------------------------
# Session


def assert_same_output_as_default(actual: Run, expected: Run, query: str, name: str) -> None:
    """``actual`` (spillstore's run, called ``name``) gave ``expected``'s output (the default
    provider's) batch by batch; each checkpoint records the provider that wrote it."""
    assert checkpoint_provider(expected.checkpoint) == {DEFAULT}
    assert checkpoint_provider(actual.checkpoint) == {SPILLSTORE}
    assert any(expected.outputs.values()), "the reference run output nothing"
    difference = describe_difference(actual.outputs, expected.outputs, name, "default")
    assert actual.outputs == expected.outputs, (
        f"{query} with {name} differs from the default provider:\n{difference}")


def use_spark_home(under: Path) -> Path:
    """Sets SPARK_HOME to a directory in ``under`` whose bin, jars and python are pyspark's, for
    local-cluster sessions started after it: their worker keeps the executors' directories (logs,
    the jars fetched from the driver) in ``$SPARK_HOME/work``, which would otherwise be inside the
    installed pyspark package, and the test's directory is removed with it."""
    home = under / "spark-home"
    home.mkdir()
    for name in ("bin", "jars", "python"):
        (home / name).symlink_to(Path(pyspark.__file__).parent / name)
    os.environ["SPARK_HOME"] = str(home)
    return home


# No /tmp/hsperfdata_<user>/<pid> file, which a killed JVM leaves.
NO_PERF_DATA = "-XX:-UsePerfData"


def jvm_tmp_env(tmp: Path) -> dict[str, str]:
    """Environment variables that put in ``tmp`` the temporary files of a process started with
    them and of the JVM it starts through spark-submit (PySpark's, ``python -m spillstore``'s):
    ``TMPDIR`` Python's, ``SPARK_SUBMIT_OPTS`` the driver JVM's ``java.io.tmpdir``, where Spark
    puts ``spark-*``, ``blockmgr-*`` and ``artifacts-*`` and LZ4, Snappy, zstd and RocksDB unpack
    their native libraries. ``session_builder``'s ``extraJavaOptions`` follow
    ``SPARK_SUBMIT_OPTS`` on the JVM's command line, so its ``tmp_dir`` wins.
    ``SPARK_LAUNCHER_OPTS`` is for the short-lived JVM that builds spark-submit's command."""
    return {"TMPDIR": str(tmp), "SPARK_SUBMIT_OPTS": f"-Djava.io.tmpdir={tmp} {NO_PERF_DATA}",
            "SPARK_LAUNCHER_OPTS": NO_PERF_DATA}


def use_tmp(monkeypatch: pytest.MonkeyPatch, tmp: Path) -> None:
    """Until ``monkeypatch`` undoes it, this process' ``tempfile`` and every process it starts
    keep their temporary files in ``tmp`` (``jvm_tmp_env``)."""
    for name, value in jvm_tmp_env(tmp).items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))


def session_builder(master: str = "local[2]", partitions: int = 2,
                    tmp_dir: Path | None = None, **options: Any) -> Any:
    """The tests' SparkSession builder with spillstore configured (``options`` are spillstore
    options): pytest's session fixture, restart_worker.py and the heavy jobs.

    The JVMs' ``java.io.tmpdir`` is ``tmp_dir``, by default Python's temporary directory, which
    ``TMPDIR`` sets: Spark's
    local dirs (``spark-*``, ``blockmgr-*``, and under them spillstore's cold tiers, as
    ``spark.local.dir`` is left unset) and the native libraries RocksDB and LZ4 unpack go
    there, so a job run by ``run_job`` leaves nothing in /tmp even when it is killed."""
    from pyspark.sql import SparkSession

    java_tmp = f"-Djava.io.tmpdir={tmp_dir or tempfile.gettempdir()} {NO_PERF_DATA}"
    # Python workers (applyInPandasWithState) must run this interpreter, which has spillstore,
    # pandas and pyarrow. pyspark's default is whatever `python3` is first on PATH, and the
    # `spark.pyspark.python` conf does not change that for a local session started from Python.
    os.environ["PYSPARK_PYTHON"] = sys.executable
    builder = (
        SparkSession.builder.master(master)
        .appName("spillstore-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", "1g")
        .config("spark.sql.shuffle.partitions", str(partitions))
        .config("spark.default.parallelism", str(partitions))
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.extraJavaOptions", java_tmp)
        .config("spark.executor.extraJavaOptions", java_tmp)
    )
    try:
        return spillstore.configure(builder, **options)
    except FileNotFoundError as e:
        raise FileNotFoundError(
            f"{e}\nThe end-to-end tests run the real provider: build it with `make jar`."
        ) from None


def start_session(tmp_dir: Path | None = None) -> Any:
    """Create (or get) the tests' SparkSession, its JVM's temporary files in ``tmp_dir`` (see
    ``session_builder``). Python workers import this module too (the applyInPandasWithState
    function lives here), so it is shipped with addPyFile."""
    session = session_builder(tmp_dir=tmp_dir).getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    session.sparkContext.addPyFile(__file__)
    return session


# --------------------------------------------------------------------------------------------
# Input: every source is a list of micro-batches, every batch a list of rows.
#
# Event time `t` is in seconds; every watermark is 10 s behind the max event time.
# The watermark a batch runs with is the one computed at the end of the previous batch:
#   batch:       0     1     2     3     4     (5: the no-data batch availableNow adds)
#   watermark:   0     0     8    23    35     61

EVENTS_SCHEMA = "id LONG, key STRING, value LONG, t LONG"
EVENTS: list[list[tuple[int, str, int, int]]] = [
    # (id, key, value, t)
    [(1, "a", 1, 1), (2, "b", 2, 2), (3, "a", 3, 5), (4, "c", 4, 8), (20, "h", 20, 3)],
    # updates of a (same window), new keys d, exact duplicate of id 3, a in a new window
    [(5, "a", 5, 6), (6, "d", 6, 12), (7, "b", 7, 15), (3, "a", 3, 5), (8, "a", 8, 18)],
    # b@9 is not late (watermark 8) and updates the first window; id 7 again 7 s later
    [(9, "a", 9, 25), (10, "e", 10, 31), (11, "b", 11, 9), (12, "d", 12, 33), (7, "b", 7, 22)],
    # a@4 and d@12 are late (watermark 23): dropped; id 7 again within its watermark
    [(13, "a", 13, 4), (14, "c", 14, 27), (6, "d", 6, 12), (15, "f", 15, 45), (7, "b", 7, 40)],
    # id 16 twice in one batch; id 1 again long after its dedup state expired; c@20 late;
    # h again after its applyInPandasWithState state timed out and was removed (batch 3)
    [(16, "a", 16, 70), (16, "a", 16, 70), (17, "e", 17, 38), (18, "b", 18, 71),
     (1, "g", 1, 50), (19, "c", 19, 20), (21, "h", 21, 60)],
]

IMPRESSIONS_SCHEMA = "imp_id LONG, imp_key STRING, t LONG"
IMPRESSIONS: list[list[tuple[int, str, int]]] = [
    [(1, "a", 1), (2, "b", 2), (3, "c", 4)],
    [(4, "a", 12), (5, "d", 14)],
    [(6, "b", 30), (7, "e", 33)],
    [(8, "a", 50)],
    [(9, "f", 80)],
]
CLICKS_SCHEMA = "click_id LONG, click_key STRING, t LONG"
CLICKS: list[list[tuple[int, str, int]]] = [
    [(101, "a", 3)],  # impression 1, same batch
    [(102, "b", 8), (103, "a", 15), (104, "z", 14)],  # impressions 2 (earlier batch) and 4
    [(105, "d", 20), (106, "c", 40)],  # impression 5; c@40 is past impression 3's range
    [(107, "b", 35)],  # impression 6
    [(108, "a", 55)],  # impression 8
]

SOURCES: dict[str, tuple[str, Sequence[Sequence[tuple[Any, ...]]]]] = {
    "events": (EVENTS_SCHEMA, EVENTS),
    "impressions": (IMPRESSIONS_SCHEMA, IMPRESSIONS),
    "clicks": (CLICKS_SCHEMA, CLICKS),
}
NUM_BATCHES = len(EVENTS)
assert all(len(batches) == NUM_BATCHES for _, batches in SOURCES.values())

# File i gets modification time _MTIME_BASE + 10 * i: the file source orders by mtime, and
# files written after a restart must come after the ones already read.
_MTIME_BASE = 1_700_000_000


def write_batches(input_dir: Path, schema: str, data: Sequence[Sequence[tuple[Any, ...]]],
                  batches: range) -> None:
    """Write ``data[i]`` for each ``i`` in ``batches`` as the JSON-lines file ``part-<i>`` in
    ``input_dir``, its columns named by ``schema`` (a DDL string), its mtime ordered by ``i``."""
    columns = [c.split()[0] for c in schema.split(",")]
    input_dir.mkdir(parents=True, exist_ok=True)
    for i in batches:
        path = input_dir / f"part-{i:04d}.json"
        tmp = input_dir / f".part-{i:04d}.json.tmp"
        with open(tmp, "w") as f:
            for row in data[i]:
                f.write(json.dumps(dict(zip(columns, row, strict=True))) + "\n")
        os.utime(tmp, (_MTIME_BASE + 10 * i, _MTIME_BASE + 10 * i))
        os.replace(tmp, path)  # the file source ignores names starting with '.'


def write_input(input_dir: Path, source: str, batches: range) -> None:
    """Write the given batches of ``source`` as one JSON-lines file each into ``input_dir``."""
    schema, data = SOURCES[source]
    write_batches(input_dir, schema, data, batches)


def write_inputs(workdir: Path, sources: Sequence[str], batches: range) -> dict[str, Path]:
    dirs = {source: workdir / "input" / source for source in sources}
    for source, path in dirs.items():
        write_input(path, source, batches)
    return dirs


# --------------------------------------------------------------------------------------------
# The queries under test

Streams = Mapping[str, Any]  # source name -> streaming DataFrame with an event-time column ts


def _agg_update_by_key(s: Streams) -> Any:
    from pyspark.sql import functions as F

    return s["events"].groupBy("key").agg(F.count("*").alias("n"), F.sum("value").alias("total"))


def _agg_window(s: Streams) -> Any:
    from pyspark.sql import functions as F

    return (
        s["events"].withWatermark("ts", "10 seconds")
        .groupBy(F.window("ts", "10 seconds"), "key")
        .agg(F.count("*").alias("n"), F.sum("value").alias("total"))
    )


def _dedup(s: Streams) -> Any:
    return s["events"].withWatermark("ts", "10 seconds").dropDuplicates(["id", "ts"])


def _dedup_within_watermark(s: Streams) -> Any:
    return s["events"].withWatermark("ts", "10 seconds").dropDuplicatesWithinWatermark(["id"])


def _session_window(s: Streams) -> Any:
    from pyspark.sql import functions as F

    return (
        s["events"].withWatermark("ts", "10 seconds")
        .groupBy(F.session_window("ts", "5 seconds"), "key")
        .agg(F.count("*").alias("n"), F.sum("value").alias("total"))
    )


def _count_until_timeout(key: tuple[Any, ...], pdfs: Iterator[Any], state: Any) -> Iterator[Any]:
    """applyInPandasWithState function: running count/sum per key; when no event came for
    10 s of event time (event-time timeout), emit the final values and remove the state."""
    import pandas as pd

    if state.hasTimedOut:
        n, total, _ = state.get
        state.remove()
        yield pd.DataFrame({"key": [key[0]], "n": [n], "total": [total], "status": ["expired"]})
        return
    n, total, last_ms = state.get if state.exists else (0, 0, 0)
    for pdf in pdfs:
        n += len(pdf)
        total += int(pdf["value"].sum())
        last_ms = max(last_ms, int(pdf["t"].max()) * 1000)
    state.update((int(n), int(total), int(last_ms)))
    state.setTimeoutTimestamp(max(last_ms + 10_000, state.getCurrentWatermarkMs() + 1))
    yield pd.DataFrame({"key": [key[0]], "n": [n], "total": [total], "status": ["active"]})


def _apply_in_pandas_with_state(s: Streams) -> Any:
    from pyspark.sql.streaming.state import GroupStateTimeout

    return (
        s["events"].withWatermark("ts", "10 seconds")
        .groupBy("key")
        .applyInPandasWithState(
            _count_until_timeout,
            outputStructType="key STRING, n LONG, total LONG, status STRING",
            stateStructType="n LONG, total LONG, last_ms LONG",
            outputMode="update",
            timeoutConf=GroupStateTimeout.EventTimeTimeout,
        )
    )


def _join(how: str) -> Callable[[Streams], Any]:
    def build(s: Streams) -> Any:
        from pyspark.sql import functions as F

        imps = s["impressions"].withColumnRenamed("ts", "imp_ts").withWatermark(
            "imp_ts", "10 seconds").drop("t")
        clicks = s["clicks"].withColumnRenamed("ts", "click_ts").withWatermark(
            "click_ts", "10 seconds").drop("t")
        condition = F.expr(
            "imp_key = click_key AND click_ts >= imp_ts "
            "AND click_ts <= imp_ts + interval 10 seconds"
        )
        return imps.join(clicks, condition, how)

    return build


def _global_limit(s: Streams) -> Any:
    return s["events"].limit(7)


def _dedup_then_count(s: Streams) -> Any:
    """Two stateful operators in one query: dropDuplicates (its state removed by the
    watermark) feeding a count + sum per key."""
    from pyspark.sql import functions as F

    return (
        s["events"].withWatermark("ts", "10 seconds").dropDuplicates(["id", "ts"])
        .groupBy("key").agg(F.count("*").alias("n"), F.sum("value").alias("total"))
    )


@dataclass(frozen=True)
class QuerySpec:
    name: str
    sources: tuple[str, ...]
    output_mode: str
    build: Callable[[Streams], Any]
    evicts: bool  # the data makes the watermark remove state


QUERIES: dict[str, QuerySpec] = {
    q.name: q
    for q in [
        QuerySpec("agg_update_by_key", ("events",), "update", _agg_update_by_key, False),
        QuerySpec("agg_update_window", ("events",), "update", _agg_window, True),
        QuerySpec("agg_append_window", ("events",), "append", _agg_window, True),
        QuerySpec("dedup", ("events",), "append", _dedup, True),
        QuerySpec("dedup_within_watermark", ("events",), "append", _dedup_within_watermark,
                  True),
        QuerySpec("apply_in_pandas_with_state", ("events",), "update",
                  _apply_in_pandas_with_state, True),
        QuerySpec("session_window", ("events",), "append", _session_window, True),
        QuerySpec("join_inner", ("impressions", "clicks"), "append", _join("inner"), True),
        QuerySpec("join_left_outer", ("impressions", "clicks"), "append", _join("left_outer"),
                  True),
        QuerySpec("global_limit", ("events",), "append", _global_limit, False),
        QuerySpec("dedup_then_count", ("events",), "update", _dedup_then_count, True),
    ]
}


def streams(spark: Any, input_dirs: Mapping[str, Path]) -> dict[str, Any]:
    from pyspark.sql import functions as F

    return {
        source: spark.readStream.schema(SOURCES[source][0])
        .option("maxFilesPerTrigger", 1)
        .json(str(path))
        .withColumn("ts", F.timestamp_seconds("t"))
        for source, path in input_dirs.items()
    }


# --------------------------------------------------------------------------------------------
# Running a query to completion and reading what it did

Outputs = dict[int, list[str]]  # batch id -> the batch's rows, canonical JSON, sorted
# A query's checkpoint: a local directory, or a URI (hdfs://, s3a://, file:) that
# checkpoint_provider and committed_batches read through Hadoop's FileSystem in this process'
# active SparkSession. The output and the input stay local.
Checkpoint = Path | str


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, (dt.datetime, dt.date)):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return str(value)
    return value


def canonical(row: Any) -> str:
    return json.dumps(_plain(row.asDict(recursive=True)), sort_keys=True)


_CRASH = "injected crash after the state commit of batch"


def batch_writer(output_dir: Path, crash_at: int | None = None,
                 before_batch: Callable[[int], None] | None = None
                 ) -> Callable[[Any, int], None]:
    """A ``foreachBatch`` function writing each batch's rows (sorted, canonical JSON) to
    ``<output_dir>/<batch id>.json``; with ``crash_at``, it fails that batch instead.
    ``before_batch(batch_id)`` is called before the batch's stateful tasks run."""
    def write(batch_df: Any, batch_id: int) -> None:
        if before_batch is not None:
            before_batch(batch_id)
        # collect() runs the stateful tasks: when it returns, the batch's state is committed.
        rows = sorted(canonical(r) for r in batch_df.collect())
        if batch_id == crash_at:
            # The query dies before the batch reaches the commit log, so a restart runs this
            # batch again on top of the state version before it, which was already overwritten
            # once.
            raise RuntimeError(f"{_CRASH} {batch_id}")
        tmp = output_dir / f".{batch_id}.json.tmp"
        tmp.write_text(json.dumps(rows, indent=0))
        os.replace(tmp, output_dir / f"{batch_id}.json")

    return write


@dataclass
class Run:
    checkpoint: Checkpoint
    output_dir: Path
    progress: list[dict[str, Any]]

    @property
    def outputs(self) -> Outputs:
        return read_outputs(self.output_dir)


def unload_state_stores(spark: Any) -> None:
    """Unload (close) every state store provider of this JVM, as Spark does for a stopped
    query's stores only at its next maintenance. spillstore's memory settings are executor-wide
    (the strictest of the loaded stores' apply), so a test that ran with a small budget unloads
    its stores before queries that expect the default one."""
    spark._jvm.org.apache.spark.sql.execution.streaming.state.StateStore.stop()


@contextlib.contextmanager
def fresh_maintenance(spark: Any, confs: Mapping[str, str]) -> Iterator[None]:
    """Runs the block on spillstore with ``confs`` set in ``spark``'s session, then puts the
    session's values back. Spark's maintenance task keeps the interval of the query that
    started it, so the loaded stores are unloaded (which stops it) before the block, for its
    query to start it at its own interval, and after it."""
    keys = [PROVIDER_CONF, *confs]
    previous = {k: spark.conf.get(k, None) for k in keys}
    unload_state_stores(spark)
    try:
        for key, value in {PROVIDER_CONF: SPILLSTORE, **confs}.items():
            spark.conf.set(key, value)
        yield
    finally:
        unload_state_stores(spark)
        for key, value in previous.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)


def run_query(
    spark: Any,
    query: str,
    input_dirs: Mapping[str, Path],
    checkpoint: Checkpoint,
    output_dir: Path,
    provider: str,
    crash_at: int | None = None,
    options: Mapping[str, str] | None = None,
    before_batch: Callable[[int], None] | None = None,
) -> Run:
    """Run ``query`` with ``trigger(availableNow=True)`` until it has read every input file,
    its state kept by ``provider`` (for a new checkpoint; an existing one keeps its own).
    ``options`` are spillstore options (names after ``spark.sql.streaming.stateStore.spillstore.``)
    set for this run only.

    With ``crash_at``, the query fails in batch ``crash_at`` after its state was committed
    and before the batch was; the Run returned is the failed run's. ``before_batch``: see
    ``batch_writer``."""
    spec = QUERIES[query]
    output_dir.mkdir(parents=True, exist_ok=True)
    previous = spark.conf.get(PROVIDER_CONF, None)
    spark.conf.set(PROVIDER_CONF, provider)
    option_keys = [spillstore.option_key(name) for name in (options or {})]
    for key, value in zip(option_keys, (options or {}).values(), strict=True):
        spark.conf.set(key, value)
    try:
        df = spec.build(streams(spark, {s: input_dirs[s] for s in spec.sources}))
        handle = (
            df.writeStream.outputMode(spec.output_mode)
            .foreachBatch(batch_writer(output_dir, crash_at, before_batch))
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        error: Any = None
        try:
            finished = handle.awaitTermination(QUERY_TIMEOUT_S)
        except Exception as e:  # a failed query raises StreamingQueryException here
            finished, error = True, e
        finally:
            if handle.isActive:
                handle.stop()
        error = error or handle.exception()
        progress = handle.recentProgress
        if crash_at is not None:
            assert error is not None and _CRASH in str(error), (
                f"query {query} with {provider} was to crash at batch {crash_at}: {error}")
            return Run(checkpoint, output_dir, progress)
        if error is not None:
            raise AssertionError(f"query {query} with {provider} failed: {error}")
        assert finished, f"query {query} did not finish within {QUERY_TIMEOUT_S} s"
        return Run(checkpoint, output_dir, progress)
    finally:
        if option_keys:
            unload_state_stores(spark)
        for key in option_keys:
            spark.conf.unset(key)
        if previous is None:
            spark.conf.unset(PROVIDER_CONF)
        else:
            spark.conf.set(PROVIDER_CONF, previous)


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (the JVM PySpark starts is a child of its Python driver;
    local-cluster executors are children of that JVM)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


class JobRun(subprocess.CompletedProcess[str]):
    """A finished job (see ``run_job``), and the command lines of the processes of its group
    that were still running once it had ended and its JVM had had 60 s to exit: ``run_job``
    killed them."""

    left_running: list[str]

    def __init__(self, done: subprocess.CompletedProcess[str], left_running: list[str]) -> None:
        super().__init__(done.args, done.returncode, done.stdout, done.stderr)
        self.left_running = left_running


def run_job(args: Sequence[str], workdir: Path, timeout_s: float,
            launcher: Sequence[str] = (sys.executable,),
            env: Mapping[str, str | None] | None = None,
            cwd: Path | None = None) -> JobRun:
    """Run ``python ARGS...`` (a job script that starts its own SparkSession, hence its own
    JVM) and wait for it, capturing its output. ``launcher`` replaces ``python`` (another
    venv's python, spark-submit with its options), ``env`` adds to or replaces variables of
    this process' environment (None removes one; ``PYSPARK_PYTHON`` is this interpreter
    unless given), ``cwd``
    is where it runs (this process' directory by default).

    The job runs in a process group of its own with its temporary files, its Python's and its
    JVM's (Spark's local dirs, cold tiers, unpacked native libraries), in ``<workdir>/tmp``
    (``jvm_tmp_env``). Whatever happens (normal end, timeout, the
    test interrupted), the group is SIGKILLed if still alive and ``<workdir>/tmp`` is
    deleted. A timeout raises AssertionError with the end of the job's stderr."""
    tmp = workdir / "tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    merged = {**os.environ, "PYSPARK_PYTHON": sys.executable, **(env or {}), **jvm_tmp_env(tmp)}
    proc = subprocess.Popen([*launcher, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={k: v for k, v in merged.items() if v is not None},
                            cwd=cwd, start_new_session=True)
    timed_out = False
    left_running: list[str] = []
    try:
        try:
            stdout, stderr = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill_group(proc.pid)
            stdout, stderr = proc.communicate()
    finally:
        if proc.poll() is not None and not timed_out:
            # The job ended; its JVM exits (and cleans up) once it sees the job's pipe close.
            _wait_group(proc.pid, timeout_s=60)
            left_running = [cmdline for _, cmdline in _group_members(proc.pid)]
        _kill_group(proc.pid)  # whatever is left: the test failed, timed out or was interrupted
        proc.kill()
        proc.wait()
        shutil.rmtree(tmp, ignore_errors=True)
    if timed_out:
        raise AssertionError(f"{' '.join(args)} did not finish within {timeout_s} s:\n"
                             f"{stderr[-6000:]}")
    return JobRun(subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr),
                  left_running)


def run_reporting_job(job: Path, spec: Mapping[str, Any], workdir: Path, timeout_s: float
                      ) -> dict[str, Any]:
    """Run ``job SPEC.json`` (see ``run_job``) with ``spec`` and ``report``, the file the job
    writes its report to (JSON: at least ``error``, the query's Java exception or null, and
    ``message``), and return the report. Fails with the Java exception's first line if the
    job wrote no report, its query failed or it exited non-zero."""
    report_file, spec_file = workdir / "report.json", workdir / "spec.json"
    spec_file.write_text(json.dumps({**spec, "report": str(report_file)}))
    started = time.monotonic()
    job_run = run_job([str(job), str(spec_file)], workdir, timeout_s=timeout_s)
    print(f"\n{job.name} {dict(spec)}: {time.monotonic() - started:.1f} s")
    assert report_file.exists(), (
        f"{job.name} wrote no report (exit {job_run.returncode}, "
        f"{java_error(job_run.stderr)}):\n{job_run.stderr[-6000:]}")
    report: dict[str, Any] = json.loads(report_file.read_text())
    assert report["error"] is None, (
        f"the query failed: {report['error']}\n{report['message']}")
    assert job_run.returncode == 0, job_run.stderr[-6000:]
    return report


def await_query(handle: Any, report: dict[str, Any], timeout_s: float) -> None:
    """In a job script: wait for a streaming query to end (stopping it after ``timeout_s``),
    and record in ``report`` its failure (``error``, the Java exception's first line, and
    ``message``) and the progress of every batch (``progress``)."""
    try:
        if not handle.awaitTermination(timeout_s):
            report["error"] = f"not finished within {timeout_s} s"
    except Exception as e:  # StreamingQueryException
        report["error"], report["message"] = java_error(str(e)), str(e)[:6000]
    finally:
        if handle.isActive:
            handle.stop()
    report["progress"] = json.loads(json.dumps(handle.recentProgress, default=str))


def write_job_report(spark: Any, report: dict[str, Any], report_file: str,
                     started: float) -> None:
    """In a job script, at its end whatever happened: stop the session and write ``report``
    (with ``seconds`` since ``started``, a ``time.monotonic()``) to ``report_file``."""
    try:
        spark.stop()
    finally:
        report["seconds"] = round(time.monotonic() - started, 1)
        Path(report_file).write_text(json.dumps(report))


def _group_members(pgid: int) -> list[tuple[int, str]]:
    """The processes (not zombies) still in process group ``pgid``: pid and command line."""
    members = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
                if int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
                    cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ")
                    members.append((int(entry), cmdline.decode(errors="replace").strip()))
            except OSError:
                continue
    return members


def _group_alive(pgid: int) -> bool:
    """Some process (not a zombie) is still in process group ``pgid``."""
    return bool(_group_members(pgid))


def _wait_group(pgid: int, timeout_s: float) -> None:
    """Wait until process group ``pgid`` is empty, at most ``timeout_s`` seconds."""
    deadline = time.monotonic() + timeout_s
    while _group_alive(pgid) and time.monotonic() < deadline:
        time.sleep(0.1)


def _kill_group(pgid: int) -> None:
    """SIGKILL every process of group ``pgid`` (a job's group, see ``run_job``), if any."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass


_JAVA_EXCEPTION = re.compile(
    r"((?:[a-z_][\w$]*\.)+[A-Z][\w$]*(?:Exception|Error))(?![\w$])(: [^\n]*)?")
_WRAPPERS = {"org.apache.spark.SparkException",
             "org.apache.spark.sql.streaming.StreamingQueryException",
             "py4j.protocol.Py4JJavaError"}  # a foreachBatch function's failure


def java_error(text: str) -> str:
    """The first Java exception named in ``text`` (a failed query's message or a job's
    stderr) that is not one of Spark's wrappers, as ``class: message`` on one line; the
    first line of ``text`` if it names none."""
    for m in _JAVA_EXCEPTION.finditer(text):
        if m.group(1) not in _WRAPPERS:
            return m.group(0).strip()
    return text.strip().splitlines()[0] if text.strip() else ""


def read_outputs(output_dir: Path) -> Outputs:
    return {
        int(p.stem): json.loads(p.read_text())
        for p in output_dir.glob("*.json")
        if p.stem.isdigit()
    }


def all_rows(outputs: Outputs) -> list[str]:
    """Every row output by any batch, sorted (batch boundaries forgotten)."""
    return sorted(row for rows in outputs.values() for row in rows)


def rows_of(outputs: Outputs) -> list[dict[str, Any]]:
    return [json.loads(row) for row in all_rows(outputs)]


def describe_difference(actual: Outputs, expected: Outputs, actual_name: str,
                        expected_name: str) -> str:
    """Batch by batch, the rows only one of two outputs has (empty when they are equal)."""
    lines = []
    for batch in sorted(set(actual) | set(expected)):
        if batch not in actual or batch not in expected:
            present = actual_name if batch in actual else expected_name
            lines.append(f"batch {batch}: only in the {present} run")
            continue
        a, e = actual[batch], expected[batch]
        if a != e:
            lines.append(f"batch {batch}:")
            lines += [f"  only {actual_name}:  {row}" for row in a if row not in e]
            lines += [f"  only {expected_name}: {row}" for row in e if row not in a]
            if sorted(set(a)) == sorted(set(e)):
                lines.append(f"  same rows, different multiplicity: {a} vs {e}")
    return "\n".join(lines)


def _hadoop_path(uri: str) -> tuple[Any, Any]:
    """Hadoop's FileSystem for ``uri`` and its Path, from the active SparkContext's JVM."""
    from pyspark import SparkContext

    sc = SparkContext._active_spark_context
    assert sc is not None, f"reading {uri} needs a running SparkSession"
    path = sc._jvm.org.apache.hadoop.fs.Path(uri)
    return path.getFileSystem(sc._jsc.hadoopConfiguration()), path


def _names(checkpoint: Checkpoint, subdir: str) -> list[str]:
    """The names in ``<checkpoint>/<subdir>``."""
    if isinstance(checkpoint, Path):
        return [p.name for p in (checkpoint / subdir).iterdir()]
    fs, path = _hadoop_path(f"{checkpoint.rstrip('/')}/{subdir}")
    return [status.getPath().getName() for status in fs.listStatus(path)]


def _read_text(checkpoint: Checkpoint, file: str) -> str:
    """The text of ``<checkpoint>/<file>``."""
    if isinstance(checkpoint, Path):
        return (checkpoint / file).read_text()
    from pyspark import SparkContext

    fs, path = _hadoop_path(f"{checkpoint.rstrip('/')}/{file}")
    stream = fs.open(path)
    try:
        jvm = SparkContext._active_spark_context._jvm  # type: ignore[union-attr]
        return bytes(jvm.org.apache.commons.io.IOUtils.toByteArray(stream)).decode()
    finally:
        stream.close()


def checkpoint_provider(checkpoint: Checkpoint) -> set[str]:
    """The provider classes recorded in the checkpoint's offset log (one per batch)."""
    classes = set()
    for name in _names(checkpoint, "offsets"):
        if name.isdigit():
            metadata = json.loads(_read_text(checkpoint, f"offsets/{name}").splitlines()[1])
            classes.add(metadata["conf"][PROVIDER_CONF])
    return classes


def committed_batches(checkpoint: Checkpoint) -> list[int]:
    """The batches the commit log records; none while a local checkpoint has no commit log."""
    if isinstance(checkpoint, Path) and not (checkpoint / "commits").is_dir():
        return []
    return sorted(int(name) for name in _names(checkpoint, "commits") if name.isdigit())


_STATE_FILE = re.compile(r"(\d+)\.(\w+)")


def state_files(checkpoint: Path) -> dict[Path, dict[str, set[int]]]:
    """Per state store directory under ``state/<operator>/<partition>[/<store name>]``: the
    versions present for each data-file suffix (``journal``, ``snapshot``, ``delta``, ...)."""
    stores: dict[Path, dict[str, set[int]]] = {}
    for path in (checkpoint / "state").rglob("*"):
        m = _STATE_FILE.fullmatch(path.name)
        if path.is_file() and m and "_metadata" not in path.parts:
            versions = stores.setdefault(path.parent, {}).setdefault(m.group(2), set())
            versions.add(int(m.group(1)))
    return stores


_V2_STATE_FILE = re.compile(r"\d+_[0-9a-f-]{36}\.(journal|snapshot)")


def names_by_checkpoint_ids(checkpoint: Path) -> bool:
    """Whether the checkpoint has spillstore state files, all named by checkpoint ids
    (checkpoint format v2: ``<v>_<id>.journal``)."""
    names = [p.name for p in (checkpoint / "state").rglob("*")
             if p.is_file() and p.suffix in (".journal", ".snapshot")]
    return bool(names) and all(_V2_STATE_FILE.fullmatch(n) for n in names)


def metric_totals(progress: Sequence[Mapping[str, Any]], name: str) -> int | None:
    """``name`` summed over all batches and state operators; None if never reported."""
    values = [m[name] for m in map(spillstore.state_metrics, progress) if name in m]
    return sum(values) if values else None
