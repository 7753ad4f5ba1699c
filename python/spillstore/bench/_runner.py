"""One run of ``python -m spillstore bench``: the worker process
(:mod:`spillstore.bench._worker`) started, waited for and killed at its timeout, with
``--restart`` a second one restarting the query on the same checkpoint, and what came out of
them (:class:`RunResult`), a failure included."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from ._presets import Preset

__all__ = ["Cluster", "RunResult", "Setup", "classify_failure", "executor_allotment_mb",
           "memory_mb", "run_once"]


@dataclass(frozen=True)
class RunResult:
    """One (preset, provider, repetition) run: its measurements, or why it failed."""

    preset: str
    provider: str
    repetition: int
    seconds: float
    """Wall time of the run's processes (with ``--restart``, both)."""
    failure: str | None = None
    """``None`` for a run that completed, else the kind of failure and the telling line."""
    records_per_s: float | None = None
    """Input rows of the measured batches / the sum of their ``triggerExecution`` times."""
    commit_ms: float | None = None
    """Median over the measured batches of ``stateOperators[0].commitTimeMs``."""
    updates_ms: float | None = None
    """Median over the measured batches of ``stateOperators[0].allUpdatesTimeMs``: the time
    the state's reads and writes took (with ``commit_ms``, the state's share of a batch), summed
    over its stores, as the commit time is. Written to ``--json`` only."""
    batch_ms: float | None = None
    """Median over the measured batches of ``durationMs.triggerExecution``. ``--json`` only."""
    each_batch_ms: list[list[int]] | None = None
    """Each measured batch's ``triggerExecution``, state updates and commit times in ms, in
    batch order (a slow batch among even ones shows here, not in the medians). ``--json``
    only."""
    forced_snapshots: list[int] | None = None
    """Each measured batch's snapshots forced on commit (Spark 4.2+'s snapshot-lag
    ``forceSnapshotUploadOnLag``; ``forceSnapshotCount``), in batch order; ``None`` for a
    provider that does not report them. ``--json`` only."""
    gc_s: float | None = None
    """Collection time of all the driver JVM's collectors over its life."""
    gc_share: float | None = None
    """``gc_s`` over the driver JVM's uptime when the measured batches were done."""
    hit_ratio: float | None = None
    """spillstore's heap hits over lookups in the measured batches (None for the others)."""
    peak_rss_mb: float | None = None
    """The driver JVM's peak resident set (``VmHWM``) when the measured batches were done."""
    state_rows: int | None = None
    """State rows of the last committed batch, counted with the state data source."""
    state_stores: int | None = None
    """State store instances per batch (``stateOperators[0].numStateStoreInstances``)."""
    executor_rss_mb: float | None = None
    """With ``--cluster``: the highest of :attr:`executor_rss_each_mb`."""
    executor_rss_each_mb: dict[str, float] | None = None
    """With ``--cluster``: each executor's peak resident set by executor id, as Spark's own
    executor metrics saw it (``ProcessTreeJVMRSSMemory`` among their peaks), when the measured
    batches were done."""
    executor_allotment_mb: int | None = None
    """With ``--cluster``: the memory a cluster manager grants an executor container
    (:func:`executor_allotment_mb`)."""
    executor_rss_share: float | None = None
    """``executor_rss_mb`` over ``executor_allotment_mb``."""
    restart_s: float | None = None
    """With ``--restart``: from ``start()`` of the query restarted in a fresh JVM to the end
    of its first batch."""
    bytes_per_batch: float | None = None
    """Checkpoint-cost presets (:mod:`spillstore.bench._cost`), as the next fields: the mean
    over the measured batches of the bytes of the files that appeared under the checkpoint's
    ``state/``."""
    files_per_batch: float | None = None
    """The mean of the files that appeared under ``state/`` per measured batch."""
    files_deleted_per_batch: float | None = None
    """The mean of the files that went from ``state/`` per measured batch."""
    max_live_bytes: int | None = None
    """The most bytes under ``state/`` after any measured batch."""
    maintenance_cpu_s_per_batch: float | None = None
    """The mean CPU seconds per measured batch of Spark's state store maintenance threads
    (JVM threads: not RocksDB's native ones)."""
    process_cpu_s_per_batch: float | None = None
    """The mean CPU seconds per measured batch of the whole worker process (the batch's tasks,
    the driver, GC, JIT, every native thread, maintenance and the listing)."""
    checkpoint_load: dict[str, Any] | None = None
    """The load batch's window (``spillstore.bench._cost.Window``'s fields): from the query's
    start to a maintenance interval and a bit after the batch."""
    checkpoint_batches: list[dict[str, Any]] | None = None
    """Each measured batch's window, in order; the last one's ends a maintenance interval and
    a bit after it."""
    checkpoint: str | None = None
    """The run's checkpoint, under ``--checkpoint-dir`` (kept); ``None`` for a local temp
    directory (removed)."""
    stderr_tail: tuple[str, ...] = ()
    """The last lines of a failed run's stderr."""

    @property
    def ok(self) -> bool:
        """Whether the run completed and measured."""
        return self.failure is None


