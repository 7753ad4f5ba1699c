"""Reading spillstore's state store metrics back from streaming query progress."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["METRICS", "cache_hit_ratio", "state_metrics"]

METRICS = (
    "spillstoreCacheHits",
    "spillstoreCacheMisses",
    "spillstoreColdLoads",
    "spillstoreEvictions",
    "spillstoreWriteBacks",
    "spillstoreJournalBytes",
    "spillstoreJournalRecords",
    "spillstoreCommitTimeMs",
    "spillstoreSnapshotsRepaired",
    "spillstoreBudgetBytes",
    "spillstoreHeapBytes",
    "spillstoreHeapEntries",
    "spillstoreColdEntries",
    "spillstoreColdBytes",
)
"""The custom metrics spillstore reports (summed over partitions in query progress)."""

_STANDARD = ("numRowsTotal", "numRowsUpdated", "numRowsRemoved", "commitTimeMs", "memoryUsedBytes")


def state_metrics(progress: Mapping[str, Any] | Any | None) -> dict[str, int]:
    """Sum the state store metrics of one micro-batch over its stateful operators.

    Args:
        progress: a progress dict (``query.lastProgress``, an element of
            ``query.recentProgress``, or a ``StreamingQueryProgress``'s JSON as a dict), or a
            ``StreamingQuery`` (its ``lastProgress`` is used), or ``None``.

    Returns:
        The standard fields (``numRowsTotal``, ``numRowsUpdated``, ``numRowsRemoved``,
        ``commitTimeMs``, ``memoryUsedBytes``) and every numeric custom metric (spillstore's
        ``spillstore*`` ones among them), each summed over the query's stateful operators.
        A metric no operator reported is absent; an empty dict when there is no progress yet.
    """
    if progress is not None and not isinstance(progress, Mapping):
        progress = getattr(progress, "lastProgress", None)
    if not progress:
        return {}
    totals: dict[str, int] = {}

    def add(name: str, value: Any) -> None:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            totals[name] = totals.get(name, 0) + int(value)

    for operator in progress.get("stateOperators") or []:
        for name in _STANDARD:
            if name in operator:
                add(name, operator[name])
        for name, value in (operator.get("customMetrics") or {}).items():
            add(name, value)
    return totals


def cache_hit_ratio(metrics: Mapping[str, int]) -> float | None:
    """Heap-tier hit ratio (hits / (hits + misses)) from :func:`state_metrics`' result, or
    ``None`` when the counters are absent or there were no lookups."""
    hits = metrics.get("spillstoreCacheHits")
    misses = metrics.get("spillstoreCacheMisses")
    if hits is None or misses is None or hits + misses == 0:
        return None
    return hits / (hits + misses)
