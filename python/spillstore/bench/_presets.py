"""The workloads of ``python -m spillstore bench``: the presets a run takes its keys, batch
sizes and driver memory from, the warm-up batches every run executes first, and the providers
the runs compare (spillstore and Spark's, by the names ``--providers`` takes)."""

from __future__ import annotations

from dataclasses import dataclass

from .._jobs import PROVIDERS

__all__ = ["BENCH_PROVIDERS", "CHECKPOINT_COST_CONFS", "DEFAULT_PROVIDERS", "PRESETS", "Preset",
           "RESTART_SNAPSHOT_CONFS", "SPARK_PROVIDER_CONFS", "WARMUP_BATCHES"]

BENCH_PROVIDERS = {**PROVIDERS, "rocksdb-nochangelog": PROVIDERS["rocksdb"]}
"""The provider class of each name ``--providers`` takes: spillstore's and Spark's two by their
short names (``rocksdb`` with changelog checkpointing, as every published figure was measured),
and Spark's RocksDB provider without changelog checkpointing, ``rocksdb-nochangelog``, which
uploads its files at every commit."""

SPARK_PROVIDER_CONFS = {
    "rocksdb": {
        "spark.sql.streaming.stateStore.rocksdb.trackTotalNumberOfRows": "false",
        "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
    },
    "rocksdb-nochangelog": {
        "spark.sql.streaming.stateStore.rocksdb.trackTotalNumberOfRows": "false",
        "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "false",
    },
}
"""The Spark confs of a provider's runs: RocksDB's fastest settings for these workloads (no row
count kept up to date, which costs a read before each write), with changelog checkpoints
(``rocksdb``) or without (``rocksdb-nochangelog``: Spark's default, files uploaded at every
commit)."""

DEFAULT_PROVIDERS = ("spillstore", "hdfs", "rocksdb")
"""What a preset's runs compare without ``--providers``, unless the preset names its own."""

WARMUP_BATCHES = 1
"""Batches each run executes before the measured ones (class loading, code generation, JIT);
they count neither in records/s nor in the commit time."""

RESTART_SNAPSHOT_CONFS = {
    "spark.sql.streaming.stateStore.minDeltasForSnapshot": "2",
    "spark.sql.streaming.stateStore.maintenanceInterval": "2s",
}
"""Spark confs of a restart preset's runs, every provider alike: see :attr:`Preset.restart`."""

CHECKPOINT_COST_CONFS = {
    "spark.sql.streaming.stateStore.maintenanceInterval": "2s",
}
"""Spark confs of a checkpoint-cost preset's runs, every provider alike (see
:attr:`Preset.checkpoint_cost`): maintenance (snapshots, cleanup) every 2 seconds instead of
Spark's 60, so that a run of seconds sees it; ``minDeltasForSnapshot`` stays Spark's default."""


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
    """Zipf-like keys (``spillstore._jobs.skewed_key``) instead of ``value % keys``, which
    fills the key space in order."""
    one_hit_share: float = 0.0
    """Share of the rows whose key is new and never seen again (a scan through the cache);
    the other rows spread uniformly over the ``keys`` hot keys."""
    memory_budget: str | None = None
    """spillstore's ``memoryBudget`` for the preset (a preset about eviction sets one smaller
    than its state); ``None``: spillstore's default, a share of the driver memory."""
    restart: bool = False
    """Whether every run restarts its query in a fresh JVM after its batches, as ``--restart``
    asks of any preset: the preset is about restart time. Every provider then snapshots its
    state once two versions follow the last snapshot, checked every 2 seconds
    (:data:`RESTART_SNAPSHOT_CONFS`; Spark's defaults are 10 versions and 60 seconds), so that
    within a run of a few batches the restart loads a snapshot and the journals after it, as a
    long-running query's does."""
    checkpoint_cost: bool = False
    """Whether the preset measures what the checkpoint costs per batch instead of feeding the
    rate source (:mod:`spillstore.bench._cost`): the ``keys`` are loaded in the one warm-up
    batch, then each measured batch updates ``rows_per_batch`` distinct random existing keys
    and adds ``new_keys`` new ones, from a seeded generator (every provider gets the same
    input), one batch at a time; after each, the files under the checkpoint's ``state/`` are
    listed. Maintenance runs every 2 seconds (:data:`CHECKPOINT_COST_CONFS`)."""
    new_keys: int = 0
    """With :attr:`checkpoint_cost`: new keys added by each measured batch."""
    providers: tuple[str, ...] = DEFAULT_PROVIDERS
    """What the preset's runs compare without ``--providers``."""

    def describe(self) -> str:
        """One line naming every parameter of the workload."""
        if self.checkpoint_cost:
            new = f" and adding {self.new_keys:,} new keys" if self.new_keys else ""
            return (f"{self.name}: {self.keys:,} keys loaded in {WARMUP_BATCHES} batch, then "
                    f"{self.batches} batches each updating {self.rows_per_batch:,} random "
                    f"existing keys{new}, one at a time, the files under the checkpoint's "
                    f"state/ listed after each; maintenance every "
                    f"{CHECKPOINT_COST_CONFS['spark.sql.streaming.stateStore.maintenanceInterval']}"
                    f", driver memory {self.driver_memory}")
        kind = "skewed" if self.skewed else "uniform"
        keys = (f"{self.keys:,} hot keys taking {1 - self.one_hit_share:.0%} of the rows, the "
                f"rest on keys seen once" if self.one_hit_share else f"{self.keys:,} {kind} keys")
        budget = f", spillstore memoryBudget {self.memory_budget}" if self.memory_budget else ""
        restart = ", then restarted in a fresh JVM" if self.restart else ""
        return (f"{self.name}: {keys}, {self.batches} batches of {self.rows_per_batch:,} rows "
                f"measured after {WARMUP_BATCHES} warm-up batch, driver memory "
                f"{self.driver_memory}{budget}{restart}")


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
        Preset("restart", keys=1_000_000, rows_per_batch=250_000, batches=4, driver_memory="1g",
               restart=True),
        Preset("restart-spill", keys=2_000_000, rows_per_batch=500_000, batches=4,
               driver_memory="2g", memory_budget="32m", restart=True),
        Preset("checkpoint-cost", keys=1_000_000, rows_per_batch=100_000, batches=30,
               driver_memory="1g", checkpoint_cost=True,
               providers=("spillstore", "hdfs", "rocksdb", "rocksdb-nochangelog")),
    )
}
"""``small``: state that fits the heap; ``skewed``: hot keys and a long cold tail; ``large``:
25M distinct keys, far beyond a 1 GB driver (Spark's default provider is expected to die in
GC); ``onehit``: a hot set that fits plus a stream of keys seen once, several times the budget
over the run (a cache must keep the hot set: the oracle that knows it hits on every lookup
after the warm-up batch, since a new key's lookup is answered without RocksDB); ``restart``
and ``restart-spill``: the seconds a query takes to come back on its state in a fresh JVM,
with a state that fits the heap and with one about five times spillstore's budget (the other
providers keep all of it on their heap or in their RocksDB); ``checkpoint-cost``: the bytes and
files each batch adds to the checkpoint's ``state/`` (and deletes from it) when a state of 1M
keys takes 100k updates a batch, with RocksDB's provider with and without changelog
checkpointing."""
