"""A streaming ``applyInPandasWithState`` count per key with spillstore in a fresh JVM: for
test_e2e_pandas_state_threads.py.

    python tests/jobs/pandas_state_job.py SPEC.json

SPEC.json: ``{"budget" (a spillstore memoryBudget), "input", "checkpoint", "report"}``. The
input is ``key LONG`` (JSON lines, file i is batch i); the query, on ``local[2]`` with 2
shuffle partitions, counts the rows of each key in its state and outputs ``(key, n)`` for
every key of a batch (update mode, no timeout).

Each batch's output is checked inside Spark, in one aggregation of the ``foreachBatch``
DataFrame (a second action would run the stateful operator again): its rows, distinct keys,
smallest and largest key and count, and up to ten rows whose count is not
``rows_per_key * (batch + 1)``, where every key comes ``rows_per_key`` times per batch. The
report (JSON) holds those per batch, the error (the Java exception's first line, or null),
the message, the progress of every batch and the seconds taken.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for harness
import harness  # noqa: E402

ROWS_PER_KEY = 2  # every key's rows in each batch
TIMEOUT_S = 1500


def count_rows(key: tuple[Any, ...], pdfs: Iterator[Any], state: Any) -> Iterator[Any]:
    """applyInPandasWithState function: the key's running row count (its state), output
    every batch. Defined in the job's ``__main__``, so cloudpickle ships it by value."""
    import pandas as pd

    n = state.get[0] if state.exists else 0
    for pdf in pdfs:
        n += len(pdf)
    state.update((n,))
    yield pd.DataFrame({"key": [key[0]], "n": [n]})


def check_batch(summaries: list[dict[str, Any]]) -> Any:
    """A ``foreachBatch`` function appending the batch's summary to ``summaries``."""
    def check(batch_df: Any, batch_id: int) -> None:
        from pyspark.sql import functions as F

        expected = ROWS_PER_KEY * (batch_id + 1)
        wrong = F.when(F.col("n") != expected, F.struct("key", "n"))
        row = batch_df.agg(
            F.count("*").alias("rows"), F.count_distinct("key").alias("keys"),
            F.min("key").alias("min_key"), F.max("key").alias("max_key"),
            F.min("n").alias("min_n"), F.max("n").alias("max_n"),
            F.slice(F.collect_list(wrong), 1, 10).alias("wrong"),
        ).first()
        summary = row.asDict(recursive=True)
        summaries.append({"batch": batch_id, "expected_n": expected, **summary})

    return check


def main(spec_file: str) -> int:
    """Run the query of SPEC.json in a new session and write the report; 0 unless the
    session itself failed (the query's failure is in the report)."""
    spec = json.loads(Path(spec_file).read_text())
    report: dict[str, Any] = {"error": None, "message": None, "progress": [], "batches": []}
    started = time.monotonic()
    spark = (harness.session_builder("local[2]", partitions=2, memoryBudget=spec["budget"])
             .appName("spillstore-pandas-state-job").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    try:
        counts = (
            spark.readStream.schema("key LONG").option("maxFilesPerTrigger", 1)
            .json(spec["input"])
            .groupBy("key")
            .applyInPandasWithState(count_rows, outputStructType="key LONG, n LONG",
                                    stateStructType="n LONG", outputMode="update",
                                    timeoutConf="NoTimeout")
        )
        handle = (
            counts.writeStream.outputMode("update")
            .foreachBatch(check_batch(report["batches"]))
            .option("checkpointLocation", spec["checkpoint"])
            .trigger(availableNow=True)
            .start()
        )
        harness.await_query(handle, report, TIMEOUT_S)
    finally:
        harness.write_job_report(spark, report, spec["report"], started)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
