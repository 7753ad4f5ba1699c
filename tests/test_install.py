"""What `make dist` puts in dist/, installed the way users install it, away from the
repository, on the default line (4.3) and on 3.5 (`make test-install`, which builds dist/):

- the wheel, into a fresh venv holding only that line's pyspark, offline (``--no-index``),
  then a streaming aggregation through ``spillstore.configure`` run from a directory of its
  own;
- the line's Maven artifact, through ``spark-submit --packages`` from ``dist/maven`` (Spark's
  ``--repositories file://...``) in a fresh venv without the package, with nothing but the
  provider conf;
- and what dist/ must hold: every artifact, checksums that match, POMs that add nothing to a
  cluster's classpath.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import tarfile
import xml.etree.ElementTree as ET
import zipfile
from pathlib import Path
from typing import Any

import harness
import pyspark
import pytest
import spillstore
from spillstore import SPARK_LINES

pytestmark = pytest.mark.install

REPO = Path(__file__).resolve().parent.parent
DIST = REPO / "dist"
VERSION = spillstore.__version__
JOB = harness.JOBS / "install_job.py"
LINES = ["4.3", "3.5"]
KEYS = {0: [1, 2, 3, 1], 1: [2, 4, 1], 2: [5, 5, 5, 1]}  # batch -> keys of its rows
POM = "{http://maven.apache.org/POM/4.0.0}"


def _artifact(line: str) -> str:
    return f"spillstore-spark{line}_{SPARK_LINES[line].scala}"


def _fresh_venv(where: Path, line: str) -> Path:
    """A new venv with only ``line``'s pyspark (and what pip installs with it); its python."""
    subprocess.run([sys.executable, "-m", "venv", str(where)], check=True, timeout=300)
    python = where / "bin" / "python"
    subprocess.run([str(python), "-m", "pip", "install", "-q", f"pyspark=={line}.*"],
                   check=True, timeout=900)
    return python


def _job(workdir: Path, python: Path, configure: bool, launcher: list[str]
         ) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    """install_job.py copied into ``workdir`` and run there with ``launcher``: the run and the
    job's report."""
    inputs = workdir / "input"
    harness.write_batches(inputs, "key LONG", [[(k,) for k in KEYS[b]] for b in sorted(KEYS)],
                          range(len(KEYS)))
    job = shutil.copy(JOB, workdir / JOB.name)
    report = workdir / "report.json"
    spec = workdir / "spec.json"
    spec.write_text(json.dumps({"configure": configure, "input": str(inputs),
                                "checkpoint": str(workdir / "checkpoint"), "report": str(report)}))
    env = {"PYSPARK_PYTHON": str(python), "PYSPARK_DRIVER_PYTHON": str(python),
           "PYTHONPATH": None, "SPARK_HOME": None}
    run = harness.run_job([job, str(spec)], workdir, timeout_s=600, launcher=launcher, env=env,
                          cwd=workdir)
    assert report.exists(), f"exit {run.returncode}:\n{run.stderr[-6000:]}"
    return run, json.loads(report.read_text())


def _run(workdir: Path, python: Path, configure: bool, launcher: list[str]) -> dict[str, Any]:
    """The job (``_job``) must count every key exactly, with spillstore."""
    _, result = _job(workdir, python, configure, launcher)
    assert result["error"] is None, result["error"]
    expected: dict[int, int] = {}
    for keys in KEYS.values():
        for k in keys:
            expected[k] = expected.get(k, 0) + 1
    assert result["counts"] == sorted([k, n] for k, n in expected.items())
    assert harness.checkpoint_provider(workdir / "checkpoint") == {spillstore.PROVIDER_CLASS}
    assert "spillstoreJournalBytes" in result["metrics"], "spillstore's metrics in progress"
    return result


@pytest.mark.parametrize("line", LINES)
def test_wheel_installs_offline_and_runs_through_configure(line: str, tmp_path: Path) -> None:
    python = _fresh_venv(tmp_path / "venv", line)
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-index", "--find-links",
                    str(DIST), f"spillstore=={VERSION}"], check=True, timeout=300)
    workdir = tmp_path / "job"
    workdir.mkdir()
    result = _run(workdir, python, configure=True, launcher=[str(python)])
    installed = Path(result["spillstore_file"]).resolve()
    assert installed.is_relative_to((tmp_path / "venv").resolve()), installed
    assert not installed.is_relative_to(REPO / "python"), "imported from the source checkout"


