package spillstore.tiered

import java.io.File

import org.rocksdb.WriteBatch

import org.apache.spark.internal.Logging

import spillstore.cold.{ColdKeyFilter, ColdKeys, ColdTier}
import spillstore.heap.{HeapTier, PrefixIndex}

/**
 * The cold tier as one live state sees it: its RocksDB (opened by the first eviction that writes,
 * closed when the state is cleared or freed), how keys are encoded in it, how many it holds
 * (exact) and the filter that keeps most lookups of absent keys off RocksDB. Only the state's
 * current user touches it (see `Ownership`); RocksDB is read only by that user, never by a
 * metrics thread.
 */
private[tiered] final class StateColdTier(name: String, prefixIndex: Option[PrefixIndex],
    localDir: () => File, filterMaxBytes: Long, openCold: (File, String) => ColdTier,
    reserveFilter: Long => Boolean, releaseFilter: Long => Unit)
    extends Logging {

  val keys: ColdKeys =
    prefixIndex.map(p => new ColdKeys.Prefixed(p.prefixOf)).getOrElse(ColdKeys.Plain)
  private var tier: ColdTier = _
  /** Keys the cold tier holds (exact). */
  private var count = 0L
  /** Keys the cold tier may hold. */
  private val filter = new ColdKeyFilter(maxBytes = filterMaxBytes, reserve = reserveFilter,
    release = releaseFilter)

  def keyCount: Long = count
  def isEmpty: Boolean = count == 0
  def isOpen: Boolean = tier != null
  def filterBytes: Long = filter.bytes
  def filterLayers: Int = filter.layerCount
  def bytes: Long = if (tier == null) 0L else tier.approximateBytes

  /** Whether RocksDB may hold the key at `base`/`offset` (false for most absent keys). */
  def mayHold(base: AnyRef, offset: Long, length: Int, hash: Int): Boolean =
    count > 0 && filter.mightContain(base, offset, length, hash)

  /** RocksDB's value of `key`, or null; only when [[mayHold]] said it may be there. */
  def get(key: Array[Byte]): Array[Byte] = tier.get(keys.encode(key))

  /**
   * Deletes, in one write, the keys the open batch of `heap` removed that RocksDB holds; none
   * while it is closed. A failed write changes nothing.
   */
  def deleteRemoved(heap: HeapTier): Unit = if (isOpen) {
    val changes = heap.changeList
    var deleted = 0
    var batch: WriteBatch = null
    try {
      var i = 0
      while (i < changes.size) {
        val s = changes.slot(i)
        if (!heap.isLive(s) && heap.cold(s) != HeapTier.ColdAbsent) {
          if (batch == null) batch = ColdTier.newBatch()
          batch.delete(keys.encode(heap.keyBytes(s)))
          deleted += 1
        }
        i += 1
      }
      if (batch != null) tier.write(batch)
    } finally if (batch != null) batch.close()
    count -= deleted
  }

  /** Deletes one key RocksDB holds. */
  def delete(key: Array[Byte]): Unit = {
    val batch = ColdTier.newBatch()
    try { batch.delete(keys.encode(key)); tier.write(batch) }
    finally batch.close()
    count -= 1
  }

  /** Writes evicted entries, opening RocksDB at the first such write. */
  def writeEvicted(batch: WriteBatch): Unit = opened().write(batch)

  /** A table file of sorted entries for [[ingest]] (RocksDB opens if it is not yet). */
  def sortedFile(): ColdTier.SortedFile = opened().newSortedFile()

  /** Moves a finished sorted file into RocksDB; its keys are counted by [[added]]. */
  def ingest(file: ColdTier.SortedFile): Unit = tier.ingest(file)

  private def opened(): ColdTier = {
    if (tier == null) {
      tier = openCold(localDir(), name)
      logInfo(s"$name starts spilling: opened its cold tier in ${tier.dir}")
    }
    tier
  }

  /** Sizes the filter for a state of `entries` keys (only until its first layer exists). */
  def expect(entries: Long): Unit = filter.expect(entries)

  /** Counts a key RocksDB holds now and did not before an eviction. */
  def added(base: AnyRef, offset: Long, length: Int, hash: Int): Unit = {
    count += 1
    if (filter.add(base, offset, length, hash)) {
      logInfo(s"Cold-key filter of $name gave up at $count keys (its limit: $filterMaxBytes " +
        "bytes, and all stores' filters share an 8th of the memory budget): misses read " +
        "RocksDB again")
    }
  }

  /** A scan of RocksDB's entries from `start` while `inRange`; the caller closes it. */
  def scan(start: Array[Byte], inRange: Array[Byte] => Boolean): ColdTier.Scan =
    tier.scan(start, inRange)

  /**
   * Closes RocksDB (if open) and forgets its keys. The tier is forgotten first: one whose
   * close fails may be closed already, and a read of a closed RocksDB crashes the JVM.
   */
  def close(): Unit = {
    val closing = tier
    tier = null
    if (closing != null) {
      logInfo(s"$name stops spilling: closing its cold tier ($count keys, ${closing.dir})")
    }
    count = 0
    filter.clear()
    if (closing != null) closing.close()
  }
}
