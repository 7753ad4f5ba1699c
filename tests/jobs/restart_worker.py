"""Continue streaming queries from their checkpoints in a fresh Python process and JVM.

Run by test_e2e_restart.py as ``python jobs/restart_worker.py JOBS.json``; JOBS.json is a list of
``{"query", "inputs": {source: dir}, "checkpoint", "output"}``. Each query runs with
spillstore (a checkpoint keeps its provider anyway) until it has read every input file,
writing its batches to ``output`` like the runs in the test process. Exits non-zero on the
first failure.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for harness
import harness  # noqa: E402


def main(jobs_file: str) -> int:
    jobs = json.loads(Path(jobs_file).read_text())
    spark = harness.start_session()
    try:
        for job in jobs:
            run = harness.run_query(
                spark,
                job["query"],
                {source: Path(d) for source, d in job["inputs"].items()},
                Path(job["checkpoint"]),
                Path(job["output"]),
                harness.SPILLSTORE,
            )
            print(f"{job['query']}: batches {[p['batchId'] for p in run.progress]}", flush=True)
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
