"""``python -m spillstore bench``: end-to-end throughput of spillstore and Spark's own state
store providers on the same streaming aggregation.

Each run is a streaming count + sum per key (update mode, ``noop`` sink) on ``local[2]`` over
a ``rate-micro-batch`` source, which makes fixed-size batches as fast as the query takes them,
in a process of its own (:mod:`spillstore.bench._worker`): every run starts a fresh JVM with
the preset's driver memory. Runs are interleaved (repetition 1: spillstore, hdfs, rocksdb;
repetition 2: ...) so a slow spell of the machine hits every provider alike. A run that fails
(non-zero exit, out of memory, GC overhead, timeout) is a result: it is counted, printed and
plotted, never dropped.

Each run's checkpoint is in its temp directory, or with ``--checkpoint-dir`` in a fresh
sub-directory ``<preset>-<provider>-<repetition>-<random>`` of that URI (HDFS, S3 or any file
system Spark reaches, its connector set with ``--conf``), which is kept. With ``--restart`` a
second process (a fresh JVM) restarts each run's query on its checkpoint right after it, and
the run reports the seconds from that query's ``start()`` to the end of its first batch.

With ``--cluster N,CORES,MEM_MB`` the query's tasks run on Spark's standalone cluster within
the run's process, ``local-cluster[N,CORES,MEM_MB]``: N executor JVMs apart from the driver,
each with ``--executor-memory`` (default MEM_MB). Each run then reports every executor's peak
resident set, from Spark's executor metrics (``ProcessTreeJVMRSSMemory``), beside the
executor's allotment: its memory plus the overhead a cluster manager such as YARN or
Kubernetes grants its container (``spark.executor.memoryOverhead``, by default the larger of
384 MB and 10 % of the memory).

The ``checkpoint-cost`` preset measures what the checkpoint costs per batch
(:mod:`spillstore.bench._cost`): ``--keys`` keys loaded in one batch, then ``--batches``
batches of ``--rows-per-batch`` updates of random existing keys (and ``--new-keys`` new keys),
one batch at a time, with the files under the checkpoint's ``state/`` listed after each: bytes
and files created, files deleted, bytes live, and the CPU of Spark's maintenance threads and of
the whole process per batch. It compares spillstore, hdfs, rocksdb (changelog checkpointing)
and rocksdb-nochangelog unless ``--providers`` says otherwise, and checks each run's final
state against its input's counts.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, replace
from typing import Any

from .._argtypes import non_negative_int, parse_option, positive_float, positive_int
from .._config import jar_path, option_key
from . import _runner
from ._presets import BENCH_PROVIDERS, DEFAULT_PROVIDERS, PRESETS, WARMUP_BATCHES, Preset
from ._report import Summary, format_number, format_report, plot, summarize
from ._runner import Cluster, RunResult, Setup, classify_failure, memory_mb

__all__ = [
    "Cluster",
    "PRESETS",
    "Preset",
    "RunResult",
    "Setup",
    "Summary",
    "WARMUP_BATCHES",
    "add_parser",
    "classify_failure",
    "format_report",
    "plot",
    "summarize",
]


def _providers(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in BENCH_PROVIDERS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"expected a comma-separated list of {', '.join(BENCH_PROVIDERS)}, got {text!r}")
    return list(dict.fromkeys(names))


def _cluster(text: str) -> tuple[int, int, int]:
    parts = text.split(",")
    try:
        numbers = tuple(positive_int(p.strip()) for p in parts)
    except argparse.ArgumentTypeError:
        numbers = ()
    if len(numbers) != 3:
        raise argparse.ArgumentTypeError(
            f"expected N,CORES,MEM_MB (executors, cores and MB each), got {text!r}")
    return numbers[0], numbers[1], numbers[2]


def _memory(text: str) -> int:
    try:
        return memory_mb(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _cluster_of(args: argparse.Namespace) -> Cluster | None:
    """The cluster ``--cluster`` and ``--executor-memory`` describe; ``None`` without
    ``--cluster``.

    Raises:
        ValueError: ``--executor-memory`` without ``--cluster``, more than the worker's memory,
            or given as a ``--conf`` too.
    """
    if args.cluster is None:
        if args.executor_memory is not None:
            raise ValueError("--executor-memory needs --cluster")
        return None
    executors, cores, worker_mb = args.cluster
    if "spark.executor.memory" in dict(args.conf):
        raise ValueError("give the executors' memory with --executor-memory, not --conf")
    executor_mb = worker_mb if args.executor_memory is None else args.executor_memory
    if executor_mb > worker_mb:
        raise ValueError(f"--executor-memory {executor_mb} MB does not fit the workers' "
                         f"{worker_mb} MB of --cluster")
    return Cluster(executors, cores, worker_mb, executor_mb)


def _check_presets(presets: list[Preset], args: argparse.Namespace) -> None:
    """Refuse what the selected presets cannot run.

    Raises:
        ValueError: ``--new-keys`` without the checkpoint-cost preset; a checkpoint-cost preset
            whose updates per batch exceed its keys (they are distinct existing keys).
    """
    if args.new_keys is not None and not any(p.checkpoint_cost for p in presets):
        raise ValueError("--new-keys applies to the checkpoint-cost preset only")
    for p in presets:
        if p.checkpoint_cost and p.rows_per_batch > p.keys:
            raise ValueError(f"{p.name}: {p.rows_per_batch:,} updates per batch "
                             f"(--rows-per-batch) exceed its {p.keys:,} keys (--keys)")


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
    bench.add_argument("--providers", type=_providers,
                       help="comma-separated providers to compare, of "
                       f"{', '.join(BENCH_PROVIDERS)} (default: {','.join(DEFAULT_PROVIDERS)}; "
                       "checkpoint-cost: all four)")
    bench.add_argument("--keys", type=positive_int, help="override the presets' key count")
    bench.add_argument("--rows-per-batch", type=positive_int,
                       help="override the presets' rows per batch (checkpoint-cost: the "
                       "existing keys each measured batch updates)")
    bench.add_argument("--new-keys", type=non_negative_int,
                       help="checkpoint-cost: new keys each measured batch adds (default: 0)")
    bench.add_argument("--batches", type=positive_int,
                       help="override the presets' number of measured batches")
    bench.add_argument("--driver-memory", help="override the presets' spark.driver.memory")
    bench.add_argument("--option", type=parse_option, action="append", default=[],
                       metavar="NAME=VALUE",
                       help="a spillstore option for its runs (repeatable)")
    bench.add_argument("--conf", type=parse_option, action="append", default=[],
                       metavar="KEY=VALUE",
                       help="a Spark conf for every run, e.g. spark.hadoop.fs.s3a.* or "
                       "spark.jars (repeatable)")
    bench.add_argument("--checkpoint-dir", metavar="URI",
                       help="put each run's checkpoint in a fresh sub-directory of this URI, "
                       "kept after the run (default: the run's local temp directory)")
    bench.add_argument("--restart", action="store_true",
                       help="after each run, restart its query on its checkpoint in a fresh "
                       "JVM and report the seconds from start() to the end of its first batch")
    bench.add_argument("--cluster", type=_cluster, metavar="N,CORES,MEM_MB",
                       help="run the tasks on local-cluster[N,CORES,MEM_MB]: N executor JVMs "
                       "of CORES cores, and report each one's peak RSS beside its allotment "
                       "(executor memory + overhead)")
    bench.add_argument("--executor-memory", type=_memory, metavar="SIZE",
                       help="with --cluster: spark.executor.memory, e.g. 1g (default: MEM_MB)")
    bench.add_argument("--timeout", type=positive_float, default=1200.0, metavar="SECONDS",
                       help="per run (with --restart, per process); a run past it is "
                       "killed and counted as failed (default: %(default)g)")
    bench.add_argument("--json", metavar="FILE", help="write every run's raw results here")
    bench.add_argument("--plot", metavar="FILE.png",
                       help="draw the comparison (needs matplotlib: spillstore[bench])")
    bench.set_defaults(run=_bench)


def _bench(args: argparse.Namespace) -> int:
    options = dict(args.option)
    names = list(PRESETS) if "all" in (args.preset or []) else list(
        dict.fromkeys(args.preset or ["small"]))
    overrides = {k: getattr(args, k) for k in ("keys", "rows_per_batch", "batches",
                                               "driver_memory") if getattr(args, k)}
    presets = [replace(PRESETS[name], **overrides) for name in names]
    if args.new_keys is not None:
        presets = [replace(p, new_keys=args.new_keys) if p.checkpoint_cost else p
                   for p in presets]
    providers = {p.name: args.providers or list(p.providers) for p in presets}
    try:  # fail now, not after an hour of runs
        _check_presets(presets, args)
        cluster = _cluster_of(args)
        for name in options:
            option_key(name)
        if any("spillstore" in chosen for chosen in providers.values()):
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
    setup = Setup(args.timeout, options, dict(args.conf), args.checkpoint_dir, args.restart,
                  cluster)
    results: list[RunResult] = []
    for preset in presets:
        runs = []
        for repetition in range(1, args.repetitions + 1):
            for provider in providers[preset.name]:
                # Through the module, so that tests can stand a fake run in for it.
                result = _runner.run_once(preset, provider, repetition, setup)
                restart = ("" if result.restart_s is None
                           else f", restart {format_number(result.restart_s, 1)} s")
                rss = ("" if result.executor_rss_share is None
                       else f", executors' peak RSS {result.executor_rss_share:.0%} of "
                       f"{result.executor_allotment_mb} MB")
                written = ("" if result.bytes_per_batch is None else
                           f", {format_number(result.bytes_per_batch)} checkpoint bytes/batch")
                outcome = (f"{format_number(result.records_per_s)} records/s{written}{restart}"
                           f"{rss}" if result.ok else f"FAILED {result.failure}")
                print(f"[{preset.name} {repetition}/{args.repetitions}] {provider}: {outcome} "
                      f"({result.seconds:.0f} s)", file=sys.stderr, flush=True)
                runs.append(result)
        results += runs
        print(format_report(preset, summarize(runs), cluster) + "\n", flush=True)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"warmup_batches": WARMUP_BATCHES, "options": options,
                       "conf": setup.conf, "checkpoint_dir": setup.checkpoint_dir,
                       "restart": setup.restart, "timeout_s": args.timeout,
                       "cluster": None if cluster is None else asdict(cluster),
                       "presets": [asdict(p) for p in presets],
                       "runs": [asdict(r) for r in results]}, f, indent=2)
    if args.plot:
        plot(summarize(results), args.plot, cluster)
    return 0
