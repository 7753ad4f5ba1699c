"""Queries kept in spillstore survive stops, crashes and a move to a fresh JVM: continued from
their checkpoint, they end with exactly the results of an uninterrupted run with Spark's
default provider."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import harness
import pytest
from harness import DEFAULT, NUM_BATCHES, QUERIES, SPILLSTORE, Run

FullRun = Callable[[str, str], Run]

RESUMABLE = ["agg_update_window", "dedup", "join_left_outer", "session_window"]
# The stop comes after batch 1. A query that stops by itself (availableNow) first runs a
# no-data batch that evicts state up to the watermark; an uninterrupted run evicts the same
# state only after processing the next file. Where that file holds a late row for state still
# alive (a@4 in batch 3 for the watermark 23 reached after batch 2), Spark's own results
# depend on the cut, with any provider. After batch 1 (watermark 8) nothing does.
BEFORE_STOP = range(0, 2)
AFTER_STOP = range(2, NUM_BATCHES)
WORKER = harness.JOBS / "restart_worker.py"


def _run_until_stop(spark: Any, query: str, workdir: Path) -> dict[str, Path]:
    """Run ``query`` with spillstore over the first input files until it stops by itself, then
    let the remaining files arrive. Returns the input directories."""
    sources = QUERIES[query].sources
    inputs = harness.write_inputs(workdir, sources, BEFORE_STOP)
    first = harness.run_query(spark, query, inputs, workdir / "checkpoint", workdir / "output",
                              SPILLSTORE)
    assert sum(p["numInputRows"] for p in first.progress) > 0
    harness.write_inputs(workdir, sources, AFTER_STOP)
    return inputs


def _assert_continued(workdir: Path, resumed_batches: list[int]) -> None:
    assert resumed_batches and resumed_batches[0] >= len(BEFORE_STOP), (
        f"the query started over instead of continuing: batches {resumed_batches}")
    assert harness.checkpoint_provider(workdir / "checkpoint") == {SPILLSTORE}


def _assert_same_results(query: str, workdir: Path, reference: Run) -> None:
    outputs = harness.read_outputs(workdir / "output")
    got, expected = harness.all_rows(outputs), harness.all_rows(reference.outputs)
    missing = [r for r in expected if r not in got]
    extra = [r for r in got if r not in expected]
    assert got == expected, f"{query}: missing {missing}, unexpected {extra}"


@pytest.mark.parametrize("query", RESUMABLE)
def test_resume_after_stop(spark: Any, full_run: FullRun, tmp_path: Path, query: str) -> None:
    inputs = _run_until_stop(spark, query, tmp_path)
    resumed = harness.run_query(spark, query, inputs, tmp_path / "checkpoint",
                                tmp_path / "output", SPILLSTORE)
    _assert_continued(tmp_path, [p["batchId"] for p in resumed.progress])
    _assert_same_results(query, tmp_path, full_run(query, DEFAULT))


@pytest.mark.parametrize(
    "query", ["agg_update_window", "join_left_outer", "apply_in_pandas_with_state"])
def test_resume_after_crash_between_state_and_batch_commit(
    spark: Any, full_run: FullRun, tmp_path: Path, query: str
) -> None:
    """Batch 2 commits its state, then the query dies before the batch is committed; the
    restart runs batch 2 again on state version 2 and must replace version 3."""
    inputs = harness.write_inputs(tmp_path, QUERIES[query].sources, range(NUM_BATCHES))
    checkpoint, output = tmp_path / "checkpoint", tmp_path / "output"
    harness.run_query(spark, query, inputs, checkpoint, output, SPILLSTORE, crash_at=2)
    assert harness.committed_batches(checkpoint) == [0, 1]
    harness.run_query(spark, query, inputs, checkpoint, output, SPILLSTORE)
    reference = full_run(query, DEFAULT)
    outputs = harness.read_outputs(output)
    difference = harness.describe_difference(outputs, reference.outputs, "spillstore", "default")
    assert outputs == reference.outputs, f"{query} differs:\n{difference}"


@pytest.fixture(scope="module")
def fresh_jvm(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Each RESUMABLE query run until stopped in this process, then continued by
    restart_worker.py in a new Python process with its own JVM, all in one subprocess."""
    jobs, workdirs = [], {}
    for query in RESUMABLE:
        workdir = tmp_path_factory.mktemp(f"fresh-jvm-{query}-")
        inputs = _run_until_stop(spark, query, workdir)
        workdirs[query] = workdir
        jobs.append({"query": query, "inputs": {k: str(v) for k, v in inputs.items()},
                     "checkpoint": str(workdir / "checkpoint"),
                     "output": str(workdir / "output")})
    jobs_dir = tmp_path_factory.mktemp("fresh-jvm-jobs")
    jobs_file = jobs_dir / "jobs.json"
    jobs_file.write_text(json.dumps(jobs))
    worker = harness.run_job([str(WORKER), str(jobs_file)], jobs_dir, timeout_s=600)
    return {"workdirs": workdirs, "worker": worker}


@pytest.mark.parametrize("query", RESUMABLE)
def test_resume_in_fresh_jvm(fresh_jvm: dict[str, Any], full_run: FullRun, query: str) -> None:
    worker = fresh_jvm["worker"]
    assert worker.returncode == 0, (
        f"restart_worker.py failed ({worker.returncode}):\n{worker.stdout}\n"
        f"{worker.stderr[-6000:]}")
    line = next(line for line in worker.stdout.splitlines() if line.startswith(f"{query}:"))
    workdir = fresh_jvm["workdirs"][query]
    _assert_continued(workdir, json.loads(line.split("batches ", 1)[1]))
    _assert_same_results(query, workdir, full_run(query, DEFAULT))
