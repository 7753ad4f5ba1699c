"""``spillstore.migrate`` moves a stopped query's state between providers: a query run in
phases, its state migrated between them, ends with exactly the outputs and the state of the
same phases run without switching (and its later phases really run on the target provider).
Interrupted migrations (the JVM killed at every step) finish when run again; what cannot be
migrated is refused with a message naming the cause."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import harness
import pytest
import spillstore
from harness import DEFAULT, NUM_BATCHES, QUERIES, SPILLSTORE
from spillstore.checkpoint import inspect_checkpoint
from spillstore.migrate import MigrationRefused, migrate

ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
FORMAT_CONF = "spark.sql.streaming.stateStore.checkpointFormatVersion"
NAMES = {DEFAULT: "hdfs", SPILLSTORE: "spillstore", ROCKSDB: "rocksdb"}
# Each phase is a run until the query stops by itself; the query is stopped between phases.
PHASES = (range(0, 2), range(2, 4), range(4, NUM_BATCHES))
# Every stateful operator spillstore supports, and two of them in one query.
ALL_OPERATORS = ["agg_update_by_key", "agg_append_window", "dedup", "dedup_within_watermark",
                 "apply_in_pandas_with_state", "session_window", "join_inner",
                 "join_left_outer", "global_limit", "dedup_then_count"]
HAS_STATE_SOURCE = harness.SPARK_LINE >= (4, 0)  # Spark 3.5 has no state data source
# Every line migrates the operators whose state Spark's providers lay out in a way of their own
# (a join's four stores, session windows' prefix keys, applyInPandasWithState's timeouts); the
# others take the same code path on every line, so they run on the default line only.
EVERY_LINE = {"apply_in_pandas_with_state", "session_window", "join_left_outer"}


def _per_line(queries: list[str]) -> list[Any]:
    return [q if q in EVERY_LINE else pytest.param(q, marks=pytest.mark.one_line)
            for q in queries]


def _state(spark: Any, checkpoint: Path) -> dict[str, list[str]]:
    """Every operator's state rows through Spark's state data source (joins: both sides),
    canonical and sorted; {} on Spark 3.5."""
    if not HAS_STATE_SOURCE:
        return {}
    result = {}
    info = inspect_checkpoint(checkpoint)
    for op in sorted({s.operator for s in info.stores}):
        names = {s.store for s in info.stores if s.operator == op}
        sides = ["left", "right"] if any(n.startswith("left-") for n in names) else [None]
        for side in sides:
            reader = (spark.read.format("statestore").option("path", str(checkpoint))
                      .option("operatorId", op))
            if side:
                reader = reader.option("joinSide", side)
            rows = reader.load().drop("partition_id").collect()
            result[f"{op}/{side or 'default'}"] = sorted(harness.canonical(r) for r in rows)
    return result


def _run_phases(spark: Any, query: str, workdir: Path, providers: Sequence[str],
                migrate_between: bool, formats: Sequence[int] | None = None) -> dict[str, Any]:
    """Run ``query`` over PHASES, phase i selecting ``providers[i]`` (and with ``formats``,
    the checkpoint format ``formats[i]`` in the session); with ``migrate_between``, the
    stopped query's state is migrated to the next phase's provider (and format) first. Returns
    per phase the providers its operators reported and the state after it."""
    checkpoint, output = workdir / "checkpoint", workdir / "output"
    ran_on, states, migrations = [], [], []
    phase_formats = list(formats or [1] * len(PHASES))
    for i, (batches, provider, fmt) in enumerate(zip(PHASES, providers, phase_formats,
                                                     strict=True)):
        inputs = harness.write_inputs(workdir, QUERIES[query].sources, batches)
        changed = i > 0 and (provider, fmt) != (providers[i - 1], phase_formats[i - 1])
        if migrate_between and changed:
            harness.unload_state_stores(spark)  # as in a new process: no provider left open
            last_committed = harness.committed_batches(checkpoint)[-1]
            result = migrate(checkpoint, NAMES[provider], spark=spark, idle_seconds=0,
                             checkpoint_format=fmt if formats else None, progress=False)
            assert result.migrated and result.target == NAMES[provider], result
            assert result.batch == last_committed, result
            assert result.checkpoint_format == fmt, result
            migrations.append(result)
        with _checkpoint_format(spark, fmt if formats else None):
            run = harness.run_query(spark, query, inputs, checkpoint, output, provider)
            operators = spillstore.operator_metrics(run.progress)
            ran_on.append(sorted({op.provider or "?" for op in operators}))
            # Spark 4.0's state data source passes no checkpoint ids: it reads no v2 state.
            v2_unreadable = fmt == 2 and harness.SPARK_LINE < (4, 1)
            states.append(None if v2_unreadable else _state(spark, checkpoint))
    harness.unload_state_stores(spark)
    return {"outputs": harness.read_outputs(output), "ran_on": ran_on, "states": states,
            "migrations": migrations, "checkpoint": checkpoint}


@contextmanager
def _checkpoint_format(spark: Any, fmt: int | None) -> Iterator[None]:
    """The session's checkpoint format conf while a phase runs (None: left as it is)."""
    if fmt is None:
        yield
        return
    spark.conf.set(FORMAT_CONF, str(fmt))
    try:
        yield
    finally:
        spark.conf.unset(FORMAT_CONF)