@pytest.mark.parametrize("line", LINES)
def test_spark_submit_packages_resolves_the_maven_artifact(line: str, tmp_path: Path) -> None:
    python = _fresh_venv(tmp_path / "venv", line)
    check = subprocess.run([str(python), "-c", "import spillstore"], capture_output=True)
    assert check.returncode != 0, "the package must not be in this venv"
    ivy = tmp_path / "ivy"
    workdir = tmp_path / "job"
    workdir.mkdir()
    coordinate = f"io.spillstore:{_artifact(line)}:{VERSION}"
    _run(workdir, python, configure=False, launcher=[
        str(tmp_path / "venv" / "bin" / "spark-submit"), "--packages", coordinate,
        "--repositories", (DIST / "maven").as_uri(), "--conf", f"spark.jars.ivy={ivy}",
        "--conf", f"{spillstore.PROVIDER_CLASS_CONF}={spillstore.PROVIDER_CLASS}"])
    # Everything else the POM names is provided by Spark: --packages fetched spillstore alone.
    assert sorted(p.name for p in (ivy / "jars").iterdir()) == [
        f"io.spillstore_{_artifact(line)}-{VERSION}.jar"]


def test_a_jar_of_another_line_fails_naming_both(tmp_path: Path) -> None:
    """A spark-submit user who puts another line's jar on Spark 4.3 (here 4.2's, which loads:
    same Scala) gets an error naming both lines and the right artifact, not a missing method."""
    workdir = tmp_path / "job"
    workdir.mkdir()
    python = Path(sys.executable)
    other = _artifact("4.2")
    wrong = DIST / "maven" / "io" / "spillstore" / other / VERSION / f"{other}-{VERSION}.jar"
    run, report = _job(workdir, python, configure=False, launcher=[
        str(python.parent / "spark-submit"), "--jars", str(wrong),
        "--conf", f"{spillstore.PROVIDER_CLASS_CONF}={spillstore.PROVIDER_CLASS}"])
    assert report["error"] is not None, "the query must fail"
    message = run.stderr  # the driver log: the cause Spark wraps
    line = ".".join(map(str, harness.SPARK_LINE))
    built_for = f"{other}.jar is built for Spark 4.2, but this is Spark {pyspark.__version__}."
    assert built_for in message
    assert f"io.spillstore:{_artifact(line)}:{VERSION}" in message


def test_dist_holds_every_artifact_with_matching_checksums() -> None:
    jars = {f"spillstore/jars/{line.jar}" for line in SPARK_LINES.values()}
    wheel = DIST / f"spillstore-{VERSION}-py3-none-any.whl"
    with zipfile.ZipFile(wheel) as archive:
        assert jars | {"spillstore/VERSION", "spillstore/py.typed"} <= set(archive.namelist())
    sdist = DIST / f"spillstore-{VERSION}.tar.gz"
    with tarfile.open(sdist) as archive:
        names = {n.split("/", 1)[1] for n in archive.getnames() if "/" in n}
    assert {f"spillstore/{j.split('/', 1)[1]}" for j in jars} <= names
    sums = dict(reversed(line.split()) for line in (DIST / "SHA256SUMS").read_text().splitlines())
    for file in (wheel, sdist):
        assert sums[file.name] == hashlib.sha256(file.read_bytes()).hexdigest(), file.name

    for line in SPARK_LINES:
        artifact = _artifact(line)
        base = DIST / "maven" / "io" / "spillstore" / artifact / VERSION
        for suffix in (".jar", "-sources.jar", "-javadoc.jar", ".pom"):
            file = base / f"{artifact}-{VERSION}{suffix}"
            for algorithm in ("md5", "sha1"):
                recorded = Path(f"{file}.{algorithm}").read_text().split()[0]
                assert recorded == hashlib.new(algorithm, file.read_bytes()).hexdigest(), file
        with zipfile.ZipFile(base / f"{artifact}-{VERSION}.jar") as jar:
            manifest = jar.read("META-INF/MANIFEST.MF").decode()
        assert f"Spillstore-Spark-Line: {line}" in manifest
        assert f"Implementation-Version: {VERSION}" in manifest
        pom = ET.parse(base / f"{artifact}-{VERSION}.pom").getroot()
        assert pom.findtext(f"{POM}artifactId") == artifact
        dependencies = pom.findall(f"{POM}dependencies/{POM}dependency")
        assert {d.findtext(f"{POM}artifactId") for d in dependencies} >= {
            f"spark-sql_{SPARK_LINES[line].scala}"}
        assert {d.findtext(f"{POM}scope") for d in dependencies} == {"provided"}
