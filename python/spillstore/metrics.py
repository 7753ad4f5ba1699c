"""Reading spillstore's state store metrics back from streaming query progress."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from pyspark.sql.streaming import StreamingQueryListener

__all__ = [
    "METRICS",
    "OperatorMetrics",
    "ProgressLogger",
    "cache_hit_ratio",
    "operator_metrics",
    "state_metrics",
    "summary",
]

METRICS = (
    "spillstoreCacheHitPermille",
    "spillstoreCacheHits",
    "spillstoreCacheMisses",
    "spillstoreColdLoads",
    "spillstoreEvictions",
    "spillstoreWriteBacks",
    "spillstoreJournalBytes",
    "spillstoreJournalRecords",
    "spillstoreCommitTimeMs",
    "spillstoreSnapshotsRepaired",
    "spillstoreMaintenanceFailures",
    "spillstoreHeapBytes",
    "spillstoreHeapEntries",
    "spillstoreColdEntries",
    "spillstoreColdBytes",
    "forceSnapshotCount",
)
"""The custom metrics spillstore reports. In query progress each one is the stateful
operator's: counts, sizes and times summed over its stores, and
``spillstoreCacheHitPermille`` the operator's hits / lookups in per mille (absent without
lookups). :func:`state_metrics` sums them over a query's operators, which leaves the ratio out:
use :func:`cache_hit_ratio` or :class:`OperatorMetrics` for that."""

_RATIO = "spillstoreCacheHitPermille"

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
        ``spillstore*`` ones among them), each summed over the query's stateful operators,
        except the per-operator ratio ``spillstoreCacheHitPermille``.
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
            if name != _RATIO:  # a ratio of one operator; a sum of them means nothing
                add(name, value)
    return totals


def cache_hit_ratio(metrics: Mapping[str, int]) -> float | None:
    """Heap-tier hit ratio (hits / (hits + misses)) from :func:`state_metrics`' result, or
    ``None`` when the counters are absent or there were no lookups."""
    hits = metrics.get("spillstoreCacheHits")
    misses = metrics.get("spillstoreCacheMisses")
    return None if hits is None or misses is None else _ratio(hits, misses)


def _progresses(source: Any) -> list[Mapping[str, Any]]:
    """Oldest first: a StreamingQuery's recentProgress, a sequence of progresses, or one."""
    if source is None:
        return []
    if isinstance(source, Mapping):
        return [source]
    if isinstance(source, Sequence) and not isinstance(source, (str, bytes)):
        return [p for p in source if p]
    recent = getattr(source, "recentProgress", None)
    if recent is None:
        raise TypeError(
            "expected a StreamingQuery, a progress dict or a sequence of progress dicts, "
            f"not {type(source).__name__}")
    return [p for p in recent if p]


def _number(mapping: Mapping[str, Any] | None, name: str) -> int:
    value = (mapping or {}).get(name)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return int(value)
    return 0


def _ratio(hits: int, misses: int) -> float | None:
    return hits / (hits + misses) if hits + misses else None


