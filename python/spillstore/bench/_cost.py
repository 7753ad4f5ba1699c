"""The ``checkpoint-cost`` workload of ``python -m spillstore bench``: what a state store's
checkpoint costs per micro-batch, in files and bytes under the query checkpoint's ``state/``,
and the CPU its maintenance takes.

A run (:func:`measure`, in the worker's process) loads the preset's ``keys`` in one batch, then
runs the measured batches one at a time: each updates ``rows_per_batch`` distinct random keys
among the existing ones and adds ``new_keys`` new ones (:func:`batch_keys`, seeded: every
provider gets the same input). The input is a directory of text files, one per batch, read by
a file stream source; the next batch's file is written only once the previous batch has
completed (``processAllAvailable``) and the state tree has been listed, so no batch runs while
the tree is listed. Each listing is compared with the one before (:func:`diff`): what a window
shows is exactly what changed under ``state/`` between two listings, the batch's commit and
whatever maintenance did meanwhile (a file written and deleted within one window is not seen).

The load's window runs from the query's start to a listing one maintenance interval and
:data:`SETTLE_S` after its batch completed, so the load's own maintenance counts in the load;
the last measured batch's window likewise ends one maintenance interval and :data:`SETTLE_S`
after it, so that maintenance counts in the last batch.

Files are listed through Hadoop's ``FileSystem`` API, whatever the storage (``file:``, HDFS,
S3): on the local file system the raw one, so Hadoop's ``.crc`` files count, as files on the
disk. The listing's calls go through a file system instance of their own, as the user
:data:`LISTER` and (on S3) with the user agent prefix :data:`LISTER`, so that a server's log
can tell them from the providers' (``tests/bench_remote.py`` does).

CPU per window: the JVM's threads of Spark's state store maintenance (``state-store-
maintenance-*``, from the JVM's thread CPU times: JVM threads only, not RocksDB's native
compaction threads), and the whole process' CPU time from ``/proc`` (task threads, the
driver, GC, JIT, every native thread, and the listing's own calls).
"""

from __future__ import annotations

import os
import random
import statistics
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ._presets import WARMUP_BATCHES, Preset

__all__ = ["LISTER", "SEED", "SETTLE_S", "CpuClock", "StateLister", "Window", "batch_keys", "diff",
           "measure", "mismatched_keys", "start", "summarize", "write_batch"]

SEED = 44
"""The input generator's seed: the same keys for every provider and run."""

SETTLE_S = 2.0
"""What the bench waits beyond one maintenance interval after the load batch and after the
last measured batch, for a maintenance run that started within the interval to finish."""

LISTER = "spillstore-bench-lister"
"""The user (and on S3 the user agent prefix) the state tree is listed as."""

Listing = dict[str, tuple[int, int]]
"""The files under a tree: path -> (bytes, modification time in ms)."""


@dataclass(frozen=True)
class Window:
    """What changed under the checkpoint's ``state/`` between two listings."""

    bytes_created: int
    """Bytes of the files that appeared (new paths, or a path whose size or time changed)."""
    files_created: int
    files_deleted: int
    """Files gone (or replaced by a file of another size or time at the same path)."""
    bytes_live: int
    """Bytes of all the files at the window's end."""
    files_live: int
    maintenance_cpu_s: float | None = None
    """CPU of Spark's state store maintenance threads in the window."""
    process_cpu_s: float | None = None
    """CPU of the whole worker process in the window."""
    batch: int | None = None
    """The batch whose window it is (``None`` for the load's)."""


def diff(before: Listing, after: Listing, maintenance_cpu_s: float | None = None,
         process_cpu_s: float | None = None, batch: int | None = None) -> Window:
    """The :class:`Window` from listing ``before`` to listing ``after``."""
    created = [path for path, stat in after.items() if before.get(path) != stat]
    deleted = [path for path, stat in before.items() if after.get(path) != stat]
    return Window(bytes_created=sum(after[p][0] for p in created), files_created=len(created),
                  files_deleted=len(deleted), bytes_live=sum(s[0] for s in after.values()),
                  files_live=len(after), maintenance_cpu_s=maintenance_cpu_s,
                  process_cpu_s=process_cpu_s, batch=batch)


