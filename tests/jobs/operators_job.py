"""Run every query under test with spillstore in a fresh JVM, at one memory budget.

    python tests/jobs/operators_job.py SPEC.json

SPEC.json: ``{"workdir", "budget" (a spillstore memoryBudget, or null for the default),
"queries": [name, ...]}``. The session is the tests' own (``harness.start_session``: local[2],
2 shuffle partitions, spillstore's default local dir) with the budget set before the JVM
starts, so the first stores of the JVM, and its first spill, are the first query's. Each query
runs in turn over all input batches (``harness.run_query``) in ``<workdir>/<query>/``; a
failed query is recorded and the next one runs. After each query the report so far is
written to ``<workdir>/report.json``: per query its seconds, its error (the Java exception's
first line, or null), the batches run and the spillstore evictions and cache misses summed
over them; the query's progress goes to ``<workdir>/<query>/progress.json``.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for harness
import harness  # noqa: E402


def run_one(spark: Any, workdir: Path, query: str,
            options: dict[str, str] | None = None) -> dict[str, Any]:
    """Run ``query`` in ``workdir/query`` with spillstore (``options``: spillstore options for
    this run, see ``harness.run_query``); what it did, for the report."""
    qdir = workdir / query
    inputs = harness.write_inputs(qdir, harness.QUERIES[query].sources,
                                  range(harness.NUM_BATCHES))
    started = time.monotonic()
    result: dict[str, Any] = {"error": None, "batches": [], "evictions": None,
                              "cache_misses": None}
    try:
        run = harness.run_query(spark, query, inputs, qdir / "checkpoint", qdir / "output",
                                harness.SPILLSTORE, options=options)
        # progress dicts hold UUIDs (the query's ids)
        (qdir / "progress.json").write_text(json.dumps(run.progress, default=str))
        result["batches"] = [p["batchId"] for p in run.progress]
        result["evictions"] = harness.metric_totals(run.progress, "spillstoreEvictions")
        result["cache_misses"] = harness.metric_totals(run.progress, "spillstoreCacheMisses")
    except Exception as e:  # run_query's AssertionError: the query failed or did not finish
        result["error"] = harness.java_error(str(e))
        result["message"] = str(e)[:6000]
    result["seconds"] = round(time.monotonic() - started, 1)
    return result


def main(spec_file: str) -> int:
    """Run the queries of SPEC.json in turn in a new session; 0 when the session ran them all
    (each query's own success or failure is in the report)."""
    spec = json.loads(Path(spec_file).read_text())
    workdir = Path(spec["workdir"])
    options = {} if spec["budget"] is None else {"memoryBudget": spec["budget"]}
    started = time.monotonic()
    # harness.start_session, with the budget in the SparkConf the JVM starts with
    spark = harness.session_builder(**options).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    spark.sparkContext.addPyFile(harness.__file__)
    report: dict[str, Any] = {"session_start_s": round(time.monotonic() - started, 1),
                              "queries": {}}
    try:
        for query in spec["queries"]:
            report["queries"][query] = run_one(spark, workdir, query)
            print(f"{query}: {report['queries'][query]}", file=sys.stderr, flush=True)
            tmp = workdir / ".report.json.tmp"
            tmp.write_text(json.dumps(report))
            tmp.replace(workdir / "report.json")
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
