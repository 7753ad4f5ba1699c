"""State ten and more times the memory budget, with a 1 GB driver: completes without OOM and
every batch's counts are exact (see spill_job.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

JOB = Path(__file__).with_name("spill_job.py")
KEYS = int(os.environ.get("SPILLSTORE_HEAVY_KEYS", 10_000_000))
ROWS_PER_BATCH = 1_000_000
BATCHES = KEYS // ROWS_PER_BATCH + 2  # the last two batches update keys held in RocksDB
BUDGET = "64m"
ENTRY_BYTES = 120  # heap bytes of one such key (docs/design.md), to state the ratio


@pytest.mark.heavy
def test_state_far_beyond_the_budget_completes_exactly() -> None:
    result = subprocess.run(
        [sys.executable, str(JOB), str(KEYS), str(ROWS_PER_BATCH), str(BATCHES), BUDGET, "1g"],
        capture_output=True, text=True, timeout=3600,
        env={**os.environ, "PYSPARK_PYTHON": sys.executable},
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-8000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    print(json.dumps(report, indent=2))
    assert report["errors"] == []
    assert report["state_rows"] == KEYS
    assert KEYS * ENTRY_BYTES >= 10 * 64 * (1 << 20), "the state must be >= 10x the budget"
    assert report["cold_entries"] >= KEYS - report["heap_entries"] > 0
    assert report["evictions"] > 0