def _assert_same_as_unswitched(switched: dict[str, Any], reference: dict[str, Any],
                               query: str) -> None:
    difference = harness.describe_difference(switched["outputs"], reference["outputs"],
                                             "migrated", "unswitched")
    assert switched["outputs"] == reference["outputs"], f"{query} outputs differ:\n{difference}"
    for phase, (got, expected) in enumerate(zip(switched["states"], reference["states"],
                                                strict=True)):
        assert got is None or got == expected, f"{query}: state after phase {phase} differs"


@pytest.mark.parametrize("query", _per_line(ALL_OPERATORS))
def test_round_trip_hdfs_to_spillstore_and_back(spark: Any, tmp_path: Path, query: str) -> None:
    reference = _run_phases(spark, query, tmp_path / "reference", [DEFAULT] * 3, False)
    switched = _run_phases(spark, query, tmp_path / "switched", [DEFAULT, SPILLSTORE, DEFAULT],
                           True)
    assert switched["ran_on"] == [["hdfs"], ["spillstore"], ["hdfs"]], switched["ran_on"]
    _assert_same_as_unswitched(switched, reference, query)
    onto, back = switched["migrations"]
    assert (onto.source, onto.target, back.source, back.target) == (
        "hdfs", "spillstore", "spillstore", "hdfs")
    is_join = query.startswith("join")
    assert [len(o.stores) for o in onto.operators] == [4] if is_join else [1] * len(onto.operators)
    if HAS_STATE_SOURCE and not is_join:  # migrate counted the rows the data source reads
        assert onto.rows == sum(len(r) for r in switched["states"][0].values())
        assert back.rows == sum(len(r) for r in switched["states"][1].values())


@pytest.mark.parametrize("query", _per_line(["agg_update_by_key", "session_window",
                                              "join_left_outer", "dedup_then_count"]))
def test_rocksdb_to_spillstore(spark: Any, tmp_path: Path, query: str) -> None:
    """Session windows use RocksDB's prefix-key encoding; joins its four stores."""
    reference = _run_phases(spark, query, tmp_path / "reference", [ROCKSDB] * 3, False)
    switched = _run_phases(spark, query, tmp_path / "switched",
                           [ROCKSDB, SPILLSTORE, SPILLSTORE], True)
    assert switched["ran_on"] == [["rocksdb"], ["spillstore"], ["spillstore"]], switched["ran_on"]
    _assert_same_as_unswitched(switched, reference, query)


def _commit_log(checkpoint: Path) -> dict[int, tuple[str, Any]]:
    """Batch id -> (the entry's log version line, the checkpoint ids it records)."""
    entries = {}
    for batch in harness.committed_batches(checkpoint):
        lines = (checkpoint / "commits" / str(batch)).read_text().splitlines()
        entries[batch] = (lines[0], json.loads(lines[1]).get("stateUniqueIds"))
    return entries


