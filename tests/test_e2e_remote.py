"""spillstore with the checkpoint on remote storage: HDFS (a MiniDFSCluster) and S3 (a moto
server through S3A), both started by ``tests/servers.py``. Per storage kind, every query keeps
its checkpoint at a URI on that storage (inputs and outputs stay local) and must end with
exactly the output of Spark's default provider on a local checkpoint (``full_run``):

- the operator set (windowed aggregation, dropDuplicates feeding an aggregation,
  applyInPandasWithState, session window, stream-stream outer join);
- a query stopped and continued in a fresh JVM;
- a query whose JVM (and Python driver) is killed -9 during a batch, continued in a fresh JVM;
- a query on the default provider migrated onto spillstore by ``python -m spillstore migrate``
  (its own process and JVM), continued on spillstore;
- spillstore's state read back through the state data source (Spark 4.0+);
- a batch failing while the storage fails requests (S3: connections reset; HDFS: the datanode
  down), resumed once it serves again;
- S3: the requests each provider (spillstore, default, RocksDB) sends per store and batch.

Each storage kind runs its queries in a few jobs (``jobs/remote_job.py``, a JVM each, with the
storage's configuration), once for the module (``remote``); the tests check their reports. On
Spark 3.5 only the operator set, the restart and the kill -9 run.

State owned here: ``remote`` caches one ``RemoteRuns`` per storage kind for the module (its
server runs until the module ends); the jobs' inputs, outputs and reports are in its workdir.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import signal
import subprocess
import threading
import time
import urllib.parse
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import harness
import pytest
import servers
from harness import DEFAULT, NUM_BATCHES, QUERIES, SPILLSTORE, Run

pytestmark = pytest.mark.remote

FullRun = Callable[[str, str], Run]
ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
JOB = harness.JOBS / "remote_job.py"
FULL_SET = harness.SPARK_LINE >= (4, 0)  # 3.5 runs the operator set, restart and kill -9 only
# The S3 runs (minutes: every S3A checkpoint file costs several requests through moto) carry
# the `s3` marker: `make test-s3` runs them, `make test` leaves them out.
KINDS = ["hdfs", pytest.param("s3", marks=pytest.mark.s3)]

OPERATOR_SET = ["agg_update_window", "dedup_then_count", "apply_in_pandas_with_state",
                "session_window", "join_left_outer"]
RESTART_QUERY = "join_left_outer"  # four stores per partition
# Stopped after batch 1 (see test_e2e_restart.BEFORE_STOP: no late row for live state follows).
BEFORE_STOP, AFTER_STOP = range(0, 2), range(2, NUM_BATCHES)
KILL_QUERY, KILL_BATCH = "agg_update_window", 2
MIGRATE_QUERY = "agg_update_by_key"  # no watermark: stopping between phases changes nothing
STATE_QUERY, STATE_OPERATORS = "dedup_then_count", [0, 1]
REQUEST_QUERY = "agg_update_by_key"
REQUEST_PROVIDERS = {"spillstore": SPILLSTORE, "default": DEFAULT, "rocksdb": ROCKSDB}
FAIL_QUERY, FAIL_BATCH = "session_window", 2
BUCKET = "checkpoints"


# --------------------------------------------------------------------------------------------
# Storage kinds


@dataclass
class Storage:
    """Where checkpoints go: ``root`` (a URI), the session conf that reaches it, the requests
    the server answered (S3), and a context manager during which the server fails requests
    (S3: connections reset; HDFS: the datanode down)."""

    kind: str
    root: str
    conf: dict[str, str]
    outage: Callable[[], contextlib.AbstractContextManager[Any]]
    requests: Callable[[], list[servers.Request]] | None = None

    def uri(self, name: str) -> str:
        return f"{self.root.rstrip('/')}/{name}"


@contextlib.contextmanager
def _storage(kind: str, tmp: Path) -> Iterator[Storage]:
    if kind == "hdfs":
        with servers.hdfs_server(tmp) as server:
            yield Storage(kind, f"{server.uri}/checkpoints", server.spark_conf(),
                          outage=server.datanode_down)
    else:
        with servers.s3_server(tmp) as server:
            server.create_bucket(BUCKET)
            yield Storage(kind, f"s3a://{BUCKET}", server.spark_conf(BUCKET), server.refusing,
                          server.requests)


# --------------------------------------------------------------------------------------------
# Jobs


@dataclass
class RemoteRuns:
    """One storage kind's jobs: each ``remote_job.py`` report by job name, the migrate
    command's result, and what the kill -9 and the refused requests left."""

    storage: Storage
    workdir: Path
    reports: dict[str, dict[str, Any]] = field(default_factory=dict)
    migrate_cli: subprocess.CompletedProcess[str] | None = None
    migrate_halted: list[subprocess.CompletedProcess[str]] = field(default_factory=list)
    killed_after: list[int] = field(default_factory=list)
    requests: list[servers.Request] = field(default_factory=list)

    def step(self, job: str, name: str, failed: bool = False) -> dict[str, Any]:
        """Step ``name`` of job ``job``; fails the test unless it ran and (``failed``: did
        not) succeed."""
        report = self.reports.get(job, {})
        result = report.get("steps", {}).get(name)
        where = f"{name} in {job} on {self.storage.kind}"
        assert result is not None, f"{where} never ran: {report.get('job_error')}"
        if failed:
            assert result["error"] is not None, f"{where} was to fail: {result}"
        else:
            assert result["error"] is None, f"{where} failed: {result['message']}"
        return result

    def output(self, name: str) -> harness.Outputs:
        return harness.read_outputs(self.workdir / name / "output")


