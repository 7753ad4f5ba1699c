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
from collections.abc import Sequence

from . import bench
from ._argtypes import parse_option, positive_float, positive_int
from ._config import (
    PROVIDER_CLASS_CONF,
    JarMismatchError,
    UnsupportedSparkVersionError,
    configure,
    jar_path,
)
from ._jobs import PROVIDERS, local_builder, skewed_key
from ._progress import follow, header, print_summary
from .checkpoint import inspect_checkpoint
from .migrate import MigrationRefused, migrate

__all__ = ["main"]


def _demo(args: argparse.Namespace) -> int:
    from pyspark.sql import functions as F

    builder = local_builder("spillstore-demo")
    if args.provider == "spillstore":
        try:
            configure(builder, **dict(args.option))
        except (FileNotFoundError, UnsupportedSparkVersionError, JarMismatchError, ValueError) as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
    else:
        if args.option:
            print("--option applies to the spillstore provider only", file=sys.stderr)
            return 2
        builder.config(PROVIDER_CLASS_CONF, PROVIDERS[args.provider])

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
            stream.select(skewed_key(args.keys).alias("key"), "value")
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
        print(header())
        progresses = follow(query, args.batches, timeout_s=60 + 30 * args.batches)
    finally:
        if query is not None:
            # Stopping interrupts the batch in flight, which Spark logs as errors: not news.
            spark.sparkContext.setLogLevel("OFF")
            query.stop()
        spark.stop()
        shutil.rmtree(checkpoint, ignore_errors=True)
    if progresses is None:
        return 1
    print_summary(progresses)
    return 0


def _jar(args: argparse.Namespace) -> int:
    try:
        print(jar_path())
    except (FileNotFoundError, UnsupportedSparkVersionError, JarMismatchError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


def _checkpoint(args: argparse.Namespace) -> int:
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
    try:
        result = migrate(args.checkpoint, args.to, batch=args.batch,
                         checkpoint_format=args.checkpoint_format,
                         idle_seconds=args.idle_seconds, conf=dict(args.conf))
    except MigrationRefused as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if result.migrated:
        formats = ("" if result.source_checkpoint_format == result.checkpoint_format else
                   f" (checkpoint format {result.source_checkpoint_format} to "
                   f"{result.checkpoint_format})")
        print(f"migrated {result.checkpoint} from {result.source} to {result.target}{formats}: "
              f"state of batch {result.batch}, {len(result.operators)} operators, "
              f"{result.rows:,} rows, {result.seconds:.1f} s; originals kept in "
              f"{result.originals}")
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
    demo.add_argument("--batches", type=positive_int, default=8,
                      help="micro-batches to run (default: %(default)s)")
    demo.add_argument("--rows-per-second", type=positive_int, default=10_000,
                      help="rate source rows per second (default: %(default)s)")
    demo.add_argument("--keys", type=positive_int, default=100_000,
                      help="number of distinct keys the rows are spread over (default: "
                      "%(default)s)")
    demo.add_argument("--trigger-seconds", type=positive_float, default=1.0,
                      help="processing-time trigger interval (default: %(default)s)")
    demo.add_argument("--provider", choices=sorted(PROVIDERS), default="spillstore",
                      help="state store provider, to compare with Spark's own (default: "
                      "%(default)s)")
    demo.add_argument("--option", type=parse_option, action="append", default=[],
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
    move.add_argument("--checkpoint-format", type=int, choices=(1, 2), default=None,
                      help="the checkpoint format to leave (spark.sql.streaming.stateStore."
                      "checkpointFormatVersion; 2 needs Spark 4.0+ and is refused for hdfs; "
                      "default: the checkpoint's own, 1 for hdfs)")
    move.add_argument("--batch", type=int, default=None, metavar="N",
                      help="refuse unless N is the last committed batch (for scripts)")
    move.add_argument("--idle-seconds", type=int, default=60, metavar="S",
                      help="refuse if the offset or commit log was written in the last S "
                      "seconds: the query may be running (default: %(default)s)")
    move.add_argument("--conf", type=parse_option, action="append", default=[],
                      metavar="KEY=VALUE",
                      help="a Spark conf for the migration's session, e.g. spark.jars and "
                      "spark.hadoop.fs.s3a.* for a checkpoint on S3 (repeatable)")
    move.set_defaults(run=_migrate)
    jar = commands.add_parser(
        "jar",
        help="print the path of the provider jar for the installed pyspark (for spark-submit)",
        description="Prints the bundled provider jar that matches the installed pyspark's "
        "Spark line, e.g. for spark-submit --jars \"$(python -m spillstore jar)\".",
    )
    jar.set_defaults(run=_jar)
    bench.add_parser(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m spillstore``; returns the process exit code."""
    args = _parser().parse_args(argv)
    return int(args.run(args))
