"""What a streaming query's checkpoint records: its state store provider and stateful
operators (``python -m spillstore checkpoint LOCATION``).

Spark takes a restarted query's provider from the checkpoint's offset log, not from the
session's conf; this reads it back, and lists each operator's state stores with the kind of
files they hold, without starting Spark. Local paths only (``file:`` URIs included).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from ._config import PROVIDER_CLASS_CONF, PROVIDERS

__all__ = ["CheckpointInfo", "StoreInfo", "inspect_checkpoint"]

_PROVIDER_NAMES = {cls: name for name, cls in PROVIDERS.items()}
# A file kind each provider writes in a store directory (``<version>.<kind>``).
_KINDS = {"journal": "spillstore", "delta": "hdfs", "zip": "rocksdb", "changelog": "rocksdb"}
_STATE_FILE = re.compile(r"(\d+)\.(\w+)")


@dataclass(frozen=True)
class StoreInfo:
    """One state store directory: ``state/<operator>/<partition>[/<store name>]``."""

    operator: int
    partition: int
    store: str
    files_of: str | None
    """The provider whose files the directory holds (``spillstore``, ``hdfs``, ``rocksdb``),
    ``None`` when it holds none yet, ``mixed`` when several."""
    latest_version: int | None


@dataclass(frozen=True)
class CheckpointInfo:
    location: Path
    provider_class: str | None
    """The provider the newest offset-log entry records; ``None`` for a query that never ran
    a batch (it will use the session's provider)."""
    last_batch: int | None
    """The newest batch in the offset log."""
    last_committed_batch: int | None
    stores: tuple[StoreInfo, ...]

    @property
    def provider(self) -> str | None:
        """``spillstore``, ``hdfs``, ``rocksdb``, the class name of another provider, or None."""
        if self.provider_class is None:
            return None
        return _PROVIDER_NAMES.get(self.provider_class, self.provider_class)

    def describe(self) -> str:
        lines = [f"checkpoint {self.location}",
                 f"  provider recorded: {self.provider_class or '(none yet: no batch has run)'}",
                 f"  last batch: {_or_dash(self.last_batch)} "
                 f"(committed: {_or_dash(self.last_committed_batch)})"]
        operators = sorted({s.operator for s in self.stores})
        for op in operators:
            stores = [s for s in self.stores if s.operator == op]
            names = sorted({s.store for s in stores})
            kinds = sorted({s.files_of or "none" for s in stores})
            lines.append(f"  operator {op}: {len({s.partition for s in stores})} partitions, "
                         f"stores {', '.join(names)}, files of {', '.join(kinds)}")
        if not operators:
            lines.append("  no state (no stateful operator has committed)")
        return "\n".join(lines)


def _or_dash(n: int | None) -> str:
    return "-" if n is None else str(n)


def _local(location: str | Path) -> Path:
    text = str(location)
    if re.match(r"^[a-zA-Z][\w+.-]*://", text) and not text.startswith("file:"):
        raise ValueError(f"{text}: only local checkpoint locations can be inspected")
    return Path(re.sub(r"^file:(//)?", "", text))


def _numbered(directory: Path) -> list[tuple[int, Path]]:
    if not directory.is_dir():
        return []
    return sorted((int(p.name), p) for p in directory.iterdir() if p.name.isdigit())


def _recorded_provider(offset_file: Path) -> str | None:
    # An offset-log entry: a version line, the metadata JSON line, then one line per source.
    lines = offset_file.read_text().splitlines()
    if len(lines) < 2:
        raise ValueError(f"{offset_file} is not an offset-log entry (fewer than 2 lines)")
    conf = json.loads(lines[1]).get("conf") or {}
    value = conf.get(PROVIDER_CLASS_CONF)
    return str(value) if value is not None else None


def _store(directory: Path, operator: int, partition: int, store: str) -> StoreInfo:
    kinds: set[str] = set()
    latest: int | None = None
    for f in directory.iterdir():
        m = _STATE_FILE.fullmatch(f.name)
        if m and m.group(2) in _KINDS:
            kinds.add(_KINDS[m.group(2)])
            latest = max(latest or 0, int(m.group(1)))
    files_of = None if not kinds else kinds.pop() if len(kinds) == 1 else "mixed"
    return StoreInfo(operator, partition, store, files_of, latest)


def inspect_checkpoint(location: str | Path) -> CheckpointInfo:
    """Read what the checkpoint at ``location`` records (see :class:`CheckpointInfo`).

    Raises:
        FileNotFoundError: ``location`` is not a directory.
        ValueError: it is not local, or its newest offset-log entry is malformed.
    """
    root = _local(location)
    if not root.is_dir():
        raise FileNotFoundError(f"{root} is not a checkpoint directory")
    offsets = _numbered(root / "offsets")
    commits = _numbered(root / "commits")
    stores = []
    for op, op_dir in _numbered(root / "state"):
        for part, part_dir in _numbered(op_dir):
            subdirs = [d for d in part_dir.iterdir() if d.is_dir() and d.name[0] not in "._"
                       and d.name != "SSTs"]
            if any(_STATE_FILE.fullmatch(f.name) for f in part_dir.iterdir()):
                stores.append(_store(part_dir, op, part, "default"))
            stores += [_store(d, op, part, d.name) for d in sorted(subdirs)]
    return CheckpointInfo(
        location=root,
        provider_class=_recorded_provider(offsets[-1][1]) if offsets else None,
        last_batch=offsets[-1][0] if offsets else None,
        last_committed_batch=commits[-1][0] if commits else None,
        stores=tuple(stores),
    )
