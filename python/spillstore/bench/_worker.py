"""One run of ``python -m spillstore bench`` in a process of its own:
``python -m spillstore.bench._worker SPEC``, SPEC being the JSON
:mod:`spillstore.bench._runner` passes (preset, provider, spillstore options, Spark confs, work
directory, checkpoint, timeout, whether this process is the restart).

It starts a local Spark (``local[2]``, or with a cluster in SPEC Spark's standalone cluster
within the process, ``local-cluster[N,CORES,MEM]``) with the preset's driver memory, the
confs and the provider, runs the streaming count + sum per key for the warm-up and measured
batches (printing the demo's line per batch; for a checkpoint-cost preset the workload and the
line of :mod:`spillstore.bench._cost`), and prints, as its last line, the measurements as JSON
(:class:`spillstore.bench.RunResult`'s fields). The restart process instead starts the same
query on the same checkpoint, waits for its first batch and prints ``restart_s``. A failure
exits non-zero with the reason on stderr; so does a checkpoint-cost run whose final state
differs from its input's counts.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
import urllib.request
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from .._config import PROVIDER_CLASS_CONF, configure
from .._jobs import local_builder, skewed_key
from .._progress import follow
from . import _cost
from ._presets import (
    BENCH_PROVIDERS,
    CHECKPOINT_COST_CONFS,
    RESTART_SNAPSHOT_CONFS,
    SPARK_PROVIDER_CONFS,
    WARMUP_BATCHES,
    Preset,
)
from ._runner import Cluster


def _peak_rss_mb(pid: int) -> float | None:
    """``VmHWM`` of a Linux process in MiB; ``None`` where /proc has no such line."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    for line in status.splitlines():
        if line.startswith("VmHWM:"):
            return round(int(line.split()[1]) / 1024, 1)
    return None


# Executors poll their process tree's memory this often and send the peaks with every
# heartbeat: a finer record than the default (a sample per 10 s heartbeat).
_METRICS_POLLING_INTERVAL = "100ms"
_HEARTBEAT_INTERVAL_S = 1
_EXECUTOR_RSS = "ProcessTreeJVMRSSMemory"


def _cluster_confs(cluster: dict[str, Any], workdir: Path) -> dict[str, str]:
    """The confs of a run on ``local-cluster``, before ``--conf``'s: its executors' memory,
    their process tree metrics (the peak RSS) and their temporary files in the run's
    directory, and the UI on a free port, whose REST API lists the executors' peaks."""
    return {
        "spark.executor.memory": f"{cluster['executor_memory_mb']}m",
        "spark.executor.processTreeMetrics.enabled": "true",
        "spark.executor.metrics.pollingInterval": _METRICS_POLLING_INTERVAL,
        "spark.executor.heartbeatInterval": f"{_HEARTBEAT_INTERVAL_S}s",
        "spark.executor.extraJavaOptions": f"-Djava.io.tmpdir={workdir} -XX:-UsePerfData",
        "spark.ui.enabled": "true",
        "spark.ui.port": "0",
        # Every heartbeat's peaks into the status store the REST API reads, none held back.
        "spark.ui.liveUpdate.period": "0",
    }


def _use_spark_home(home: Path) -> None:
    """Point SPARK_HOME at ``home``, a new directory of the run whose bin, jars and python are
    pyspark's: the standalone worker keeps its executors' directories (logs, fetched jars) in
    ``$SPARK_HOME/work``, which would otherwise be inside the installed package."""
    import pyspark

    home.mkdir()
    for name in ("bin", "jars", "python"):
        (home / name).symlink_to(Path(pyspark.__file__).parent / name)
    os.environ["SPARK_HOME"] = str(home)


def executor_rss_mb(executors: Sequence[dict[str, Any]]) -> dict[str, float]:
    """Each executor's peak RSS in MiB, by id, from the executors as the REST API's
    ``/applications/<id>/allexecutors`` lists them (the driver left out, and any executor
    without a process tree peak: one that never sent a heartbeat)."""
    found = {}
    for executor in executors:
        rss = (executor.get("peakMemoryMetrics") or {}).get(_EXECUTOR_RSS)
        if executor["id"] != "driver" and rss:
            found[executor["id"]] = round(rss / 2 ** 20, 1)
    return found


def _read_executor_rss(spark: Any, count: int) -> dict[str, float]:
    """The executors' peaks once every one of the ``count`` has sent a heartbeat after the
    measured batches (two heartbeat intervals)."""
    time.sleep(2 * _HEARTBEAT_INTERVAL_S + 0.5)
    context = spark.sparkContext
    url = f"{context.uiWebUrl}/api/v1/applications/{context.applicationId}/allexecutors"
    with urllib.request.urlopen(url, timeout=30) as response:
        found = executor_rss_mb(json.load(response))
    if len(found) != count:
        raise RuntimeError(f"{len(found)} of {count} executors report a peak RSS: {found}")
    return found


