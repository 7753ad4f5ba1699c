"""``python -m spillstore bench`` for real at a tiny size: one run of each provider, each in
its own JVM, with the raw results and the chart written; and one on local-cluster."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import harness
import pytest

PROVIDERS = ("spillstore", "hdfs", "rocksdb")
KEYS = 2000


# The benchmark reads the final state back through the state data source.
@harness.needs_state_reader
def test_bench_runs_every_provider_and_writes_json_and_plot(tmp_path: Path) -> None:
    raw, chart = tmp_path / "runs.json", tmp_path / "bench.png"
    # 1 warm-up + 2 measured batches of 1000 rows: value % 2000 fills all 2000 keys.
    bench = subprocess.run(
        [sys.executable, "-m", "spillstore", "bench", "--preset", "small", "--keys", str(KEYS),
         "--rows-per-batch", "1000", "--batches", "2", "--repetitions", "1",
         "--timeout", "240", "--json", str(raw), "--plot", str(chart)],
        capture_output=True, text=True, timeout=600,
        env={**os.environ, **harness.jvm_tmp_env(tmp_path)})
    assert bench.returncode == 0, bench.stdout + bench.stderr[-5000:]

    runs = json.loads(raw.read_text())["runs"]
    assert [r["provider"] for r in runs] == list(PROVIDERS)
    for run in runs:
        assert run["failure"] is None, run
        assert run["records_per_s"] > 0 and run["state_rows"] == KEYS, run
        assert run["commit_ms"] >= 0 and run["gc_s"] >= 0 and run["peak_rss_mb"] > 100, run
        assert run["updates_ms"] >= 0 and run["batch_ms"] > 0, run
        # Each measured batch's times, whose medians are the run's.
        each = run["each_batch_ms"]
        assert len(each) == 2 and all(b > 0 and u >= 0 and c >= 0 for b, u, c in each), run
        assert [statistics.median(column) for column in zip(*each, strict=True)] == [
            run["batch_ms"], run["updates_ms"], run["commit_ms"]], run
        assert 0 <= run["gc_share"] < 1, run
        # Every key is new in the warm-up batch and revisited after it: all heap hits.
        assert (run["hit_ratio"] == 1.0) == (run["provider"] == "spillstore"), run

    table = bench.stdout.splitlines()
    assert table[0].startswith(f"small: {KEYS:,} uniform keys"), table
    assert [line.split()[:2] for line in table[2:5]] == [[p, "1/0"] for p in PROVIDERS], table
    assert chart.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    assert not list(tmp_path.glob("spillstore-bench-*")), "run directories are removed"


def test_bench_restart_preset_with_checkpoint_dir(tmp_path: Path) -> None:
    """The ``restart`` preset restarts each run without ``--restart``, and its runs snapshot
    early enough that the restart has a snapshot to load."""
    raw, checkpoints = tmp_path / "runs.json", tmp_path / "checkpoints"
    bench = subprocess.run(
        [sys.executable, "-m", "spillstore", "bench", "--preset", "restart", "--keys", "500",
         "--rows-per-batch", "500", "--batches", "3", "--repetitions", "1",
         "--providers", "spillstore", "--checkpoint-dir", checkpoints.as_uri(),
         "--timeout", "120", "--json", str(raw)],
        capture_output=True, text=True, timeout=300,
        env={**os.environ, **harness.jvm_tmp_env(tmp_path)})
    assert bench.returncode == 0, bench.stdout + bench.stderr[-5000:]

    (run,) = json.loads(raw.read_text())["runs"]
    assert run["failure"] is None, run
    assert 0 < run["restart_s"] < run["seconds"], run
    (kept,) = checkpoints.iterdir()
    assert run["checkpoint"] == kept.as_uri() and kept.name.startswith("restart-spillstore-1-")
    # The restarted query committed a batch beyond the warm-up and measured ones.
    assert max(int(p.name) for p in (kept / "commits").iterdir() if p.name.isdigit()) >= 4
    # Maintenance every 2 s, a snapshot once two journals follow the last one (Spark's
    # defaults, 60 s and 10, would leave none in a run of seconds).
    assert list((kept / "state").rglob("*.snapshot")), sorted((kept / "state").rglob("*"))
    assert "restart s" in bench.stdout.splitlines()[1], bench.stdout
    assert not list(tmp_path.glob("spillstore-bench-*")), "run directories are removed"


@pytest.mark.cluster
def test_bench_on_local_cluster_reports_each_executors_peak_rss_and_restarts(
        tmp_path: Path) -> None:
    raw = tmp_path / "runs.json"
    bench = subprocess.run(
        [sys.executable, "-m", "spillstore", "bench", "--preset", "small", "--keys", "500",
         "--rows-per-batch", "500", "--batches", "1", "--repetitions", "1",
         "--providers", "spillstore", "--cluster", "2,1,1024", "--executor-memory", "768m",
         "--restart", "--timeout", "240", "--json", str(raw)],
        capture_output=True, text=True, timeout=300, env=dict(os.environ, TMPDIR=str(tmp_path)))
    assert bench.returncode == 0, bench.stdout + bench.stderr[-5000:]

    (run,) = json.loads(raw.read_text())["runs"]
    assert run["failure"] is None and run["state_rows"] == 500, run
    assert 0 < run["restart_s"] < run["seconds"], run  # on a cluster of its own too
    each = run["executor_rss_each_mb"]
    assert sorted(each) == ["0", "1"] and run["executor_rss_mb"] == max(each.values()), run
    # A JVM with a 768 MB heap that ran tasks holds more than 100 MB, and Spark measured it
    # below what the machine could give it.
    assert all(100 < mb < 768 + 2048 for mb in each.values()), run
    assert run["executor_allotment_mb"] == 768 + 384, run
    assert run["executor_rss_share"] == round(run["executor_rss_mb"] / (768 + 384), 4), run
    table = bench.stdout.splitlines()
    assert table[1].startswith("tasks on local-cluster[2,1,1024], executor memory 768 MB")
    assert "executor peak RSS MB max (each)" in table[2], table
    assert not list(tmp_path.glob("spillstore-bench-*")), "run directories are removed"


@harness.needs_state_reader
def test_bench_checkpoint_cost_lists_the_state_tree_after_each_batch(tmp_path: Path) -> None:
    """The ``checkpoint-cost`` preset at a toy size: 2,000 keys loaded, then 3 batches of 200
    updates and 50 new keys, spillstore and the default provider; every run's final state is
    checked against its input by the worker (a run whose state differs fails). Not restarted:
    ``--restart`` has its test on local-cluster, and the ``restart`` preset its own."""
    raw = tmp_path / "runs.json"
    bench = subprocess.run(
        [sys.executable, "-m", "spillstore", "bench", "--preset", "checkpoint-cost",
         "--keys", "2000", "--rows-per-batch", "200", "--new-keys", "50", "--batches", "3",
         "--repetitions", "1", "--providers", "spillstore,hdfs",
         "--timeout", "240", "--json", str(raw)],
        capture_output=True, text=True, timeout=600,
        env={**os.environ, **harness.jvm_tmp_env(tmp_path)})
    assert bench.returncode == 0, bench.stdout + bench.stderr[-5000:]

    runs = json.loads(raw.read_text())["runs"]
    assert [r["provider"] for r in runs] == ["spillstore", "hdfs"]
    for run in runs:
        assert run["failure"] is None, run
        assert run["state_rows"] == 2000 + 3 * 50 and run["restart_s"] is None, run
        load, batches = run["checkpoint_load"], run["checkpoint_batches"]
        # The load wrote the state's metadata and each of the 4 stores' first version.
        assert load["files_created"] >= 4 and load["bytes_created"] == load["bytes_live"] > 0
        assert [w["batch"] for w in batches] == [1, 2, 3], run
        for before, w in zip([load, *batches], batches, strict=False):
            # Every batch commits a version of each of the 4 stores: a file each at least.
            assert w["files_created"] >= 4 and w["bytes_created"] > 0, run
            assert w["files_live"] == before["files_live"] + w["files_created"] - w[
                "files_deleted"], run
            assert w["maintenance_cpu_s"] >= 0 and w["process_cpu_s"] > 0, run
        assert run["bytes_per_batch"] == pytest.approx(
            statistics.fmean(w["bytes_created"] for w in batches), abs=1e-3), run
        assert run["files_per_batch"] >= 4 and run["files_deleted_per_batch"] >= 0, run
        if run["provider"] == "hdfs":  # the raw local file system: each delta's .crc too
            assert run["files_per_batch"] >= 8, run
        assert run["max_live_bytes"] == max(w["bytes_live"] for w in batches), run
        assert run["maintenance_cpu_s_per_batch"] >= 0 and run["process_cpu_s_per_batch"] > 0, run

    out = bench.stdout
    assert out.startswith("checkpoint-cost: 2,000 keys loaded in 1 batch, then 3 batches "
                          "each updating 200 random existing keys and adding 50 new keys"), out
    table = out[out.index("checkpoint per measured batch"):].splitlines()
    assert [line.split()[0] for line in table[2:4]] == ["spillstore", "hdfs"], table
    assert not list(tmp_path.glob("spillstore-bench-*")), "run directories are removed"
