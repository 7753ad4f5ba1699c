"""``applyInPandasWithState`` uses one store from two threads on Spark 3.5 (issue 28): its
input iterator, which the Python runner's writer thread consumes, reads each group's state,
while the task thread writes the state Python returns. spillstore's heap tier is not
thread-safe, and concurrent reads and writes under a small budget (reads promote spilled
entries, writes evict) corrupted it in the second batch: ``ArrayIndexOutOfBoundsException``
in the heap pages, or a page left with live bytes after its evacuation. It runs on 3.5 only:
on 4.x one thread makes every call (unless 4.3's ``spark.python.udf.pipelined.enabled`` is
on, which the JVM suite ``PipelinedPythonSuite`` covers with the same access pattern), and
the run costs minutes of Python.

The load is the one that failed: 100k keys and 100k rows per batch passed on the broken
code, so the test has 400k keys, each twice per batch (800k rows, shuffled), over 2 shuffle
partitions with ``memoryBudget=1m``, for two batches (the second is the one that failed).
Its cost is Python's, per group (400k groups a batch): minutes. The query runs in a fresh JVM
(``pandas_state_job.py``), as the budget is executor-wide, and checks each batch's output
inside Spark: every key once, with its exact count. About 13 minutes on 2 cores, so it is a
soak test (``make test-soak``); in ``make test`` the JVM suites that drive the same access
pattern with real threads (``SpillStoreTwoThreadSuite`` on 3.5, ``PipelinedPythonSuite`` on 4.3)
guard the race.
"""

from __future__ import annotations

from pathlib import Path

import harness
import pytest
import spillstore
from jobs.pandas_state_job import ROWS_PER_KEY

pytestmark = [pytest.mark.soak,
              pytest.mark.skipif(harness.SPARK_LINE != (3, 5),
                                 reason="only Spark 3.5 reads state on a second thread")]

JOB = harness.JOBS / "pandas_state_job.py"
KEYS = 400_000
BATCHES = 2


def _write_input(input_dir: Path, seed: int) -> None:
    """BATCHES JSON-lines files of ``key LONG``, each every key ROWS_PER_KEY times, shuffled.
    Every batch holds the same rows, so the order the file source takes them in does not
    matter (harness.write_batches, which orders them, takes ten times as long here)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    input_dir.mkdir(parents=True)
    for b in range(BATCHES):
        keys = rng.permutation(np.tile(np.arange(KEYS), ROWS_PER_KEY))
        text = "".join(map('{{"key":{}}}\n'.format, keys.tolist()))
        (input_dir / f"part-{b:04d}.json").write_text(text)


def test_apply_in_pandas_with_state_counts_exact_under_a_small_budget(tmp_path: Path) -> None:
    """Count per key over 2 batches of 800k rows (400k keys) at memoryBudget=1m: every
    batch outputs each key once with count ``ROWS_PER_KEY * (batch + 1)``, and spilled state
    was read back."""
    input_dir, checkpoint = tmp_path / "input", tmp_path / "checkpoint"
    _write_input(input_dir, seed=28)
    report = harness.run_reporting_job(
        JOB, {"budget": "1m", "input": str(input_dir), "checkpoint": str(checkpoint)},
        tmp_path, timeout_s=1800)
    print(f"batches: {report['batches']}")

    expected = [{"batch": b, "expected_n": ROWS_PER_KEY * (b + 1), "rows": KEYS, "keys": KEYS,
                 "min_key": 0, "max_key": KEYS - 1, "min_n": ROWS_PER_KEY * (b + 1),
                 "max_n": ROWS_PER_KEY * (b + 1), "wrong": []} for b in range(BATCHES)]
    assert report["batches"] == expected, (
        "the batches' outputs differ from the model (wrong: up to ten rows with another "
        "count):\n" + "\n".join(f"  {actual}" for actual in report["batches"])
        + "\nexpected:\n" + "\n".join(f"  {model}" for model in expected))

    # Reads promoted spilled state (else the test proves nothing about the race it is for).
    ops = [op for p in report["progress"] for op in spillstore.operator_metrics(p)]
    evictions, cold_loads = sum(op.evictions for op in ops), sum(op.cold_loads for op in ops)
    print(f"{report['seconds']} s in the job, {evictions} evictions, {cold_loads} cold loads")
    assert evictions > 0 and cold_loads > 0, (
        f"nothing spilled and read back: {evictions} evictions, {cold_loads} cold loads")
