"""Spilling from several tasks at once (issue 12): the live state of a store is changed by its
task thread and by memory-relief rounds, and many stores of one executor spill at the same
time. Each test runs ``aggregation_job.py`` in a fresh JVM with spillstore's default local
dir (under Spark's local dir) and checks every batch, and the final state, against plain
Python.

- The first spill of an executor: in a fresh JVM two tasks spill for the first time at once
  and both create the cold tier's parent directory (a ``mkdirs`` race once failed batch 0).
- Many partitions under a small budget: 16 stores on 4 task threads share a 4 MB budget over
  20 batches, with updates of old (spilled) keys in every batch.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import harness
import pytest
import spillstore
from jobs.aggregation_job import SCHEMAS

JOB = harness.JOBS / "aggregation_job.py"


def _run_job(workdir: Path, batches: list[list[tuple[int, ...]]], **spec: Any
             ) -> tuple[dict[str, Any], harness.Outputs]:
    """Write ``batches`` as the input files and run aggregation_job.py with ``spec``
    (master, partitions, budget, shape, read_state); its report and its outputs. Fails with
    the Java exception's first line if the job or its query failed."""
    input_dir, checkpoint, output = (workdir / d for d in ("input", "checkpoint", "output"))
    harness.write_batches(input_dir, SCHEMAS[spec["shape"]], batches, range(len(batches)))
    report = harness.run_reporting_job(JOB, {
        **spec, "input": str(input_dir), "checkpoint": str(checkpoint), "output": str(output)},
        workdir, timeout_s=600)
    return report, harness.read_outputs(output)


def _evictions(progress: list[dict[str, Any]]) -> int:
    """Entries evicted from the heap over all batches (spillstore's ``spillstoreEvictions``)."""
    return sum(op.evictions for p in progress for op in spillstore.operator_metrics(p))


def _canonical(row: dict[str, Any]) -> str:
    """A row as the job's output files hold it (``harness.canonical`` of a Row)."""
    return json.dumps(row, sort_keys=True)


# --------------------------------------------------------------------------------------------
# The first spill of a fresh executor

FIRST_SPILL_ROWS = 3000  # per batch: values b*R .. (b+1)*R - 1
FIRST_SPILL_BATCHES = 3


def _mod3_expected(batches: list[list[tuple[int, ...]]]) -> harness.Outputs:
    """Update mode output of ``groupBy(value % 3).count()``: every batch touches all three
    keys, each with its count over all batches so far."""
    counts = [0, 0, 0]
    out: harness.Outputs = {}
    for b, rows in enumerate(batches):
        for (value,) in rows:
            counts[value % 3] += 1
        out[b] = sorted(_canonical({"k": k, "count": counts[k]}) for k in range(3))
    return out


@pytest.mark.parametrize("trial", [1, 2])
def test_first_spill_of_a_fresh_jvm(tmp_path: Path, trial: int) -> None:
    """The failure seen in issue 12, run twice (each in a fresh JVM, where the race is): update
    mode count per ``value % 3``, local[2], 5 shuffle partitions, a one-byte budget, the
    default local dir."""
    batches: list[list[tuple[int, ...]]] = [
        [(v,) for v in range(b * FIRST_SPILL_ROWS, (b + 1) * FIRST_SPILL_ROWS)]
        for b in range(FIRST_SPILL_BATCHES)]
    report, outputs = _run_job(tmp_path, batches, master="local[2]", partitions=5, budget="1",
                               shape="mod3_count", read_state=False)
    expected = _mod3_expected(batches)
    assert outputs == expected, (
        f"trial {trial}:\n"
        + harness.describe_difference(outputs, expected, "spillstore", "expected"))
    assert _evictions(report["progress"]) > 0, "the one-byte budget evicted nothing"


# --------------------------------------------------------------------------------------------
# Many partitions, small budget

KEYS = 60_000
BATCHES = 20
NEW_PER_BATCH = KEYS // BATCHES  # keys first seen in each batch
OLD_PER_BATCH = 2_000  # updates of keys seen in earlier batches (or earlier in batch 0)
PARTITIONS = 16


def _many_keys_input(seed: int) -> list[list[tuple[int, ...]]]:
    """BATCHES batches of (key, value): NEW_PER_BATCH new keys and OLD_PER_BATCH updates of
    keys already seen, shuffled, from a seeded generator."""
    rnd = random.Random(seed)
    batches: list[list[tuple[int, ...]]] = []
    for b in range(BATCHES):
        new = range(b * NEW_PER_BATCH, (b + 1) * NEW_PER_BATCH)
        old = [rnd.randrange((b + 1) * NEW_PER_BATCH) for _ in range(OLD_PER_BATCH)]
        rows: list[tuple[int, ...]] = [(k, rnd.randrange(1000)) for k in [*new, *old]]
        rnd.shuffle(rows)
        batches.append(rows)
    return batches


def _count_sum_model(batches: list[list[tuple[int, ...]]]
                     ) -> tuple[harness.Outputs, dict[int, tuple[int, int]]]:
    """Update mode output of count + sum per key, batch by batch, and the final state."""
    state: dict[int, tuple[int, int]] = {}
    out: harness.Outputs = {}
    for b, rows in enumerate(batches):
        touched = set()
        for key, value in rows:
            n, total = state.get(key, (0, 0))
            state[key] = (n + 1, total + value)
            touched.add(key)
        out[b] = sorted(_canonical({"key": k, "n": state[k][0], "total": state[k][1]})
                        for k in touched)
    return out, state


@harness.needs_state_reader
def test_many_partitions_small_budget_exact_state(tmp_path: Path) -> None:
    """16 shuffle partitions on local[4] with memoryBudget=4m over 20 batches: every batch's
    output and the final state read through the state data source equal the model."""
    batches = _many_keys_input(seed=12)
    report, outputs = _run_job(tmp_path, batches, master="local[4]", partitions=PARTITIONS,
                               budget="4m", shape="key_count_sum", read_state=True)
    expected, model = _count_sum_model(batches)
    assert len(model) == KEYS
    assert [p["batchId"] for p in report["progress"]] == list(range(BATCHES))
    assert outputs == expected, harness.describe_difference(
        outputs, expected, "spillstore", "model")

    # The final state, read back from the checkpoint (spillstore's journals and snapshots).
    rows = json.loads((tmp_path / "state.json").read_text())
    state: dict[int, tuple[int, int]] = {}
    for _, (key,), (n, total) in rows:
        assert key not in state, f"key {key} twice in the state"
        state[key] = (n, total)
    wrong = {k: (state.get(k), v) for k, v in model.items() if state.get(k) != v}
    extra = sorted(set(state) - set(model))
    assert not wrong and not extra, (
        f"state differs from the model for {len(wrong)} keys (state, model), e.g. "
        f"{dict(list(wrong.items())[:10])}; keys not in the model: {extra[:10]}")
    assert {partition for partition, _, _ in rows} == set(range(PARTITIONS))

    # Spilling really happened, and updates read spilled keys back (else the test would prove
    # nothing about the spill tier).
    progress = report["progress"]
    evictions = _evictions(progress)
    cold_loads = sum(op.cold_loads for p in progress for op in spillstore.operator_metrics(p))
    cold = sum(op.cold_entries for op in spillstore.operator_metrics(progress))
    print(f"many partitions: {report['seconds']} s in the job, {evictions} evictions, "
          f"{cold_loads} cold loads, {cold} cold entries at the end")
    assert evictions > 0 and cold > 0, f"nothing spilled: {evictions} evictions, {cold} cold"
    assert cold_loads > 0, "no update read a spilled key back"
