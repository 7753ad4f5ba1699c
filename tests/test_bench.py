"""``python -m spillstore bench`` without Spark: failure classification, statistics, the
report, the plot, argument handling, the order of runs (with a fake run), the restart step
(with a fake worker) and ``tests/bench_remote.py``'s count of S3 requests (on a canned log)."""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import bench_remote
import harness
import pytest
from servers import AuditRecord, Request
from spillstore import bench
from spillstore.bench import (
    PRESETS,
    RunResult,
    _cost,
    _runner,
    _worker,
    classify_failure,
    format_report,
    summarize,
)
from spillstore.cli import main

# The bench's own Python, without Spark: the same on every line.
pytestmark = pytest.mark.one_line

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
    cut = classify_failure(1, "RuntimeException: " + "x" * 500)
    assert len(cut) == len("exit status 1: ") + 200


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


@pytest.mark.parametrize("cluster", [None, bench.Cluster(2, 1, 1536, 1024)])
def test_plot_marks_failures(tmp_path: Path, cluster: bench.Cluster | None) -> None:
    runs = [ok("spillstore", 1, 100.0, executor_rss_mb=900.0),
            ok("spillstore", 2, 120.0, executor_rss_mb=950.0), failed("hdfs", 1, "OOM"),
            replace(ok("rocksdb", 1, 50.0), preset="large"), failed("hdfs", 1, "OOM")]
    path = tmp_path / "bench.png"
    bench.plot(summarize(runs), str(path), cluster)
    assert path.read_bytes().startswith(PNG_MAGIC)


