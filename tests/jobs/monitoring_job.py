"""A spilling streaming aggregation with spillstore's plugin and Spark's PrometheusServlet and
JMX sinks, in a fresh JVM: for test_e2e_monitoring.py.

    python tests/jobs/monitoring_job.py WORKDIR

The query runs on (processing-time trigger) while two input files arrive (two batches); then
the job scrapes the driver's ``/metrics/prometheus`` and reads the ``metrics`` JMX domain of
the platform MBean server; then two more files, and both are read again. Before each reading
it waits until nothing moves any more (see ``settle``), so both sinks and both sources
describe the same moment. Prints one JSON line:
``{"readings": [{"prometheus": {...}, "jmx": {...}, "progress": [...]}, ...]}``; a metric's
key is its name as each sink shows it.
"""

from __future__ import annotations

import json
import re
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for harness
import harness  # noqa: E402

BUDGET = "256k"
REPORT_INTERVAL_MS = 200
KEYS_PER_BATCH = 4000
NAMESPACE = "app"  # spark.metrics.namespace: metric names without the random application id
# name{labels} value, as PrometheusServlet writes each line
_PROMETHEUS_LINE = re.compile(r"^(\S+?)\{[^}]*\}\s+(\S+)$")


def builder_java_options() -> str:
    return str(harness.session_builder()._options["spark.driver.extraJavaOptions"])


def session(workdir: Path) -> Any:
    builder = (
        harness.session_builder("local[2]", partitions=2, memoryBudget=BUDGET,
                                metricsReportInterval=f"{REPORT_INTERVAL_MS}ms")
        .config("spark.ui.enabled", "true")
        # py4j reflects on the platform MBean server's class, which java.management hides
        .config("spark.driver.extraJavaOptions", builder_java_options() +
                " --add-opens=java.management/com.sun.jmx.mbeanserver=ALL-UNNAMED")
        .config("spark.ui.port", "0")
        .config("spark.metrics.namespace", NAMESPACE)
        .config("spark.metrics.conf.*.sink.prometheusServlet.class",
                "org.apache.spark.metrics.sink.PrometheusServlet")
        .config("spark.metrics.conf.*.sink.prometheusServlet.path", "/metrics/prometheus")
        .config("spark.metrics.conf.*.sink.jmx.class", "org.apache.spark.metrics.sink.JmxSink")
        # snapshots (and so snapshot bytes) within the run
        .config("spark.sql.streaming.stateStore.maintenanceInterval", "1s")
        .config("spark.sql.streaming.stateStore.minDeltasForSnapshot", "1")
    )
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def batch_keys(batch: int) -> list[tuple[int]]:
    """New keys every batch (the state outgrows the budget) and the previous batch's keys again
    (hits or cold loads)."""
    keys = range(max(0, (batch - 1) * KEYS_PER_BATCH), (batch + 1) * KEYS_PER_BATCH)
    return [(k,) for k in keys]


DATA = [batch_keys(b) for b in range(4)]


def start(spark: Any, input_dir: Path, checkpoint: Path) -> Any:
    return (
        spark.readStream.schema("key LONG").option("maxFilesPerTrigger", 1)
        .json(str(input_dir)).groupBy("key").count()
        .writeStream.outputMode("update").format("noop")
        .option("checkpointLocation", str(checkpoint)).trigger(processingTime="100 milliseconds")
        .start()
    )


def wait_for_batches(query: Any, batches: int) -> None:
    deadline = time.monotonic() + harness.QUERY_TIMEOUT_S
    while sum(1 for p in query.recentProgress if p["numInputRows"] > 0) < batches:
        assert query.exception() is None, query.exception()
        assert time.monotonic() < deadline, "the query did not process its input in time"
        time.sleep(0.2)


def prometheus(spark: Any) -> dict[str, float]:
    url = spark.sparkContext.uiWebUrl + "/metrics/prometheus"
    with urllib.request.urlopen(url, timeout=30) as response:
        text = response.read().decode()
    values = {}
    for line in text.splitlines():
        m = _PROMETHEUS_LINE.match(line.strip())
        if m:
            values[m.group(1)] = float(m.group(2))
    return values


def jmx(spark: Any) -> dict[str, float]:
    jvm = spark.sparkContext._jvm
    server = jvm.java.lang.management.ManagementFactory.getPlatformMBeanServer()
    values = {}
    for name in server.queryNames(jvm.javax.management.ObjectName("metrics:*"), None):
        full = name.getKeyProperty("name")
        if ".spillstore." not in full:
            continue
        attribute = {"counters": "Count", "timers": "Count"}.get(name.getKeyProperty("type"),
                                                                  "Value")
        values[f"{full}.{attribute}"] = float(server.getAttribute(name, attribute))
    return values


def settle(spark: Any) -> None:
    """Waits until nothing moves: maintenance has snapshotted every journal, and the driver's
    sums equal this JVM's own figures (the executor plugin's reports caught up). Then both sinks
    and both sources describe the same moment."""
    own_prefix = f"metrics_{NAMESPACE}_driver_spillstore_"
    sums_prefix = own_prefix + "executors_"
    previous = None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        time.sleep(1.5)  # longer than the maintenance interval and many report intervals
        values = prometheus(spark)
        summed = {k[len(sums_prefix):-len("_Value")]: v for k, v in values.items()
                  if k.startswith(sums_prefix) and k.endswith("_Value")}
        own = {name: values.get(f"{own_prefix}{name}_Count",
                                values.get(f"{own_prefix}{name}_Value"))
               for name in summed if name not in ("reportingExecutors", "commitTimeMs")}
        if own == previous and all(summed[k] == v for k, v in own.items()):
            return
        previous = own
    raise AssertionError("spillstore's figures did not settle within 60 s")


def main(workdir: str) -> int:
    work = Path(workdir)
    input_dir = work / "input"
    spark = session(work)
    readings = []
    try:
        input_dir.mkdir(parents=True)
        query = start(spark, input_dir, work / "checkpoint")
        try:
            for batches in (range(0, 2), range(2, 4)):
                harness.write_batches(input_dir, "key LONG", DATA, batches)
                wait_for_batches(query, batches.stop)
                settle(spark)
                readings.append({"prometheus": prometheus(spark), "jmx": jmx(spark),
                                 "progress": json.loads(json.dumps(query.recentProgress,
                                                                   default=str))})
        finally:
            query.stop()
    finally:
        spark.stop()
    print(json.dumps({"readings": readings}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