def _run_step(runs: RemoteRuns, name: str, query: str, provider: str,
              pause_batch: int | None = None) -> dict[str, Any]:
    step = {"op": "run", "name": name, "query": query, "provider": provider,
            "inputs": {s: str(runs.workdir / name / "input" / s) for s in QUERIES[query].sources},
            "checkpoint": runs.storage.uri(name), "output": str(runs.workdir / name / "output")}
    if pause_batch is not None:
        step["pause"] = {"batch": pause_batch, "dir": str(runs.workdir / name)}
    return step


def _write_input(runs: RemoteRuns, name: str, query: str, batches: range) -> None:
    harness.write_inputs(runs.workdir / name, QUERIES[query].sources, batches)


def _job(runs: RemoteRuns, job: str, steps: list[dict[str, Any]],
         on_pause: Callable[[int], None] | None = None, pause_dir: Path | None = None) -> None:
    """Run ``steps`` in a remote_job.py process (own JVM) and keep its report. ``on_pause(pid)``
    is called, in a thread, when the job pauses in ``pause_dir`` (see remote_job.py)."""
    workdir = runs.workdir / f"job-{job}"
    workdir.mkdir()
    report_file = workdir / "report.json"
    (workdir / "spec.json").write_text(json.dumps(
        {"conf": runs.storage.conf, "report": str(report_file), "steps": steps}))
    watcher, ended = None, threading.Event()
    if on_pause is not None:
        assert pause_dir is not None

        def watch() -> None:
            while not (pause_dir / "paused").exists():
                if ended.wait(0.05):
                    return
            on_pause(int((pause_dir / "paused").read_text()))

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
    started = time.monotonic()
    try:
        done = harness.run_job([str(JOB), str(workdir / "spec.json")], workdir, timeout_s=600)
    finally:
        ended.set()
        if watcher is not None:
            watcher.join(60)
    report = json.loads(report_file.read_text()) if report_file.exists() else {"steps": {}}
    report["job_error"] = (f"exit {done.returncode}, {harness.java_error(done.stderr)}:\n"
                           f"{done.stderr[-4000:]}")
    runs.reports[job] = report
    times = {name: r["seconds"] for name, r in report["steps"].items()}
    print(f"\n{runs.storage.kind} job {job}: {time.monotonic() - started:.0f} s (session start "
          f"{report.get('session_start_s')} s; steps {times})")


