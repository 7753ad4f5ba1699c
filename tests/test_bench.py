"""``python -m spillstore bench`` without Spark: failure classification, statistics, the
report, the plot, argument handling and the order of runs (with a fake run)."""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import pytest
from spillstore import _bench_runner, bench
from spillstore.bench import PRESETS, RunResult, classify_failure, format_report, summarize
from spillstore.cli import main

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def ok(provider: str, repetition: int, rate: float, **fields: object) -> RunResult:
    values: dict[str, object] = dict(commit_ms=10.0, gc_s=1.0, gc_share=0.025,
                                     peak_rss_mb=500.0, state_rows=1000)
    values.update(fields)
    return RunResult("small", provider, repetition, 30.0, records_per_s=rate, **values)


def failed(provider: str, repetition: int, failure: str) -> RunResult:
    return RunResult("small", provider, repetition, 1200.0, failure=failure)


@pytest.mark.parametrize(("returncode", "stderr", "timed_out_after", "expected"), [
    (1, "WARN x\nERROR Uncaught exception in thread Executor task launch worker\n"
        "java.lang.OutOfMemoryError: Java heap space\n\tat java.base/...\n"
        "py4j.protocol.Py4JNetworkError: Answer from Java side is empty\n",
     None, "OOM: java.lang.OutOfMemoryError: Java heap space"),
    (52, "java.lang.OutOfMemoryError: GC overhead limit exceeded\n", None,
     "GC overhead: java.lang.OutOfMemoryError: GC overhead limit exceeded"),
    (-9, "WARN slow\n", 1200.0, "timeout after 1200 s: WARN slow"),
    (1, "the query stopped: boom\ntimed out after 300 s waiting for 26 batches\n", None,
     "timeout: timed out after 300 s waiting for 26 batches"),
    (-9, "", None, "killed by SIGKILL"),
    (1, "Traceback (most recent call last):\n  File \"x.py\", line 1\n"
        "pyspark.errors.exceptions.captured.StreamingQueryException: [STREAM_FAILED] x\n"
        "JVM stacktrace:\n\tat org.apache.spark.Foo.bar(Foo.scala:1)\n", None,
     "exit status 1: pyspark.errors.exceptions.captured.StreamingQueryException: "
     "[STREAM_FAILED] x"),
])
def test_failures_are_named_with_their_telling_line(
        returncode: int, stderr: str, timed_out_after: float | None, expected: str) -> None:
    assert classify_failure(returncode, stderr, timed_out_after) == expected


def test_telling_line_is_cut() -> None:
    assert len(classify_failure(1, "RuntimeException: " + "x" * 500)) == len("exit status 1: ") + 200


def test_summary_is_medians_of_completed_runs_and_lists_failures() -> None:
    runs = [ok("spillstore", 1, 100.0, commit_ms=5.0), ok("hdfs", 1, 80.0),
            ok("spillstore", 2, 120.0, commit_ms=7.0, peak_rss_mb=900.0),
            failed("hdfs", 2, "OOM: java.lang.OutOfMemoryError: Java heap space"),
            ok("spillstore", 3, 90.0, commit_ms=6.0, state_rows=999)]
    spill, hdfs = summarize(runs)
    assert (spill.provider, spill.ok, spill.failed) == ("spillstore", 3, 0)
    assert (spill.records_per_s, spill.records_min, spill.records_max) == (100.0, 90.0, 120.0)
    assert spill.commit_ms == 6.0 and spill.peak_rss_mb == 900.0
    assert spill.state_rows == (999, 1000)
    assert (hdfs.ok, hdfs.failed, hdfs.records_per_s) == (1, 1, 80.0)
    assert hdfs.failures == ("rep 2: OOM: java.lang.OutOfMemoryError: Java heap space",)
    assert "999–1,000" in format_report(PRESETS["small"], [spill]).splitlines()[2]


def test_report_compares_with_spillstore_and_prints_failures() -> None:
    runs = [ok("spillstore", 1, 100_000.0), ok("hdfs", 1, 50_000.0),
            failed("rocksdb", 1, "timeout after 1200 s")]
    lines = format_report(PRESETS["small"], summarize(runs)).splitlines()
    assert lines[0].startswith("small: 1,000,000 uniform keys")
    assert lines[1].split()[:4] == ["provider", "runs", "ok/failed", "records/s"]
    assert "vs spillstore" in lines[1]
    assert lines[2].split() == ["spillstore", "1/0", "100,000", "(100,000–100,000)", "1.00x",
                                "10", "1.0", "2.5%", "500", "-", "1,000"]
    assert lines[3].split()[4] == "0.50x"
    assert lines[4].split() == ["rocksdb", "0/1"] + ["-"] * 8
    assert lines[5] == "  FAILED rocksdb rep 1: timeout after 1200 s"
    assert len(lines) == 6


def test_report_falls_back_to_hdfs_when_spillstore_has_no_rate() -> None:
    runs = [failed("spillstore", 1, "OOM"), ok("hdfs", 1, 50_000.0), ok("rocksdb", 1, 25_000.0)]
    lines = format_report(PRESETS["small"], summarize(runs)).splitlines()
    assert "vs hdfs" in lines[1]
    assert [line.split()[4] for line in lines[2:5]] == ["-", "1.00x", "0.50x"]


