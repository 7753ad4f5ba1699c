"""A query whose checkpoint records another provider runs on that one, whatever the session
selects (Spark's rule): spillstore makes that visible in the driver log, in
``operator_metrics`` and with ``python -m spillstore checkpoint``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import harness
import pytest
import spillstore
from spillstore.checkpoint import inspect_checkpoint
from spillstore.cli import main as cli

JOB = harness.JOBS / "provider_switch_job.py"


@pytest.fixture(scope="module")
def switched(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    workdir = tmp_path_factory.mktemp("switch")
    result = harness.run_job([str(JOB), str(workdir)], workdir, timeout_s=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-6000:]
    report: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    return {"workdir": workdir, "stderr": result.stderr, **report}


def test_a_restart_keeps_the_recorded_provider_and_the_driver_log_says_so(
        switched: dict[str, Any]) -> None:
    checkpoint = switched["workdir"] / "checkpoint"
    # spillstore selected for the second run, but Spark kept the HDFS provider
    assert switched["providers"] == [["hdfs"], ["hdfs"]]
    warnings = [line for line in switched["stderr"].splitlines()
                if "is configured for spillstore" in line]
    assert len(warnings) == 1, switched["stderr"][-5000:]
    (line,) = warnings
    assert "WARN" in line and "ProviderCheck" in line, line
    assert str(checkpoint) in line and harness.DEFAULT in line, line
    assert "'switch_1'" in line and "`python -m spillstore migrate " in line, line


def test_checkpoint_command_shows_the_recorded_provider(
        switched: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    checkpoint = switched["workdir"] / "checkpoint"
    info = inspect_checkpoint(checkpoint)
    assert (info.provider, info.last_batch, info.last_committed_batch) == ("hdfs", 1, 1)
    assert {s.files_of for s in info.stores} == {"hdfs"}
    assert {(s.operator, s.store) for s in info.stores} == {(0, "default")}
    assert len(info.stores) == 2  # the session's 2 shuffle partitions
    assert cli(["checkpoint", f"file://{checkpoint}"]) == 0
    out = capsys.readouterr().out
    assert f"provider recorded: {harness.DEFAULT}" in out
    assert "operator 0: 2 partitions, stores default, files of hdfs" in out
    assert f"run `python -m spillstore migrate {checkpoint}`" in out


def test_checkpoint_command_refuses_what_it_cannot_read(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli(["checkpoint", str(tmp_path / "missing")]) == 2
    assert "is not a checkpoint directory" in capsys.readouterr().err
    assert cli(["checkpoint", "s3a://bucket/checkpoint"]) == 2
    assert "only local checkpoint locations" in capsys.readouterr().err
    (tmp_path / "offsets").mkdir()
    (tmp_path / "offsets" / "0").write_text("v1\n")
    assert cli(["checkpoint", str(tmp_path)]) == 2
    assert "not an offset-log entry" in capsys.readouterr().err


def test_a_new_query_records_nothing_yet(tmp_path: Path) -> None:
    info = inspect_checkpoint(tmp_path)
    assert (info.provider, info.last_batch, info.stores) == (None, None, ())
    assert "no batch has run" in info.describe()
    assert spillstore.operator_metrics([]) == []