def _kill_when_paused(pid: int, pause_dir: Path, seed: int) -> None:
    """Let the paused batch go on, then kill -9 the job's JVM and its Python driver somewhere
    in that batch."""
    (pause_dir / "go").touch()
    time.sleep(random.Random(seed).uniform(0, 0.5))
    victims = [*harness.descendants(pid), pid]  # the JVM first: no clean close
    for victim in victims:
        with contextlib.suppress(ProcessLookupError):
            os.kill(victim, signal.SIGKILL)


def _refuse_during_batch(runs: RemoteRuns, pause_dir: Path, report_file: Path) -> None:
    """While the paused batch runs the server refuses requests; once the job has recorded the
    batch's failure, the server serves again and the job may resume (``<pause_dir>/resume``)."""
    with runs.storage.outage():
        (pause_dir / "go").touch()
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            if report_file.exists() and "fail" in json.loads(report_file.read_text())["steps"]:
                break
            time.sleep(0.1)
    (pause_dir / "resume").touch()


# S3: the migrate command's JVM stops dead (spillstore.migrate.haltAt) after these objects of
# each of its moves (S3A renames a directory object by object), and is run again each time.
MIGRATE_HALTS_S3 = ["state-moved-3", "staged-moved-2", "finishing-2"]


def _migrate_cli(runs: RemoteRuns, checkpoint: str,
                 halt_at: str | None = None) -> subprocess.CompletedProcess[str]:
    """``python -m spillstore migrate`` in a process of its own, the storage's jars and
    settings given as a user would, with ``--conf``; ``halt_at`` stops its JVM at that step."""
    confs = [a for key, value in runs.storage.conf.items() for a in ("--conf", f"{key}={value}")]
    workdir = runs.workdir / f"migrate-cli-{halt_at or 'last'}"
    workdir.mkdir()
    env = {"JAVA_TOOL_OPTIONS": f"-Dspillstore.migrate.haltAt={halt_at}"} if halt_at else None
    return harness.run_job(["-m", "spillstore", "migrate", checkpoint, "--idle-seconds", "0",
                            *confs], workdir, timeout_s=300, env=env)