def test_hit_ratio_is_the_median_of_spillstores_runs() -> None:
    runs = [ok("spillstore", 1, 100.0, hit_ratio=0.9), ok("spillstore", 2, 100.0, hit_ratio=0.97),
            ok("spillstore", 3, 100.0, hit_ratio=0.95), ok("rocksdb", 1, 50.0)]
    spill, rocks = summarize(runs)
    assert (spill.hit_ratio, rocks.hit_ratio) == (0.95, None)
    lines = format_report(PRESETS["onehit"], [spill, rocks]).splitlines()
    assert lines[0].startswith("onehit: 10,000 hot keys taking 90% of the rows, the rest on "
                               "keys seen once"), lines[0]
    assert lines[0].endswith("spillstore memoryBudget 32m"), lines[0]
    assert lines[2].split()[9] == "95.0%" and lines[3].split()[9] == "-"


def test_plot_marks_failures(tmp_path: Path) -> None:
    runs = [ok("spillstore", 1, 100.0), ok("spillstore", 2, 120.0), failed("hdfs", 1, "OOM"),
            replace(ok("rocksdb", 1, 50.0), preset="large"), failed("hdfs", 1, "OOM")]
    path = tmp_path / "bench.png"
    bench.plot(summarize(runs), str(path))
    assert path.read_bytes().startswith(PNG_MAGIC)


def test_bad_option_name_fails_before_any_run(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(_bench_runner, "run_once", lambda *a: pytest.fail("ran"))
    assert main(["bench", "--option", "not-a-name=1"]) == 2
    assert "invalid spillstore option name" in capsys.readouterr().err


def test_plot_without_matplotlib_fails_before_any_run(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(_bench_runner, "run_once", lambda *a: pytest.fail("ran"))
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    assert main(["bench", "--plot", "x.png"]) == 2
    assert "pip install 'spillstore[bench]'" in capsys.readouterr().err


def test_runs_are_interleaved_with_overrides_and_written_as_json(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    calls: list[tuple[str, str, int, int, dict[str, str], float]] = []

    def fake(preset: bench.Preset, provider: str, repetition: int, options: dict[str, str],
             timeout_s: float) -> RunResult:
        calls.append((preset.name, provider, repetition, preset.keys, options, timeout_s))
        if provider == "hdfs" and preset.name == "large":
            return replace(failed(provider, repetition, "OOM: Java heap space"),
                           preset=preset.name)
        return replace(ok(provider, repetition, 1000.0 * repetition), preset=preset.name)

    monkeypatch.setattr(_bench_runner, "run_once", fake)
    out = tmp_path / "runs.json"
    assert main(["bench", "--preset", "skewed", "--preset", "large", "--repetitions", "2",
                 "--providers", "hdfs,spillstore", "--keys", "5000", "--option", "a=1",
                 "--timeout", "60", "--json", str(out)]) == 0
    assert [c[:3] for c in calls] == [
        ("skewed", "hdfs", 1), ("skewed", "spillstore", 1),
        ("skewed", "hdfs", 2), ("skewed", "spillstore", 2),
        ("large", "hdfs", 1), ("large", "spillstore", 1),
        ("large", "hdfs", 2), ("large", "spillstore", 2)]
    assert all(c[3:] == (5000, {"a": "1"}, 60.0) for c in calls)
    printed = capsys.readouterr()
    assert "skewed: 5,000 skewed keys" in printed.out
    assert "FAILED hdfs rep 2: OOM: Java heap space" in printed.out
    assert "[large 2/2] hdfs: FAILED OOM: Java heap space" in printed.err
    raw = json.loads(out.read_text())
    assert [p["name"] for p in raw["presets"]] == ["skewed", "large"]
    assert raw["presets"][1]["keys"] == 5000 and raw["warmup_batches"] == bench.WARMUP_BATCHES
    assert len(raw["runs"]) == 8 and sum(r["failure"] is not None for r in raw["runs"]) == 2


def test_all_presets_default_small(monkeypatch: pytest.MonkeyPatch) -> None:
    names: list[str] = []
    monkeypatch.setattr(_bench_runner, "run_once", lambda preset, provider, *a: (
        names.append(preset.name) or ok(provider, 1, 1.0)))
    assert main(["bench", "--repetitions", "1", "--providers", "hdfs"]) == 0
    assert main(["bench", "--preset", "all", "--repetitions", "1", "--providers", "hdfs"]) == 0
    assert names == ["small", *PRESETS]


def test_a_run_past_its_timeout_is_killed_with_its_jvm(monkeypatch: pytest.MonkeyPatch) -> None:
    workdirs: list[str] = []
    mkdtemp = tempfile.mkdtemp

    def recording_mkdtemp(*args: object, **kwargs: object) -> str:
        workdirs.append(mkdtemp(*args, **kwargs))  # type: ignore[arg-type]
        return workdirs[-1]

    monkeypatch.setattr(tempfile, "mkdtemp", recording_mkdtemp)
    preset = replace(PRESETS["small"], keys=10, rows_per_batch=10, batches=1_000_000)
    started = time.monotonic()
    result = _bench_runner.run_once(preset, "hdfs", 1, {}, 12.0)
    assert time.monotonic() - started < 40
    assert result.failure is not None and result.failure.startswith("timeout after 12 s"), result
    assert result.stderr_tail, "the last lines of stderr are kept"
    (workdir,) = workdirs
    assert not os.path.exists(workdir), "the run's directory is removed"
    # The JVM's command line names the run's directory (spark.local.dir): none is left.
    deadline = time.monotonic() + 10
    while _processes_naming(workdir) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not _processes_naming(workdir)


def _processes_naming(text: str) -> list[str]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if text in cmdline:
            found.append(pid)
    return found
