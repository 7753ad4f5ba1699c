"""Fixtures shared by the end-to-end tests: one SparkSession for the whole run, every
full (uninterrupted) run of a test query computed once and shared between tests, and the
runs of every test query with spillstore in a fresh JVM per memory budget.

| state                                     | owner                                              |
|-------------------------------------------|----------------------------------------------------|
| `TMPDIR`, `SPARK_SUBMIT_OPTS`,            | `session_tmp` for the session; a test may override |
| `SPARK_LAUNCHER_OPTS`, `tempfile.tempdir` | them with its own monkeypatch                      |
"""

from __future__ import annotations

import json
import shutil
import time
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import harness
import pytest
import spillstore

OPERATORS_JOB = harness.JOBS / "operators_job.py"


def write_stand_in_jar(path: Path, line: str, version: str | None = spillstore.__version__) -> None:
    """A jar holding only the manifest the build writes: built for ``line`` at ``version``
    (None leaves the version out, as in a jar built before the manifest recorded it)."""
    attributes = {"Manifest-Version": "1.0", "Spillstore-Spark-Line": line}
    if version is not None:
        attributes["Implementation-Version"] = version
    manifest = "".join(f"{key}: {value}\r\n" for key, value in attributes.items())
    with zipfile.ZipFile(path, "w") as jar:
        jar.writestr("META-INF/MANIFEST.MF", manifest)


@pytest.fixture(scope="session", autouse=True)
def session_tmp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The temporary directory of this process (``tempfile``) and of every process the tests
    start (``harness.use_tmp``), JVMs too, instead of /tmp; the session fails if anything is
    left in it at the end. A process that kills a JVM, or stops it dead, must give it a directory
    of its test's own (``harness.run_job`` does): a JVM killed there would leave its files here.
    /tmp itself is shared with other runs, so nothing left there could be told apart as this
    session's."""
    tmp = tmp_path_factory.mktemp("tmp")
    with pytest.MonkeyPatch.context() as monkeypatch:
        harness.use_tmp(monkeypatch, tmp)
        yield tmp
    # A JVM whose Python driver has just exited may still be deleting its files.
    deadline = time.monotonic() + 30
    while (left := sorted(path.name for path in tmp.iterdir())) and time.monotonic() < deadline:
        time.sleep(0.5)
    shutil.rmtree(tmp, ignore_errors=True)
    # pytest keeps what session-scoped fixtures made with tmp_path_factory (the runs' inputs,
    # checkpoints and outputs) whatever the retention policy; every fixture is done with them.
    for path in tmp_path_factory.getbasetemp().iterdir():
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
    assert not left, f"the tests left temporary files (in /tmp without session_tmp): {left}"


@pytest.fixture
def jar(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """Stand-ins for the bundled jars (one per Spark line, with the manifest the build writes),
    so the package's tests do not depend on `make jar`; returns the one for the installed
    pyspark."""
    import pyspark
    from spillstore import SPARK_LINES, _config, _lines

    jars = tmp_path / "jars"
    jars.mkdir()
    for line in SPARK_LINES.values():
        write_stand_in_jar(jars / line.jar, line.line)
    monkeypatch.setattr(_config, "_JAR_DIR", jars)
    return str(jars / _lines.line_of(pyspark.__version__).jar)


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """local[2] session configured with ``spillstore.configure`` (jar on spark.jars, provider
    class spillstore); ``harness.run_query`` switches the provider per query. Its JVM keeps
    its temporary files (Spark's local dirs, cold tiers, unpacked native libraries) under the
    session's basetemp, which pytest deletes even if this process dies before the JVM."""
    session = harness.start_session(tmp_dir=tmp_path_factory.mktemp("session-jvm-tmp"))
    yield session
    session.stop()


# spillstore options that make every committed entry leave the heap at the next growth.
EVERYTHING_SPILLS = {"memoryBudget": "1"}

# The budgets every query runs at in a fresh JVM (fresh_jvm_runs): name -> memoryBudget.
BUDGETS: dict[str, str | None] = {"default_budget": None, "budget_1_byte": "1"}


@pytest.fixture(scope="session")
def full_run(
    spark: Any, tmp_path_factory: pytest.TempPathFactory
) -> Callable[[str, str], harness.Run]:
    """``full_run(query, provider)``: the query run once in this process' session over all
    input batches with a new checkpoint and the given provider; cached for the session."""
    cache: dict[tuple[str, str], harness.Run] = {}

    def get(query: str, provider: str) -> harness.Run:
        if (query, provider) not in cache:
            tag = "spillstore" if provider == harness.SPILLSTORE else "default"
            workdir: Path = tmp_path_factory.mktemp(f"{query}-{tag}-")
            inputs = harness.write_inputs(
                workdir, harness.QUERIES[query].sources, range(harness.NUM_BATCHES))
            cache[(query, provider)] = harness.run_query(
                spark, query, inputs, workdir / "checkpoint", workdir / "output", provider)
        return cache[(query, provider)]

    return get


@dataclass
class FreshJvmRuns:
    """Every query of ``harness.QUERIES`` run with spillstore by ``operators_job.py``, in one
    fresh JVM at one memory budget."""

    budget: str  # a name in BUDGETS
    workdir: Path
    job: Any  # subprocess.CompletedProcess[str]
    report: dict[str, Any]  # operators_job.py's report.json ({} if it wrote none)
    seconds: float

    def run(self, query: str) -> harness.Run:
        """The query's run; fails the calling test, naming the query and the budget, if the
        job or the query failed."""
        where = f"{query} with spillstore at {self.budget} in a fresh JVM"
        result = self.report.get("queries", {}).get(query)
        if result is None:
            raise AssertionError(
                f"{where}: operators_job.py never ran it (exit {self.job.returncode}, "
                f"{harness.java_error(self.job.stderr)}):\n{self.job.stderr[-6000:]}")
        if result["error"] is not None:
            raise AssertionError(f"{where} failed: {result['error']}\n{result['message']}")
        qdir = self.workdir / query
        progress = json.loads((qdir / "progress.json").read_text())
        return harness.Run(qdir / "checkpoint", qdir / "output", progress)


@pytest.fixture(scope="session")
def fresh_jvm_runs(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], FreshJvmRuns]:
    """``fresh_jvm_runs(budget)``: every test query run with spillstore in a new Python
    process and JVM at that budget (a name in BUDGETS), all queries in turn in that one JVM;
    run once per budget and cached for the session."""
    cache: dict[str, FreshJvmRuns] = {}

    def get(budget: str) -> FreshJvmRuns:
        if budget not in cache:
            workdir = tmp_path_factory.mktemp(f"fresh-jvm-{budget}-")
            spec = workdir / "spec.json"
            spec.write_text(json.dumps({"workdir": str(workdir), "budget": BUDGETS[budget],
                                        "queries": list(harness.QUERIES)}))
            started = time.monotonic()
            job = harness.run_job([str(OPERATORS_JOB), str(spec)], workdir, timeout_s=900)
            seconds = time.monotonic() - started
            report_file = workdir / "report.json"
            report = json.loads(report_file.read_text()) if report_file.exists() else {}
            times = {q: r["seconds"] for q, r in report.get("queries", {}).items()}
            print(f"\nfresh JVM at {budget}: {seconds:.0f} s (session start "
                  f"{report.get('session_start_s')} s; per query {times})")
            cache[budget] = FreshJvmRuns(budget, workdir, job, report, seconds)
        return cache[budget]

    return get