_OOM = re.compile(r"OutOfMemoryError|Cannot allocate memory")
_GC_OVERHEAD = re.compile(r"GC overhead limit exceeded")
_WORKER_TIMEOUT = re.compile(r"^timed out after")
_EXCEPTION = re.compile(r"\b[\w.$]*(Error|Exception)\b")


def classify_failure(returncode: int | None, stderr: str,
                     timed_out_after: float | None = None) -> str:
    """Name what ended a failed run, followed by its most telling stderr line.

    Args:
        returncode: the process' exit status (negative: killed by that signal).
        stderr: everything the run wrote to stderr.
        timed_out_after: the timeout in seconds, when the run was killed for exceeding it.

    Returns:
        ``"<kind>: <line>"`` (or just the kind), the kind being ``timeout after N s``,
        ``GC overhead``, ``OOM``, ``killed by SIGNAME`` or ``exit status N``; the line is the
        first one naming the out-of-memory or GC overhead error, else the last exception line,
        else the last line, cut to 200 characters.
    """
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]

    def first(pattern: re.Pattern[str]) -> str | None:
        return next((line for line in lines if pattern.search(line)), None)

    telling = first(_GC_OVERHEAD) or first(_OOM)
    if timed_out_after is not None:
        kind = f"timeout after {timed_out_after:g} s"
    elif first(_GC_OVERHEAD):
        kind = "GC overhead"
    elif telling:
        kind = "OOM"
    elif first(_WORKER_TIMEOUT):
        kind = "timeout"
        telling = first(_WORKER_TIMEOUT)
    elif returncode is not None and returncode < 0:
        kind = f"killed by {signal.Signals(-returncode).name}"
    else:
        kind = f"exit status {returncode}"
    if telling is None:
        telling = next((line for line in reversed(lines) if _EXCEPTION.search(line)),
                       lines[-1] if lines else None)
    return f"{kind}: {telling[:200]}" if telling else kind


_MEMORY = re.compile(r"(\d+)([kmgt]?)b?", re.IGNORECASE)
_MEMORY_UNITS_KB = {"k": 1, "m": 1024, "g": 1024 ** 2, "t": 1024 ** 3}


def memory_mb(text: str) -> int:
    """A JVM memory string as Spark's memory confs take it (``1g``, ``768m``, ``1536``: no unit
    is MiB), in MiB, rounded down."""
    match = _MEMORY.fullmatch(text.strip())
    if not match:
        raise ValueError(f"expected a memory size such as 768m or 1g, got {text!r}")
    number, unit = int(match.group(1)), match.group(2).lower()
    return number if not unit else number * _MEMORY_UNITS_KB[unit] // 1024


# Spark's defaults for the overhead a cluster manager adds to an executor's heap.
_OVERHEAD_FACTOR = 0.1
_MIN_OVERHEAD_MB = 384


def executor_allotment_mb(executor_memory_mb: int, conf: dict[str, str]) -> int:
    """``spark.executor.memory`` plus the overhead YARN and Kubernetes add to it for the
    container (``spark.executor.memoryOverhead`` when set in ``conf``, else the larger of
    ``spark.executor.minMemoryOverhead``, 384 MiB by default, and
    ``spark.executor.memoryOverheadFactor``, 0.1 by default, of the memory)."""
    overhead = conf.get("spark.executor.memoryOverhead")
    if overhead is not None:
        return executor_memory_mb + memory_mb(overhead)
    factor = float(conf.get("spark.executor.memoryOverheadFactor", _OVERHEAD_FACTOR))
    floor = memory_mb(conf.get("spark.executor.minMemoryOverhead", f"{_MIN_OVERHEAD_MB}m"))
    return executor_memory_mb + max(floor, int(executor_memory_mb * factor))


