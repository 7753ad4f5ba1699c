package spillstore.cold

import org.rocksdb.{LRUCache, WriteBufferManager}

import org.apache.spark.internal.Logging

/**
 * The native memory of all cold tiers of one executor JVM: one block cache and one write-buffer
 * budget that every cold tier's RocksDB shares, as Spark's RocksDB provider does with
 * `boundedMemoryUsage`: data blocks and memtables (charged to the cache) are bounded by one
 * number, `bytes`, however many stores an executor loads, where each RocksDB had its own 8 MB
 * cache and two 16 MB memtables. RocksDB flushes memtables when the stores being written
 * together exceed the write-buffer share; a store that stops writing keeps what its memtables
 * hold (at most two of [[Shared.memtableBytes]]). The share is a target, not a cap: RocksDB
 * flushes only the store being written and skips it while its previous flush is still running,
 * so while background flushes lag the writes (a busy machine) memtables pass the share, each
 * store up to its two memtables. Index and filter blocks are outside the bound (see
 * [[ColdTier]]).
 *
 * | state | owner | who may touch it |
 * |---|---|---|
 * | `requested`, `inUse` | this object, under its lock | [[configure]] (provider init, any task thread), [[shared]] (a cold tier opening) |
 *
 * The first cold tier opened fixes the size for the JVM's life (a RocksDB cache cannot be
 * resized from Java): a later provider that asks for another size gets a WARN, not a second
 * cache. The cache and the write-buffer manager are never closed: RocksDB instances reference
 * them until they close, and a JVM holds one pair.
 */
object ColdMemory extends Logging {
  /** The smallest bound that still holds two memtables and some blocks. */
  final val MinBytes: Long = 16L << 20
  /** The largest default (for a heap budget of 2 GB or more). */
  final val MaxDefaultBytes: Long = 1L << 30
  /** Share of the bound that memtables may take before RocksDB flushes them. */
  private val WriteBufferShare = 0.5

  final class Shared private[ColdMemory] (val bytes: Long) {
    // Default shard bits (RocksDB picks them from the capacity); no high-priority pool, since
    // index and filter blocks are not cached (ColdTier).
    val cache = new LRUCache(bytes, -1, false, 0.0)
    val writeBuffers = new WriteBufferManager((bytes * WriteBufferShare).toLong, cache)
    /** A quarter of the write-buffer share, at most 16 MB: when all stores' memtables together
     *  pass the share, the manager flushes the one being written. */
    val memtableBytes: Long =
      math.max(1L << 20, math.min(16L << 20, (bytes * WriteBufferShare).toLong / 4))
  }

  private var requested: Option[Long] = None
  private var inUse: Shared = _

  /**
   * Sets the bound cold tiers opened from now on share; a no-op (with a WARN when it differs)
   * once a cold tier has opened.
   */
  def configure(bytes: Long): Unit = synchronized {
    require(bytes >= MinBytes, s"cold tier memory $bytes is below the minimum $MinBytes")
    if (inUse == null) requested = Some(bytes)
    else if (inUse.bytes != bytes) {
      logWarning(s"spillstore's cold tiers in this JVM already share ${inUse.bytes} bytes of " +
        s"native memory; a provider asks for $bytes, which applies only after a restart. Set " +
        "the cold tier memory once for the application (its Spark conf).")
    }
  }

  /** A pair of its own, for a test that must not depend on what earlier tests did to the
   *  JVM's (never closed, as the JVM's). */
  private[spillstore] def separate(bytes: Long): Shared = {
    RocksDBLibrary.load()
    new Shared(bytes)
  }

  /** The pair every cold tier opened now shares (created on first use). */
  def shared: Shared = synchronized {
    if (inUse == null) {
      RocksDBLibrary.load()
      inUse = new Shared(requested.getOrElse(DefaultBytes))
      logInfo(s"spillstore's cold tiers share ${inUse.bytes >> 20} MB of native memory " +
        s"(block cache, with memtables up to ${(inUse.bytes * WriteBufferShare).toLong >> 20} MB)")
    }
    inUse
  }

  /** Without a provider's conf (tests, tools): 64 MB. */
  private[spillstore] val DefaultBytes: Long = 64L << 20

  /**
   * The default bound for a heap budget: half of it, within [16 MB, 1 GB], so that the
   * executor's total is the heap budget plus a stated share of it. Half, not less: for a state
   * that grows past the budget, memory here (fewer memtable flushes and compactions) paid as
   * much as heap budget did, and costs less RSS, since G1 keeps committed about 1/0.6 of the
   * heap in use (measured on executors of 1 GB with `bench --cluster`).
   */
  def defaultFor(heapBudgetBytes: Long): Long =
    math.max(MinBytes, math.min(MaxDefaultBytes, heapBudgetBytes / 2))
}

/** RocksDB's native library, loaded once per JVM before any RocksDB object is made. */
private[cold] object RocksDBLibrary {
  private lazy val loaded: Unit = org.rocksdb.RocksDB.loadLibrary()
  def load(): Unit = loaded
}
