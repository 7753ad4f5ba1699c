"""Command line: ``python -m spillstore demo``, ``python -m spillstore jar`` (the provider jar
for the installed pyspark), ``python -m spillstore bench`` (:mod:`spillstore.bench`),
``python -m spillstore checkpoint`` (:mod:`spillstore.checkpoint`) and ``python -m spillstore
migrate`` (:mod:`spillstore.migrate`).

The demo starts a local Spark session configured through :func:`spillstore.configure`, runs a
streaming count + sum per key over a skewed generated stream for a fixed number of
micro-batches, and prints what the state store did in each batch.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from typing import Any

from ._config import (
    PROVIDER_CLASS,
    PROVIDER_CLASS_CONF,
    UnsupportedSparkVersionError,
    configure,
    jar_path,
)
from .metrics import _size, cache_hit_ratio, state_metrics

__all__ = ["main"]

_PROVIDERS = {
    "spillstore": PROVIDER_CLASS,
    "hdfs": "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider",
    "rocksdb": "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
}

_COLUMNS = (
    ("batch", 5),
    ("input rows", 10),
    ("rows/s", 9),
    ("state rows", 10),
    ("commit ms", 9),
    ("journal", 10),
    ("heap", 10),
    ("hit ratio", 9),
)


def _fmt_bytes(n: int | None) -> str:
    return "-" if n is None else _size(n)


def _fmt_int(n: float | None) -> str:
    return "-" if n is None else f"{int(round(n)):,}"


def _fmt_ratio(r: float | None) -> str:
    return "-" if r is None else f"{r:.1%}"


def _row(cells: Sequence[str]) -> str:
    return "  ".join(cell.rjust(width) for cell, (_, width) in zip(cells, _COLUMNS, strict=True))


def _parse_option(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    return name.strip(), value.strip()


def _skewed_key(keys: int) -> Any:
    """A key in [0, keys) with a log-uniform (Zipf-like, P(k) ~ 1/k) distribution, computed
    from the rate source's ``value``: key 0 gets ~ln 2/ln(keys+1) of the rows, most keys are
    cold."""
    from pyspark.sql import functions as F

    uniform = F.pmod(F.xxhash64("value"), F.lit(1_000_003)) / F.lit(1_000_003.0)
    return (F.floor(F.pow(F.lit(float(keys + 1)), uniform)) - 1).cast("long")


def _local_builder(app_name: str) -> Any:
    """A ``SparkSession.Builder`` for ``local[2]`` with 4 shuffle partitions and no UI: the
    session of the demo and of each benchmark run."""
    from pyspark.sql import SparkSession

    return (
        SparkSession.builder.master("local[2]")
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.showConsoleProgress", "false")
    )


def _demo(args: argparse.Namespace) -> int:
    from pyspark.sql import functions as F

    builder = _local_builder("spillstore-demo")
    if args.provider == "spillstore":
        try:
            configure(builder, **dict(args.option))
        except (FileNotFoundError, UnsupportedSparkVersionError, ValueError) as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
    else:
        if args.option:
            print("--option applies to the spillstore provider only", file=sys.stderr)
            return 2
        builder.config(PROVIDER_CLASS_CONF, _PROVIDERS[args.provider])

    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    checkpoint = tempfile.mkdtemp(prefix="spillstore-demo-")
    query = None
    try:
        provider = spark.conf.get(PROVIDER_CLASS_CONF)
        print(
            f"spillstore demo: provider {provider}, {args.batches} batches of ~"
            f"{args.rows_per_second:,} rows (trigger every {args.trigger_seconds:g} s), "
            f"{args.keys:,} skewed keys, count + sum per key, update mode"
        )
        stream = (
            spark.readStream.format("rate")
            .option("rowsPerSecond", args.rows_per_second)
            .option("numPartitions", 2)
            .load()
        )
        counts = (
            stream.select(_skewed_key(args.keys).alias("key"), "value")
            .groupBy("key")
            .agg(F.count("*").alias("count"), F.sum("value").alias("sum"))
        )
        query = (
            counts.writeStream.queryName("spillstore_demo")
            .outputMode("update")
            .format("noop")
            .option("checkpointLocation", checkpoint)
            .trigger(processingTime=f"{args.trigger_seconds} seconds")
            .start()
        )
        print(_row([name for name, _ in _COLUMNS]))
        progresses = _follow(query, args.batches, timeout_s=60 + 30 * args.batches)
    finally:
        if query is not None:
            # Stopping interrupts the batch in flight, which Spark logs as errors: not news.
            spark.sparkContext.setLogLevel("OFF")
            query.stop()
        spark.stop()
        shutil.rmtree(checkpoint, ignore_errors=True)
    if progresses is None:
        return 1
    _summary(progresses)
    return 0


def _follow(query: Any, batches: int, timeout_s: float) -> list[dict[str, Any]] | None:
    """Print one line per completed micro-batch until ``batches`` of them have completed."""
    done: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout_s
    while len(done) < batches:
        if not query.isActive:
            print(f"the query stopped: {query.exception()}", file=sys.stderr)
            return None
        if time.monotonic() > deadline:
            print(f"timed out after {timeout_s:.0f} s waiting for {batches} batches",
                  file=sys.stderr)
            return None
        last = done[-1]["batchId"] if done else -1
        for progress in query.recentProgress:
            if progress["batchId"] > last and len(done) < batches:
                done.append(progress)
                _print_batch(progress)
        time.sleep(0.2)
    return done


def _print_batch(progress: dict[str, Any]) -> None:
    m = state_metrics(progress)
    print(
        _row(
            [
                str(progress["batchId"]),
                _fmt_int(progress.get("numInputRows")),
                _fmt_int(progress.get("processedRowsPerSecond")),
                _fmt_int(m.get("numRowsTotal")),
                _fmt_int(m.get("commitTimeMs")),
                _fmt_bytes(m.get("spillstoreJournalBytes")),
                _fmt_bytes(m.get("spillstoreHeapBytes")),
                _fmt_ratio(cache_hit_ratio(m)),
            ]
        ),
        flush=True,
    )


def _summary(progresses: list[dict[str, Any]]) -> None:
    metrics = [state_metrics(p) for p in progresses]
    rows = sum(int(p.get("numInputRows", 0)) for p in progresses)
    busy_ms = sum(int((p.get("durationMs") or {}).get("triggerExecution", 0)) for p in progresses)
    totals: dict[str, int] = {}
    for m in metrics:
        for name, value in m.items():
            totals[name] = totals.get(name, 0) + value
    heap = [m["spillstoreHeapBytes"] for m in metrics if "spillstoreHeapBytes" in m]
    print(
        f"summary: {len(progresses)} batches, {rows:,} input rows in {busy_ms / 1000:.1f} s of "
        f"batch time ({_fmt_int(rows / (busy_ms / 1000) if busy_ms else None)} rows/s); "
        f"state rows at the end {_fmt_int(metrics[-1].get('numRowsTotal'))}; "
        f"journal written {_fmt_bytes(totals.get('spillstoreJournalBytes'))}; "
        f"peak heap {_fmt_bytes(max(heap) if heap else None)}; "
        f"cache hit ratio {_fmt_ratio(cache_hit_ratio(totals))}"
    )


def _positive_int(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {value}")
    return value


def _jar(args: argparse.Namespace) -> int:
    try:
        print(jar_path())
    except (FileNotFoundError, UnsupportedSparkVersionError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


def _positive_float(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {value}")
    return value


def _checkpoint(args: argparse.Namespace) -> int:
    from .checkpoint import inspect_checkpoint

    try:
        info = inspect_checkpoint(args.location)
    except (OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(info.describe())
    if info.provider not in (None, "spillstore"):
        print(f"  This query runs on {info.provider_class} even when the session selects "
              "spillstore; stop it and run `python -m spillstore migrate "
              f"{info.location}` to move its state onto spillstore.")
    return 0


def _migrate(args: argparse.Namespace) -> int:
    from .migrate import MigrationRefused, migrate

    try:
        result = migrate(args.checkpoint, args.to, batch=args.batch,
                         idle_seconds=args.idle_seconds)
    except MigrationRefused as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if result.migrated:
        print(f"migrated {result.checkpoint} from {result.source} to {result.target}: state of "
              f"batch {result.batch}, {len(result.operators)} operators, {result.rows:,} rows, "
              f"{result.seconds:.1f} s; originals kept in {result.originals}")
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m spillstore", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    demo = commands.add_parser(
        "demo",
        help="run a streaming aggregation over a skewed stream and print state store metrics",
        description="Runs count + sum per key (update mode, noop sink) on local[2] over a rate "
        "stream whose keys are Zipf-like skewed, for a fixed number of micro-batches, printing "
        "the state store metrics of each batch.",
    )
    demo.add_argument("--batches", type=_positive_int, default=8,
                      help="micro-batches to run (default: %(default)s)")
    demo.add_argument("--rows-per-second", type=_positive_int, default=10_000,
                      help="rate source rows per second (default: %(default)s)")
    demo.add_argument("--keys", type=_positive_int, default=100_000,
                      help="number of distinct keys the rows are spread over (default: "
                      "%(default)s)")
    demo.add_argument("--trigger-seconds", type=_positive_float, default=1.0,
                      help="processing-time trigger interval (default: %(default)s)")
    demo.add_argument("--provider", choices=sorted(_PROVIDERS), default="spillstore",
                      help="state store provider, to compare with Spark's own (default: "
                      "%(default)s)")
    demo.add_argument("--option", type=_parse_option, action="append", default=[],
                      metavar="NAME=VALUE",
                      help="a spillstore option, e.g. --option memoryBudgetFraction=0.3 "
                      "(repeatable)")
    demo.set_defaults(run=_demo)
    inspect = commands.add_parser(
        "checkpoint",
        help="show the state store provider a query's checkpoint records, and its state",
        description="Spark runs a restarted query on the provider its checkpoint records, "
        "whatever the session selects. This prints that provider, the last batches and each "
        "stateful operator's stores with the provider whose files they hold.",
    )
    inspect.add_argument("location", help="the query's checkpoint location (a local path)")
    inspect.set_defaults(run=_checkpoint)
    move = commands.add_parser(
        "migrate",
        help="move a stopped query's state to another provider (onto spillstore, or back)",
        description="Copies the state of the last committed batch of every stateful operator "
        "with the providers' own code, verifies each store (rows and checksum), then swaps it "
        "in and makes the checkpoint record the target provider. The originals are kept "
        "under CHECKPOINT/_spillstore_migrations/. Safe to re-run after an interruption.",
    )
    move.add_argument("checkpoint", help="the stopped query's checkpoint location")
    move.add_argument("--to", choices=("spillstore", "hdfs", "rocksdb"), default="spillstore",
                      help="the target provider (default: %(default)s; hdfs is Spark's "
                      "default provider; rocksdb is refused)")
    move.add_argument("--batch", type=int, default=None, metavar="N",
                      help="refuse unless N is the last committed batch (for scripts)")
    move.add_argument("--idle-seconds", type=int, default=60, metavar="S",
                      help="refuse if the offset or commit log was written in the last S "
                      "seconds: the query may be running (default: %(default)s)")
    move.set_defaults(run=_migrate)
    jar = commands.add_parser(
        "jar",
        help="print the path of the provider jar for the installed pyspark (for spark-submit)",
        description="Prints the bundled provider jar that matches the installed pyspark's "
        "Spark line, e.g. for spark-submit --jars \"$(python -m spillstore jar)\".",
    )
    jar.set_defaults(run=_jar)
    from .bench import add_parser as add_bench  # bench imports this module's helpers

    add_bench(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m spillstore``; returns the process exit code."""
    args = _parser().parse_args(argv)
    return int(args.run(args))