@dataclass(frozen=True)
class OperatorMetrics:
    """spillstore's state metrics of one stateful operator, summed over its partitions (and,
    for a stream-stream join, over its four stores).

    Counters (hits, misses, evictions, journal bytes, commit time) are the last batch's;
    sizes (heap, cold) are as of the end of the last batch.
    """

    operator: str
    """Spark's operator name in progress (``stateStoreSave``, ``dedupe``,
    ``symmetricHashJoin``, ``sessionWindowStateStoreSaveExec``, ...)."""
    index: int
    """Position of the operator in the progress' ``stateOperators``."""
    batch_id: int
    """The micro-batch the counters are from."""
    hit_ratio: float | None
    """Heap hits / lookups in the last batch; ``None`` without lookups."""
    cumulative_hit_ratio: float | None
    """Heap hits / lookups over every batch read (a query's ``recentProgress``, by default
    the last 100 batches); ``None`` without lookups."""
    cache_hits: int
    cache_misses: int
    evictions: int
    """Entries evicted from the heap to the cold tier (RocksDB) in the last batch."""
    write_backs: int
    """Evicted entries that had to be written to RocksDB (the others it already held)."""
    cold_loads: int
    """Entries loaded back from RocksDB into the heap in the last batch."""
    heap_bytes: int
    """Estimated heap bytes of live state."""
    heap_entries: int
    cold_bytes: int
    """Size of the cold tier's RocksDB (files and memtables)."""
    cold_entries: int
    journal_bytes: int
    """Bytes of journal files the last batch's commits wrote."""
    journal_records: int
    commit_time_ms: int
    """Time the last batch's commits spent writing journals (summed over partitions)."""
    rows_total: int
    """Spark's ``numRowsTotal``: keys in the operator's state."""
    provider: str | None = None
    """The provider the operator really runs on, told by the metrics it reports:
    ``spillstore``, ``hdfs``, ``rocksdb``, or ``None`` when none of those. A restarted query
    runs on the provider its checkpoint records, whatever the session selects."""

    def summary(self) -> str:
        """One line: ``stateStoreSave#0 hit 97.5% (cum 99.1%) evicted 12 heap 1.2 MiB ...``."""
        if self.provider not in (None, "spillstore"):
            return f"{self.operator}#{self.index} runs on {self.provider}, not spillstore"
        return (
            f"{self.operator}#{self.index} hit {_percent(self.hit_ratio)}"
            f" (cum {_percent(self.cumulative_hit_ratio)})"
            f" hits {self.cache_hits} misses {self.cache_misses} evicted {self.evictions}"
            f" heap {size_text(self.heap_bytes)} ({self.heap_entries} keys)"
            f" cold {size_text(self.cold_bytes)} ({self.cold_entries} keys)"
            f" journal {size_text(self.journal_bytes)} commit {self.commit_time_ms} ms"
        )


def _percent(ratio: float | None) -> str:
    return "n/a" if ratio is None else f"{ratio * 100:.1f}%"


