"""What the local streaming jobs print about their micro-batches: a table line per completed
batch (the demo's and each benchmark run's), and the demo's closing summary."""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from typing import Any

from .metrics import cache_hit_ratio, size_text, state_metrics

__all__ = ["follow", "header", "print_summary"]

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
    return "-" if n is None else size_text(n)


def _fmt_int(n: float | None) -> str:
    return "-" if n is None else f"{int(round(n)):,}"


def _fmt_ratio(r: float | None) -> str:
    return "-" if r is None else f"{r:.1%}"


def _row(cells: Sequence[str]) -> str:
    return "  ".join(cell.rjust(width) for cell, (_, width) in zip(cells, _COLUMNS, strict=True))


def header() -> str:
    """The column names of the lines :func:`follow` prints."""
    return _row([name for name, _ in _COLUMNS])


def follow(query: Any, batches: int, timeout_s: float) -> list[dict[str, Any]] | None:
    """Print one line per completed micro-batch until ``batches`` of them have completed.

    Returns:
        Those batches' progress, or ``None`` (the reason on stderr) when the query stopped
        or ``timeout_s`` passed first.
    """
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


def print_summary(progresses: list[dict[str, Any]]) -> None:
    """One line over the batches :func:`follow` returned: rows, rows/s over the batch time,
    the final state rows, the journal written, the peak heap and the cache hit ratio."""
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
