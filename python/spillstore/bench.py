"""``python -m spillstore bench``: end-to-end throughput of spillstore and Spark's own state
store providers on the same streaming aggregation.

Each run is a streaming count + sum per key (update mode, ``noop`` sink) on ``local[2]`` over
a ``rate-micro-batch`` source, which makes fixed-size batches as fast as the query takes them,
in a process of its own (:mod:`spillstore._bench_worker`): every run starts a fresh JVM with
the preset's driver memory. Runs are interleaved (repetition 1: spillstore, hdfs, rocksdb;
repetition 2: ...) so a slow spell of the machine hits every provider alike. A run that fails
(non-zero exit, out of memory, GC overhead, timeout) is a result: it is counted, printed and
plotted, never dropped.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from ._argtypes import parse_option, positive_float, positive_int
from ._config import jar_path, option_key
from ._jobs import PROVIDERS

__all__ = [
    "PRESETS",
    "Preset",
    "RunResult",
    "Summary",
    "WARMUP_BATCHES",
    "add_parser",
    "classify_failure",
    "format_report",
    "plot",
    "summarize",
]

WARMUP_BATCHES = 1
"""Batches each run executes before the measured ones (class loading, code generation, JIT);
they count neither in records/s nor in the commit time."""


@dataclass(frozen=True)
class Preset:
    """A workload: how many keys, how the rows map to them, and how much the driver gets."""

    name: str
    keys: int
    """Distinct keys the rows are spread over."""
    rows_per_batch: int
    batches: int
    """Measured batches, after :data:`WARMUP_BATCHES` warm-up batches."""
    driver_memory: str
    """``spark.driver.memory`` (local mode: the heap of the JVM that runs everything)."""
    skewed: bool = False
    """Zipf-like keys (``_jobs.skewed_key``) instead of ``value % keys``, which fills the key
    space in order."""
    one_hit_share: float = 0.0
    """Share of the rows whose key is new and never seen again (a scan through the cache);
    the other rows spread uniformly over the ``keys`` hot keys."""
    memory_budget: str | None = None
    """spillstore's ``memoryBudget`` for the preset (a preset about eviction sets one smaller
    than its state); ``None``: spillstore's default, a share of the driver memory."""

    def describe(self) -> str:
        """One line naming every parameter of the workload."""
        kind = "skewed" if self.skewed else "uniform"
        keys = (f"{self.keys:,} hot keys taking {1 - self.one_hit_share:.0%} of the rows, the "
                f"rest on keys seen once" if self.one_hit_share else f"{self.keys:,} {kind} keys")
        budget = f", spillstore memoryBudget {self.memory_budget}" if self.memory_budget else ""
        return (f"{self.name}: {keys}, {self.batches} batches of {self.rows_per_batch:,} rows "
                f"measured after {WARMUP_BATCHES} warm-up batch, driver memory "
                f"{self.driver_memory}{budget}")


PRESETS = {
    p.name: p
    for p in (
        Preset("small", keys=1_000_000, rows_per_batch=200_000, batches=8, driver_memory="1g"),
        Preset("skewed", keys=1_000_000, rows_per_batch=200_000, batches=8, driver_memory="1g",
               skewed=True),
        Preset("large", keys=25_000_000, rows_per_batch=1_000_000, batches=25,
               driver_memory="1g"),
        Preset("onehit", keys=10_000, rows_per_batch=500_000, batches=12, driver_memory="1g",
               one_hit_share=0.1, memory_budget="32m"),
    )
}
"""``small``: state that fits the heap; ``skewed``: hot keys and a long cold tail; ``large``:
25M distinct keys, far beyond a 1 GB driver (Spark's default provider is expected to die in
GC); ``onehit``: a hot set that fits plus a stream of keys seen once, several times the budget
over the run (a cache must keep the hot set: the oracle that knows it hits on every lookup
after the warm-up batch, since a new key's lookup is answered without RocksDB)."""


@dataclass(frozen=True)
class RunResult:
    """One (preset, provider, repetition) run: its measurements, or why it failed."""

    preset: str
    provider: str
    repetition: int
    seconds: float
    """Wall time of the run's process."""
    failure: str | None = None
    """``None`` for a run that completed, else the kind of failure and the telling line."""
    records_per_s: float | None = None
    """Input rows of the measured batches / the sum of their ``triggerExecution`` times."""
    commit_ms: float | None = None
    """Median over the measured batches of ``stateOperators[0].commitTimeMs``."""
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


