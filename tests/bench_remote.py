"""``python -m spillstore bench`` with every run's checkpoint on a storage server of
``tests/servers.py``: HDFS (a MiniDFSCluster), S3 (moto, through ``s3a://``), or a local
``file:`` directory to compare with.

    python tests/bench_remote.py --storage hdfs|s3|local [--json FILE] [bench arguments]

e.g. ``--storage s3 --keys 200000 --rows-per-batch 100000 --batches 6 --repetitions 2
--restart`` (``make bench-remote STORAGE=s3 BENCH_ARGS="..."``). The server is started
before the bench and stopped after it, with everything stored on it. The bench prints its
tables as usual; for s3 and hdfs this script then prints, per preset and provider, the calls
the server answered under each run's ``<checkpoint>/state/`` per state store and committed
batch, by kind, and the files written there (see :func:`count_state_calls`): for s3 every
request, for hdfs the namenode calls of its audit log (not the block calls addBlock and
complete, which the namenode does not audit). The checkpoint-cost preset's own listings of the
state tree (made as ``spillstore.bench._cost.LISTER``) are left out of the counts and mark its
runs' window: from the listing after the load batch to the one after the last batch.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import NamedTuple
from urllib.parse import parse_qs, unquote, urlparse

sys.path.insert(0, str(Path(__file__).resolve().parent))  # tests/, for servers
import servers  # noqa: E402
from spillstore.bench._cost import LISTER  # noqa: E402
from spillstore.cli import main as spillstore_main  # noqa: E402

BUCKET = "bench"
KINDS = ("GET", "HEAD", "LIST", "PUT", "COPY", "POST", "DELETE")
# The tests' fail-fast retry settings would turn a slow answer on a loaded machine into a
# failed run; the bench keeps s3a's own retries (these are its defaults), set per bucket like
# the server's settings, which they override.
S3A_RETRIES = {"attempts.maximum": "5", "retry.limit": "7", "retry.throttle.limit": "20",
               "connection.timeout": "200000"}


@dataclass
class StateRequests:
    """The storage calls of one or more runs under their checkpoints' ``state/``: S3
    requests, or HDFS namenode calls."""

    by_kind: Counter[str] = field(default_factory=Counter)
    objects_written: int = 0
    """Files (keys) written and not deleted or renamed away later in the counted calls: a
    rename's temporary file is not counted, its target is; directory markers (keys ending in
    ``/``) neither (see :class:`StateCall`)."""
    store_batches: int = 0
    """What the counts are divided by: state stores x committed batches counted."""
    measured_only: bool = True
    """Whether the counts are of the measured batches (the calls between the commit-log
    writes of the batch before the first measured one and of the last one, or for the
    checkpoint-cost preset between its first and its last listing), else of the whole run,
    divided by the stores times all its batches."""

    def add(self, other: StateRequests) -> None:
        self.by_kind.update(other.by_kind)
        self.objects_written += other.objects_written
        self.store_batches += other.store_batches
        self.measured_only &= other.measured_only

    def per_store_batch(self, count: int) -> float:
        return count / self.store_batches if self.store_batches else 0.0


class StateCall(NamedTuple):
    """One storage call as the counting sees it, its keys relative to the bucket or the
    file system's root (no leading ``/``)."""
    kind: str  # its column in the table
    key: str  # the key or path it names (a listing's prefix; a rename's source)
    ok: bool  # whether it took effect
    writes: str | None = None  # the key a file is at afterwards
    removes: str | None = None  # the key whose file is gone afterwards
    tree: bool = False
    """Whether ``removes`` takes the files under ``<removes>/`` too (an HDFS delete), and
    moves them under ``<writes>/`` for a rename of a directory (one they are found under)."""
    lister: bool = False
    """Whether the bench's own listing of the state tree made it (never counted)."""


def _s3_calls(requests: Sequence[servers.Request], bucket: str) -> list[StateCall]:
    """The requests on ``bucket`` (path-style: ``/<bucket>/<key>``); a LIST is a GET on the
    bucket, a write a PUT, a COPY or the POST that completes a multipart upload (not the
    upload of a part)."""
    calls = []
    for r in requests:
        ok = 200 <= r.status < 300
        if r.path.rstrip("/") == f"/{bucket}":
            prefix = parse_qs(r.query).get("prefix", [""])[0]
            calls.append(StateCall("LIST" if r.method == "GET" else r.method, prefix, ok,
                                   lister=r.agent.startswith(LISTER)))
            continue
        if not r.path.startswith(f"/{bucket}/"):
            continue
        key = unquote(r.path[len(bucket) + 2:])
        upload = "uploadId" in parse_qs(r.query, keep_blank_values=True)
        writes = ((r.method in ("PUT", "COPY") and not upload) or (r.method == "POST" and upload))
        calls.append(StateCall(r.method, key, ok, writes=key if writes else None,
                               removes=key if r.method == "DELETE" else None,
                               lister=r.agent.startswith(LISTER)))
    return calls


