"""Writes a release's golden checkpoints: every query of ``harness.QUERIES`` run with
spillstore over the first GOLDEN_BATCHES input batches, its checkpoint and its output kept in
the tests, so that every later version must resume them exactly (test_golden.py).

    python tests/jobs/golden_job.py write tests/golden/<version>

Per query ``<dir>/<query>/checkpoint`` (Spark's logs and spillstore's state files) and
``<dir>/<query>/output`` (``<batch id>.json``, as ``harness.batch_writer`` writes them), and
``<dir>/golden.json``: the spillstore version and Spark version that wrote them and the number
of input batches they hold. Snapshots are taken after every second commit
(``minDeltasForSnapshot=2``,
maintenance every 100 ms), so a checkpoint holds snapshots and journals after them, as one
whose maintenance lags does. No-data batches are off, so batch ``i`` is input file ``i`` and
the resumed query's batches are those of one uninterrupted run.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for harness
import harness  # noqa: E402

GOLDEN_BATCHES = 3
"""Input batches (files) a golden checkpoint holds; the test feeds the rest of the input."""


def write(target: Path) -> None:
    import pyspark
    import spillstore

    if target.exists():
        raise SystemExit(f"{target} exists: a release's golden checkpoints are never rewritten")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        spark = (harness.session_builder(tmp_dir=work / "jvm")
                 .config("spark.sql.streaming.stateStore.minDeltasForSnapshot", "2")
                 .config("spark.sql.streaming.stateStore.maintenanceInterval", "100ms")
                 # No trailing no-data batch: it would run the watermark forward before the
                 # rest of the input, so the resumed query could not match one uninterrupted run.
                 .config("spark.sql.streaming.noDataMicroBatches.enabled", "false")
                 .getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        spark.sparkContext.addPyFile(harness.__file__)
        try:
            staging = work / "golden"
            for query, spec in sorted(harness.QUERIES.items()):
                inputs = harness.write_inputs(work / query, spec.sources, range(GOLDEN_BATCHES))
                harness.run_query(spark, query, inputs, staging / query / "checkpoint",
                                  staging / query / "output", harness.SPILLSTORE)
                time.sleep(1)  # let maintenance snapshot the last versions
                harness.unload_state_stores(spark)
        finally:
            spark.stop()
        (staging / "golden.json").write_text(json.dumps({
            "spillstore": spillstore.__version__, "spark": pyspark.__version__,
            "batches": GOLDEN_BATCHES}, indent=2) + "\n")
        shutil.copytree(staging, target)


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "write":
        raise SystemExit(__doc__)
    write(Path(sys.argv[2]))