needs_v2 = pytest.mark.skipif(harness.SPARK_LINE < (4, 0),
                              reason="Spark 3.5 has no checkpoint format v2")


@needs_v2
def test_checkpoint_format_v1_to_v2_and_back(spark: Any, tmp_path: Path) -> None:
    """spillstore's v1 checkpoint becomes v2 (spillstore to spillstore), then goes back to
    Spark's default provider, which takes v1 only: exactly as if never switched; in the v2
    phase the commit log records the ids of the join's four stores in Spark's order (a wrong
    order fails the restart's base-id check or loads the wrong store), and every entry has the
    format Spark 4.0 and 4.1 insist on."""
    query = "join_left_outer"
    reference = _run_phases(spark, query, tmp_path / "reference", [DEFAULT] * 3, False)
    switched = _run_phases(spark, query, tmp_path / "switched", [SPILLSTORE] * 2 + [DEFAULT],
                           True, formats=[1, 2, 1])
    assert switched["ran_on"] == [["spillstore"], ["spillstore"], ["hdfs"]], switched["ran_on"]
    _assert_same_as_unswitched(switched, reference, query)
    onto_v2, back = switched["migrations"]
    assert (onto_v2.source_checkpoint_format, onto_v2.checkpoint_format) == (1, 2)
    assert (back.source_checkpoint_format, back.checkpoint_format) == (2, 1)
    assert {line for line, _ in _commit_log(switched["checkpoint"]).values()} == {"v1"}
    kept = sorted((switched["checkpoint"] / "_spillstore_migrations").iterdir())
    assert [k.name.split("-", 2)[2] for k in kept] == ["spillstore-to-spillstore-v2",
                                                      "spillstore-to-hdfs-v1"]


@needs_v2
@pytest.mark.one_line
def test_rocksdb_v2_to_spillstore_keeps_v2(spark: Any, tmp_path: Path) -> None:
    """A v2 checkpoint of RocksDB's provider (the provider Spark picks for real-time mode) is
    read by the ids its commit log records, and stays v2 on spillstore: the commit log records
    the new stores' ids, and the query goes on with them, exactly."""
    query = "join_left_outer"
    reference = _run_phases(spark, query, tmp_path / "reference", [ROCKSDB] * 3, False,
                            formats=[2, 2, 2])
    switched = _run_phases(spark, query, tmp_path / "switched", [ROCKSDB] + [SPILLSTORE] * 2,
                           True, formats=[2, 2, 2])
    assert switched["ran_on"] == [["rocksdb"], ["spillstore"], ["spillstore"]], switched["ran_on"]
    _assert_same_as_unswitched(switched, reference, query)
    (onto,) = switched["migrations"]
    assert (onto.source, onto.source_checkpoint_format, onto.checkpoint_format) == (
        "rocksdb", 2, 2)
    log = _commit_log(switched["checkpoint"])
    migrated = log[onto.batch][1]["0"]
    journals = {p.name.split("_", 1)[1].removesuffix(".journal")
                for p in (switched["checkpoint"] / "state" / "0").rglob(f"{onto.batch + 1}_*")}
    assert {i for partition in migrated for i in partition} == journals
    assert all(len(partition) == 4 for partition in migrated)


# --------------------------------------------------------------------------------------------
# Interrupted migrations and refusals: the migration's own protocol, the same on every line

