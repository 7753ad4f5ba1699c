"""State ten and more times the memory budget, with a 1 GB driver: completes without OOM and
every batch's counts are exact (see spill_job.py).

``SPILLSTORE_HEAVY_KEYS`` and ``SPILLSTORE_HEAVY_BUDGET`` (a spillstore memoryBudget such as
``64m``) change the size, e.g. for a quicker run at the same ratio: the state must still
measure at least ten times the budget, or the test fails."""

from __future__ import annotations

import json
import os
from pathlib import Path

import harness
import pytest

JOB = harness.JOBS / "spill_job.py"
KEYS = int(os.environ.get("SPILLSTORE_HEAVY_KEYS", 10_000_000))
ROWS_PER_BATCH = min(KEYS, 1_000_000)
BATCHES = KEYS // ROWS_PER_BATCH + 2  # the last two batches update keys held in RocksDB
BUDGET = os.environ.get("SPILLSTORE_HEAVY_BUDGET", "64m")
_UNITS = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}


def _bytes(size: str) -> int:
    """A size such as ``64m`` in bytes."""
    unit = size[-1].lower()
    return int(size[:-1]) * _UNITS[unit] if unit in _UNITS else int(size)


@pytest.mark.heavy
def test_state_far_beyond_the_budget_completes_exactly(tmp_path: Path) -> None:
    result = harness.run_job(
        [str(JOB), str(KEYS), str(ROWS_PER_BATCH), str(BATCHES), BUDGET, "1g"], tmp_path,
        timeout_s=3600)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-8000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    print(json.dumps(report, indent=2))
    assert report["errors"] == []
    assert report["state_rows"] == KEYS
    assert report["cold_entries"] >= KEYS - report["heap_entries"] > 0
    assert report["evictions"] > 0

    # The state, measured, is at least ten times the budget: every row costs on the heap what
    # the rows still there cost on average (spillstore's own estimate of its heap bytes).
    budget = _bytes(BUDGET)
    assert 0 < report["budget_bytes"] <= budget, f"budget in force {report['budget_bytes']}"
    bytes_per_row = report["heap_bytes"] / report["heap_entries"]
    state_bytes = report["state_rows"] * bytes_per_row
    print(f"state {state_bytes / (1 << 20):.0f} MiB ({report['state_rows']} rows x "
          f"{bytes_per_row:.1f} B measured on the heap) = {state_bytes / budget:.1f}x the "
          f"budget; on disk {report['cold_bytes'] / (1 << 20):.0f} MiB in RocksDB")
    assert state_bytes >= 10 * budget, (
        f"the state ({state_bytes:.0f} B) must be >= 10x the budget ({budget} B)")