def _hdfs_calls(records: Sequence[servers.AuditRecord]) -> list[StateCall]:
    """The audited namenode calls by ``cmd`` (a rename's options left out); a create or an
    append writes its path, a rename moves its source to its target, a delete removes its
    path with what is under it."""
    calls = []
    for r in records:
        if r.src is None:
            continue
        kind = r.cmd.split(" ", 1)[0]
        src, dst = r.src.lstrip("/"), (r.dst or "").lstrip("/") or None
        calls.append(StateCall(
            kind, src, r.allowed,
            writes=src if kind in ("create", "append") else dst if kind == "rename" else None,
            removes=src if kind in ("rename", "delete") else None, tree=True,
            lister=r.user == LISTER))
    return calls


def count_state_calls(calls: Sequence[StateCall], checkpoint: str, first_batch: int,
                      last_batch: int, stores: int, run_batches: int,
                      between_listings: bool = False) -> StateRequests:
    """Count one run's calls under ``<checkpoint>/state/``, but the bench's own listings'.

    Args:
        calls: what the storage answered, in order.
        checkpoint: the run's checkpoint, a URL whose path is ``calls``' keys' root.
        first_batch, last_batch: the ids of its first and last measured batches; the counted
            calls are those after the commit-log write (a call writing ``commits/<id>``) of
            ``first_batch - 1`` up to that of ``last_batch``.
        stores: state store instances per batch.
        run_batches: every batch of the run, for the whole-run count when either commit-log
            write (or with ``between_listings`` any listing) is missing from ``calls``.
        between_listings: count the calls between the first and the last call of the bench's
            listings under the state tree instead (a checkpoint-cost run: from the listing
            after the load batch to the one a maintenance interval after the last batch).
    """
    root = urlparse(checkpoint).path.strip("/")
    state = f"{root}/state"

    def under(key: str | None, prefix: str) -> bool:
        return key is not None and (key == prefix or key.startswith(prefix + "/"))

    start: int | None
    end: int | None
    if between_listings:
        listings = [i for i, c in enumerate(calls) if c.lister and under(c.key, state)]
        start, end = (listings[0], listings[-1]) if listings else (None, None)
    else:
        commits = {c.writes: i for i, c in enumerate(calls)
                   if c.ok and under(c.writes, f"{root}/commits")}
        start = -1 if first_batch == 0 else commits.get(f"{root}/commits/{first_batch - 1}")
        end = commits.get(f"{root}/commits/{last_batch}")
    measured = start is not None and end is not None
    lo, hi = (start, end) if measured else (-1, len(calls))
    counted = StateRequests(
        store_batches=stores * ((last_batch - first_batch + 1) if measured else run_batches),
        measured_only=measured)
    written: set[str] = set()
    for c in calls[lo + 1:hi + 1]:
        if c.lister or not (under(c.key, state) or under(c.writes, state)):
            continue
        counted.by_kind[c.kind] += 1
        if not c.ok:
            continue
        moved = set()
        if c.removes is not None:
            gone = {k for k in written if k == c.removes or (c.tree and under(k, c.removes))}
            written -= gone
            moved = {k for k in gone if k != c.removes}
        if c.writes is not None and moved:  # a directory renamed: its files move along
            written |= {c.writes + k[len(c.removes or ""):] for k in moved}
        elif c.writes is not None:
            written.add(c.writes)
    counted.objects_written = sum(under(k, state) and not k.endswith("/") for k in written)
    return counted


def count_state_requests(requests: Sequence[servers.Request], checkpoint: str,
                         first_batch: int, last_batch: int, stores: int,
                         run_batches: int, between_listings: bool = False) -> StateRequests:
    """:func:`count_state_calls` of S3 requests (``S3Server.requests()``) for the checkpoint
    ``s3a://<bucket>/<key>``."""
    return count_state_calls(_s3_calls(requests, urlparse(checkpoint).netloc), checkpoint,
                             first_batch, last_batch, stores, run_batches, between_listings)


def count_namenode_calls(records: Sequence[servers.AuditRecord], checkpoint: str,
                         first_batch: int, last_batch: int, stores: int,
                         run_batches: int, between_listings: bool = False) -> StateRequests:
    """:func:`count_state_calls` of HDFS audit records (``HdfsServer.audit_records()``) for
    the checkpoint ``hdfs://<namenode>/<path>``."""
    return count_state_calls(_hdfs_calls(records), checkpoint, first_batch, last_batch,
                             stores, run_batches, between_listings)


class Table(NamedTuple):
    """How one storage's calls are named in :func:`format_state_calls`."""
    title: str  # before the window's description
    calls: str  # the total's column
    written: str  # the written files' column
    kinds: tuple[str, ...]  # columns shown even when none was counted; others follow, sorted


S3_TABLE = Table("S3 requests under each run's <checkpoint>/state/ per state store and "
                 "committed batch (all runs pooled; LIST: GET on the bucket",
                 "requests", "objects written", KINDS)
