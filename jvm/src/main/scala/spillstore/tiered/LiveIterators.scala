package spillstore.tiered

import scala.collection.mutable.ArrayBuffer

import org.apache.spark.sql.catalyst.expressions.UnsafeRow
import org.apache.spark.unsafe.Platform

import spillstore.cold.{ColdKeys, ColdTier}
import spillstore.heap.{HeapTier, KeyValue, PrefixIndex}

/**
 * The iterations of one live state's open batch over both tiers: whole-state iterators and
 * prefix scans. An iterator is valid only in the batch that created it; while one is open,
 * eviction waits (RocksDB and the heap's slots must not change under it). Only the state's
 * current user touches it (see `Ownership`).
 */
private[tiered] final class LiveIterators(state: TieredState, heap: HeapTier, cold: StateColdTier,
    prefixIndex: Option[PrefixIndex]) {
  /** Iterators of this batch not yet exhausted or closed. */
  private var open = 0
  /** Cold-tier scans of this batch's iterators (native iterators). */
  private val scans = new ArrayBuffer[ColdTier.Scan]
  /** Counts ended batches. */
  private var epoch = 0L

  def anyOpen: Boolean = open > 0

  /** Ends this batch's iterations: their cold scans close, and using them throws. */
  def endBatch(): Unit = {
    scans.foreach(_.close())
    scans.clear()
    open = 0
    epoch += 1
  }

  /**
   * Live entries of both tiers, each key once, heap winning, as a live view like a
   * ConcurrentHashMap iterator: it looks one entry ahead, returns values as of `next()` (or as
   * of the look-ahead for an entry removed since) and sees keys added while it runs.
   *
   * First the cold tier: keys the heap held when the iterator was created are left to the heap
   * part; a key promoted since is returned here with the heap's value. Then the heap, by slot:
   * entries added since creation that RocksDB holds were the cold part's.
   */
  def iterator(): Iterator[KeyValue] with AutoCloseable = {
    open += 1
    val heapAtStart = heap.numSlots
    val createdIn = epoch
    new Iterator[KeyValue] with AutoCloseable {
      private val scan = if (cold.isEmpty) null else cold.scan(null, _ => true)
      if (scan != null) scans += scan
      private val coldPart: Iterator[(Array[Byte], Array[Byte])] =
        if (scan == null) Iterator.empty else scan
      private var slot = 0
      private var aheadSlot = -1 // the heap's entry for the look-ahead key, if any
      private var ahead: KeyValue = _
      private var done = false
      advance()

      private def advance(): Unit = {
        ahead = null
        while (ahead == null && coldPart.hasNext) {
          val (ck, v) = coldPart.next()
          val key = cold.keys.decode(ck)
          val s = heap.lookup(key, Platform.BYTE_ARRAY_OFFSET, key.length, HeapTier.hashOf(key))
          if (s < 0) lookAhead(-1, KeyValue.of(key, v))
          else if (s >= heapAtStart && heap.isLive(s)) lookAhead(s, heap.keyValue(s))
        }
        while (ahead == null && slot < heap.numSlots) {
          if (heap.isLive(slot) && (slot < heapAtStart || heap.cold(slot) == HeapTier.ColdAbsent)) {
            lookAhead(slot, heap.keyValue(slot))
          }
          slot += 1
        }
        if (ahead == null) close()
      }

      /** Done early (the operator stopped): eviction need not wait for this iterator any more. */
      override def close(): Unit = if (!done) {
        done = true
        ahead = null
        if (createdIn == epoch) {
          open -= 1
          if (scan != null) { scan.close(); scans -= scan }
        }
      }

      private def lookAhead(s: Int, kv: KeyValue): Unit = { aheadSlot = s; ahead = kv }

      private def checkUsable(what: String): Unit = {
        if (createdIn != epoch) throw new IllegalStateException(
          s"$what on an iterator of $state whose batch has ended (committed, aborted or released)")
      }

      override def hasNext: Boolean = { checkUsable("iterator.hasNext"); ahead != null }
      override def next(): KeyValue = {
        checkUsable("iterator.next")
        if (ahead == null) throw new NoSuchElementException("no more state entries")
        val seen = ahead
        // The batch may have changed (or promoted and changed) the key since the look-ahead.
        val s = if (aheadSlot >= 0) aheadSlot
        else heap.lookup(seen.base, Platform.BYTE_ARRAY_OFFSET + seen.offset, seen.keyLength,
          HeapTier.hashOf(seen.base, seen.offset, seen.keyLength))
        val moved = s >= 0 && heap.isLive(s) &&
          ((heap.page(s) ne seen.base) || heap.keyOffset(s) != seen.offset)
        val out = if (moved) heap.keyValue(s) else seen
        advance()
        out
      }
    }
  }

  /** Live entries whose key has `prefix` as its first columns, both tiers, captured now. */
  def prefixScan(prefix: UnsafeRow): Array[KeyValue] = {
    val index = prefixIndex.get
    val out = ArrayBuffer.empty[KeyValue]
    index.keysWithPrefix(prefix).foreach { key =>
      val s = heap.find(key, Platform.BYTE_ARRAY_OFFSET, key.length, HeapTier.hashOf(key))
      if (s >= 0 && heap.isLive(s)) out += heap.keyValue(s)
    }
    if (!cold.isEmpty) {
      val start = cold.keys.asInstanceOf[ColdKeys.Prefixed].rangeStart(prefix)
      val scan = cold.scan(start, LiveIterators.startsWith(_, start))
      try scan.foreach { case (ck, v) =>
          val key = cold.keys.decode(ck)
          if (heap.find(key, Platform.BYTE_ARRAY_OFFSET, key.length, HeapTier.hashOf(key)) < 0) {
            out += KeyValue.of(key, v)
          }
        }
      finally scan.close()
    }
    out.toArray
  }
}

private object LiveIterators {
  private def startsWith(a: Array[Byte], prefix: Array[Byte]): Boolean =
    a.length >= prefix.length &&
      java.util.Arrays.equals(a, 0, prefix.length, prefix, 0, prefix.length)
}