def size_text(n: int) -> str:
    """``n`` bytes as the CLI and the progress log print it (``1.5 MiB``)."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{n} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def _provider(custom: Mapping[str, Any]) -> str | None:
    names = set(custom)
    if any(n.startswith("spillstore") for n in names):
        return "spillstore"
    if any(n.startswith("rocksdb") for n in names):
        return "rocksdb"
    if "loadedMapCacheHitCount" in names:
        return "hdfs"
    return None


def operator_metrics(source: Any) -> list[OperatorMetrics]:
    """spillstore's metrics of each stateful operator of a query's last batch.

    Args:
        source: a ``StreamingQuery`` (its ``recentProgress`` is read), a sequence of
            progress dicts oldest first (``query.recentProgress``), or a single progress
            dict (``query.lastProgress``, a listener event's ``progress``).

    Returns:
        One :class:`OperatorMetrics` per stateful operator of the last progress, in the
        order of its ``stateOperators``; operators are matched across batches by position
        (a query's plan does not change). Empty before the first progress or for a
        stateless query. Metrics a provider did not report read as 0 (a query on another
        provider gives zeros and ratios of ``None``).
    """
    progresses = _progresses(source)
    if not progresses:
        return []
    last = progresses[-1]
    result = []
    for index, op in enumerate(last.get("stateOperators") or []):
        custom = op.get("customMetrics") or {}
        hits, misses = 0, 0
        for progress in progresses:
            operators = progress.get("stateOperators") or []
            if index < len(operators):
                metrics = operators[index].get("customMetrics")
                hits += _number(metrics, "spillstoreCacheHits")
                misses += _number(metrics, "spillstoreCacheMisses")
        batch_hits = _number(custom, "spillstoreCacheHits")
        batch_misses = _number(custom, "spillstoreCacheMisses")
        result.append(OperatorMetrics(
            operator=str(op.get("operatorName", "")),
            index=index,
            batch_id=_number(last, "batchId"),
            hit_ratio=_ratio(batch_hits, batch_misses),
            cumulative_hit_ratio=_ratio(hits, misses),
            cache_hits=batch_hits,
            cache_misses=batch_misses,
            evictions=_number(custom, "spillstoreEvictions"),
            write_backs=_number(custom, "spillstoreWriteBacks"),
            cold_loads=_number(custom, "spillstoreColdLoads"),
            heap_bytes=_number(custom, "spillstoreHeapBytes"),
            heap_entries=_number(custom, "spillstoreHeapEntries"),
            cold_bytes=_number(custom, "spillstoreColdBytes"),
            cold_entries=_number(custom, "spillstoreColdEntries"),
            journal_bytes=_number(custom, "spillstoreJournalBytes"),
            journal_records=_number(custom, "spillstoreJournalRecords"),
            commit_time_ms=_number(custom, "spillstoreCommitTimeMs"),
            rows_total=_number(op, "numRowsTotal"),
            provider=_provider(custom),
        ))
    return result


def summary(progress: Mapping[str, Any],
            operators: Sequence[OperatorMetrics] | None = None) -> str:
    """One line describing a batch's progress and the spillstore metrics of its stateful
    operators (what :class:`ProgressLogger` logs); ``operators`` defaults to
    ``operator_metrics(progress)``."""
    name = progress.get("name") or progress.get("id") or "query"
    line = (f"{name} batch {progress.get('batchId')}: {_number(progress, 'numInputRows')} rows"
            f" in {_number(progress.get('durationMs'), 'triggerExecution')} ms")
    if operators is None:
        operators = operator_metrics(progress)
    return "; ".join([line] + [op.summary() for op in operators])


class ProgressLogger(StreamingQueryListener):
    """A ``StreamingQueryListener`` that logs one line per micro-batch of every query of a
    session with spillstore's state metrics (hit ratio, evictions, heap and cold bytes,
    journal bytes, commit time), through Python :mod:`logging`::

        logging.basicConfig(level=logging.INFO)
        spark.streams.addListener(spillstore.ProgressLogger())

    The ratio in a line is the batch's; ``cum`` is over the batches seen by this listener.
    Batches without stateful operators are logged too (without operator part).

    Args:
        logger: where to log; default ``logging.getLogger("spillstore.progress")``.
        level: the level of the lines; default ``logging.INFO``.
    """

    def __init__(self, logger: logging.Logger | None = None, level: int = logging.INFO) -> None:
        self.logger = logger or logging.getLogger("spillstore.progress")
        self.level = level
        self._totals: dict[tuple[str, int], tuple[int, int]] = {}

    def onQueryStarted(self, event: Any) -> None:
        """Nothing to log."""

    def onQueryProgress(self, event: Any) -> None:
        """Log the batch's one-line :func:`summary`, the hit ratio also cumulated."""
        progress = event.progress
        if not isinstance(progress, Mapping):  # pyspark 3.5: an object, with its JSON
            progress = json.loads(progress.json)
        query_id = str(progress.get("runId") or progress.get("id"))
        operators = []
        for op in operator_metrics(progress):
            key = (query_id, op.index)
            hits, misses = self._totals.get(key, (0, 0))
            hits, misses = hits + op.cache_hits, misses + op.cache_misses
            self._totals[key] = (hits, misses)
            operators.append(replace(op, cumulative_hit_ratio=_ratio(hits, misses)))
        if self.logger.isEnabledFor(self.level):
            self.logger.log(self.level, "%s", summary(progress, operators))

    def onQueryIdle(self, event: Any) -> None:
        """Nothing to log."""

    def onQueryTerminated(self, event: Any) -> None:
        """Forget the query's totals."""
        run_id = str(getattr(event, "runId", ""))
        for key in [k for k in self._totals if k[0] == run_id]:
            del self._totals[key]