def _mean(values: Iterable[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return round(statistics.fmean(present), 4) if present else None


def summarize(windows: Sequence[Window]) -> dict[str, Any]:
    """The run's figures over its measured batches' windows: means per batch, the most bytes
    live after any of them."""
    return {
        "bytes_per_batch": _mean(w.bytes_created for w in windows),
        "files_per_batch": _mean(w.files_created for w in windows),
        "files_deleted_per_batch": _mean(w.files_deleted for w in windows),
        "max_live_bytes": max((w.bytes_live for w in windows), default=None),
        "maintenance_cpu_s_per_batch": _mean(w.maintenance_cpu_s for w in windows),
        "process_cpu_s_per_batch": _mean(w.process_cpu_s for w in windows),
    }


def batch_keys(preset: Preset, batch: int) -> list[int]:
    """The keys of one batch's rows: the load batch (0) has each of the preset's keys once;
    measured batch ``b`` (1, 2, ...) has ``rows_per_batch`` distinct keys drawn from the
    ``keys + (b - 1) * new_keys`` existing ones, then ``new_keys`` keys never seen before.
    Seeded with :data:`SEED` and the batch: the same for every run."""
    if batch < WARMUP_BATCHES:
        return list(range(preset.keys)) if batch == 0 else []
    existing = preset.keys + (batch - WARMUP_BATCHES) * preset.new_keys
    rng = random.Random(SEED * 1_000_003 + batch)
    return [*rng.sample(range(existing), preset.rows_per_batch),
            *range(existing, existing + preset.new_keys)]


def write_batch(inputs: Path, preset: Preset, batch: int) -> None:
    """The batch's input file, written aside and renamed into ``inputs`` (the stream source
    skips names starting with a dot), so that the source never sees it half written."""
    inputs.mkdir(exist_ok=True)
    text = "".join(f"{k}\n" for k in batch_keys(preset, batch))
    aside = inputs / f".batch-{batch:06d}.txt"
    aside.write_text(text, encoding="ascii")
    os.rename(aside, inputs / f"batch-{batch:06d}.txt")


def start(spark: Any, checkpoint: str, inputs: Path) -> Any:
    """Start the query (count + sum per key, update mode, ``noop`` sink) on the input files
    in ``inputs``, a batch per file, and on ``checkpoint``, resuming it if it holds one."""
    from pyspark.sql import functions as F

    stream = (spark.readStream.format("text").option("maxFilesPerTrigger", 1)
              .load(str(inputs)))
    counts = (stream.select(F.col("value").cast("long").alias("key")).groupBy("key")
              .agg(F.count("*").alias("count"), F.sum("key").alias("sum")))
    return (counts.writeStream.queryName("spillstore_bench").outputMode("update")
            .format("noop").option("checkpointLocation", checkpoint).start())


class StateLister:
    """Lists the files under ``<checkpoint>/state`` through a ``FileSystem`` instance of its
    own (user and user agent :data:`LISTER`); on the local file system the raw one, which
    shows Hadoop's checksum files."""

    def __init__(self, spark: Any, checkpoint: str) -> None:
        jvm = spark._jvm
        fs_api = jvm.org.apache.hadoop.fs
        conf = jvm.org.apache.hadoop.conf.Configuration(spark._jsc.hadoopConfiguration())
        conf.set("fs.s3a.user.agent.prefix", LISTER)
        self._root = fs_api.Path(checkpoint.rstrip("/") + "/state")
        # Not through getFileSystem(conf): that would leave an instance with the lister's user
        # agent in Hadoop's cache of file systems, for the query's writes to use.
        uri = self._root.toUri()
        if uri.getScheme() is None:
            uri = fs_api.FileSystem.getDefaultUri(conf)
        fs = fs_api.FileSystem.newInstance(uri, conf, LISTER)
        # A ChecksumFileSystem (the local one) hides the .crc files it writes.
        if jvm.java.lang.Class.forName("org.apache.hadoop.fs.ChecksumFileSystem").isInstance(fs):
            fs = fs.getRawFileSystem()
        self._fs = fs

    def list(self) -> Listing:
        """Every file under the tree, by path (none when it does not exist yet)."""
        found: Listing = {}
        if self._fs.exists(self._root):
            self._walk(self._root, found)
        return found

    def _walk(self, directory: Any, found: Listing) -> None:
        for status in self._fs.listStatus(directory):
            if status.isDirectory():
                self._walk(status.getPath(), found)
            else:
                found[status.getPath().toString()] = (status.getLen(),
                                                      status.getModificationTime())

    def close(self) -> None:
        self._fs.close()


_MAINTENANCE_THREADS = "state-store-maintenance"


class CpuClock:
    """CPU seconds so far of the JVM's maintenance threads and of its whole process."""

    def __init__(self, spark: Any) -> None:
        jvm = spark._jvm
        self._threads = jvm.java.lang.management.ManagementFactory.getThreadMXBean()
        self._pid = int(jvm.java.lang.ProcessHandle.current().pid())
        self._names: dict[int, str] = {}
        self._thread_ns: dict[int, int] = {}
        self._maintenance_ns = 0
        self._tick = os.sysconf("SC_CLK_TCK")

    def maintenance_s(self) -> float:
        """Seconds of CPU of every thread named ``state-store-maintenance*`` since the first
        call: each live thread's increase since the call before is added (a thread that ended
        in between loses what it did since then)."""
        ids = [int(i) for i in self._threads.getAllThreadIds()]
        for i in ids:
            if i not in self._names:
                info = self._threads.getThreadInfo(i)  # None for a thread that has ended
                self._names[i] = "" if info is None else str(info.getThreadName())
        for i in ids:
            if not self._names.get(i, "").startswith(_MAINTENANCE_THREADS):
                continue
            ns = int(self._threads.getThreadCpuTime(i))
            if ns >= 0:
                self._maintenance_ns += ns - self._thread_ns.get(i, 0)
                self._thread_ns[i] = ns
        return self._maintenance_ns / 1e9

    def process_s(self) -> float | None:
        """The process' user and system CPU seconds (``/proc/<pid>/stat``); ``None`` where
        there is no such file."""
        try:
            stat = Path(f"/proc/{self._pid}/stat").read_text()
        except OSError:
            return None
        fields = stat.rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / self._tick


class _Clocks:
    """One sample of both CPU clocks, and the window's share of them."""

    def __init__(self, cpu: CpuClock | None) -> None:
        self._cpu = cpu
        self._last = self._now()

    def _now(self) -> tuple[float | None, float | None]:
        if self._cpu is None:
            return None, None
        return self._cpu.maintenance_s(), self._cpu.process_s()

    def take(self) -> tuple[float | None, float | None]:
        """The maintenance and process CPU seconds since the last call (``None`` for a clock
        that has none)."""
        now = self._now()
        spent = tuple(None if a is None or b is None else round(b - a, 3)
                      for a, b in zip(self._last, now, strict=True))
        self._last = now
        return spent[0], spent[1]


def _settle_s(spark: Any) -> float:
    """One maintenance interval, as the session has it, and :data:`SETTLE_S`."""
    interval = spark.conf.get("spark.sql.streaming.stateStore.maintenanceInterval")
    ms = spark._jvm.org.apache.spark.network.util.JavaUtils.timeStringAsMs(interval)
    return int(ms) / 1000 + SETTLE_S


def _progress_of(query: Any, batch: int) -> dict[str, Any]:
    """The progress of ``batch``, which has completed."""
    for progress in reversed(query.recentProgress):
        if progress["batchId"] == batch and progress["numInputRows"] > 0:
            return dict(progress)
    raise RuntimeError(f"no progress of batch {batch} among {len(query.recentProgress)}")


def measure(spark: Any, preset: Preset, checkpoint: str, workdir: Path,
            print_line: Callable[[str], None], cpu: bool = True
            ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Run the load batch and the measured ones, listing the state tree after each; with
    ``cpu``, the CPU clocks of this process' JVM too (without: ``None``, as on a cluster, whose
    maintenance runs on the executors).

    Returns:
        Every batch's progress (the load's first), and the run's checkpoint figures:
        ``checkpoint_load`` (the load's :class:`Window`), ``checkpoint_batches`` (each
        measured batch's) and :func:`summarize`'s over the measured ones.
    """
    settle_s = _settle_s(spark)
    inputs = workdir / "input"
    lister = StateLister(spark, checkpoint)
    clocks = _Clocks(CpuClock(spark) if cpu else None)
    progresses = []
    windows = []
    try:
        # The run's checkpoint is new: nothing under state/ yet. (Not listed, so that the
        # first listing on a server's log is the one after the load.)
        listed: Listing = {}
        write_batch(inputs, preset, 0)
        query = start(spark, checkpoint, inputs)
        try:
            query.processAllAvailable()
            progresses.append(_progress_of(query, 0))
            time.sleep(settle_s)
            now = lister.list()
            load = diff(listed, now, *clocks.take())
            print_line(_line("load", progresses[-1], load))
            listed = now
            for batch in range(WARMUP_BATCHES, WARMUP_BATCHES + preset.batches):
                write_batch(inputs, preset, batch)
                query.processAllAvailable()
                progresses.append(_progress_of(query, batch))
                if batch == WARMUP_BATCHES + preset.batches - 1:
                    time.sleep(settle_s)
                now = lister.list()
                windows.append(diff(listed, now, *clocks.take(), batch=batch))
                print_line(_line(str(batch), progresses[-1], windows[-1]))
                listed = now
        finally:
            spark.sparkContext.setLogLevel("OFF")
            query.stop()
            spark.sparkContext.setLogLevel("ERROR")
    finally:
        lister.close()
    return progresses, {"checkpoint_load": asdict(load),
                        "checkpoint_batches": [asdict(w) for w in windows],
                        **summarize(windows)}


def _line(name: str, progress: dict[str, Any], w: Window) -> str:
    return (f"batch {name:>5}: {progress['numInputRows']:>9,} rows in "
            f"{progress['durationMs']['triggerExecution']:>6,} ms; state/: "
            f"+{w.files_created} files ({w.bytes_created:,} B), -{w.files_deleted}, "
            f"live {w.files_live} files ({w.bytes_live:,} B); maintenance CPU "
            f"{w.maintenance_cpu_s} s, process CPU {w.process_cpu_s} s")


def mismatched_keys(spark: Any, checkpoint: str, inputs: Path) -> int:
    """The keys whose count or sum in the query's last committed state differs from the
    input's (every batch file in ``inputs`` counted once), or that only one of them has."""
    from pyspark.sql import functions as F

    expected = (spark.read.text(str(inputs)).select(F.col("value").cast("long").alias("key"))
                .groupBy("key").agg(F.count("*").alias("e_count"), F.sum("key").alias("e_sum")))
    state = (spark.read.format("statestore").load(checkpoint)
             .select(F.col("key.key").alias("key"), F.col("value.count").alias("s_count"),
                     F.col("value.sum").alias("s_sum")))
    joined = expected.join(state, "key", "full_outer")
    return int(joined.where(~(F.col("e_count").eqNullSafe(F.col("s_count"))
                              & F.col("e_sum").eqNullSafe(F.col("s_sum")))).count())
