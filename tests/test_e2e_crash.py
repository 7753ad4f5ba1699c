"""kill -9 of a running streaming query's JVM (and its Python driver) in a subprocess, at a
seeded point mid-stream; the query restarted from its checkpoint ends with exactly the results
of an uninterrupted run with Spark's default provider."""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import harness
import pytest
from harness import DEFAULT, NUM_BATCHES, QUERIES, SPILLSTORE, Run

FullRun = Callable[[str, str], Run]
WORKER = harness.JOBS / "restart_worker.py"
# (query, batches committed before the kill, seed of the delay after that into the next batch)
TRIALS = [("agg_update_window", 1, 1), ("join_left_outer", 2, 2), ("session_window", 3, 3)]


def _committed(checkpoint: Path) -> list[int]:
    """Committed batches so far (none before the query creates its commit log)."""
    return harness.committed_batches(checkpoint) if (checkpoint / "commits").is_dir() else []


@pytest.mark.heavy
@pytest.mark.parametrize(("query", "target", "seed"), TRIALS)
def test_kill9_mid_stream_then_restart(
    spark: Any, full_run: FullRun, tmp_path: Path, query: str, target: int, seed: int
) -> None:
    rnd = random.Random(seed)
    inputs = harness.write_inputs(tmp_path, QUERIES[query].sources, range(NUM_BATCHES))
    checkpoint, output = tmp_path / "checkpoint", tmp_path / "output"
    jobs = tmp_path / "jobs.json"
    jobs.write_text(json.dumps([{"query": query, "inputs": {k: str(v) for k, v in inputs.items()},
                                 "checkpoint": str(checkpoint), "output": str(output)}]))
    # The killed JVM cannot delete its temporary files (Spark's local dirs, the cold tiers in
    # them, the native libraries it unpacked): they go to a directory of the test's.
    worker_tmp = tmp_path / "worker-tmp"
    worker_tmp.mkdir()
    worker = subprocess.Popen([sys.executable, str(WORKER), str(jobs)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              env={**os.environ, **harness.jvm_tmp_env(worker_tmp)})
    try:
        deadline = time.monotonic() + 300
        while len(_committed(checkpoint)) < target:
            assert worker.poll() is None, "the worker ended before the kill"
            assert time.monotonic() < deadline, "no progress"
            time.sleep(0.05)
        time.sleep(rnd.uniform(0, 0.5))  # somewhere into the next batch
        # The JVM first: no shutdown hook, no clean close. Short-lived children (Spark's Python
        # workers) may be gone by the time their turn comes; the JVM itself must have been hit.
        victims = harness.descendants(worker.pid)
        assert victims, "the worker has no JVM to kill"
        os.kill(victims[0], signal.SIGKILL)
        for pid in victims[1:]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        worker.send_signal(signal.SIGKILL)
    finally:
        if worker.poll() is None:  # the test failed before the kill
            for pid in harness.descendants(worker.pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            worker.kill()
        worker.wait(60)
        shutil.rmtree(worker_tmp, ignore_errors=True)
    killed_after = _committed(checkpoint)
    assert len(killed_after) < NUM_BATCHES, f"the query finished before the kill: {killed_after}"
    resumed = harness.run_query(spark, query, inputs, checkpoint, output, SPILLSTORE)
    assert harness.checkpoint_provider(checkpoint) == {SPILLSTORE}
    reference = full_run(query, DEFAULT)
    outputs = harness.read_outputs(output)
    difference = harness.describe_difference(outputs, reference.outputs, "spillstore", "default")
    print(f"{query}: SIGKILL after committed batches {killed_after}; resumed batches "
          f"{[p['batchId'] for p in resumed.progress]}; results equal the default provider's")
    # Where the kill lands decides how the resumed query cuts the remaining input into batches
    # (batch ids can shift by one), so compare every row output, batch boundaries forgotten.
    assert harness.all_rows(outputs) == harness.all_rows(reference.outputs), (
        f"{query}: killed after batches {killed_after}, resumed with "
        f"{[p['batchId'] for p in resumed.progress]}:\n{difference}")
