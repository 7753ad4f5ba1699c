"""Steps of the remote-checkpoint tests (test_e2e_remote.py) in one fresh JVM whose session has
the storage's configuration (hdfs://, s3a://: endpoint, credentials, jars).

    python tests/jobs/remote_job.py SPEC.json

SPEC.json: ``{"conf": {key: value}, "report", "steps": [step, ...]}``. ``conf`` is added to
``harness.session_builder``'s (``spark.jars`` is appended to, the spillstore jar stays). The
steps run in turn; each records ``{"error", "message", ...}`` under its ``name`` in the report,
which is rewritten after every step (a job killed mid-step leaves the steps before it). Steps:

- ``run``: ``{"query", "provider", "inputs": {source: dir}, "checkpoint" (a URI), "output"}``
  with ``harness.run_query``; records the batches run, the providers the operators reported,
  the providers the offset log records and the committed batches. With ``"pause": {"batch",
  "dir"}``, before that batch's rows are collected (its state committed) the job creates
  ``<dir>/paused`` (holding its pid) and waits for ``<dir>/go``: the test acts in between.
- ``wait``: ``{"file"}``: wait until it exists (the test has done something).
- ``read_state``: ``{"checkpoint", "operators": [id, ...]}``: each operator's state rows
  through the state data source (Spark 4.0+), canonical and sorted, as ``state``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for harness
import harness  # noqa: E402
import spillstore  # noqa: E402

WAIT_S = 180


def _wait_for(file: Path) -> None:
    deadline = time.monotonic() + WAIT_S
    while not file.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{file} did not appear within {WAIT_S} s")
        time.sleep(0.05)


def _pausing(pause: dict[str, Any]) -> Any:
    """A ``before_batch`` hook for ``harness.run_query`` that holds ``pause["batch"]``."""
    where = Path(pause["dir"])

    def before(batch_id: int) -> None:
        if batch_id == pause["batch"]:
            # The test may kill -9 us. Renamed into place: the test reads the pid as soon as the
            # name exists, and a half-written file once made its watcher die and the batch wait
            # out WAIT_S with the storage up.
            (where / "paused.tmp").write_text(str(os.getpid()))
            os.replace(where / "paused.tmp", where / "paused")
            _wait_for(where / "go")

    return before


def _run(spark: Any, step: dict[str, Any]) -> dict[str, Any]:
    pause = step.get("pause")
    run = harness.run_query(spark, step["query"], {s: Path(d) for s, d in step["inputs"].items()},
                            step["checkpoint"], Path(step["output"]), step["provider"],
                            before_batch=_pausing(pause) if pause else None)
    return {"batches": [p["batchId"] for p in run.progress],
            "ran_on": sorted({op.provider or "?"
                              for op in spillstore.operator_metrics(run.progress)}),
            "recorded": sorted(harness.checkpoint_provider(step["checkpoint"])),
            "committed": harness.committed_batches(step["checkpoint"])}


def _read_state(spark: Any, step: dict[str, Any]) -> dict[str, Any]:
    state = {}
    for op in step["operators"]:
        rows = (spark.read.format("statestore").option("path", step["checkpoint"])
                .option("operatorId", op).load().collect())
        state[str(op)] = sorted(harness.canonical(r) for r in rows)
    return {"state": state}


def _step(spark: Any, step: dict[str, Any]) -> dict[str, Any]:
    if step["op"] == "run":
        return _run(spark, step)
    if step["op"] == "wait":
        _wait_for(Path(step["file"]))
        return {}
    if step["op"] == "read_state":
        return _read_state(spark, step)
    raise ValueError(f"unknown step {step['op']}")


def main(spec_file: str) -> int:
    spec = json.loads(Path(spec_file).read_text())
    started = time.monotonic()
    builder = harness.session_builder()
    for key, value in spec["conf"].items():
        if key == "spark.jars":
            value = f"{builder._options['spark.jars']},{value}"
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    spark.sparkContext.addPyFile(harness.__file__)
    report: dict[str, Any] = {"session_start_s": round(time.monotonic() - started, 1),
                              "steps": {}}
    try:
        for step in spec["steps"]:
            step_started = time.monotonic()
            result: dict[str, Any] = {"error": None, "message": None}
            try:
                result.update(_step(spark, step))
            except Exception as e:  # recorded; the test decides whether it was expected
                result["error"], result["message"] = harness.java_error(str(e)), str(e)[:6000]
            result["seconds"] = round(time.monotonic() - step_started, 1)
            report["steps"][step["name"]] = result
            print(f"{step['name']}: {result}", file=sys.stderr, flush=True)
            tmp = Path(spec["report"]).with_suffix(".tmp")
            tmp.write_text(json.dumps(report))
            tmp.replace(spec["report"])
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
