"""Executor loss (issue 6, item 7): stateful queries on ``local-cluster[2,1,1024]``, one executor
JVM SIGKILLed in the middle of a batch; each query carries on (tasks retried on the surviving
executor, a replacement executor started by the worker, state reloaded from the checkpoint)
and outputs exactly what plain Python computes from the input.

Two variants, each one subprocess (executor_loss_job.py) running two trials (an aggregation,
and dropDuplicates feeding an aggregation) with one kill each: spillstore's default memory
budget, and ``memoryBudget=1``, where every entry lives in the executor's local RocksDB, so the
killed executor's cold tier is lost with it.
"""

from __future__ import annotations

import json
from pathlib import Path

import harness
import pytest
from jobs import executor_loss_job as job

JOB = harness.JOBS / "executor_loss_job.py"
# (variant, spillstore memoryBudget or None for the default, [(shape, seed)]): the seed picks
# the input, the batch during which the kill comes (after 1 to 4 committed batches), the delay
# into that batch's job (0-0.4 s) and which of the two executors dies.
VARIANTS = [
    ("default_budget", None, [("agg", 11), ("dedup_agg", 12)]),
    ("budget_1_byte", "1", [("agg", 21), ("dedup_agg", 22)]),
]


@pytest.mark.heavy
@pytest.mark.parametrize(("variant", "budget", "trials"), VARIANTS, ids=[v[0] for v in VARIANTS])
def test_executor_killed_mid_batch_query_completes_exactly(
    tmp_path: Path, variant: str, budget: str | None, trials: list[tuple[str, int]]
) -> None:
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"workdir": str(tmp_path), "budget": budget,
                                "trials": [{"shape": s, "seed": n} for s, n in trials]}))
    # In a process group and temp dir of its own (harness.run_job): the executor JVM killed
    # here cannot delete its temporary files (native libraries it unpacked) itself.
    result = harness.run_job([str(JOB), str(spec)], tmp_path, timeout_s=600)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-8000:]
    reports = json.loads(result.stdout.strip().splitlines()[-1])["trials"]
    assert len(reports) == len(trials)

    for n, ((shape, seed), r) in enumerate(zip(trials, reports, strict=True)):
        name = f"{variant} trial {n} ({shape}, seed {seed})"
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
            assert any(d["cold_dirs"] for d in r["victim_roots_left"].values()), r
        else:
            assert r["cold_entries_max"] == 0, r

        # The query carried on to the end and every batch is exact.
        assert r["error"] is None, f"{name}: {r['error']}"
        assert r["committed"] == list(range(job.FILES)), r
        outputs = harness.read_outputs(tmp_path / str(n) / "output")
        expected = job.expected_outputs(shape, job.input_batches(seed))
        # One run with availableNow and maxFilesPerTrigger=1: the offset log fixes file i as
        # batch i before the batch runs, and an executor loss does not restart the query, so
        # batches compare one to one (which implies equal rows with boundaries forgotten).
        assert outputs == expected, (
            f"{name}: killed executor {r['victim']} after batches {r['committed_at_kill']}:\n"
            + harness.describe_difference(outputs, expected, "spillstore", "expected"))
        assert harness.all_rows(outputs) == harness.all_rows(expected)

        left = {Path(p).name: v for p, v in r["victim_roots_left"].items()}
        print(f"{name}: SIGKILL executor {r['victim']} (pid {r['pid']}) {r['delay_s']} s into "
              f"batch {len(r['committed_at_kill'])}; Spark: {dead['remove_reason']!r}, "
              f"{dead['failed_tasks']} task(s) lost (victim busy: {r['victim_was_busy']}), replaced by {replacements} after "
              f"{r['replaced_after_s']} s; {r['query_s']} s, batches {r['batch_ms']} ms; "
              f"{sum(len(v) for v in expected.values())} rows exact; dead executor's local dir "
              f"left until the app ends: {left}")
    leftover = [str(p) for p in (tmp_path / "local").rglob("spillstore-*")]
    print(f"{variant}: cold-tier dirs left after the application ended: {leftover}")