def _migrate_cli(checkpoint: Path, workdir: Path, halt_at: str | None = None,
                 kill_after_line: str | None = None,
                 move_by_file: bool = False) -> subprocess.CompletedProcess[str]:
    """``python -m spillstore migrate`` in a new process group; ``halt_at`` stops its JVM dead
    at that step (spillstore.migrate.haltAt), ``kill_after_line`` kill -9s the whole group
    when a stdout line starts with it, ``move_by_file`` moves directories file by file, as on
    an object store (spillstore.migrate.moveByFile). The JVM, which may die without cleaning
    up, keeps its temporary files in ``workdir/jvm-tmp``, deleted at the end."""
    tmp = workdir / "jvm-tmp"
    tmp.mkdir(exist_ok=True)
    env = {**os.environ, **harness.jvm_tmp_env(tmp)}
    props = ([f"-Dspillstore.migrate.haltAt={halt_at}"] if halt_at else []) + \
        (["-Dspillstore.migrate.moveByFile=true"] if move_by_file else [])
    if props:
        env["JAVA_TOOL_OPTIONS"] = " ".join(props)
    command = [sys.executable, "-m", "spillstore", "migrate", str(checkpoint), "--idle-seconds",
               "0"]
    proc = subprocess.Popen(command, cwd=workdir, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    lines = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if kill_after_line and line.strip().startswith(kill_after_line):
                os.killpg(proc.pid, signal.SIGKILL)
                break
        proc.wait(timeout=300)
    finally:
        try:  # the group holds the JVM too: nothing outlives the test
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
        shutil.rmtree(tmp, ignore_errors=True)
    stderr = proc.stderr.read() if proc.stderr else ""
    return subprocess.CompletedProcess(command, proc.returncode, "".join(lines), stderr)


@pytest.mark.one_line
def test_killed_at_every_step_then_rerun(spark: Any, tmp_path: Path) -> None:
    """join_inner (4 stores x 2 partitions): the migration's JVM dies after 3 stores, after
    moving the original state aside, after moving the new one in, and after rewriting the
    offset log; each re-run picks up from there, and a last one finishes. The query then
    continues on spillstore exactly as an unswitched one."""
    query = "join_inner"
    reference = _run_phases(spark, query, tmp_path / "reference", [DEFAULT] * 3, False)
    workdir = tmp_path / "switched"
    checkpoint, output = workdir / "checkpoint", workdir / "output"
    inputs = harness.write_inputs(workdir, QUERIES[query].sources, PHASES[0])
    harness.run_query(spark, query, inputs, checkpoint, output, DEFAULT)
    harness.unload_state_stores(spark)
    steps = ["store-3", "state-moved", "staged-moved", "offsets-rewritten"]
    for step in steps:
        run = _migrate_cli(checkpoint, workdir, halt_at=step)
        assert run.returncode != 0, f"halt at {step} did not stop the migration:\n{run.stdout}"
        assert (checkpoint / "_spillstore_migration" / "plan.json").exists(), step
    done = _migrate_cli(checkpoint, workdir)
    assert done.returncode == 0, done.stdout + done.stderr[-5000:]
    assert "Resuming the switch" in done.stdout, done.stdout
    assert inspect_checkpoint(checkpoint).provider == "spillstore"
    assert not (checkpoint / "_spillstore_migration").exists()
    for batches in PHASES[1:]:
        inputs = harness.write_inputs(workdir, QUERIES[query].sources, batches)
        run = harness.run_query(spark, query, inputs, checkpoint, output, SPILLSTORE)
        assert {op.provider for op in spillstore.operator_metrics(run.progress)} == {"spillstore"}
    harness.unload_state_stores(spark)
    outputs = harness.read_outputs(output)
    assert outputs == reference["outputs"], harness.describe_difference(
        outputs, reference["outputs"], "migrated", "unswitched")
    if HAS_STATE_SOURCE:
        assert _state(spark, checkpoint) == reference["states"][-1]


def _files(root: Path) -> dict[str, int]:
    return {str(f.relative_to(root)): f.stat().st_size for f in root.rglob("*")
            if f.is_file() and not f.name.endswith(".crc")}


@pytest.mark.one_line
def test_killed_inside_file_by_file_moves_then_rerun(spark: Any, tmp_path: Path) -> None:
    """Where a directory rename is a copy per object (S3A), directories move file by file; the
    migration's JVM dies after the 2nd file of each move (the original state aside, the new
    one in, the workspace to its kept place); each re-run finishes from there. The state is
    the original's, and the kept originals are exactly the files the query had."""
    query = "dedup_then_count"
    inputs = harness.write_inputs(tmp_path, QUERIES[query].sources, PHASES[0])
    checkpoint = tmp_path / "checkpoint"
    harness.run_query(spark, query, inputs, checkpoint, tmp_path / "output", DEFAULT)
    harness.unload_state_stores(spark)
    before, original = _state(spark, checkpoint), _files(checkpoint / "state")
    for step in ["state-moved-2", "staged-moved-2", "finishing-2"]:
        run = _migrate_cli(checkpoint, tmp_path, halt_at=step, move_by_file=True)
        assert run.returncode != 0, f"halt at {step} did not stop the migration:\n{run.stdout}"
    done = _migrate_cli(checkpoint, tmp_path, move_by_file=True)
    assert done.returncode == 0, done.stdout + done.stderr[-5000:]
    assert "Resuming the end of the switch" in done.stdout, done.stdout
    assert inspect_checkpoint(checkpoint).provider == "spillstore"
    assert not (checkpoint / "_spillstore_migration").exists()
    [kept] = (checkpoint / "_spillstore_migrations").iterdir()
    assert _files(kept / "original-state") == original
    assert _state(spark, checkpoint) == before


@pytest.mark.one_line
def test_kill_9_while_migrating_then_rerun(spark: Any, tmp_path: Path) -> None:
    """A real kill -9 of the migrate command (Python and JVM) after its first store; wherever
    it landed, the re-run finishes and the state is the original's."""
    query = "join_left_outer"
    inputs = harness.write_inputs(tmp_path, QUERIES[query].sources, PHASES[0])
    checkpoint = tmp_path / "checkpoint"
    harness.run_query(spark, query, inputs, checkpoint, tmp_path / "output", DEFAULT)
    harness.unload_state_stores(spark)
    before = _state(spark, checkpoint)
    killed = _migrate_cli(checkpoint, tmp_path, kill_after_line="[1/")
    assert killed.returncode == -signal.SIGKILL, killed.stdout
    assert inspect_checkpoint(checkpoint).provider == "hdfs"  # nothing switched yet
    done = _migrate_cli(checkpoint, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr[-5000:]
    assert "Resuming the migration" in done.stdout, done.stdout
    assert inspect_checkpoint(checkpoint).provider == "spillstore"
    assert _state(spark, checkpoint) == before


# --------------------------------------------------------------------------------------------
# Refusals

@pytest.fixture
def stopped_query(spark: Any, tmp_path: Path) -> Path:
    """A copy of a stopped dedup_then_count query's checkpoint (HDFS provider)."""
    inputs = harness.write_inputs(tmp_path, QUERIES["dedup_then_count"].sources, PHASES[0])
    checkpoint = tmp_path / "checkpoint"
    harness.run_query(spark, "dedup_then_count", inputs, checkpoint, tmp_path / "output",
                      DEFAULT)
    harness.unload_state_stores(spark)
    return checkpoint


def _refused(spark: Any, checkpoint: Path, to: str = "spillstore", **kwargs: Any) -> str:
    kwargs.setdefault("idle_seconds", 0)
    with pytest.raises(MigrationRefused) as refused:
        migrate(checkpoint, to, spark=spark, progress=False, **kwargs)
    return str(refused.value)


def _set_recorded_conf(checkpoint: Path, key: str, value: str) -> None:
    last = inspect_checkpoint(checkpoint).last_batch
    offset_file = checkpoint / "offsets" / str(last)
    lines = offset_file.read_text().split("\n")
    metadata = json.loads(lines[1])
    metadata["conf"][key] = value
    lines[1] = json.dumps(metadata)
    offset_file.write_text("\n".join(lines))
    (checkpoint / "offsets" / f".{last}.crc").unlink(missing_ok=True)


@pytest.mark.one_line
def test_refusals_name_the_cause(spark: Any, stopped_query: Path, tmp_path: Path) -> None:
    checkpoint = stopped_query
    untouched = sorted(p.relative_to(checkpoint) for p in checkpoint.rglob("*"))

    assert "looks in use" in _refused(spark, checkpoint, idle_seconds=3600)
    assert "--idle-seconds" in _refused(spark, checkpoint, idle_seconds=3600)
    last = inspect_checkpoint(checkpoint).last_committed_batch
    message = _refused(spark, checkpoint, batch=0)
    assert "--batch 0: the last committed batch of" in message and f"is {last}" in message
    assert "RocksDB provider is not supported" in _refused(spark, checkpoint, "rocksdb")
    assert "unknown target provider 'memory'" in _refused(spark, checkpoint, "memory")
    assert "is not a checkpoint directory" in _refused(spark, tmp_path / "missing")
    empty = tmp_path / "never-ran"
    empty.mkdir()
    assert "has no committed batch" in _refused(spark, empty)
    # what refusals leave: nothing new in the checkpoint
    assert sorted(p.relative_to(checkpoint) for p in checkpoint.rglob("*")) == untouched

    message = _refused(spark, checkpoint, "hdfs", checkpoint_format=2)
    assert "--checkpoint-format 2: Spark's HDFS-backed provider does not support" in message
    assert "checkpoint formats are 1 and 2" in _refused(spark, checkpoint, checkpoint_format=3)
    no_ids = tmp_path / "v2-without-ids"
    shutil.copytree(checkpoint, no_ids)
    last = inspect_checkpoint(no_ids).last_committed_batch
    entry = no_ids / "commits" / str(last)
    entry.write_text("v2\n" + entry.read_text().split("\n", 1)[1])
    (no_ids / "commits" / f".{last}.crc").unlink(missing_ok=True)
    message = _refused(spark, no_ids)
    assert f"commits/{last} records no checkpoint ids of operator 0" in message

    unknown = tmp_path / "unknown-provider"
    shutil.copytree(checkpoint, unknown)
    _set_recorded_conf(unknown, "spark.sql.streaming.stateStore.providerClass", "com.acme.Store")
    message = _refused(spark, unknown)
    assert "records the provider com.acme.Store, which migrate cannot read" in message

    tws = tmp_path / "transform-with-state"
    shutil.copytree(checkpoint, tws)
    (tws / "state" / "0" / "_stateSchema").mkdir()
    assert "transformWithState" in _refused(spark, tws)

    no_schema = tmp_path / "no-schema"
    shutil.copytree(checkpoint, no_schema)
    shutil.rmtree(no_schema / "state" / "1" / "0" / "_metadata")
    message = _refused(spark, no_schema)
    assert "key and value schema of operator 1" in message and "_metadata/schema" in message


@pytest.mark.one_line
def test_a_running_query_in_the_session_is_refused(spark: Any, tmp_path: Path) -> None:
    inputs = harness.write_inputs(tmp_path, ["events"], PHASES[0])
    spark.conf.set(harness.PROVIDER_CONF, DEFAULT)
    try:
        query = (harness.streams(spark, inputs)["events"].groupBy("key").count()
                 .writeStream.outputMode("update").format("noop")
                 .option("checkpointLocation", str(tmp_path / "checkpoint"))
                 .trigger(processingTime="1 second").queryName("still_running").start())
    finally:
        spark.conf.set(harness.PROVIDER_CONF, SPILLSTORE)
    try:
        query.processAllAvailable()
        assert "query 'still_running' is running on" in _refused(spark, tmp_path / "checkpoint")
    finally:
        query.stop()
        harness.unload_state_stores(spark)


@pytest.mark.one_line
def test_an_unfinished_migration_to_another_target_is_refused(
        spark: Any, stopped_query: Path, tmp_path: Path) -> None:
    run = _migrate_cli(stopped_query, tmp_path, halt_at="store-1")
    assert run.returncode != 0
    message = _refused(spark, stopped_query, "hdfs")
    assert "unfinished migration of batch" in message and "--to spillstore" in message
    assert "or delete" in message  # nothing was switched yet
    result = migrate(stopped_query, "spillstore", spark=spark, idle_seconds=0, progress=False)
    assert result.migrated and inspect_checkpoint(stopped_query).provider == "spillstore"
    again = migrate(stopped_query, "spillstore", spark=spark, idle_seconds=0, progress=False)
    assert not again.migrated and again.originals is None