@dataclass(frozen=True)
class Cluster:
    """Spark's standalone cluster within the run's process: ``local-cluster[N,CORES,MEM]``, a
    worker JVM of ``memory_mb`` per executor, each running one executor JVM."""

    executors: int
    cores: int
    """Per executor."""
    memory_mb: int
    """Each worker's memory, which its executor's ``spark.executor.memory`` must fit."""
    executor_memory_mb: int

    @property
    def master(self) -> str:
        return f"local-cluster[{self.executors},{self.cores},{self.memory_mb}]"


@dataclass(frozen=True)
class Setup:
    """What every run of one ``bench`` command shares beyond its preset and provider."""

    timeout_s: float
    """Per process; one past it is killed and its run counted as failed."""
    options: dict[str, str] = field(default_factory=dict)
    """spillstore options (its runs only)."""
    conf: dict[str, str] = field(default_factory=dict)
    """Spark confs for every run."""
    checkpoint_dir: str | None = None
    """A URI each run makes a fresh sub-directory of for its checkpoint; ``None``: the run's
    local temp directory."""
    restart: bool = False
    """Whether a second process restarts each run's query, for :attr:`RunResult.restart_s`."""
    cluster: Cluster | None = None
    """Where the query's tasks run: ``None`` for the driver (``local[2]``), else executor JVMs
    apart from it."""


def run_once(preset: Preset, provider: str, repetition: int, setup: Setup) -> RunResult:
    """Run one benchmark process (and with ``setup.restart`` or ``preset.restart`` the
    restarting one after it) and wait for it, killing its process group (the Python worker and
    the JVM it launched) at the timeout."""
    workdir = tempfile.mkdtemp(prefix="spillstore-bench-")
    checkpoint = None
    if setup.checkpoint_dir is not None:
        checkpoint = (f"{setup.checkpoint_dir.rstrip('/')}/"
                      f"{preset.name}-{provider}-{repetition}-{uuid.uuid4().hex[:8]}")
    spec = {"preset": asdict(preset), "provider": provider, "options": setup.options,
            "conf": setup.conf, "workdir": workdir,
            "checkpoint": checkpoint or os.path.join(workdir, "checkpoint"),
            "timeout_s": setup.timeout_s, "restart": False,
            "cluster": None if setup.cluster is None else asdict(setup.cluster)}
    base = RunResult(preset.name, provider, repetition, 0.0, checkpoint=checkpoint)
    started = time.monotonic()
    try:
        result = _run_worker(spec, setup.timeout_s, base)
        if (setup.restart or preset.restart) and result.ok:
            restarted = _run_worker({**spec, "restart": True}, setup.timeout_s, base)
            result = (replace(result, restart_s=restarted.restart_s) if restarted.ok else
                      replace(result, failure=f"restart: {restarted.failure}",
                              stderr_tail=restarted.stderr_tail))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    if setup.cluster is not None:
        allotment = executor_allotment_mb(setup.cluster.executor_memory_mb, setup.conf)
        rss = result.executor_rss_mb
        result = replace(result, executor_allotment_mb=allotment,
                         executor_rss_share=None if rss is None else round(rss / allotment, 4))
    return replace(result, seconds=round(time.monotonic() - started, 1))


def _run_worker(spec: dict[str, object], timeout_s: float, base: RunResult) -> RunResult:
    """One worker process: ``base`` with the fields of its result line, or its failure."""
    process = subprocess.Popen(
        [sys.executable, "-m", "spillstore.bench._worker", json.dumps(spec)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    timed_out_after = None
    try:
        try:
            stdout, stderr = process.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out_after = timeout_s
            os.killpg(process.pid, signal.SIGKILL)
            stdout, stderr = process.communicate()
    finally:
        if process.poll() is None:  # interrupted while waiting (Ctrl-C)
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    if process.returncode == 0 and timed_out_after is None:
        try:
            return replace(base, **json.loads(stdout.strip().splitlines()[-1]))
        except (IndexError, ValueError, TypeError) as e:
            stderr += f"\nno result line on stdout: {e!r}"
    return replace(base, failure=classify_failure(process.returncode, stderr, timed_out_after),
                   stderr_tail=tuple(stderr.strip().splitlines()[-20:]))

