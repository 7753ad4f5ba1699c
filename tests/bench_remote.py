"""``python -m spillstore bench`` with every run's checkpoint on a storage server of
``tests/servers.py``: HDFS (a MiniDFSCluster), S3 (moto, through ``s3a://``), or a local
``file:`` directory to compare with.

    python tests/bench_remote.py --storage hdfs|s3|local [--json FILE] [bench arguments]

e.g. ``--storage s3 --keys 200000 --rows-per-batch 100000 --batches 6 --repetitions 2
--restart`` (``make bench-remote STORAGE=s3 BENCH_ARGS="..."``). The server is started
before the bench and stopped after it, with everything stored on it. The bench prints its
tables as usual; for s3 this script then prints, per preset and provider, the requests the
server answered under each run's ``<checkpoint>/state/`` per state store and committed batch,
by kind, and the objects written there (see :func:`count_state_requests`).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlparse

sys.path.insert(0, str(Path(__file__).resolve().parent))  # tests/, for servers
import servers  # noqa: E402
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
    """The requests of one or more runs under their checkpoints' ``state/``."""

    by_kind: Counter[str] = field(default_factory=Counter)
    objects_written: int = 0
    """Keys written (PUT, COPY, or a completed multipart upload) and not deleted
    later in the counted requests: a rename's temporary object is not counted; directory
    markers (keys ending in ``/``) neither."""
    store_batches: int = 0
    """What the counts are divided by: state stores x committed batches counted."""
    measured_only: bool = True
    """Whether the counts are of the measured batches (the requests between the commit-log
    writes of the batch before the first measured one and of the last one), else of the whole
    run, divided by the stores times all its batches."""

    def add(self, other: StateRequests) -> None:
        self.by_kind.update(other.by_kind)
        self.objects_written += other.objects_written
        self.store_batches += other.store_batches
        self.measured_only &= other.measured_only

    def per_store_batch(self, count: int) -> float:
        return count / self.store_batches if self.store_batches else 0.0


def _kind_and_key(request: servers.Request, bucket: str) -> tuple[str, str] | None:
    """A request's kind and the key it names (a listing's prefix); ``None`` for one outside
    ``bucket`` (path-style: ``/<bucket>/<key>``)."""
    if request.path.rstrip("/") == f"/{bucket}":
        prefix = parse_qs(request.query).get("prefix", [""])[0]
        return ("LIST" if request.method == "GET" else request.method), prefix
    if not request.path.startswith(f"/{bucket}/"):
        return None
    return request.method, unquote(request.path[len(bucket) + 2:])


def count_state_requests(requests: Sequence[servers.Request], checkpoint: str,
                         first_batch: int, last_batch: int, stores: int,
                         run_batches: int) -> StateRequests:
    """Count one run's requests under ``<checkpoint>/state/``.

    Args:
        requests: what the server answered, in order (``S3Server.requests()``).
        checkpoint: the run's checkpoint, ``s3a://<bucket>/<key>``.
        first_batch, last_batch: the ids of its first and last measured batches; the counted
            requests are those after the commit-log write (a PUT or COPY of ``commits/<id>``) of
            ``first_batch - 1`` up to that of ``last_batch``.
        stores: state store instances per batch.
        run_batches: every batch of the run, for the whole-run count when either commit-log
            write is missing from ``requests``.
    """
    url = urlparse(checkpoint)
    bucket, root = url.netloc, url.path.strip("/")
    state = f"{root}/state"
    named = [(i, kk) for i, r in enumerate(requests) if (kk := _kind_and_key(r, bucket))]
    commits = {key: i for i, (kind, key) in named
               if kind in ("PUT", "COPY") and requests[i].status == 200
               and key.startswith(f"{root}/commits/")}
    start = -1 if first_batch == 0 else commits.get(f"{root}/commits/{first_batch - 1}")
    end = commits.get(f"{root}/commits/{last_batch}")
    measured = start is not None and end is not None
    lo, hi = (start, end) if measured else (-1, len(requests))
    counted = StateRequests(
        store_batches=stores * ((last_batch - first_batch + 1) if measured else run_batches),
        measured_only=measured)
    written: set[str] = set()
    for i, (kind, key) in named:
        if not lo < i <= hi or not (key == state or key.startswith(state + "/")):
            continue
        counted.by_kind[kind] += 1
        query = parse_qs(requests[i].query, keep_blank_values=True)
        if (kind in ("PUT", "COPY") and "uploadId" not in query) or (kind == "POST" and "uploadId" in query):
            written.add(key)
        elif kind == "DELETE":
            written.discard(key)
    counted.objects_written = sum(not key.endswith("/") for key in written)
    return counted