def _run_once(preset: Preset, provider: str, repetition: int, options: dict[str, str],
              timeout_s: float) -> RunResult:
    """Run one benchmark process and wait for it, killing its process group (the Python
    worker and the JVM it launched) at the timeout."""
    workdir = tempfile.mkdtemp(prefix="spillstore-bench-")
    spec = {"preset": asdict(preset), "provider": provider, "options": options,
            "workdir": workdir, "timeout_s": timeout_s}
    started = time.monotonic()
    process = subprocess.Popen(
        [sys.executable, "-m", "spillstore._bench_worker", json.dumps(spec)],
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
        shutil.rmtree(workdir, ignore_errors=True)
    seconds = time.monotonic() - started
    base = RunResult(preset.name, provider, repetition, round(seconds, 1))
    if process.returncode == 0 and timed_out_after is None:
        try:
            return replace(base, **json.loads(stdout.strip().splitlines()[-1]))
        except (IndexError, ValueError, TypeError) as e:
            stderr += f"\nno result line on stdout: {e!r}"
    return replace(base, failure=classify_failure(process.returncode, stderr, timed_out_after),
                   stderr_tail=tuple(stderr.strip().splitlines()[-20:]))


@dataclass(frozen=True)
class Summary:
    """The runs of one provider on one preset, condensed (medians over the completed runs)."""

    preset: str
    provider: str
    ok: int
    failed: int
    records_per_s: float | None = None
    records_min: float | None = None
    records_max: float | None = None
    commit_ms: float | None = None
    gc_s: float | None = None
    gc_share: float | None = None
    hit_ratio: float | None = None
    peak_rss_mb: float | None = None
    """The highest peak over the runs."""
    state_rows: tuple[int, ...] = ()
    """The distinct final state row counts, ascending (one value when the runs agree)."""
    failures: tuple[str, ...] = ()
    """``rep N: <failure>`` for each failed run."""


def _median(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def summarize(results: Sequence[RunResult]) -> list[Summary]:
    """One :class:`Summary` per (preset, provider), in the order they first appear."""
    groups: dict[tuple[str, str], list[RunResult]] = {}
    for r in results:
        groups.setdefault((r.preset, r.provider), []).append(r)
    summaries = []
    for (preset, provider), runs in groups.items():
        ok = [r for r in runs if r.ok]
        rates = [r.records_per_s for r in ok if r.records_per_s is not None]
        rss = [r.peak_rss_mb for r in ok if r.peak_rss_mb is not None]
        summaries.append(Summary(
            preset=preset,
            provider=provider,
            ok=len(ok),
            failed=len(runs) - len(ok),
            records_per_s=_median(rates),
            records_min=min(rates, default=None),
            records_max=max(rates, default=None),
            commit_ms=_median([r.commit_ms for r in ok]),
            gc_s=_median([r.gc_s for r in ok]),
            gc_share=_median([r.gc_share for r in ok]),
            hit_ratio=_median([r.hit_ratio for r in ok]),
            peak_rss_mb=max(rss, default=None),
            state_rows=tuple(sorted({r.state_rows for r in ok if r.state_rows is not None})),
            failures=tuple(f"rep {r.repetition}: {r.failure}" for r in runs if not r.ok),
        ))
    return summaries


def _baseline(summaries: Sequence[Summary]) -> Summary | None:
    """What the ratio column compares with: spillstore, else hdfs, when it has a rate."""
    for name in ("spillstore", "hdfs"):
        for s in summaries:
            if s.provider == name and s.records_per_s:
                return s
    return None


def _num(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


_HEADER = ("provider", "runs ok/failed", "records/s median (min–max)", "vs {}",
           "commit ms", "GC s", "GC %", "peak RSS MB", "hit ratio", "state rows")


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def format_report(preset: Preset, summaries: Sequence[Summary]) -> str:
    """The table of one preset: a line per provider, then one line per failed run.

    The ratio column divides each provider's median records/s by spillstore's (by hdfs'
    when spillstore has none); commit ms, GC s, GC % (of the JVM's uptime) and the hit ratio
    (spillstore's) are medians over the completed runs, peak RSS is their maximum.
    """
    base = _baseline(summaries)
    header = [h.format(base.provider if base else "-") for h in _HEADER]
    rows = [header]
    for s in summaries:
        rate = "-" if s.records_per_s is None else (
            f"{_num(s.records_per_s)} ({_num(s.records_min)}–{_num(s.records_max)})")
        ratio = (f"{s.records_per_s / base.records_per_s:.2f}x"
                 if base and base.records_per_s and s.records_per_s is not None else "-")
        state = "–".join(dict.fromkeys(f"{n:,}" for n in s.state_rows[:1] + s.state_rows[-1:]))
        rows.append([s.provider, f"{s.ok}/{s.failed}", rate, ratio, _num(s.commit_ms),
                     _num(s.gc_s, 1), _percent(s.gc_share), _num(s.peak_rss_mb),
                     _percent(s.hit_ratio), state or "-"])
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = [preset.describe()]
    for row in rows:
        cells = [row[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(row[1:], widths[1:])]
        lines.append("  ".join(cells))
    lines += [f"  FAILED {s.provider} {f}" for s in summaries for f in s.failures]
    return "\n".join(lines)


def plot(summaries: Sequence[Summary], path: str) -> None:
    """Draw the runs into ``path`` (PNG), one panel per measure, bars grouped by preset with
    one per provider: records/s (median, error bars min–max), peak RSS, GC share of the
    JVM's uptime and spillstore's hit ratio. A provider with failed runs gets ``n/m failed``
    over its records/s bar (a bar of height 0 when none completed). Needs matplotlib
    (``spillstore[bench]``)."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import PercentFormatter, StrMethodFormatter

    presets = list(dict.fromkeys(s.preset for s in summaries))
    providers = list(dict.fromkeys(s.provider for s in summaries))
    by_key = {(s.preset, s.provider): s for s in summaries}
    width = 0.8 / len(providers)
    fig = Figure(figsize=(max(9.0, 3.0 * len(presets) + 3), 8.0), layout="constrained")
    axes = fig.subplots(2, 2).flatten()

    def cells(provider: str) -> list[tuple[float, Summary]]:
        placed = [(j, by_key[(preset, provider)]) for j, preset in enumerate(presets)
                  if (preset, provider) in by_key]
        offset = (providers.index(provider) - (len(providers) - 1) / 2) * width
        return [(j + offset, s) for j, s in placed]

    rate_ax = axes[0]
    top = max((s.records_max or 0.0 for s in summaries), default=0.0) or 1.0
    for provider in providers:
        placed = cells(provider)
        heights = [s.records_per_s or 0.0 for _, s in placed]
        errors = [[h - (s.records_min or h) for h, (_, s) in zip(heights, placed)],
                  [(s.records_max or h) - h for h, (_, s) in zip(heights, placed)]]
        rate_ax.bar([x for x, _ in placed], heights, width * 0.95, yerr=errors, capsize=3,
                    label=provider)
        for h, (x, s) in zip(heights, placed):
            if s.failed:
                rate_ax.text(x, max(h, s.records_max or 0.0) + top * 0.02,
                             f"{s.failed}/{s.ok + s.failed} failed", rotation=90, ha="center",
                             va="bottom", color="firebrick", fontsize=8)
    rate_ax.set_ylim(0, top * 1.35)
    rate_ax.yaxis.set_major_formatter(StrMethodFormatter("{x:,.0f}"))
    rate_ax.set_ylabel("records/s (median; bars: min–max)")
    rate_ax.legend()

    panels = ((axes[1], "peak_rss_mb", "peak RSS MB (max of runs)", None),
              (axes[2], "gc_share", "GC time / JVM uptime (median)", PercentFormatter(1.0)),
              (axes[3], "hit_ratio", "spillstore heap hit ratio (median)", PercentFormatter(1.0)))
    for ax, field, label, formatter in panels:
        for provider in providers:
            placed = [(x, getattr(s, field)) for x, s in cells(provider)]
            ax.bar([x for x, _ in placed], [v or 0.0 for _, v in placed], width * 0.95,
                   label=provider)
        ax.set_ylabel(label)
        if formatter is not None:
            ax.yaxis.set_major_formatter(formatter)
    for ax in axes:
        ax.set_xticks(range(len(presets)), presets)
    fig.suptitle("spillstore bench: streaming count + sum per key, local[2]")
    fig.savefig(path, dpi=110)


def _providers(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in PROVIDERS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"expected a comma-separated list of {', '.join(PROVIDERS)}, got {text!r}")
    return list(dict.fromkeys(names))


def add_parser(commands: Any) -> None:
    """Add the ``bench`` subcommand to the subparsers of ``python -m spillstore``."""
    bench = commands.add_parser(
        "bench", help="compare records/s of spillstore, hdfs and rocksdb on a streaming "
        "aggregation, each run in its own process",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    bench.add_argument("--preset", action="append", choices=[*PRESETS, "all"],
                       help="workload to run (repeatable; default: small): "
                       # argparse formats help with %: the onehit preset's "90%" would break it
                       + "; ".join(p.describe() for p in PRESETS.values()).replace("%", "%%"))
    bench.add_argument("--repetitions", type=positive_int, default=3,
                       help="runs of each provider per preset, interleaved (default: "
                       "%(default)s)")
    bench.add_argument("--providers", type=_providers, default=list(PROVIDERS),
                       help="comma-separated providers to compare (default: "
                       f"{','.join(PROVIDERS)})")
    bench.add_argument("--keys", type=positive_int, help="override the presets' key count")
    bench.add_argument("--rows-per-batch", type=positive_int,
                       help="override the presets' rows per batch")
    bench.add_argument("--batches", type=positive_int,
                       help="override the presets' number of measured batches")
    bench.add_argument("--driver-memory", help="override the presets' spark.driver.memory")
    bench.add_argument("--option", type=parse_option, action="append", default=[],
                       metavar="NAME=VALUE",
                       help="a spillstore option for its runs (repeatable)")
    bench.add_argument("--timeout", type=positive_float, default=1200.0, metavar="SECONDS",
                       help="per run; a run past it is killed and counted as failed "
                       "(default: %(default)g)")
    bench.add_argument("--json", metavar="FILE", help="write every run's raw results here")
    bench.add_argument("--plot", metavar="FILE.png",
                       help="draw the comparison (needs matplotlib: spillstore[bench])")
    bench.set_defaults(run=_bench)


def _bench(args: argparse.Namespace) -> int:
    options = dict(args.option)
    try:  # fail now, not after an hour of runs
        for name in options:
            option_key(name)
        if "spillstore" in args.providers:
            jar_path()
        if args.plot:
            import matplotlib  # noqa: F401
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except FileNotFoundError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except ImportError:
        print("error: --plot needs matplotlib: pip install 'spillstore[bench]'",
              file=sys.stderr)
        return 2
    names = list(PRESETS) if "all" in (args.preset or []) else list(
        dict.fromkeys(args.preset or ["small"]))
    overrides = {k: getattr(args, k) for k in ("keys", "rows_per_batch", "batches",
                                               "driver_memory") if getattr(args, k)}
    presets = [replace(PRESETS[name], **overrides) for name in names]
    results: list[RunResult] = []
    for preset in presets:
        runs = []
        for repetition in range(1, args.repetitions + 1):
            for provider in args.providers:
                result = _run_once(preset, provider, repetition, options, args.timeout)
                outcome = (f"{_num(result.records_per_s)} records/s" if result.ok
                           else f"FAILED {result.failure}")
                print(f"[{preset.name} {repetition}/{args.repetitions}] {provider}: {outcome} "
                      f"({result.seconds:.0f} s)", file=sys.stderr, flush=True)
                runs.append(result)
        results += runs
        print(format_report(preset, summarize(runs)) + "\n", flush=True)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"warmup_batches": WARMUP_BATCHES, "options": options,
                       "timeout_s": args.timeout, "presets": [asdict(p) for p in presets],
                       "runs": [asdict(r) for r in results]}, f, indent=2)
    if args.plot:
        plot(summarize(results), args.plot)
    return 0