HDFS_TABLE = Table("HDFS namenode calls under each run's <checkpoint>/state/ per state store "
                   "and committed batch, from the namenode's audit log (all runs pooled; "
                   "audited calls only: not the block calls addBlock and complete; files "
                   "written: created, or renamed to, and not deleted or renamed away",
                   "namenode calls", "files written",
                   ("create", "open", "rename", "delete", "listStatus", "getfileinfo",
                    "mkdirs"))


def format_state_calls(raw: dict[str, object], count: Callable[..., StateRequests],
                       table: Table) -> str:
    """The table of ``count`` (:func:`count_state_requests` or :func:`count_namenode_calls`
    with its log bound) per preset and provider, all runs pooled, from the bench's ``--json``
    document ``raw``."""
    warmup = int(raw["warmup_batches"])  # type: ignore[call-overload]
    presets = {p["name"]: p for p in raw["presets"]}  # type: ignore[attr-defined]
    pooled: dict[tuple[str, str], StateRequests] = {}
    runs: Counter[tuple[str, str]] = Counter()
    for run in raw["runs"]:  # type: ignore[attr-defined]
        if run["checkpoint"] is None or run["state_stores"] is None:
            continue  # failed before measuring
        preset = presets[run["preset"]]
        batches = preset["batches"]
        # A restart runs one batch more (the restart presets restart without --restart).
        restarted = raw["restart"] or preset.get("restart", False)
        counted = count(run["checkpoint"], warmup, warmup + batches - 1, run["state_stores"],
                        warmup + batches + (1 if restarted else 0),
                        preset.get("checkpoint_cost", False))
        group = (run["preset"], run["provider"])
        pooled.setdefault(group, StateRequests()).add(counted)
        runs[group] += 1
    seen = {kind for c in pooled.values() for kind in c.by_kind}
    kinds = [*table.kinds, *sorted(seen - set(table.kinds))]
    header = ["preset", "provider", "runs", "counted over", table.calls, table.written, *kinds]
    rows = [header]
    for (preset, provider), c in pooled.items():
        rows.append([preset, provider, str(runs[(preset, provider)]),
                     "measured batches" if c.measured_only else "whole run",
                     f"{c.per_store_batch(sum(c.by_kind.values())):.2f}",
                     f"{c.per_store_batch(c.objects_written):.2f}",
                     *(f"{c.per_store_batch(c.by_kind[k]):.2f}" for k in kinds)])
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = [f"{table.title}; measured batches: from the commit of batch {warmup - 1} to that "
             "of the last measured one, for checkpoint-cost from the listing after the load "
             "batch to the one after the last batch, the bench's listings not counted; whole "
             "run: all calls over stores x all batches)"]
    lines += ["  ".join(c.ljust(w) if i < 4 else c.rjust(w)
                        for i, (c, w) in enumerate(zip(row, widths, strict=True))) for row in rows]
    return "\n".join(lines)


def format_state_requests(raw: dict[str, object], requests: Sequence[servers.Request]) -> str:
    """:func:`format_state_calls` of S3 requests."""
    return format_state_calls(raw, partial(count_state_requests, requests), S3_TABLE)


Report = Callable[[dict[str, object]], str]


@contextmanager
def _storage(kind: str, tmp: Path) -> Iterator[tuple[str, dict[str, str], Report | None]]:
    """The checkpoint directory, the Spark confs reaching it and, for a server, the table of
    its calls under the runs' state (a function of the bench's ``--json`` document)."""
    if kind == "local":
        yield (tmp / "checkpoints").as_uri(), {}, None
    elif kind == "hdfs":
        with servers.hdfs_server(tmp) as hdfs:
            yield f"{hdfs.uri}/bench", {}, lambda raw: format_state_calls(
                raw, partial(count_namenode_calls, hdfs.audit_records()), HDFS_TABLE)
    else:
        with servers.s3_server(tmp) as s3:
            s3.create_bucket(BUCKET)
            retries = {f"spark.hadoop.fs.s3a.bucket.{BUCKET}.{key}": value
                       for key, value in S3A_RETRIES.items()}
            yield (f"s3a://{BUCKET}/checkpoints", {**s3.spark_conf(BUCKET), **retries},
                   lambda raw: format_state_requests(raw, s3.requests()))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, allow_abbrev=False,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--storage", choices=("hdfs", "s3", "local"), required=True)
    parser.add_argument("--json", metavar="FILE",
                        help="the bench's raw results (default: a temp file, removed)")
    args, bench_args = parser.parse_known_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="spillstore-bench-remote-"))
    try:
        raw_path = Path(args.json) if args.json else tmp / "runs.json"
        with _storage(args.storage, tmp) as (checkpoint_dir, conf, report):
            print(f"checkpoints under {checkpoint_dir}", flush=True)
            status = spillstore_main(
                ["bench", *bench_args, "--checkpoint-dir", checkpoint_dir,
                 *(f"--conf={key}={value}" for key, value in conf.items()),
                 "--json", str(raw_path)])
            if status == 0 and report is not None:
                raw = json.loads(raw_path.read_text(encoding="utf-8"))
                print(report(raw), flush=True)
        return status
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
