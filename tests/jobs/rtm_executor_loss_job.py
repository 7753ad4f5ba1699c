"""A real-time mode aggregation (Spark 4.3) on spillstore on ``local-cluster[2,2,1024]`` (two
executor JVMs), one executor SIGKILLed while a real-time batch runs; the query is restarted and
ends with exactly the state plain Python computes from its input.

    python tests/jobs/rtm_executor_loss_job.py SPEC.json

SPEC.json: ``{"workdir", "report", "budget" (a spillstore memoryBudget)}``. The source is
Spark's ``LowLatencyMemoryStream`` (its records live on the driver and reach the executors'
tasks by RPC, so it runs on a cluster); the sink a Python ``foreach`` writer, one file per task
and batch under ``<workdir>/output``. As docs/checkpoint-v2.md says, spillstore runs in
real-time mode by a micro-batch first with the provider named and checkpoint format v2, then a
restart in real-time mode with no provider named (Spark refuses one named at ``start()``).

Real-time mode runs every task of a batch at once and does not retry a lost one: the executor's
loss fails the query (``ExecutorLostFailure``), which is restarted from its checkpoint as a user
(or a job scheduler) would. The report (JSON, ``harness.run_reporting_job``) holds the kill,
what Spark recorded about the executor and the first run's failure, the progress of both runs,
the rows the sink received and the state the last committed batch left (Spark's state data
source), for the test (tests/heavy/test_executor_loss.py) to compare with ``model``.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for harness
import harness  # noqa: E402

from jobs.executor_loss_job import (  # noqa: E402
    busy_executors,
    executor_processes,
    spark_executors,
    wait_for_executors,
)

KEYS = 300
ROUNDS = 16
ROWS_PER_ROUND = 600
# Rounds fed in the micro-batch first batch, and before the kill (each round 0.5 s apart).
MICRO_BATCH_ROUNDS = 2
KILL_AFTER_RTM_BATCHES = 2
RTM_BATCH = "2 seconds"
CHECKPOINT_FORMAT_CONF = "spark.sql.streaming.stateStore.checkpointFormatVersion"


def round_keys(r: int) -> list[str]:
    """Round ``r``'s records: keys drawn with repetition so that rounds share keys."""
    return [f"k{(r * 7919 + i * 31) % KEYS}" for i in range(ROWS_PER_ROUND)]


def model() -> dict[str, int]:
    """Each key's count over every round: what the state must end with."""
    counts: dict[str, int] = {}
    for r in range(ROUNDS):
        for k in round_keys(r):
            counts[k] = counts.get(k, 0) + 1
    return counts


class FileSink:
    """A foreach writer: each (partition, batch) task attempt writes its rows to a file of its
    own, so a failed attempt's rows stay beside its retry's."""

    def __init__(self, out: str) -> None:
        self.out = out

    def open(self, partition_id: int, epoch_id: int) -> bool:
        name = f"{epoch_id}-{partition_id}-{uuid.uuid4().hex}.jsonl"
        self.file = open(os.path.join(self.out, name), "w")  # noqa: SIM115
        return True

    def process(self, row: Any) -> None:
        self.file.write(json.dumps({"key": row["value"], "count": row["count"]}) + "\n")

    def close(self, error: Any) -> None:
        self.file.close()


def wait_until(condition: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} not within {timeout_s} s")
        time.sleep(0.1)


def sink_rows(output: Path) -> list[dict[str, Any]]:
    """Every whole row at the sink. A file's last line without its newline is not read: a
    running task is writing it (the sink is read while the query runs), or the kill cut it."""
    return [json.loads(line) for f in sorted(output.iterdir())
            for line in f.read_text().split("\n")[:-1]]


def max_counts(output: Path) -> dict[str, int]:
    best: dict[str, int] = {}
    for row in sink_rows(output):
        best[row["key"]] = max(best.get(row["key"], 0), row["count"])
    return best


