"""Executor loss (issue 6, item 7): stateful queries on ``local-cluster[2,1,1024]``, one executor
JVM SIGKILLed in the middle of a batch; each query carries on (tasks retried on the surviving
executor, a replacement executor started by the worker, state reloaded from the checkpoint)
and outputs exactly what plain Python computes from the input.

Two variants, each one subprocess (executor_loss_job.py) running its trials with one kill
each: spillstore's default memory budget (an aggregation, and dropDuplicates feeding an
aggregation), and ``memoryBudget=1``, where every entry lives in the executor's local RocksDB,
so the killed executor's cold tier is lost with it (dropDuplicates feeding an aggregation,
session windows, a stream-stream join; the last two exact against the default provider). On
Spark 4.3, one more: a real-time mode aggregation (``test_real_time_mode_...``).

Who deletes a killed executor's cold tier on a standalone cluster: each executor's default
spillstore dir is under its own ``spark-<uuid>`` root in the worker's application dir; the first
spill of an executor started later on that worker sweeps the dead JVMs' dirs in the sibling
``spark-*`` roots (LocalDirs.scala), and the worker deletes the application's dirs, whatever is
left of them, when the application ends. In ``local-cluster`` mode the workers live in the
driver's JVM and stop with the application, so their deletion (on a background thread, once the
application's last executor has exited) can be cut short; the application's dirs are inside the
driver's local root, which the driver's JVM deletes at exit. So the test checks what is left
once the job's process has exited, not right after ``spark.stop()``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import harness
import pytest
from jobs import executor_loss_job as job
from jobs import rtm_executor_loss_job as rtm_job

JOB = harness.JOBS / "executor_loss_job.py"
# (variant, spillstore memoryBudget or None for the default, [(shape, seed, checkpoint format)]):
# the seed picks the input, the batch during which the kill comes (after 1 to 4 committed
# batches), the delay into that batch's job (0-0.4 s) and which of the two executors dies.
# A variant's trials share one application (a cluster start a variant, not a trial). The last
# trial at one byte runs with checkpoint format v2 (Spark 4.x): the retried tasks commit under
# new checkpoint ids beside the killed attempts' files.
VARIANTS = [
    ("default_budget", None, [("agg", 11, 1), ("dedup_agg", 12, 1)]),
    ("budget_1_byte", "1", [("dedup_agg", 22, 1), ("session", 23, 1), ("join", 24, 1)]
     + ([("session", 33, 2)] if harness.SPARK_LINE >= (4, 0) else [])),
]


@pytest.mark.heavy
@pytest.mark.parametrize(("variant", "budget", "trials"), VARIANTS, ids=[v[0] for v in VARIANTS])
def test_executor_killed_mid_batch_query_completes_exactly(
    tmp_path: Path, variant: str, budget: str | None, trials: list[tuple[str, int, int]]
) -> None:
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"workdir": str(tmp_path), "budget": budget,
                                "trials": [{"shape": s, "seed": n, "checkpoint_format": f}
                                           for s, n, f in trials]}))
    # In a process group and temp dir of its own (harness.run_job): the executor JVM killed
    # here cannot delete its temporary files (native libraries it unpacked) itself.
    result = harness.run_job([str(JOB), str(spec)], tmp_path, timeout_s=600)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-8000:]
    final = json.loads(result.stdout.strip().splitlines()[-1])
    reports = final["trials"]
    assert len(reports) == len(trials)

    for n, ((shape, seed, checkpoint_format), r) in enumerate(zip(trials, reports, strict=True)):
        name = f"{variant} trial {n} ({shape}, seed {seed}, checkpoint format v{checkpoint_format})"
        # The kill happened, mid-stream, and Spark saw that executor die and replaced it.
        assert "pid" in r, f"{name}: no kill: {r}"
        assert r["job_active_at_kill"], f"{name}: no job was running at the kill: {r}"
        assert 1 <= len(r["committed_at_kill"]) < job.FILES, f"{name}: not mid-stream: {r}"
        assert r["victim"] in r["executors_before"] and r["pid_gone"], r
        dead = r["spark_executors"][r["victim"]]
        assert not dead["active"] and "137" in (dead["remove_reason"] or ""), (
            f"{name}: Spark did not record executor {r['victim']} as killed: {dead}")
        replacements = [e for e, s in r["spark_executors"].items()
                        if s["active"] and e not in r["executors_before"]]
        assert replacements, f"{name}: no replacement executor: {r['spark_executors']}"
        if budget == "1":
            # Everything spilled, and the dead executor took a populated cold tier with it.
            assert r["cold_entries_max"] > 0, r
            assert r["victim_cold_dirs_at_kill"] > 0, r
        else:
            assert r["cold_entries_max"] == 0, r

        # The query carried on to the end and every batch is exact.
        assert r["error"] is None, f"{name}: {r['error']}"
        # session and join: one more batch, without data, for the watermark's last move.
        extra = [job.FILES] if shape in job.REFERENCE_SHAPES else []
        assert r["committed"] in (list(range(job.FILES)), list(range(job.FILES)) + extra), r
        outputs = harness.read_outputs(tmp_path / str(n) / "output")
        if shape in job.REFERENCE_SHAPES:
            expected = harness.read_outputs(tmp_path / str(n) / "reference")
            assert sum(len(rows) for rows in expected.values()) > 0, f"{name}: no output"
        else:
            expected = job.expected_outputs(shape, job.input_batches(seed))
        # One run with availableNow and maxFilesPerTrigger=1: the offset log fixes file i as
        # batch i before the batch runs, and an executor loss does not restart the query, so
        # batches compare one to one (which implies equal rows with boundaries forgotten).
        assert outputs == expected, (
            f"{name}: killed executor {r['victim']} after batches {r['committed_at_kill']}:\n"
            + harness.describe_difference(outputs, expected, "spillstore", "expected"))
        assert harness.all_rows(outputs) == harness.all_rows(expected)
        if checkpoint_format == 2:
            assert harness.names_by_checkpoint_ids(tmp_path / str(n) / "checkpoint"), name

        left = {Path(p).name: v for p, v in r["victim_roots_left"].items()}
        print(f"{name}: SIGKILL executor {r['victim']} (pid {r['pid']}) {r['delay_s']} s into "
              f"batch {len(r['committed_at_kill'])}; Spark: {dead['remove_reason']!r}, "
              f"{dead['failed_tasks']} task(s) lost (victim busy: {r['victim_was_busy']}), "
              f"replaced by {replacements} after "
              f"{r['replaced_after_s']} s; {r['query_s']} s, batches {r['batch_ms']} ms; "
              f"{sum(len(v) for v in expected.values())} rows exact; dead executor's local dir "
              f"at the end of the trial: {left}")
    if budget == "1" and len(trials) > 1:
        # Before the application ends: a killed executor's per-JVM dir is gone once an executor
        # started after the kill on the same worker has spilled (its first spill sweeps the dead
        # JVMs' dirs in the sibling spark-* roots of the worker's application dir). Only trials
        # after a kill make its successor spill for sure: a variant of one trial may end first.
        before = final["before_stop"]
        alive = [d for d in before["jvm_dirs"] if d["alive"]]
        assert {d["pid"] for d in alive} <= set(before["executors"].values()), before
        swept = 0
        for r in reports:
            worker_dir = Path(r["local_roots"][0]).parent
            if any(Path(d["path"]).is_relative_to(worker_dir) and d["pid"] not in r["pids_before"]
                   for d in alive):
                assert not [d for d in before["jvm_dirs"] if d["pid"] == r["pid"]], (
                    f"killed executor {r['pid']}'s dir outlived its successor's first spill: "
                    f"{before}")
                swept += 1
        assert swept, f"no killed executor had a successor that spilled on its worker: {before}"
    # Once the application has ended (its driver JVM, which hosts the workers here, has exited):
    # no executor's per-JVM dir or cold tier is left, the killed ones' included.
    leftover = [str(p) for pattern in ("jvm-*", "spillstore-*")
                for p in (tmp_path / "local").rglob(pattern)]
    assert leftover == [], f"{variant}: dirs left after the application ended: {leftover}"


RTM_JOB = harness.JOBS / "rtm_executor_loss_job.py"


@pytest.mark.heavy
@pytest.mark.skipif(harness.SPARK_LINE < (4, 3), reason="real-time mode runs stateful queries "
                    "from Spark 4.3 (SPARK-57228)")
def test_real_time_mode_executor_killed_mid_batch_state_exact(tmp_path: Path) -> None:
    """Real-time mode on spillstore (rtm_executor_loss_job.py): an executor running one of a
    real-time batch's tasks is SIGKILLed after two real-time batches; with ``memoryBudget=1``
    every entry lives in the executors' cold tiers, so the killed one's state is lost with it.
    Spark does not retry a lost task in real-time mode: the query fails and is restarted from its
    checkpoint. The sink's rows and the state of the last committed batch are exactly the
    input's counts."""
    report = harness.run_reporting_job(RTM_JOB, {"workdir": str(tmp_path), "budget": "1"},
                                       tmp_path, timeout_s=400)
    # The kill: mid-stream, of an executor running a task, which Spark saw die and replaced.
    assert report["query_active_at_kill"], report
    assert len(report["committed_at_kill"]) >= 1 + rtm_job.KILL_AFTER_RTM_BATCHES, report
    assert report["fed_before_kill"] < rtm_job.ROUNDS, report
    executors = report["spark_executors"]
    dead = executors[report["victim"]]
    assert not dead["active"] and "137" in (dead["remove_reason"] or ""), executors
    assert any(s["active"] for e, s in executors.items()
               if e not in report["executors_before"]), f"no replacement executor: {executors}"
    failure = report["first_run_error"]
    assert failure is None or "ExecutorLostFailure" in failure, failure
    assert report["last_run_error"] is None, report["last_run_error"]

    expected = rtm_job.model()
    assert report["sink_max_counts"] == expected, "the sink's last count of some key is wrong"
    assert report["state"] == expected, "the last committed state differs from the input's"
    # On spillstore throughout (the offset log's provider, v2 journals after the kill), spilling.
    assert report["provider_in_offset_log"] == [harness.SPILLSTORE], report
    last_version = max(int(Path(j).name.split("_")[0]) for j in report["journals"])
    assert last_version > len(report["committed_at_kill"]), report["journals"]
    last = [op["customMetrics"] for p in report["last_run_progress"]
            for op in p["stateOperators"]]
    assert sum(m.get("spillstoreColdLoads", 0) for m in last) > 0, last
    assert all("spillstoreCacheHitPermille" in m for m in last), last
    print(f"real-time mode: SIGKILL executor {report['victim']} after batches "
          f"{report['committed_at_kill']}; first run: "
          f"{(failure or 'carried on').splitlines()[0][:160]}; "
          f"{sum(expected.values())} records, {len(expected)} keys exact; {report['seconds']} s")