def test_bad_option_name_fails_before_any_run(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(_runner, "run_once", lambda *a: pytest.fail("ran"))
    assert main(["bench", "--option", "not-a-name=1"]) == 2
    assert "invalid spillstore option name" in capsys.readouterr().err


def test_plot_without_matplotlib_fails_before_any_run(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(_runner, "run_once", lambda *a: pytest.fail("ran"))
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    assert main(["bench", "--plot", "x.png"]) == 2
    assert "pip install 'spillstore[bench]'" in capsys.readouterr().err


def test_runs_are_interleaved_with_overrides_and_written_as_json(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    calls: list[tuple[str, str, int, int, bench.Setup]] = []

    def fake(preset: bench.Preset, provider: str, repetition: int,
             setup: bench.Setup) -> RunResult:
        calls.append((preset.name, provider, repetition, preset.keys, setup))
        if provider == "hdfs" and preset.name == "large":
            return replace(failed(provider, repetition, "OOM: Java heap space"),
                           preset=preset.name)
        return replace(ok(provider, repetition, 1000.0 * repetition), preset=preset.name)

    monkeypatch.setattr(_runner, "run_once", fake)
    out = tmp_path / "runs.json"
    assert main(["bench", "--preset", "skewed", "--preset", "large", "--repetitions", "2",
                 "--providers", "hdfs,spillstore", "--keys", "5000", "--option", "a=1",
                 "--timeout", "60", "--json", str(out)]) == 0
    assert [c[:3] for c in calls] == [
        ("skewed", "hdfs", 1), ("skewed", "spillstore", 1),
        ("skewed", "hdfs", 2), ("skewed", "spillstore", 2),
        ("large", "hdfs", 1), ("large", "spillstore", 1),
        ("large", "hdfs", 2), ("large", "spillstore", 2)]
    assert all(c[3:] == (5000, bench.Setup(60.0, {"a": "1"})) for c in calls)
    printed = capsys.readouterr()
    assert "skewed: 5,000 skewed keys" in printed.out
    assert "FAILED hdfs rep 2: OOM: Java heap space" in printed.out
    assert "[large 2/2] hdfs: FAILED OOM: Java heap space" in printed.err
    raw = json.loads(out.read_text())
    assert [p["name"] for p in raw["presets"]] == ["skewed", "large"]
    assert raw["presets"][1]["keys"] == 5000 and raw["warmup_batches"] == bench.WARMUP_BATCHES
    assert len(raw["runs"]) == 8 and sum(r["failure"] is not None for r in raw["runs"]) == 2
    assert (raw["conf"], raw["checkpoint_dir"], raw["restart"]) == ({}, None, False)


def test_confs_checkpoint_dir_and_restart_reach_every_run_and_the_json(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    setups: list[bench.Setup] = []

    def fake(preset: bench.Preset, provider: str, repetition: int,
             setup: bench.Setup) -> RunResult:
        setups.append(setup)
        return ok(provider, repetition, 1000.0, restart_s=2.0 + repetition)

    monkeypatch.setattr(_runner, "run_once", fake)
    out = tmp_path / "runs.json"
    assert main(["bench", "--repetitions", "2", "--providers", "rocksdb",
                 "--conf", "spark.a=1", "--conf", "spark.b = x=y", "--checkpoint-dir",
                 "s3a://b/c", "--restart", "--json", str(out)]) == 0
    expected = bench.Setup(1200.0, {}, {"spark.a": "1", "spark.b": "x=y"}, "s3a://b/c", True)
    assert setups == [expected, expected]
    printed = capsys.readouterr()
    assert "[small 2/2] rocksdb: 1,000 records/s, restart 4.0 s" in printed.err
    assert printed.out.splitlines()[2].split()[6] == "3.5"  # the median of 3 and 4 s
    raw = json.loads(out.read_text())
    assert raw["conf"] == expected.conf and raw["checkpoint_dir"] == "s3a://b/c"
    assert raw["restart"] is True and [r["restart_s"] for r in raw["runs"]] == [3.0, 4.0]


@pytest.mark.parametrize("argv", [["--conf", "novalue"], ["--conf", "=1"]])
def test_a_conf_without_key_and_value_is_a_usage_error(
        argv: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_runner, "run_once", lambda *a: pytest.fail("ran"))
    with pytest.raises(SystemExit) as exit:
        main(["bench", *argv])
    assert exit.value.code == 2


@pytest.mark.parametrize(("text", "mb"), [("1g", 1024), ("768m", 768), ("1536", 1536),
                                          ("2G", 2048), ("524288k", 512), ("1t", 1024 ** 2)])
def test_memory_sizes_read_as_spark_does(text: str, mb: int) -> None:
    assert _runner.memory_mb(text) == mb


@pytest.mark.parametrize(("executor_mb", "conf", "allotment"), [
    (1024, {}, 1024 + 384),  # 10 % is below the 384 MB floor
    (8192, {}, 8192 + 819),  # 10 % of 8 GB, rounded down
    (1024, {"spark.executor.memoryOverhead": "1g"}, 2048),
    (1024, {"spark.executor.memoryOverhead": "100"}, 1124),  # set, it is not floored
    (8192, {"spark.executor.memoryOverheadFactor": "0.25"}, 8192 + 2048),
    (1024, {"spark.executor.minMemoryOverhead": "200m"}, 1024 + 200),
])
def test_allotment_is_executor_memory_plus_overhead(
        executor_mb: int, conf: dict[str, str], allotment: int) -> None:
    assert _runner.executor_allotment_mb(executor_mb, conf) == allotment


def test_cluster_and_executor_memory_reach_every_run_and_the_json(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    setups: list[bench.Setup] = []

    def fake(preset: bench.Preset, provider: str, repetition: int,
             setup: bench.Setup) -> RunResult:
        setups.append(setup)
        return ok(provider, repetition, 1000.0)

    monkeypatch.setattr(_runner, "run_once", fake)
    out = tmp_path / "runs.json"
    assert main(["bench", "--repetitions", "1", "--providers", "hdfs,rocksdb",
                 "--cluster", "2,1,1536", "--executor-memory", "1g", "--json", str(out)]) == 0
    assert main(["bench", "--repetitions", "1", "--providers", "hdfs", "--cluster",
                 "3, 2, 900"]) == 0
    assert main(["bench", "--repetitions", "1", "--providers", "hdfs"]) == 0
    clusters = [s.cluster for s in setups]
    assert clusters == [bench.Cluster(2, 1, 1536, 1024)] * 2 + [
        bench.Cluster(3, 2, 900, 900), None]  # the executors get the worker's memory
    assert clusters[0] is not None and clusters[0].master == "local-cluster[2,1,1536]"
    assert json.loads(out.read_text())["cluster"] == {
        "executors": 2, "cores": 1, "memory_mb": 1536, "executor_memory_mb": 1024}


@pytest.mark.parametrize(("argv", "message"), [
    (["--cluster", "2,1"], None), (["--cluster", "2,0,1024"], None),
    (["--cluster", "2,1,1g"], None), (["--cluster", "2,1,1024", "--executor-memory", "lots"], None),
    (["--cluster", "2,1,1024", "--executor-memory", "2g"], "does not fit the workers' 1024 MB"),
    (["--executor-memory", "1g"], "--executor-memory needs --cluster"),
    (["--cluster", "2,1,1024", "--conf", "spark.executor.memory=1g"], "with --executor-memory"),
])
def test_a_cluster_that_cannot_run_is_refused_before_any_run(
        argv: list[str], message: str | None, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(_runner, "run_once", lambda *a: pytest.fail("ran"))
    if message is None:  # argparse's usage error
        with pytest.raises(SystemExit) as exit:
            main(["bench", *argv])
        assert exit.value.code == 2
    else:
        assert main(["bench", *argv]) == 2
        assert message in capsys.readouterr().err


def test_executor_peaks_are_read_from_the_rest_apis_executor_list() -> None:
    # /api/v1/applications/<id>/allexecutors, cut down: the driver, two live executors, one
    # that never sent a heartbeat.
    payload = json.loads("""[
      {"id": "driver", "isActive": true, "maxMemory": 455501414,
       "peakMemoryMetrics": {"JVMHeapMemory": 200000000, "ProcessTreeJVMRSSMemory": 0}},
      {"id": "1", "isActive": true, "maxMemory": 434582323,
       "peakMemoryMetrics": {"JVMHeapMemory": 310000000, "JVMOffHeapMemory": 90000000,
                             "ProcessTreeJVMVMemory": 4000000000,
                             "ProcessTreeJVMRSSMemory": 1400897536,
                             "ProcessTreePythonRSSMemory": 0}},
      {"id": "0", "isActive": false,
       "peakMemoryMetrics": {"ProcessTreeJVMRSSMemory": 1073741824}},
      {"id": "2", "isActive": true}
    ]""")
    assert _worker.executor_rss_mb(payload) == {"1": 1336.0, "0": 1024.0}


def test_a_cluster_run_gets_its_allotment_and_the_executors_share_of_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    specs: list[dict[str, object]] = []

    def fake_worker(spec: dict[str, object], timeout_s: float, base: RunResult) -> RunResult:
        specs.append(spec)
        return replace(base, records_per_s=100.0, executor_rss_mb=1337.6,
                       executor_rss_each_mb={"0": 1337.6, "1": 1200.0})

    monkeypatch.setattr(_runner, "_run_worker", fake_worker)
    cluster = bench.Cluster(2, 1, 1536, 1024)
    result = _runner.run_once(PRESETS["small"], "spillstore", 1,
                                    bench.Setup(30.0, cluster=cluster))
    assert specs[0]["cluster"] == {"executors": 2, "cores": 1, "memory_mb": 1536,
                                   "executor_memory_mb": 1024}
    assert (result.executor_allotment_mb, result.executor_rss_share) == (1408, 0.95)
    local = _runner.run_once(PRESETS["small"], "spillstore", 1, bench.Setup(30.0))
    assert specs[1]["cluster"] is None and local.executor_allotment_mb is None


def test_executor_columns_show_the_run_with_the_highest_peak() -> None:
    def cluster_run(provider: str, repetition: int, each: dict[str, float]) -> RunResult:
        peak = max(each.values())
        return ok(provider, repetition, 100.0, executor_rss_mb=peak, executor_rss_each_mb=each,
                  executor_allotment_mb=1408, executor_rss_share=round(peak / 1408, 4))

    runs = [cluster_run("spillstore", 1, {"0": 1300.0, "1": 1250.0}),
            cluster_run("spillstore", 2, {"0": 1100.0, "1": 1340.0}),
            cluster_run("rocksdb", 1, {"0": 900.0, "1": 915.0}), failed("rocksdb", 2, "OOM")]
    spill, rocks = summarize(runs)
    assert (spill.executor_rss_mb, spill.executor_rss_each_mb) == (1340.0, (1100.0, 1340.0))
    assert (rocks.executor_rss_mb, rocks.executor_rss_share) == (915.0, 0.6499)
    lines = format_report(PRESETS["small"], [spill, rocks],
                          bench.Cluster(2, 1, 1536, 1024)).splitlines()
    assert lines[1] == ("tasks on local-cluster[2,1,1536], executor memory 1,024 MB; GC and "
                        "peak RSS MB are the driver's")
    assert "executor peak RSS MB max (each)  of allotment MB" in lines[2]
    assert lines[3].split()[9:14] == ["1,340", "(1,100,", "1,340)", "95.2%", "of"]
    assert lines[4].split()[9:14] == ["915", "(900,", "915)", "65.0%", "of"]
    plain = format_report(PRESETS["small"], summarize([ok("hdfs", 1, 10.0)])).splitlines()
    assert "executor" not in plain[1] and len(plain[2].split()) == 11


def test_restart_column_only_when_a_run_restarted() -> None:
    plain = format_report(PRESETS["small"], summarize([ok("hdfs", 1, 10.0)])).splitlines()
    assert "restart s" not in plain[1] and len(plain[2].split()) == 11
    runs = [ok("spillstore", 1, 10.0, restart_s=4.0), ok("spillstore", 2, 10.0, restart_s=6.5),
            ok("spillstore", 3, 10.0, restart_s=5.0), ok("hdfs", 1, 10.0)]
    lines = format_report(PRESETS["small"], summarize(runs)).splitlines()
    assert "commit ms  restart s  GC s" in lines[1]
    assert lines[2].split()[5:8] == ["10", "5.0", "1.0"] and lines[3].split()[6] == "-"


@pytest.mark.parametrize("name", ["restart", "restart-spill"])
def test_the_restart_presets_restart_every_run_without_the_flag(
        name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    specs: list[dict[str, Any]] = []

    def fake_worker(spec: dict[str, Any], timeout_s: float, base: RunResult) -> RunResult:
        specs.append(spec)
        return replace(base, records_per_s=100.0, restart_s=3.5 if spec["restart"] else None)

    monkeypatch.setattr(_runner, "_run_worker", fake_worker)
    result = _runner.run_once(PRESETS[name], "rocksdb", 1, bench.Setup(30.0))
    assert [s["restart"] for s in specs] == [False, True] and result.restart_s == 3.5
    assert "then restarted in a fresh JVM" in PRESETS[name].describe()
    # The spilling one: a state of 2M keys (about 160 MB on the heap) over a 32 MB budget.
    budget = specs[0]["preset"]["memory_budget"]
    assert (budget, specs[0]["preset"]["keys"]) == (
        ("32m", 2_000_000) if name == "restart-spill" else (None, 1_000_000))


@pytest.mark.parametrize("restart_fails", [False, True])
def test_restart_runs_a_second_worker_on_the_same_checkpoint(
        restart_fails: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    specs: list[dict[str, object]] = []

    def fake_worker(spec: dict[str, object], timeout_s: float, base: RunResult) -> RunResult:
        specs.append(spec)
        if not spec["restart"]:
            return replace(base, records_per_s=100.0, commit_ms=5.0)
        if restart_fails:
            return replace(base, failure="OOM: Java heap space", stderr_tail=("OOM",))
        return replace(base, restart_s=7.25)

    monkeypatch.setattr(_runner, "_run_worker", fake_worker)
    setup = bench.Setup(30.0, {"a": "1"}, {"spark.x": "y"}, "hdfs://nn:1/bench/", True)
    first = _runner.run_once(PRESETS["small"], "hdfs", 2, setup)
    second = _runner.run_once(PRESETS["small"], "hdfs", 2, setup)
    assert [s["restart"] for s in specs] == [False, True] * 2
    checkpoints = [s["checkpoint"] for s in specs]
    assert checkpoints[0] == checkpoints[1] != checkpoints[2] == checkpoints[3]
    assert all(str(c).startswith("hdfs://nn:1/bench/small-hdfs-2-") for c in checkpoints)
    assert first.checkpoint == checkpoints[0] and second.checkpoint == checkpoints[2]
    assert all(s["conf"] == {"spark.x": "y"} and s["options"] == {"a": "1"} for s in specs)
    assert first.records_per_s == 100.0
    if restart_fails:
        assert first.failure == "restart: OOM: Java heap space" and not first.ok
        assert first.stderr_tail == ("OOM",)
    else:
        assert first.ok and first.restart_s == 7.25


def test_without_checkpoint_dir_the_checkpoint_is_in_the_removed_workdir(
        monkeypatch: pytest.MonkeyPatch) -> None:
    specs: list[dict[str, object]] = []

    def fake_worker(spec: dict[str, object], timeout_s: float, base: RunResult) -> RunResult:
        specs.append(spec)
        return replace(base, failure="exit status 1")

    monkeypatch.setattr(_runner, "_run_worker", fake_worker)
    result = _runner.run_once(PRESETS["small"], "hdfs", 1, bench.Setup(30.0, restart=True))
    (spec,) = specs  # a failed run is not restarted
    assert spec["checkpoint"] == os.path.join(str(spec["workdir"]), "checkpoint")
    assert result.checkpoint is None and not os.path.exists(str(spec["workdir"]))


def test_all_presets_default_small(monkeypatch: pytest.MonkeyPatch) -> None:
    names: list[str] = []
    monkeypatch.setattr(_runner, "run_once", lambda preset, provider, *a: (
        names.append(preset.name) or ok(provider, 1, 1.0)))
    assert main(["bench", "--repetitions", "1", "--providers", "hdfs"]) == 0
    assert main(["bench", "--preset", "all", "--repetitions", "1", "--providers", "hdfs"]) == 0
    assert names == ["small", *PRESETS]


def test_a_run_past_its_timeout_is_killed_with_its_jvm(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The killed JVM cannot delete its temporary files: they go to this test's directory.
    harness.use_tmp(monkeypatch, tmp_path)
    workdirs: list[str] = []
    mkdtemp = tempfile.mkdtemp

    def recording_mkdtemp(*args: object, **kwargs: object) -> str:
        workdirs.append(mkdtemp(*args, **kwargs))  # type: ignore[arg-type]
        return workdirs[-1]

    monkeypatch.setattr(tempfile, "mkdtemp", recording_mkdtemp)
    preset = replace(PRESETS["small"], keys=10, rows_per_batch=10, batches=1_000_000)
    started = time.monotonic()
    result = _runner.run_once(preset, "hdfs", 1, bench.Setup(12.0))
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


ROOT = "checkpoints/small-spillstore-1-abc"


def s3_log(with_first_commit: bool = True) -> list[Request]:
    """Requests of one run (batch 0 warm-up, batch 1 measured, 2 after) and of another."""
    def put(key: str, query: str = "") -> Request:
        return Request("PUT", f"/bench/{key}", query, 200)

    def copy(key: str) -> Request:  # a rename's copy, as the server records it
        return Request("COPY", f"/bench/{key}", "", 200)

    state = f"{ROOT}/state/0/0"
    return [
        put(f"{state}/1.delta"),
        put(f"{ROOT}/commits/.0.tmp"),
        *([copy(f"{ROOT}/commits/0")] if with_first_commit else []),
        Request("GET", "/bench", f"list-type=2&prefix={state}/&delimiter=%2F", 200),
        put(f"{state}/.2.delta.tmp"),
        copy(f"{state}/2.delta"),
        Request("DELETE", f"/bench/{state}/.2.delta.tmp", "", 204),
        Request("HEAD", f"/bench/{state}/2.delta", "", 200),
        put(f"{state}/"),  # a directory marker
        Request("POST", f"/bench/{state}/big%201", "uploads", 200),
        put(f"{state}/big%201", "partNumber=1&uploadId=u"),
        Request("POST", f"/bench/{state}/big%201", "uploadId=u", 200),
        put("checkpoints/other/state/0/0/2.delta"),
        Request("GET", f"/bench/{ROOT}/offsets/1", "", 200),
        put(f"{ROOT}/statefoo"),
        Request("PUT", f"/bench/{ROOT}/commits/1", "", 500),  # failed: not the commit
        copy(f"{ROOT}/commits/1"),
        put(f"{state}/3.delta"),
    ]


def test_state_requests_are_counted_between_the_measured_batches_commits() -> None:
    counted = bench_remote.count_state_requests(
        s3_log(), f"s3a://bench/{ROOT}", first_batch=1, last_batch=1, stores=2, run_batches=3)
    assert counted.measured_only and counted.store_batches == 2
    assert counted.by_kind == {"LIST": 1, "PUT": 3, "COPY": 1, "DELETE": 1, "HEAD": 1, "POST": 2}
    # 2.delta and "big 1": the temporary file is deleted, the marker is no file.
    assert counted.objects_written == 2


def test_state_requests_of_the_whole_run_without_the_commit_before_the_measured() -> None:
    counted = bench_remote.count_state_requests(
        s3_log(with_first_commit=False), f"s3a://bench/{ROOT}/", first_batch=1, last_batch=1,
        stores=2, run_batches=3)
    assert not counted.measured_only and counted.store_batches == 6
    assert counted.by_kind["PUT"] == 5 and counted.by_kind["COPY"] == 1
    assert sum(counted.by_kind.values()) == 11
    assert counted.objects_written == 4


def test_namenode_calls_follow_renames_and_tree_deletes() -> None:
    """HDFS: a temp file renamed to its name is one file written; a rename of a directory
    moves its files; a delete takes what is under its path."""
    def rec(cmd: str, src: str, dst: str | None = None, allowed: bool = True) -> AuditRecord:
        return AuditRecord(0, allowed, cmd, f"/{src}", f"/{dst}" if dst else None)

    state = f"{ROOT}/state/0/0"
    records = [
        rec("create", f"{ROOT}/commits/.0.tmp"),
        rec("rename (options=[OVERWRITE])", f"{ROOT}/commits/.0.tmp", f"{ROOT}/commits/0"),
        rec("getfileinfo", state),
        rec("create", f"{state}/.2.journal.u.tmp"),
        rec("rename (options=[OVERWRITE])", f"{state}/.2.journal.u.tmp", f"{state}/2.journal"),
        rec("create", f"{state}/.3.journal.v.tmp"),
        rec("delete", f"{state}/.3.journal.v.tmp"),
        rec("mkdirs", f"{ROOT}/state/0/1/tmp"),
        rec("create", f"{ROOT}/state/0/1/tmp/a"),
        rec("create", f"{ROOT}/state/0/1/tmp/b"),
        rec("rename", f"{ROOT}/state/0/1/tmp", f"{ROOT}/state/0/1/dir"),
        rec("delete", f"{ROOT}/state/0/1/dir/b"),
        rec("create", f"{state}/4.journal", allowed=False),
        rec("open", f"{state}/2.journal"),
        rec("create", f"{ROOT}/commits/.1.tmp"),
        rec("rename (options=[OVERWRITE])", f"{ROOT}/commits/.1.tmp", f"{ROOT}/commits/1"),
    ]
    counted = bench_remote.count_namenode_calls(
        records, f"hdfs://localhost:9000/{ROOT}", first_batch=1, last_batch=1, stores=2,
        run_batches=2)
    assert counted.measured_only and counted.store_batches == 2
    assert counted.by_kind == {"getfileinfo": 1, "create": 5, "rename": 2, "delete": 2,
                               "mkdirs": 1, "open": 1}
    # 2.journal (its temp file renamed), dir/a (moved with its directory); not the deleted
    # .3.journal temp, dir/b, nor the refused create.
    assert counted.objects_written == 2


def test_state_request_table_pools_runs_per_provider() -> None:
    run = {"preset": "small", "provider": "spillstore", "checkpoint": f"s3a://bench/{ROOT}",
           "state_stores": 2}
    raw = {"warmup_batches": 1, "restart": True, "presets": [{"name": "small", "batches": 1}],
           "runs": [run, run, {**run, "provider": "hdfs", "checkpoint": None,
                               "state_stores": None}]}
    lines = bench_remote.format_state_requests(raw, s3_log()).splitlines()
    assert "from the commit of batch 0" in lines[0]
    assert lines[1].split() == ["preset", "provider", "runs", "counted", "over", "requests",
                                "objects", "written", *bench_remote.KINDS]
    # Two runs over the same log: the same counts over twice the store batches.
    assert lines[2].split() == ["small", "spillstore", "2", "measured", "batches", "4.50",
                                "1.00", "0.00", "0.50", "0.50", "1.50", "0.50", "1.00", "0.50"]
    assert len(lines) == 3


# ---------------------------------------------------------------------------------------------
# The checkpoint-cost preset


def test_a_window_is_the_difference_of_two_listings() -> None:
    before = {"s/0/1.delta": (100, 1), "s/0/.1.delta.crc": (12, 1), "s/0/2.delta": (50, 2)}
    after = {"s/0/1.delta": (100, 1), "s/0/2.delta": (60, 3),  # rewritten in place
             "s/0/3.delta": (70, 4), "s/0/4.snapshot": (1000, 5)}
    window = _cost.diff(before, after, 0.5, 2.0, batch=3)
    assert window == _cost.Window(bytes_created=1130, files_created=3, files_deleted=2,
                                  bytes_live=1230, files_live=4, maintenance_cpu_s=0.5,
                                  process_cpu_s=2.0, batch=3)
    assert _cost.diff(after, after).files_created == 0


def test_windows_are_summarized_as_means_per_batch_and_the_most_bytes_live() -> None:
    windows = [_cost.Window(100, 2, 0, 1100, 10, 0.1, 1.0), _cost.Window(300, 4, 1, 1000, 13,
                                                                         None, 3.0)]
    assert _cost.summarize(windows) == {
        "bytes_per_batch": 200.0, "files_per_batch": 3.0, "files_deleted_per_batch": 0.5,
        "max_live_bytes": 1100, "maintenance_cpu_s_per_batch": 0.1,
        "process_cpu_s_per_batch": 2.0}


def test_the_input_loads_every_key_then_updates_distinct_existing_ones_seeded() -> None:
    preset = replace(PRESETS["checkpoint-cost"], keys=100, rows_per_batch=30, new_keys=5)
    assert _cost.batch_keys(preset, 0) == list(range(100))
    first, second = _cost.batch_keys(preset, 1), _cost.batch_keys(preset, 2)
    assert len(set(first[:30])) == 30 and max(first[:30]) < 100 and first[30:] == [
        100, 101, 102, 103, 104]
    # Batch 2 draws from the 105 keys there are by then, and adds 105..109.
    assert len(set(second[:30])) == 30 and max(second[:30]) < 105
    assert second[30:] == list(range(105, 110)) and first[:30] != second[:30]
    assert _cost.batch_keys(preset, 1) == first  # the same for every run


def cost(provider: str, repetition: int, rate: float, **fields: object) -> RunResult:
    values: dict[str, object] = dict(
        bytes_per_batch=2.5 * 2 ** 20, files_per_batch=4.0, files_deleted_per_batch=1.0,
        max_live_bytes=40 * 2 ** 20, maintenance_cpu_s_per_batch=0.0125,
        process_cpu_s_per_batch=1.5, batch_ms=800.0,
        checkpoint_load={"bytes_created": 10 * 2 ** 20, "files_created": 12})
    values.update(fields)
    return replace(ok(provider, repetition, rate, **values), preset="checkpoint-cost")


def test_the_checkpoint_cost_report_adds_a_table_per_batch() -> None:
    runs = [cost("spillstore", 1, 100.0), cost("spillstore", 2, 100.0, files_per_batch=6.0,
                                                max_live_bytes=50 * 2 ** 20),
            cost("rocksdb-nochangelog", 1, 50.0, bytes_per_batch=None,
                 checkpoint_load=None, maintenance_cpu_s_per_batch=None),
            failed("hdfs", 1, "OOM")]
    lines = format_report(PRESETS["checkpoint-cost"], summarize(runs)).splitlines()
    assert lines[0].startswith("checkpoint-cost: 1,000,000 keys loaded in 1 batch, then 30 "
                               "batches each updating 100,000 random existing keys"), lines[0]
    table = lines[lines.index("") + 1:]
    assert table[0].startswith("checkpoint per measured batch")
    assert table[1].split()[:4] == ["provider", "load", "MB", "(files)"]
    # Medians over the runs of their means; the highest live bytes.
    assert table[2].split() == ["spillstore", "10.00", "(12)", "2.50", "5.0", "1.0", "50.00",
                                "0.013", "1.50", "800"]
    assert table[3].split() == ["rocksdb-nochangelog", "-", "-", "4.0", "1.0", "40.00", "-",
                                "1.50", "800"]
    assert table[4].split()[1:] == ["-"] * 8 and len(table) == 5
    plain = format_report(PRESETS["small"], summarize([ok("hdfs", 1, 10.0)]))
    assert "checkpoint per measured batch" not in plain


def test_checkpoint_cost_compares_its_four_providers_with_its_own_options(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[bench.Preset, str]] = []

    def fake(preset: bench.Preset, provider: str, repetition: int,
             setup: bench.Setup) -> RunResult:
        calls.append((preset, provider))
        return replace(cost(provider, repetition, 10.0), preset=preset.name)

    monkeypatch.setattr(_runner, "run_once", fake)
    out = tmp_path / "runs.json"
    assert main(["bench", "--preset", "small", "--preset", "checkpoint-cost", "--repetitions",
                 "1", "--keys", "2000", "--rows-per-batch", "200", "--batches", "3",
                 "--new-keys", "7", "--json", str(out)]) == 0
    assert [(p.name, provider) for p, provider in calls] == [
        ("small", "spillstore"), ("small", "hdfs"), ("small", "rocksdb"),
        ("checkpoint-cost", "spillstore"), ("checkpoint-cost", "hdfs"),
        ("checkpoint-cost", "rocksdb"), ("checkpoint-cost", "rocksdb-nochangelog")]
    small, checkpoint_cost = calls[0][0], calls[-1][0]
    assert (small.new_keys, checkpoint_cost.new_keys) == (0, 7)
    assert (checkpoint_cost.keys, checkpoint_cost.rows_per_batch, checkpoint_cost.batches) == (
        2000, 200, 3)
    raw = json.loads(out.read_text())
    assert raw["presets"][1]["checkpoint_cost"] and raw["runs"][-1]["files_per_batch"] == 4.0
    calls.clear()
    assert main(["bench", "--preset", "checkpoint-cost", "--repetitions", "1",
                 "--providers", "hdfs,rocksdb-nochangelog"]) == 0
    assert [provider for _, provider in calls] == ["hdfs", "rocksdb-nochangelog"]


@pytest.mark.parametrize(("argv", "message"), [
    (["--preset", "small", "--new-keys", "5"], "--new-keys applies to the checkpoint-cost"),
    (["--preset", "checkpoint-cost", "--keys", "100", "--rows-per-batch", "101"],
     "101 updates per batch (--rows-per-batch) exceed its 100 keys"),
])
def test_what_checkpoint_cost_cannot_run_is_refused_before_any_run(
        argv: list[str], message: str, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(_runner, "run_once", lambda *a: pytest.fail("ran"))
    assert main(["bench", *argv]) == 2
    assert message in capsys.readouterr().err


def test_rocksdb_runs_with_and_without_changelog_checkpointing() -> None:
    key = "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled"
    confs = bench._presets.SPARK_PROVIDER_CONFS
    assert (confs["rocksdb"][key], confs["rocksdb-nochangelog"][key]) == ("true", "false")
    providers = bench._presets.BENCH_PROVIDERS
    assert providers["rocksdb-nochangelog"] == providers["rocksdb"]


def test_checkpoint_cost_requests_are_counted_between_the_benchs_listings() -> None:
    """The bench's own listings (user agent spillstore-bench-lister) are not counted, and
    mark the window: from the listing after the load to the one after the last batch."""
    state = f"{ROOT}/state/0/0"
    agent = f"{_cost.LISTER}, Hadoop 3.5.0, aws-sdk-java/2.29"

    def listing() -> Request:
        return Request("GET", "/bench", f"list-type=2&prefix={ROOT}/state/&delimiter=%2F",
                       200, agent)

    log = [
        Request("PUT", f"/bench/{state}/1.delta", "", 200),  # the load batch's
        Request("PUT", f"/bench/{ROOT}/commits/0", "", 200),
        Request("PUT", f"/bench/{state}/1.snapshot", "", 200),  # the load's maintenance
        listing(), listing(),
        Request("PUT", f"/bench/{state}/2.delta", "", 200, "Hadoop 3.5.0"),
        Request("PUT", f"/bench/{ROOT}/commits/1", "", 200),
        listing(),
        Request("GET", "/bench", f"list-type=2&prefix={state}/&delimiter=%2F", 200),
        Request("DELETE", f"/bench/{state}/1.delta", "", 204),
        listing(),
        Request("PUT", f"/bench/{state}/3.delta", "", 200),  # the restart's
    ]
    counted = bench_remote.count_state_requests(
        log, f"s3a://bench/{ROOT}", first_batch=1, last_batch=2, stores=1, run_batches=4,
        between_listings=True)
    assert counted.measured_only and counted.store_batches == 2
    assert counted.by_kind == {"PUT": 1, "LIST": 1, "DELETE": 1}
    assert counted.objects_written == 1
    # Without listings in the log: the whole run, still without the bench's own calls.
    whole = bench_remote.count_state_requests(
        log[:3], f"s3a://bench/{ROOT}", first_batch=1, last_batch=2, stores=1, run_batches=4,
        between_listings=True)
    assert not whole.measured_only and whole.by_kind == {"PUT": 2}


def test_namenode_calls_of_the_benchs_listings_are_not_counted() -> None:
    state = f"/{ROOT}/state/0/0"
    records = [AuditRecord(0, True, "listStatus", state, None, _cost.LISTER),
               AuditRecord(0, True, "create", f"{state}/2.delta", None, "root"),
               AuditRecord(0, True, "listStatus", state, None, _cost.LISTER)]
    counted = bench_remote.count_namenode_calls(
        records, f"hdfs://localhost:9000/{ROOT}", first_batch=1, last_batch=1, stores=1,
        run_batches=2, between_listings=True)
    assert counted.measured_only and counted.by_kind == {"create": 1}
