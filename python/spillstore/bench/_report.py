"""The results of ``python -m spillstore bench``, condensed: per (preset, provider) medians
(:class:`Summary`), the table printed per preset and the chart."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from ._presets import Preset
from ._runner import Cluster, RunResult

__all__ = ["Summary", "format_number", "format_report", "plot", "summarize"]


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
    restart_s: float | None = None
    gc_s: float | None = None
    gc_share: float | None = None
    hit_ratio: float | None = None
    peak_rss_mb: float | None = None
    """The highest peak over the runs."""
    executor_rss_mb: float | None = None
    """With ``--cluster``: the highest executor peak RSS over the runs."""
    executor_rss_each_mb: tuple[float, ...] = ()
    """Each executor's peak RSS in the run of that highest peak, ascending."""
    executor_allotment_mb: int | None = None
    executor_rss_share: float | None = None
    """``executor_rss_mb`` over ``executor_allotment_mb``."""
    state_rows: tuple[int, ...] = ()
    """The distinct final state row counts, ascending (one value when the runs agree)."""
    batch_ms: float | None = None
    bytes_per_batch: float | None = None
    """Checkpoint-cost presets, as the next fields: medians over the completed runs of each
    run's mean per measured batch (:class:`spillstore.bench.RunResult`)."""
    files_per_batch: float | None = None
    files_deleted_per_batch: float | None = None
    max_live_bytes: int | None = None
    """The highest over the runs."""
    maintenance_cpu_s_per_batch: float | None = None
    process_cpu_s_per_batch: float | None = None
    load_bytes: float | None = None
    """The median of the bytes the load batch's window created."""
    load_files: float | None = None
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
        # The completed run whose executors peaked highest; with none, one that has no peak.
        executor_peak = max(ok or runs, key=lambda r: r.executor_rss_mb or 0.0)
        summaries.append(Summary(
            preset=preset,
            provider=provider,
            ok=len(ok),
            failed=len(runs) - len(ok),
            records_per_s=_median(rates),
            records_min=min(rates, default=None),
            records_max=max(rates, default=None),
            commit_ms=_median([r.commit_ms for r in ok]),
            restart_s=_median([r.restart_s for r in ok]),
            gc_s=_median([r.gc_s for r in ok]),
            gc_share=_median([r.gc_share for r in ok]),
            hit_ratio=_median([r.hit_ratio for r in ok]),
            peak_rss_mb=max(rss, default=None),
            executor_rss_mb=executor_peak.executor_rss_mb,
            executor_rss_each_mb=tuple(sorted((executor_peak.executor_rss_each_mb
                                               or {}).values())),
            executor_allotment_mb=executor_peak.executor_allotment_mb,
            executor_rss_share=executor_peak.executor_rss_share,
            state_rows=tuple(sorted({r.state_rows for r in ok if r.state_rows is not None})),
            batch_ms=_median([r.batch_ms for r in ok]),
            bytes_per_batch=_median([r.bytes_per_batch for r in ok]),
            files_per_batch=_median([r.files_per_batch for r in ok]),
            files_deleted_per_batch=_median([r.files_deleted_per_batch for r in ok]),
            max_live_bytes=max((r.max_live_bytes for r in ok if r.max_live_bytes is not None),
                               default=None),
            maintenance_cpu_s_per_batch=_median([r.maintenance_cpu_s_per_batch for r in ok]),
            process_cpu_s_per_batch=_median([r.process_cpu_s_per_batch for r in ok]),
            load_bytes=_median([(r.checkpoint_load or {}).get("bytes_created") for r in ok]),
            load_files=_median([(r.checkpoint_load or {}).get("files_created") for r in ok]),
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


def format_number(value: float | None, digits: int = 0) -> str:
    """``value`` with thousands separators and ``digits`` decimals; ``-`` for ``None``."""
    return "-" if value is None else f"{value:,.{digits}f}"


_HEADER = ("provider", "runs ok/failed", "records/s median (min–max)", "vs {}",
           "commit ms", "restart s", "GC s", "GC %", "peak RSS MB",
           "executor peak RSS MB max (each)", "of allotment MB", "hit ratio", "state rows")
_RESTART = _HEADER.index("restart s")
_EXECUTOR_RSS = (_HEADER.index("executor peak RSS MB max (each)"),
                 _HEADER.index("of allotment MB"))


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def _executor_rss(s: Summary) -> tuple[str, str]:
    if s.executor_rss_mb is None:
        return "-", "-"
    each = ", ".join(format_number(v) for v in s.executor_rss_each_mb)
    share = _percent(s.executor_rss_share)
    return (f"{format_number(s.executor_rss_mb)} ({each})",
            f"{share} of {format_number(s.executor_allotment_mb)}")


def format_report(preset: Preset, summaries: Sequence[Summary],
                  cluster: Cluster | None = None) -> str:
    """The table of one preset: a line per provider, then one line per failed run.

    The ratio column divides each provider's median records/s by spillstore's (by hdfs'
    when spillstore has none); commit ms, restart s (a column only when some run restarted),
    GC s, GC % (of the driver JVM's uptime) and the hit ratio (spillstore's) are medians over
    the completed runs, the driver's peak RSS is their maximum. On a ``cluster`` (named under
    the preset), the executors' peak RSS of the run with the highest, and its share of an
    executor's allotment (columns only when some run has them).
    """
    base = _baseline(summaries)
    restarted = any(s.restart_s is not None for s in summaries)
    on_cluster = any(s.executor_rss_mb is not None for s in summaries)
    header = [h.format(base.provider if base else "-") for h in _HEADER]
    rows = [header]
    for s in summaries:
        rate = "-" if s.records_per_s is None else (
            f"{format_number(s.records_per_s)} "
            f"({format_number(s.records_min)}–{format_number(s.records_max)})")
        ratio = (f"{s.records_per_s / base.records_per_s:.2f}x"
                 if base and base.records_per_s and s.records_per_s is not None else "-")
        state = "–".join(dict.fromkeys(f"{n:,}" for n in s.state_rows[:1] + s.state_rows[-1:]))
        rows.append([s.provider, f"{s.ok}/{s.failed}", rate, ratio, format_number(s.commit_ms),
                     format_number(s.restart_s, 1), format_number(s.gc_s, 1),
                     _percent(s.gc_share), format_number(s.peak_rss_mb), *_executor_rss(s),
                     _percent(s.hit_ratio), state or "-"])
    dropped = ({_RESTART} if not restarted else set()) | (
        set(_EXECUTOR_RSS) if not on_cluster else set())
    rows = [[c for i, c in enumerate(row) if i not in dropped] for row in rows]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = [preset.describe()]
    if cluster is not None:
        lines.append(f"tasks on {cluster.master}, executor memory "
                     f"{cluster.executor_memory_mb:,} MB; GC and peak RSS MB are the driver's")
    for row in rows:
        cells = [row[0].ljust(widths[0])] + [
            c.rjust(w) for c, w in zip(row[1:], widths[1:], strict=True)]
        lines.append("  ".join(cells))
    lines += [f"  FAILED {s.provider} {f}" for s in summaries for f in s.failures]
    if any(s.bytes_per_batch is not None for s in summaries):
        lines += ["", *_checkpoint_table(summaries, restarted)]
    return "\n".join(lines)


_MB = 2 ** 20


def _mb(value: float | None) -> str:
    return "-" if value is None else f"{value / _MB:,.2f}"


def _checkpoint_table(summaries: Sequence[Summary], restarted: bool) -> list[str]:
    """A checkpoint-cost preset's second table: per provider, what the load left under the
    checkpoint's ``state/``, then per measured batch the MB and files created there, the files
    deleted, the most MB live, and the CPU seconds of maintenance and of the whole process
    (medians over the runs of their means; the live MB the highest)."""
    header = ["provider", "load MB (files)", "MB/batch", "files/batch", "deleted/batch",
              "max live MB", "maint. CPU s/batch", "process CPU s/batch", "batch ms",
              *(["restart s"] if restarted else [])]
    rows = [header]
    for s in summaries:
        load = ("-" if s.load_bytes is None
                else f"{_mb(s.load_bytes)} ({format_number(s.load_files)})")
        rows.append([s.provider, load, _mb(s.bytes_per_batch),
                     format_number(s.files_per_batch, 1),
                     format_number(s.files_deleted_per_batch, 1), _mb(s.max_live_bytes),
                     format_number(s.maintenance_cpu_s_per_batch, 3),
                     format_number(s.process_cpu_s_per_batch, 2), format_number(s.batch_ms),
                     *([format_number(s.restart_s, 1)] if restarted else [])])
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = ["checkpoint per measured batch: the files under <checkpoint>/state/ listed after "
             "each batch (the last one's a maintenance interval later); CPU of Spark's "
             "maintenance threads and of the whole process"]
    for row in rows:
        lines.append("  ".join([row[0].ljust(widths[0])] + [
            c.rjust(w) for c, w in zip(row[1:], widths[1:], strict=True)]))
    return lines


def plot(summaries: Sequence[Summary], path: str, cluster: Cluster | None = None) -> None:
    """Draw the runs into ``path`` (PNG), one panel per measure, bars grouped by preset with
    one per provider: records/s (median, error bars min–max), peak RSS (on a ``cluster``, the
    executors'), GC share of the driver JVM's uptime and spillstore's hit ratio. A provider
    with failed runs gets ``n/m failed`` over its records/s bar (a bar of height 0 when none
    completed). Needs matplotlib (``spillstore[bench]``)."""
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
        errors = [[h - (s.records_min or h) for h, (_, s) in zip(heights, placed, strict=True)],
                  [(s.records_max or h) - h for h, (_, s) in zip(heights, placed, strict=True)]]
        rate_ax.bar([x for x, _ in placed], heights, width * 0.95, yerr=errors, capsize=3,
                    label=provider)
        for h, (x, s) in zip(heights, placed, strict=True):
            if s.failed:
                rate_ax.text(x, max(h, s.records_max or 0.0) + top * 0.02,
                             f"{s.failed}/{s.ok + s.failed} failed", rotation=90, ha="center",
                             va="bottom", color="firebrick", fontsize=8)
    rate_ax.set_ylim(0, top * 1.35)
    rate_ax.yaxis.set_major_formatter(StrMethodFormatter("{x:,.0f}"))
    rate_ax.set_ylabel("records/s (median; bars: min–max)")
    rate_ax.legend()

    rss = (("peak_rss_mb", "peak RSS MB (max of runs)") if cluster is None
           else ("executor_rss_mb", "executor peak RSS MB (max of runs)"))
    panels = ((axes[1], *rss, None),
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
    where = "local[2]" if cluster is None else cluster.master
    fig.suptitle(f"spillstore bench: streaming count + sum per key, {where}")
    fig.savefig(path, dpi=110)