SPECULATION_JOB = harness.JOBS / "speculation_job.py"


@pytest.mark.heavy
def test_speculative_copy_of_a_slow_stateful_task_output_exact(tmp_path: Path) -> None:
    """``spark.speculation=true`` on two hosts (speculation_job.py): one task of a session
    window's stateful stage sleeps, a speculative copy on the other host writes the same
    state version and succeeds, and the query's output equals the default provider's, with
    every entry in the cold tier. Once with checkpoint format v1 and, on Spark 4.x, once with
    v2, in one application: with v2 the two attempts write that version under different
    checkpoint ids, and the commit log records the copy's."""
    slow_batch = 3
    formats = [1, 2] if harness.SPARK_LINE >= (4, 0) else [1]
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"workdir": str(tmp_path), "budget": "1", "shape": "session",
                                "seed": 31, "slow_batch": slow_batch,
                                "checkpoint_formats": formats}))
    result = harness.run_job([str(SPECULATION_JOB), str(spec)], tmp_path, timeout_s=900)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-8000:]
    runs = json.loads(result.stdout.strip().splitlines()[-1])["runs"]
    assert sorted(runs) == [str(f) for f in formats], runs
    expected = harness.read_outputs(tmp_path / "reference")
    assert sum(len(rows) for rows in expected.values()) > 0, "no output"
    for fmt in formats:
        _check_speculated_run(runs[str(fmt)], tmp_path / f"v{fmt}", fmt, expected)