def format_state_requests(raw: dict[str, object], requests: Sequence[servers.Request]) -> str:
    """The table of :func:`count_state_requests` per preset and provider, all runs pooled,
    from the bench's ``--json`` document ``raw``."""
    warmup = int(raw["warmup_batches"])  # type: ignore[call-overload]
    presets = {p["name"]: p for p in raw["presets"]}  # type: ignore[attr-defined]
    pooled: dict[tuple[str, str], StateRequests] = {}
    runs: Counter[tuple[str, str]] = Counter()
    for run in raw["runs"]:  # type: ignore[attr-defined]
        if run["checkpoint"] is None or run["state_stores"] is None:
            continue  # failed before measuring
        batches = presets[run["preset"]]["batches"]
        counted = count_state_requests(
            requests, run["checkpoint"], warmup, warmup + batches - 1, run["state_stores"],
            warmup + batches + (1 if raw["restart"] else 0))
        group = (run["preset"], run["provider"])
        pooled.setdefault(group, StateRequests()).add(counted)
        runs[group] += 1
    header = ["preset", "provider", "runs", "counted over", "requests", "objects written",
              *KINDS]
    rows = [header]
    for (preset, provider), c in pooled.items():
        rows.append([preset, provider, str(runs[(preset, provider)]),
                     "measured batches" if c.measured_only else "whole run",
                     f"{c.per_store_batch(sum(c.by_kind.values())):.2f}",
                     f"{c.per_store_batch(c.objects_written):.2f}",
                     *(f"{c.per_store_batch(c.by_kind[k]):.2f}" for k in KINDS)])
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = ["S3 requests under each run's <checkpoint>/state/ per state store and committed "
             "batch (all runs pooled; LIST: GET on the bucket; measured batches: from the "
             f"commit of batch {warmup - 1} to that of the last measured one; whole run: "
             "all requests over stores x all batches)"]
    lines += ["  ".join(c.ljust(w) if i < 4 else c.rjust(w)
                        for i, (c, w) in enumerate(zip(row, widths))) for row in rows]
    return "\n".join(lines)


@contextmanager
def _storage(kind: str, tmp: Path) -> Iterator[tuple[str, dict[str, str],
                                                     servers.S3Server | None]]:
    """The checkpoint directory, the Spark confs reaching it and the S3 server (for s3)."""
    if kind == "local":
        yield (tmp / "checkpoints").as_uri(), {}, None
    elif kind == "hdfs":
        with servers.hdfs_server(tmp) as hdfs:
            yield f"{hdfs.uri}/bench", {}, None
    else:
        with servers.s3_server(tmp) as s3:
            s3.create_bucket(BUCKET)
            retries = {f"spark.hadoop.fs.s3a.bucket.{BUCKET}.{key}": value
                       for key, value in S3A_RETRIES.items()}
            yield f"s3a://{BUCKET}/checkpoints", {**s3.spark_conf(BUCKET), **retries}, s3


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
        with _storage(args.storage, tmp) as (checkpoint_dir, conf, s3):
            print(f"checkpoints under {checkpoint_dir}", flush=True)
            status = spillstore_main(
                ["bench", *bench_args, "--checkpoint-dir", checkpoint_dir,
                 *(f"--conf={key}={value}" for key, value in conf.items()),
                 "--json", str(raw_path)])
            if status == 0 and s3 is not None:
                raw = json.loads(raw_path.read_text(encoding="utf-8"))
                print(format_state_requests(raw, s3.requests()), flush=True)
        return status
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
