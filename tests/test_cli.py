"""``python -m spillstore``: argument handling, and the demo run for real (in its own JVM)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import harness
import pytest
from spillstore import _config
from spillstore.cli import main


@pytest.mark.parametrize("argv", [
    [],
    ["demo", "--batches", "0"],
    ["demo", "--rows-per-second", "-5"],
    ["demo", "--provider", "memory"],
    ["demo", "--option", "novalue"],
    ["bench", "--providers", "memory"],
    ["bench", "--providers", ""],
    ["bench", "--repetitions", "0"],
    ["bench", "--preset", "huge"],
    ["bench", "--option", "novalue"],
    ["bench", "--timeout", "0"],
])
@pytest.mark.one_line
def test_bad_arguments_exit_with_usage(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    assert "usage:" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["--help"], ["demo", "--help"], ["bench", "--help"],
                                  ["migrate", "--help"], ["checkpoint", "--help"],
                                  ["jar", "--help"]])
@pytest.mark.one_line
def test_every_command_prints_its_help(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 0
    assert "usage:" in capsys.readouterr().out


@pytest.mark.one_line
def test_option_only_with_spillstore(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--provider", "hdfs", "--option", "a=1"]) == 2
    assert "spillstore provider only" in capsys.readouterr().err


@pytest.mark.one_line
def test_migrate_confs_reach_its_session(monkeypatch: pytest.MonkeyPatch) -> None:
    """``migrate --conf`` goes to the session migrate starts (a checkpoint on S3 needs the
    connector there); the real migration over S3 and HDFS is tests/test_e2e_remote.py's."""
    from spillstore import cli

    # The package's `migrate` attribute is the function; the module is in sys.modules.
    migrate_module = sys.modules["spillstore.migrate"]

    seen: list[dict[str, str]] = []

    class Stop(Exception):
        pass

    def session(conf: dict[str, str]) -> Any:
        seen.append(dict(conf))
        raise Stop

    monkeypatch.setattr(migrate_module, "_local_session", session)
    with pytest.raises(Stop):
        cli.main(["migrate", "s3a://b/ck", "--conf", "spark.jars=a.jar,b.jar",
                  "--conf", "spark.hadoop.fs.s3a.endpoint=http://h:1"])
    assert seen == [{"spark.jars": "a.jar,b.jar", "spark.hadoop.fs.s3a.endpoint": "http://h:1"}]
    with pytest.raises(ValueError, match="session passed as spark"):
        migrate_module.migrate("/ck", spark=object(), conf={"spark.a": "1"})


@pytest.mark.one_line
def test_demo_without_jar_says_make_jar(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(_config, "_JAR_DIR", tmp_path / "missing")
    assert main(["demo"]) == 1
    assert "make jar" in capsys.readouterr().err


@pytest.mark.one_line
def test_demo_runs_and_reports_spillstore_metrics(tmp_path: Path) -> None:
    env = {**os.environ, **harness.jvm_tmp_env(tmp_path)}
    demo = subprocess.run(
        [sys.executable, "-m", "spillstore", "demo", "--batches", "3", "--rows-per-second",
         "2000", "--keys", "1000", "--trigger-seconds", "0.5"],
        capture_output=True, text=True, timeout=300, env=env)
    assert demo.returncode == 0, demo.stdout + demo.stderr[-5000:]
    lines = demo.stdout.splitlines()
    assert lines[0].startswith("spillstore demo: provider spillstore.SpillStoreProvider"), lines
    assert lines[1].split()[:3] == ["batch", "input", "rows"]
    batches = [line.split() for line in lines[2:5]]
    assert [b[0] for b in batches] == ["0", "1", "2"], lines
    with_rows = [b for b in batches if b[1] != "0"]
    assert with_rows, lines
    # batch, input rows, rows/s, state rows, commit ms, journal ("71.3 KiB"), heap ("2.4 MiB"),
    # hit ratio: journal and heap come from spillstore's metrics, "-" (one token) if absent
    for b in with_rows:
        assert len(b) == 10 and b[6].endswith("B") and b[8].endswith("B"), lines
    assert lines[5].startswith("summary: 3 batches,"), lines
    assert len(lines) == 6, lines
    assert not list(tmp_path.glob("spillstore-demo-*")), "checkpoint not cleaned up"


@pytest.mark.one_line
def test_demo_keys_are_skewed(spark: Any) -> None:
    from pyspark.sql import functions as F
    from spillstore._jobs import skewed_key

    keys = 1000
    counts = (spark.range(100_000).withColumnRenamed("id", "value")
              .select(skewed_key(keys).alias("key")).groupBy("key").count()
              .orderBy(F.desc("count")).collect())
    assert all(0 <= r["key"] < keys for r in counts)
    assert len(counts) > keys * 0.9, "most keys occur"
    top = [r["count"] for r in counts]
    assert top[0] > 100_000 * 0.05, "the hottest key gets over 5% of the rows"
    assert sum(top[:10]) > 100_000 * 0.25 and top[-1] < 100_000 / keys, "hot head, cold tail"


def test_jar_prints_the_installed_lines_jar(jar: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["jar"]) == 0
    assert capsys.readouterr().out.strip() == jar


def test_jar_on_an_unsupported_pyspark_names_the_lines(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import pyspark

    monkeypatch.setattr(pyspark, "__version__", "3.4.1")
    assert main(["jar"]) == 1
    assert "Spark lines 3.5, 4.0, 4.1, 4.2 and 4.3" in capsys.readouterr().err