def _check_speculated_run(r: dict[str, Any], rundir: Path, checkpoint_format: int,
                          expected: dict[int, list[Any]]) -> None:
    assert r["error"] is None, r["error"]
    assert r["cold_entries_max"] > 0, r
    assert r["slept"], "no task attempt slept: the marker was never taken"
    # A speculative copy of the task that slept (in the stage of the state store's operators)
    # ran on the other host and succeeded; the attempt it copied did not.
    attempts = r["slept_task_attempts"]
    won = [a for a in attempts if a["speculative"] and a["status"] == "SUCCESS"]
    copied = [a for a in attempts if not a["speculative"]]
    assert len(won) == 1 and len(copied) == 1, f"attempts of task {r['slept']}: {attempts}"
    assert copied[0]["status"] != "SUCCESS" and copied[0]["host"] != won[0]["host"], attempts
    assert r["committed"] in (list(range(job.FILES)), list(range(job.FILES + 1))), r["committed"]
    outputs = harness.read_outputs(rundir / "output")
    assert outputs == expected, harness.describe_difference(
        outputs, expected, "spillstore", "default provider")
    if checkpoint_format == 2:
        assert harness.names_by_checkpoint_ids(rundir / "checkpoint")
    print(f"speculation, checkpoint format v{checkpoint_format}: task (stage, partition) "
          f"{r['slept']} slept; its attempts "
          f"{attempts}; {r['query_s']} s, batches {r['batch_ms']} ms; "
          f"{sum(len(v) for v in expected.values())} rows exact")
