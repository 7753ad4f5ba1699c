package spillstore.tiered

import java.util.concurrent.atomic.AtomicReference

import org.apache.spark.unsafe.Platform

import spillstore.cold.{ColdKeys, WriteBatchBytes}
import spillstore.heap.HeapTier

/**
 * Write-back eviction of one live state: the heap's coldest committed entries (by CLOCK) go to
 * RocksDB, in writes of bounded size, and only those RocksDB lacks or holds stale are written.
 * Only the state's user calls it, or a relief round while the state is idle (see
 * `Ownership`); never while an iterator of the batch is open. A relief round that finds the
 * state owned leaves a shrink request instead (volatile), which the owner honours at its next
 * growth report or as it lets go.
 */
private[tiered] final class Evictor(heap: HeapTier, cold: StateColdTier, counting: TierCounting,
    iterators: LiveIterators, publish: () => Unit) {
  import Evictor._

  /** The pending shrink request, if any: set by relief rounds, taken by whoever honours it. */
  private val shrinkTo = new AtomicReference[ShrinkTarget]

  /**
   * A relief round's request: shrink to `targetBytes` and `targetEntries`; never blocks. Joins
   * a request still pending (the stricter of each target), so none is lost to another.
   */
  def requestShrink(targetBytes: Long, targetEntries: Long): Unit = {
    val asked = ShrinkTarget(targetBytes, targetEntries)
    shrinkTo.accumulateAndGet(asked,
      (pending, next) => if (pending == null) next else pending.min(next))
  }

  def shrinkRequested: Boolean = shrinkTo.get != null

  /** Whether a state of `bytes` and `entries` is over a pending shrink request. */
  def overShrinkTarget(bytes: Long, entries: Long): Boolean = {
    val t = shrinkTo.get
    t != null && (bytes > t.bytes || entries > t.entries)
  }

  /**
   * Honours a pending shrink request, if any; returns the bytes freed. Takes the request in
   * one step: one that arrives while this evicts stays pending for the next call.
   */
  def shrinkIfRequested(): Long = {
    val t = shrinkTo.getAndSet(null)
    if (t == null) 0L else evict(residentBytes - t.bytes, heap.numLiveEntries - t.entries)
  }

  /** What the state keeps on the heap: the heap tier and the cold tier's key filter. */
  def residentBytes: Long = heap.estimatedBytes + cold.filterBytes

  /**
   * Evicts at least `bytes` and `entries` (coldest first) unless only pinned entries are left
   * or an iterator of this batch is still open. Returns the bytes freed.
   */
  def evict(bytes: Long, entries: Long): Long = {
    if ((bytes <= 0 && entries <= 0) || iterators.anyOpen) return 0
    val before = residentBytes
    heap.trimToSize() // spare capacity goes first: a state with no entries left has some
    // Then garbage (a commit leaves it to the next batch's puts): a page evacuated costs copies,
    // an entry evicted a RocksDB write now and a miss later.
    if (bytes > 0 && heap.reclaim(bytes) != 0) publish()
    var entriesLeft = entries
    // In writes of at most MaxVictimsPerWrite; evicted keys join the cold-key filter, which may
    // grow by a layer: evict on to pay for it.
    var evicted = 0
    do {
      evicted = evictOnce(residentBytes - (before - bytes), entriesLeft)
      entriesLeft -= evicted
      // Evicted entries leave garbage in the heap's pages: give it back before evicting more.
      val over = residentBytes - (before - bytes)
      if (over > 0 && heap.reclaim(over) != 0) publish()
    } while (evicted > 0 && (residentBytes > before - bytes || entriesLeft > 0))
    before - residentBytes
  }

  /**
   * One write to RocksDB of victims worth `bytes` and `entries`, at most [[MaxVictimsPerWrite]]
   * and about [[MaxBytesPerWrite]]; returns how many.
   */
  private def evictOnce(bytes: Long, entries: Long): Int = {
    val victims = new Array[Int](MaxVictimsPerWrite)
    var n = 0
    var freed = 0L
    var writeBytes = 0L
    var victim = -1
    while (n < MaxVictimsPerWrite && writeBytes < MaxBytesPerWrite &&
      (freed < bytes || n < entries) && { victim = heap.nextVictim(); victim >= 0 }) {
      victims(n) = victim
      n += 1
      freed += heap.entryBytes(victim)
      writeBytes += WriteBatchBytes.putBytes(heap.keyLength(victim), heap.valueLength(victim))
    }
    if (n == 0) return 0
    // RocksDB first: if the write fails, the heap still has every entry.
    val written =
      try writeBack(victims, n)
      catch {
        case e: Throwable =>
          (0 until n).foreach(i => heap.unselect(victims(i)))
          throw e
      }
    cold.expect(heap.numLiveEntries)
    (0 until n).foreach { i =>
      val v = victims(i)
      if (heap.cold(v) == HeapTier.ColdAbsent) {
        cold.added(heap.page(v), Platform.BYTE_ARRAY_OFFSET + heap.keyOffset(v),
          heap.keyLength(v), heap.hashAt(v))
      }
    }
    // Dropping moves the last slot's entry into the freed one: highest slots first, so that no
    // victim is moved before its turn.
    java.util.Arrays.sort(victims, 0, n)
    var i = n - 1
    while (i >= 0) { heap.dropCommitted(victims(i)); i -= 1 }
    heap.trimToSize()
    counting.evictions += n
    counting.writeBacks += written
    publish()
    n
  }

  /** Writes the victims whose value RocksDB lacks, in one write; returns how many. */
  private def writeBack(victims: Array[Int], count: Int): Int = {
    val puts = new KeyOrderedPuts(count)
    var i = 0
    while (i < count) {
      val v = victims(i)
      if (heap.cold(v) != HeapTier.ColdClean) {
        val page = heap.page(v)
        val valueOffset = heap.keyOffset(v) + heap.keyLength(v)
        if (cold.keys eq ColdKeys.Plain) {
          puts.add(page, heap.keyOffset(v), heap.keyLength(v), page, valueOffset,
            heap.valueLength(v))
        } else {
          val k = cold.keys.encode(heap.keyBytes(v))
          puts.add(k, 0, k.length, page, valueOffset, heap.valueLength(v))
        }
      }
      i += 1
    }
    if (puts.size > 0) {
      val batch = puts.toWriteBatch
      try cold.writeEvicted(batch)
      finally batch.close()
    }
    puts.size
  }
}

object Evictor {
  private final case class ShrinkTarget(bytes: Long, entries: Long) {
    def min(o: ShrinkTarget): ShrinkTarget =
      ShrinkTarget(bytes.min(o.bytes), entries.min(o.entries))
  }

  /**
   * Victims per RocksDB write. Bounds what one eviction holds at once: the victim list (64 KB of
   * references, below the 512 KB at which G1 allocates an array as humongous in a 1 GB heap;
   * a 25M-key run allocated 390 larger lists) and the native `WriteBatch`, which is outside
   * `coldTierMemory`. It does not lower G1's work: Spark's own large arrays start its cycles too.
   */
  private[tiered] val MaxVictimsPerWrite = 16384

  /**
   * Bytes of puts per RocksDB write (victims are added until the write reaches it): keeps the
   * write's one array ([[WriteBatchBytes]]) below G1's humongous size for entries of up to a few KB.
   */
  private[tiered] val MaxBytesPerWrite = 256 << 10
}