def _start(spark: Any, preset: Preset, checkpoint: str) -> Any:
    """Start the benchmark's query on ``checkpoint`` (resuming it if it holds one)."""
    from pyspark.sql import functions as F

    stream = (spark.readStream.format("rate-micro-batch")
              .option("rowsPerBatch", preset.rows_per_batch)
              .option("numPartitions", 2)
              .load())
    key = _key(preset)
    counts = (stream.select(key.alias("key"), "value").groupBy("key")
              .agg(F.count("*").alias("count"), F.sum("value").alias("sum")))
    return (counts.writeStream.queryName("spillstore_bench").outputMode("update")
            .format("noop").option("checkpointLocation", checkpoint).start())


def _stop(spark: Any, query: Any) -> None:
    # Stopping interrupts the batch in flight, which Spark logs as errors: not news.
    spark.sparkContext.setLogLevel("OFF")
    query.stop()
    spark.sparkContext.setLogLevel("ERROR")


def _jvm_figures(spark: Any) -> dict[str, Any]:
    """The driver JVM's collection time over its life, its share of the JVM's uptime, and its
    peak RSS."""
    jvm = spark._jvm
    management = jvm.java.lang.management.ManagementFactory
    gc_ms = sum(max(0, bean.getCollectionTime())
                for bean in management.getGarbageCollectorMXBeans())
    uptime_ms = management.getRuntimeMXBean().getUptime()
    return {"gc_s": round(gc_ms / 1000, 2),
            "gc_share": round(gc_ms / uptime_ms, 4) if uptime_ms > 0 else None,
            "peak_rss_mb": _peak_rss_mb(jvm.java.lang.ProcessHandle.current().pid())}


def _measure(spark: Any, preset: Preset, checkpoint: str, workdir: Path, timeout_s: float,
             executors: int) -> dict[str, Any] | None:
    """Run the query for the warm-up and measured batches; ``None`` if it failed. With
    ``executors`` (on local-cluster), their peak RSS too. A checkpoint-cost preset runs
    :func:`spillstore.bench._cost.measure` and checks the final state against its input.

    Raises:
        RuntimeError: a checkpoint-cost run's final state differs from its input's counts.
    """
    figures: dict[str, Any] = {}
    if preset.checkpoint_cost:
        progresses, figures = _cost.measure(spark, preset, checkpoint, workdir,
                                            lambda line: print(line, flush=True),
                                            cpu=not executors)
        jvm_figures = _jvm_figures(spark)
    else:
        query = _start(spark, preset, checkpoint)
        try:
            found = follow(query, WARMUP_BATCHES + preset.batches, timeout_s)
            if found is None:
                return None
            progresses = found
            jvm_figures = _jvm_figures(spark)
        finally:
            _stop(spark, query)
    cluster = {}
    if executors:
        each = _read_executor_rss(spark, executors)
        cluster = {"executor_rss_mb": max(each.values()), "executor_rss_each_mb": each}
    measured: Sequence[dict[str, Any]] = progresses[WARMUP_BATCHES:]
    rows = sum(p["numInputRows"] for p in measured)
    busy_ms = sum(p["durationMs"]["triggerExecution"] for p in measured)
    if preset.checkpoint_cost:
        mismatched = _cost.mismatched_keys(spark, checkpoint, workdir / "input")
        if mismatched:
            raise RuntimeError(f"inexact state: {mismatched:,} keys' count or sum differ "
                               "from the input's")
    return {
        "records_per_s": round(rows / (busy_ms / 1000), 1),
        "commit_ms": statistics.median(p["stateOperators"][0]["commitTimeMs"] for p in measured),
        "updates_ms": statistics.median(p["stateOperators"][0]["allUpdatesTimeMs"]
                                        for p in measured),
        "batch_ms": statistics.median(p["durationMs"]["triggerExecution"] for p in measured),
        "each_batch_ms": [[p["durationMs"]["triggerExecution"],
                           p["stateOperators"][0]["allUpdatesTimeMs"],
                           p["stateOperators"][0]["commitTimeMs"]] for p in measured],
        "forced_snapshots": _forced_snapshots(measured),
        **jvm_figures,
        "hit_ratio": _hit_ratio(measured),
        "state_rows": _state_rows(spark, checkpoint),
        "state_stores": measured[-1]["stateOperators"][0].get("numStateStoreInstances"),
        **figures,
        **cluster,
    }