def main(spec_file: str) -> int:
    spec = json.loads(Path(spec_file).read_text())
    workdir = Path(spec["workdir"])
    checkpoint, output = workdir / "checkpoint", workdir / "output"
    output.mkdir(parents=True)
    harness.use_spark_home(workdir)
    started = time.monotonic()
    spark = (
        # Real-time mode runs the source's task and both stores' tasks at once: 3 of 4 slots.
        harness.session_builder("local-cluster[2,2,1024]", partitions=2,
                                memoryBudget=spec["budget"])
        .appName("spillstore-rtm-executor-loss")
        .config("spark.executor.memory", "512m")
        .config("spark.local.dir", str(workdir / "local"))
        .config("spark.shuffle.io.maxRetries", "0")
        .config(CHECKPOINT_FORMAT_CONF, "2")
        .config("spark.sql.streaming.realTimeMode.minBatchDuration", "1000")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    report: dict[str, Any] = {"error": None, "message": None}
    try:
        run(spark, checkpoint, output, report)
    except Exception as e:
        report["error"], report["message"] = harness.java_error(str(e)), str(e)[:6000]
        raise
    finally:
        harness.write_job_report(spark, report, spec["report"], started)
    return 0


def run(spark: Any, checkpoint: Path, output: Path, report: dict[str, Any]) -> None:
    from pyspark.sql import DataFrame

    jvm = spark._jvm
    stream = jvm.org.apache.spark.sql.execution.streaming.sources.LowLatencyMemoryStream.apply(
        spark._jsparkSession, 1, jvm.org.apache.spark.sql.Encoders.STRING())

    def feed(r: int) -> None:
        stream.addData(jvm.org.apache.spark.api.python.PythonUtils.toSeq(round_keys(r)))

    counts = DataFrame(stream.toDF(), spark).groupBy("value").count()
    wait_for_executors(spark, 2)
    app = spark.sparkContext.applicationId
    before = executor_processes(app)
    report["executors_before"] = sorted(before)

    # 1. A micro-batch with spillstore named and checkpoint format v2.
    for r in range(MICRO_BATCH_ROUNDS):
        feed(r)
    first = (counts.writeStream.outputMode("update").foreach(FileSink(str(output)))
             .option("checkpointLocation", str(checkpoint)).start())
    first.processAllAvailable()
    first.stop()
    spark.conf.unset(harness.PROVIDER_CONF)

    def start_real_time() -> Any:
        return (counts.writeStream.outputMode("update").foreach(FileSink(str(output)))
                .option("checkpointLocation", str(checkpoint))
                .trigger(realTime=RTM_BATCH).start())

    def committed() -> int:
        return len(harness.committed_batches(checkpoint))

    # 2. Real time, fed while it runs; an executor killed once enough batches committed.
    query = start_real_time()
    fed = MICRO_BATCH_ROUNDS
    base = committed()
    while committed() < base + KILL_AFTER_RTM_BATCHES and fed < ROUNDS // 2:
        feed(fed)
        fed += 1
        time.sleep(0.5)
    wait_until(lambda: committed() >= base + KILL_AFTER_RTM_BATCHES, 60,
               f"{KILL_AFTER_RTM_BATCHES} real-time batches committed")
    # An executor running one of the batch's tasks.
    busy: list[str] = []

    def find_busy() -> bool:
        busy[:] = busy_executors(spark, before)
        return bool(busy)

    wait_until(find_busy, 30, "an executor running a task")
    victim = busy[0]
    report["committed_at_kill"] = harness.committed_batches(checkpoint)
    report["query_active_at_kill"] = query.isActive
    os.kill(before[victim], signal.SIGKILL)
    report.update(victim=victim, pid=before[victim], fed_before_kill=fed)
    while fed < ROUNDS:
        feed(fed)
        fed += 1
    expected = model()
    wait_until(lambda: not query.isActive or max_counts(output) == expected, 120,
               "the first run's end or every key's full count at the sink")
    report["first_run_error"] = str(query.exception())[:3000] if query.exception() else None
    report["first_run_progress"] = json.loads(json.dumps(query.recentProgress, default=str))
    if not query.isActive:
        # 3. Real-time mode does not retry a lost task: restart from the checkpoint.
        wait_for_executors(spark, 2)
        query = start_real_time()
        wait_until(lambda: max_counts(output) == expected or not query.isActive, 120,
                   "every key's full count at the sink")
    after = committed()
    wait_until(lambda: committed() > after or not query.isActive, 60,
               "the batch that output the last counts committed")
    query.stop()
    report["last_run_error"] = str(query.exception()) if query.exception() else None
    report["last_run_progress"] = json.loads(json.dumps(query.recentProgress, default=str))
    report["spark_executors"] = spark_executors(spark)
    report["sink_max_counts"] = max_counts(output)
    report["sink_rows"] = len(sink_rows(output))
    state = spark.read.format("statestore").load(str(checkpoint))
    report["state"] = {r["key"]["value"]: r["value"]["count"] for r in state.collect()}
    report["provider_in_offset_log"] = sorted(harness.checkpoint_provider(checkpoint))
    report["journals"] = sorted(str(p.relative_to(checkpoint)) for p in
                                (checkpoint / "state").rglob("*.journal"))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
