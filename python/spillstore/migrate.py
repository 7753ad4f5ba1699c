"""Move a stopped query's state to another state store provider
(``python -m spillstore migrate CHECKPOINT --to spillstore|hdfs [--checkpoint-format 1|2]``).

Spark runs a restarted query on the provider its checkpoint records, so selecting spillstore
for an existing query changes nothing. :func:`migrate` copies the state of the last committed
batch of every stateful operator, partition and store with the providers' own code (the source
provider reads it, the target provider commits it), reads it back to check each store's row
count and checksum, and only then swaps the new state in and makes the offset log record the
target provider. With checkpoint format v2 (Spark 4.0+) the source is read by the checkpoint
ids its commit log records, and the commit log is made to record the new stores' ids; a
migration may also change the format (v1 to v2 and back), spillstore to spillstore included.
The originals are kept under ``<checkpoint>/_spillstore_migrations/``.
An interrupted run (even kill -9) is finished by running the same command again.

The work is done in the JVM (``spillstore.migrate.Migration``); this module starts a local
Spark session for it when none is given.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ._config import configure

__all__ = ["MigrationRefused", "MigrationResult", "OperatorResult", "TARGETS", "migrate"]

TARGETS = ("spillstore", "hdfs", "rocksdb")
"""Target names :func:`migrate` takes; ``rocksdb`` is refused (Spark's RocksDB provider
cannot start a checkpoint at a later version)."""


class MigrationRefused(ValueError):
    """The checkpoint cannot be migrated as asked; the message says why and what to do.
    Nothing was changed (or what was changed is finished by re-running the same command)."""


@dataclass(frozen=True)
class OperatorResult:
    id: int
    name: str
    """Spark's operator name from its metadata (Spark 4.x), or ``""`` (Spark 3.5)."""
    stores: tuple[str, ...]
    partitions: int
    rows: int


@dataclass(frozen=True)
class MigrationResult:
    checkpoint: str
    source: str
    target: str
    batch: int
    """The committed batch whose state was moved; the query continues after it."""
    source_checkpoint_format: int
    """The checkpoint format (1 or 2) the checkpoint was in."""
    checkpoint_format: int
    """The checkpoint format it is in now."""
    migrated: bool
    """False when the checkpoint already recorded the target provider."""
    originals: str | None
    """Where the original state and offset-log entries were kept."""
    rows: int
    seconds: float
    operators: tuple[OperatorResult, ...]


def migrate(checkpoint: str | Path, to: str = "spillstore", *, batch: int | None = None,
            checkpoint_format: int | None = None, idle_seconds: int = 60, spark: Any = None,
            conf: Mapping[str, str] | None = None, progress: bool = True) -> MigrationResult:
    """Move the state of the stopped query at ``checkpoint`` onto the provider ``to``.

    Args:
        checkpoint: the query's checkpoint location (any Hadoop file system path).
        to: ``"spillstore"`` or ``"hdfs"`` (Spark's default provider, the way back).
        batch: if given, the batch the caller expects to be the last committed one; the
            migration is refused if it is not (a query restarts after its last committed
            batch, so only that batch's state can be moved).
        checkpoint_format: the checkpoint format to leave the checkpoint in, 1 or 2
            (``spark.sql.streaming.stateStore.checkpointFormatVersion``; 2 needs Spark 4.0+
            and is refused for ``hdfs``); by default the checkpoint's own (1 for ``hdfs``).
            Restart the query with that conf set to the same value.
        idle_seconds: the checkpoint's offset and commit logs must not have been written for
            this long, at the start and just before the swap (Spark keeps no lock on a
            checkpoint; this is how a running query is detected).
        spark: a session whose JVM has the spillstore jar (see :func:`spillstore.configure`);
            by default a local one is started and stopped again.
        conf: Spark confs for that local session, e.g. ``spark.jars`` and
            ``spark.hadoop.fs.s3a.*`` for a checkpoint on S3; not with ``spark``, whose own
            confs apply.
        progress: print each store as it is verified (from the JVM, to standard output).

    Raises:
        MigrationRefused: the checkpoint cannot be migrated as asked (running query, unknown
            provider, transformWithState, a checkpoint format the target cannot take, ...).
    """
    if to not in TARGETS:
        raise MigrationRefused(f"unknown target provider {to!r}: use one of {', '.join(TARGETS)}")
    if checkpoint_format not in (None, 1, 2):
        raise MigrationRefused(f"checkpoint_format={checkpoint_format!r}: checkpoint formats "
                               "are 1 and 2")
    if spark is not None and conf:
        raise ValueError("conf is for the session migrate starts: set it on the session "
                         "passed as spark instead")
    own = spark is None
    if own:
        spark = _local_session(conf or {})
    try:
        from py4j.protocol import Py4JJavaError

        jvm = spark._jvm
        try:
            text = jvm.spillstore.migrate.Migration.migrate(
                spark._jsparkSession, str(checkpoint), to, -1 if batch is None else batch,
                idle_seconds, progress, checkpoint_format or 0)
        except Py4JJavaError as e:
            cause = e.java_exception
            if cause.getClass().getName() == "spillstore.migrate.MigrationRefusedException":
                raise MigrationRefused(str(cause.getMessage())) from None
            raise
        return _result(json.loads(text))
    finally:
        if own:
            spark.stop()


def _local_session(conf: Mapping[str, str]) -> Any:
    from pyspark.sql import SparkSession

    builder = (SparkSession.builder.master("local[1]").appName("spillstore-migrate")
               .config("spark.ui.enabled", "false"))
    # Before configure(), which adds its jar to a spark.jars set here.
    for key, value in conf.items():
        builder.config(key, value)
    spark = configure(builder).getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark


def _result(d: dict[str, Any]) -> MigrationResult:
    operators = tuple(
        OperatorResult(id=int(o["id"]), name=str(o["name"]),
                       stores=tuple(str(o["stores"]).split(",")),
                       partitions=int(o["partitions"]), rows=int(o["rows"]))
        for o in d["operators"])
    return MigrationResult(
        checkpoint=str(d["checkpoint"]), source=str(d["source"]), target=str(d["target"]),
        batch=int(d["batch"]), source_checkpoint_format=int(d["sourceCheckpointFormat"]),
        checkpoint_format=int(d["checkpointFormat"]), migrated=bool(d["migrated"]),
        originals=d.get("originals"),
        rows=int(d["rows"]), seconds=float(d["seconds"]), operators=operators)