def _restart(spark: Any, preset: Preset, checkpoint: str, workdir: Path, timeout_s: float
             ) -> dict[str, Any] | None:
    """Restart the query on its checkpoint and time it to the end of its first batch (the
    trigger's start plus its ``triggerExecution``: exact, where polling is not); ``None`` if
    it failed. A checkpoint-cost preset's gets one more batch of updates as its input."""
    inputs = workdir / "input"
    if preset.checkpoint_cost:
        _cost.write_batch(inputs, preset, WARMUP_BATCHES + preset.batches)
    started = time.time()
    query = (_cost.start(spark, checkpoint, inputs) if preset.checkpoint_cost
             else _start(spark, preset, checkpoint))
    try:
        progresses = follow(query, 1, timeout_s)
    finally:
        _stop(spark, query)
    if progresses is None:
        return None
    (first,) = progresses
    # Spark writes UTC with a "Z", which fromisoformat takes from Python 3.11 on only.
    trigger = datetime.fromisoformat(first["timestamp"].replace("Z", "+00:00")).timestamp()
    ended = trigger + first["durationMs"]["triggerExecution"] / 1000
    return {"restart_s": round(ended - started, 2)}


def _key(preset: Preset) -> Any:
    """The grouping key of the preset's rows, from the rate source's ``value``."""
    from pyspark.sql import functions as F

    if preset.one_hit_share:
        # value is unique and increasing: keys + value is never seen twice.
        bucket = F.pmod(F.xxhash64("value"), F.lit(1_000_003)) / F.lit(1_000_003.0)
        hot = F.pmod(F.xxhash64(F.col("value"), F.lit(1)), F.lit(preset.keys))
        return F.when(bucket < F.lit(preset.one_hit_share), F.lit(preset.keys) + F.col("value")
                      ).otherwise(hot)
    if preset.skewed:
        return skewed_key(preset.keys)
    return F.col("value") % F.lit(preset.keys)


def _hit_ratio(progresses: Sequence[dict[str, Any]]) -> float | None:
    """spillstore's heap hits over lookups in these batches; ``None`` for other providers."""
    hits = misses = 0
    for p in progresses:
        for operator in p.get("stateOperators") or []:
            custom = operator.get("customMetrics") or {}
            hits += int(custom.get("spillstoreCacheHits", 0))
            misses += int(custom.get("spillstoreCacheMisses", 0))
    return round(hits / (hits + misses), 4) if hits + misses else None


def _forced_snapshots(progresses: Sequence[dict[str, Any]]) -> list[int] | None:
    """Each batch's snapshots forced on commit (``forceSnapshotCount``, as spillstore and
    Spark's HDFS provider name it), in batch order; ``None`` for a provider that reports none."""
    metrics = [[operator.get("customMetrics") or {} for operator in p.get("stateOperators") or []]
               for p in progresses]
    if not any("forceSnapshotCount" in m for batch in metrics for m in batch):
        return None
    return [sum(int(m.get("forceSnapshotCount", 0)) for m in batch) for batch in metrics]


def _state_rows(spark: Any, checkpoint: str) -> int | None:
    """The rows in the query's state. RocksDB does not count them with
    trackTotalNumberOfRows=false, so every provider's are read through the state data source
    alike; Spark 3.5 has none: ``None`` there."""
    import pyspark

    if int(pyspark.__version__.split(".")[0]) < 4:
        return None
    return int(spark.read.format("statestore").load(checkpoint).count())


def main(argv: Sequence[str]) -> int:
    """Run the benchmark run described by ``argv[0]`` (JSON); returns the exit code."""
    spec = json.loads(argv[0])
    preset = Preset(**{**spec["preset"], "providers": tuple(spec["preset"]["providers"])})
    provider: str = spec["provider"]
    workdir = Path(spec["workdir"])
    cluster: dict[str, Any] | None = spec["cluster"]
    builder = (local_builder(f"spillstore-bench-{provider}")
               .config("spark.driver.memory", preset.driver_memory)
               .config("spark.local.dir", str(workdir / "local")))
    if cluster is not None:
        # The restarting process shares the run's directory with the first one.
        _use_spark_home(workdir / ("spark-home-restart" if spec["restart"] else "spark-home"))
        builder.master(Cluster(**cluster).master)
        for key, value in _cluster_confs(cluster, workdir).items():
            builder.config(key, value)
    # Before configure(), which adds its jar to a spark.jars set here; --conf last, to win.
    for key, value in {**(RESTART_SNAPSHOT_CONFS if preset.restart else {}),
                       **(CHECKPOINT_COST_CONFS if preset.checkpoint_cost else {}),
                       **spec["conf"]}.items():
        builder.config(key, value)
    if provider == "spillstore":
        options = dict(spec["options"])
        if preset.memory_budget:
            options.setdefault("memoryBudget", preset.memory_budget)
        configure(builder, **options)
    else:
        builder.config(PROVIDER_CLASS_CONF, BENCH_PROVIDERS[provider])
        for key, value in SPARK_PROVIDER_CONFS.get(provider, {}).items():
            builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    try:
        if spec["restart"]:
            result = _restart(spark, preset, spec["checkpoint"], workdir, spec["timeout_s"])
        else:
            result = _measure(spark, preset, spec["checkpoint"], workdir, spec["timeout_s"],
                              0 if cluster is None else cluster["executors"])
    finally:
        spark.stop()
    if result is None:
        return 1
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