def _run_all(runs: RemoteRuns) -> None:
    """Every job of one storage kind, in order: A runs the operator set, the first phase of the
    restart and the migration, the request counts, and is killed -9 in a batch of its last
    query; the migrate command; B continues the restart, the killed query and the migrated one,
    and fails a batch while the storage fails requests, then resumes it."""
    s = runs.storage
    a_steps = []
    for query in OPERATOR_SET:
        _write_input(runs, f"ops-{query}", query, range(NUM_BATCHES))
        a_steps.append(_run_step(runs, f"ops-{query}", query, SPILLSTORE))
    _write_input(runs, "restart", RESTART_QUERY, BEFORE_STOP)
    a_steps.append(_run_step(runs, "restart", RESTART_QUERY, SPILLSTORE))
    if FULL_SET:
        a_steps.append({"op": "read_state", "name": "state", "operators": STATE_OPERATORS,
                        "checkpoint": s.uri(f"ops-{STATE_QUERY}")})
        _write_input(runs, "migrate", MIGRATE_QUERY, BEFORE_STOP)
        a_steps.append(_run_step(runs, "migrate", MIGRATE_QUERY, DEFAULT))
        if s.requests is not None:
            for tag, provider in REQUEST_PROVIDERS.items():
                _write_input(runs, f"requests-{tag}", REQUEST_QUERY, range(NUM_BATCHES))
                a_steps.append(_run_step(runs, f"requests-{tag}", REQUEST_QUERY, provider))
    # last: the job is killed -9 in it (the report keeps the steps before)
    _write_input(runs, "kill", KILL_QUERY, range(NUM_BATCHES))
    kill_dir = runs.workdir / "kill"
    a_steps.append(_run_step(runs, "kill", KILL_QUERY, SPILLSTORE, pause_batch=KILL_BATCH))
    _job(runs, "A", a_steps,
         on_pause=lambda pid: _kill_when_paused(pid, kill_dir, seed=len(s.kind)),
         pause_dir=kill_dir)
    runs.killed_after = sorted(int(p.stem) for p in (kill_dir / "output").glob("*.json"))
    if s.requests is not None:
        runs.requests = list(s.requests())
    if FULL_SET:
        for halt in MIGRATE_HALTS_S3 if s.kind == "s3" else []:
            runs.migrate_halted.append(_migrate_cli(runs, s.uri("migrate"), halt))
        runs.migrate_cli = _migrate_cli(runs, s.uri("migrate"))

    _write_input(runs, "restart", RESTART_QUERY, AFTER_STOP)
    b_steps = [_run_step(runs, "restart", RESTART_QUERY, SPILLSTORE),
               _run_step(runs, "kill", KILL_QUERY, SPILLSTORE)]
    on_pause, fail_dir = None, runs.workdir / "fail"
    if FULL_SET:
        _write_input(runs, "migrate", MIGRATE_QUERY, AFTER_STOP)
        b_steps.append(_run_step(runs, "migrate", MIGRATE_QUERY, SPILLSTORE))
    if FULL_SET:
        _write_input(runs, "fail", FAIL_QUERY, range(NUM_BATCHES))
        fail = _run_step(runs, "fail", FAIL_QUERY, SPILLSTORE, pause_batch=FAIL_BATCH)
        b_steps += [fail, {"op": "wait", "name": "server-back", "file": str(fail_dir / "resume")},
                    {**fail, "name": "fail-resumed", "pause": None}]
        report_file = runs.workdir / "job-B" / "report.json"
        on_pause = lambda _pid: _refuse_during_batch(runs, fail_dir, report_file)  # noqa: E731
    _job(runs, "B", b_steps, on_pause=on_pause, pause_dir=fail_dir)


@pytest.fixture(scope="module", params=KINDS)
def remote(request: pytest.FixtureRequest,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[RemoteRuns]:
    """One storage kind's server and every job run against it (see ``_run_all``)."""
    kind = request.param
    tmp = tmp_path_factory.mktemp(f"remote-{kind}-")
    with _storage(kind, tmp) as storage:
        runs = RemoteRuns(storage, tmp / "runs")
        runs.workdir.mkdir()
        started = time.monotonic()
        _run_all(runs)
        print(f"\n{kind}: every job {time.monotonic() - started:.0f} s")
        yield runs


# --------------------------------------------------------------------------------------------
# Exact against the default provider


def _assert_exact(outputs: harness.Outputs, reference: Run, what: str,
                  batch_by_batch: bool = True) -> None:
    assert any(reference.outputs.values()), "the reference run output nothing"
    difference = harness.describe_difference(outputs, reference.outputs, "spillstore", "default")
    if batch_by_batch:
        assert outputs == reference.outputs, f"{what} differs from the default provider:\n" \
                                             f"{difference}"
    else:
        assert harness.all_rows(outputs) == harness.all_rows(reference.outputs), (
            f"{what} differs from the default provider:\n{difference}")


@pytest.mark.parametrize("query", OPERATOR_SET)
def test_operator_same_output_as_default(remote: RemoteRuns, full_run: FullRun,
                                         query: str) -> None:
    step = remote.step("A", f"ops-{query}")
    assert step["ran_on"] == ["spillstore"] and step["recorded"] == [SPILLSTORE], step
    _assert_exact(remote.output(f"ops-{query}"), full_run(query, DEFAULT),
                  f"{query} with its checkpoint on {remote.storage.kind}")


def test_restart_in_fresh_jvm(remote: RemoteRuns, full_run: FullRun) -> None:
    assert remote.step("A", "restart")["ran_on"] == ["spillstore"]
    resumed = remote.step("B", "restart")
    assert resumed["batches"][0] >= len(BEFORE_STOP), (
        f"the query started over instead of continuing: {resumed['batches']}")
    assert resumed["ran_on"] == ["spillstore"], resumed
    # a query that stops by itself runs a no-data batch first: batch ids shift
    _assert_exact(remote.output("restart"), full_run(RESTART_QUERY, DEFAULT),
                  f"{RESTART_QUERY} restarted on {remote.storage.kind}", batch_by_batch=False)


def test_kill_9_mid_batch_then_resume(remote: RemoteRuns, full_run: FullRun) -> None:
    assert "kill" not in remote.reports["A"]["steps"], "the killed job finished its query"
    assert remote.killed_after and remote.killed_after[-1] < NUM_BATCHES - 1, (
        f"killed after batches {remote.killed_after}")
    resumed = remote.step("B", "kill")
    assert resumed["batches"][0] in (KILL_BATCH, KILL_BATCH + 1), resumed
    print(f"{remote.storage.kind}: kill -9 in batch {KILL_BATCH} after outputs "
          f"{remote.killed_after}; resumed batches {resumed['batches']}")
    _assert_exact(remote.output("kill"), full_run(KILL_QUERY, DEFAULT),
                  f"{KILL_QUERY} killed -9 on {remote.storage.kind}")


# --------------------------------------------------------------------------------------------
# Spark 4.0+: migrate, the state data source, the requests, a refused commit

needs_full_set = pytest.mark.skipif(not FULL_SET,
                                    reason="Spark 3.5 runs a subset (docs/testing.md)")


@needs_full_set
def test_migrate_default_to_spillstore(remote: RemoteRuns, full_run: FullRun) -> None:
    assert remote.step("A", "migrate")["ran_on"] == ["hdfs"]
    cli = remote.migrate_cli
    assert cli is not None and cli.returncode == 0, (
        f"python -m spillstore migrate {remote.storage.uri('migrate')} failed "
        f"({cli and cli.returncode}):\n{cli and cli.stdout}\n{cli and cli.stderr[-4000:]}")
    assert "migrated" in cli.stdout and "to spillstore" in cli.stdout, cli.stdout
    # Only an S3 run has halted runs: elsewhere the list is empty (zip stops at the shorter).
    halted = [(halt, run.returncode)
              for halt, run in zip(MIGRATE_HALTS_S3, remote.migrate_halted, strict=False)]
    assert all(code != 0 for _, code in halted), halted
    if remote.storage.kind == "s3":  # each halt inside a move; the last run ends the last move
        assert len(halted) == len(MIGRATE_HALTS_S3), halted
        assert "Resuming the end of the switch" in cli.stdout, cli.stdout
    continued = remote.step("B", "migrate")
    assert continued["ran_on"] == ["spillstore"], continued
    _assert_exact(remote.output("migrate"), full_run(MIGRATE_QUERY, DEFAULT),
                  f"{MIGRATE_QUERY} migrated on {remote.storage.kind}")


@needs_full_set
def test_state_data_source_reads_spillstore_state(remote: RemoteRuns, spark: Any,
                                                  full_run: FullRun) -> None:
    got = remote.step("A", "state")["state"]
    reference = str(full_run(STATE_QUERY, DEFAULT).checkpoint)
    expected = {}
    for op in STATE_OPERATORS:
        rows = (spark.read.format("statestore").option("path", reference)
                .option("operatorId", op).load().collect())
        expected[str(op)] = sorted(harness.canonical(r) for r in rows)
    assert all(expected.values()), f"the default provider's state is empty: {expected}"
    assert got == expected


_JOURNAL = re.compile(r"\d+\.journal")


@dataclass
class StateRequests:
    """The S3 requests that touched one checkpoint's ``state/`` (object keys, or a listing's
    prefix, under it): per method, the count per store (operator and partition) and committed
    batch; and spillstore's journals: every journal-named key sent per method."""

    per_store_batch: dict[str, float]
    journal_keys: dict[str, list[str]]


def state_requests(requests: list[servers.Request], bucket: str, checkpoint_key: str,
                   batches: int) -> StateRequests:
    per_method: Counter[str] = Counter()
    journal_keys: dict[str, list[str]] = {}
    stores = set()
    prefix = f"{bucket}/{checkpoint_key}/state/"
    for method, path, query, *_ in requests:
        key = path.lstrip("/")
        listed = urllib.parse.parse_qs(query).get("prefix")
        if listed:
            key = f"{key.rstrip('/')}/{listed[0]}"
        if not key.startswith(prefix):
            continue
        parts = key[len(prefix):].split("/")
        if len(parts) >= 2 and parts[0].isdigit() and parts[1].isdigit():
            stores.add((parts[0], parts[1]))
        per_method[method] += 1
        if "journal" in parts[-1]:
            journal_keys.setdefault(method, []).append(key)
    per_store_batch = {m: n / max(1, len(stores) * batches) for m, n in per_method.items()}
    return StateRequests(per_store_batch, journal_keys)


@needs_full_set
def test_s3_requests_per_store_and_batch(remote: RemoteRuns) -> None:
    if remote.storage.requests is None:
        pytest.skip(f"{remote.storage.kind} counts no requests")
    table = {}
    for tag in REQUEST_PROVIDERS:
        step = remote.step("A", f"requests-{tag}")
        table[tag] = state_requests(remote.requests, BUCKET, f"requests-{tag}",
                                    len(step["committed"]))
    methods = sorted({m for r in table.values() for m in r.per_store_batch})
    print(f"\nS3 requests under state/ per store and committed batch ({REQUEST_QUERY}, "
          f"{harness.NUM_BATCHES} files):")
    print(f"{'provider':<12}" + "".join(f"{m:>10}" for m in methods))
    for tag, r in table.items():
        print(f"{tag:<12}" + "".join(f"{r.per_store_batch.get(m, 0):>10.2f}" for m in methods))
    assert all(r.per_store_batch for r in table.values()), f"a provider sent no request: {table}"
    # A journal written through a temp object and a rename shows as a PUT of another name,
    # a COPY to the journal's name and a DELETE of the temp object.
    journals = table["spillstore"].journal_keys
    puts = journals.get("PUT", [])
    assert puts, f"no journal was PUT: {journals}"
    renamed = [k for k in puts if not _JOURNAL.fullmatch(k.rsplit("/", 1)[1])]
    counts = {m: len(keys) for m, keys in journals.items()}
    assert (not renamed and len(puts) == len(set(puts)) and not journals.get("COPY")
            and not journals.get("DELETE")), (
        f"spillstore's journal commits went through temp objects, copies or deletes: requests "
        f"on journal names {counts}, PUTs of other names than <version>.journal {len(renamed)}, "
        f"e.g. {renamed[:2]}")


@needs_full_set
def test_refused_requests_fail_the_batch_then_resume(remote: RemoteRuns,
                                                     full_run: FullRun) -> None:
    failed = remote.step("B", "fail", failed=True)
    print(f"{remote.storage.kind}: batch {FAIL_BATCH} with requests refused: {failed['error']}")
    # Failed by the storage, not by the job's own wait for the outage to begin.
    assert "did not appear within" not in failed["message"], failed["message"][:2000]
    resumed = remote.step("B", "fail-resumed")
    assert resumed["batches"][0] == FAIL_BATCH, resumed
    _assert_exact(remote.output("fail"), full_run(FAIL_QUERY, DEFAULT),
                  f"{FAIL_QUERY} after refused requests on {remote.storage.kind}")
