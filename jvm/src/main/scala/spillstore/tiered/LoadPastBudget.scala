package spillstore.tiered

import java.util.{Arrays => JArrays}

import org.apache.spark.unsafe.Platform

import spillstore.cold.{ColdKeys, ColdTier}
import spillstore.heap.HeapTier

/**
 * The rest of a version being loaded once the heap has taken its share of the memory budget:
 * those entries go straight to the cold tier and never through the heap (loading them there
 * first would make the memory manager evict them again one write at a time, as if they were the
 * state's coldest).
 *
 * Entries come once each, in unsigned key order, into a cleared state, so the tier holds none
 * of them and nothing is read first. Used by the state's owner only, for the one load it belongs
 * to; [[close]] lets go of what a failed load left open (the next load clears the state).
 */
private[tiered] sealed trait LoadPastBudget extends AutoCloseable {
  def add(key: Array[Byte], value: Array[Byte]): Unit
  /** Writes what is pending: the load read its version to the end. */
  def finish(): Unit
  override def close(): Unit = ()
}

private[tiered] object LoadPastBudget {
  /**
   * Starts the cold part of a load once `heap` holds its share: the entries loaded so far, in
   * slots of their key order, none evicted.
   *
   * @param expectedKeys what the cold-key filter is sized for if this load opens its first layer
   */
  def apply(cold: StateColdTier, heap: HeapTier, expectedKeys: () => Long): LoadPastBudget =
    if (cold.keys eq ColdKeys.Plain) new IntoFiles(cold, heap, expectedKeys)
    else new InBatches(cold, expectedKeys)

  /** RocksDB's own target file size: a later compaction rewrites only the files it overlaps. */
  private val MaxFileBytes = 64L << 20
  /** Puts between two looks at the file's size (a native call). */
  private val SizeCheckEvery = 4096

  /**
   * Plain keys are RocksDB's keys as they are, so they arrive in RocksDB's order: they are
   * written into sorted table files that RocksDB takes in whole ([[ColdTier.ingest]]), with no
   * memtable inserts, flushes or compactions left to compete with the query's first batch
   * (`restart-spill`, docs/benchmarks.md). A key is counted in the tier as it is written. A key
   * out of order (never from a checkpoint's files, which are sorted) ends the files: the rest
   * goes in write batches.
   *
   * The heap's share goes first, and its entries become [[HeapTier.ColdClean]] once the load is
   * written: the first batches after a restart promote cold keys, and each entry they evict for
   * one is then dropped instead of written (a sequential file write at the load instead of a
   * RocksDB write per promoted key).
   */
  private final class IntoFiles(cold: StateColdTier, heap: HeapTier, expectedKeys: () => Long)
      extends LoadPastBudget {
    private var file: ColdTier.SortedFile = _
    private var last: Array[Byte] = _
    private var sinceSizeCheck = 0
    private var unsorted: InBatches = _
    private val heapShare = heap.numSlots

    if (heap.numLiveEntries != heapShare) {
      throw new IllegalStateException(s"$this: the heap's share has ${heap.numLiveEntries} " +
        s"live entries in $heapShare slots; a load evicts nothing")
    }
    (0 until heapShare).foreach(s => add(heap.keyBytes(s), heap.valueBytes(s)))

    def add(key: Array[Byte], value: Array[Byte]): Unit =
      if (unsorted != null) unsorted.add(key, value)
      else if (last != null && JArrays.compareUnsigned(last, key) >= 0) {
        ingestFile()
        unsorted = new InBatches(cold, expectedKeys)
        unsorted.add(key, value)
      } else {
        if (file == null) {
          file = cold.sortedFile()
          cold.expect(expectedKeys())
        }
        file.put(key, value)
        last = key
        cold.added(key, Platform.BYTE_ARRAY_OFFSET, key.length, HeapTier.hashOf(key))
        sinceSizeCheck += 1
        if (sinceSizeCheck == SizeCheckEvery) {
          sinceSizeCheck = 0
          if (file.bytes >= MaxFileBytes) ingestFile()
        }
      }

    def finish(): Unit = {
      ingestFile()
      if (unsorted != null) unsorted.finish()
      (0 until heapShare).foreach(s => heap.setCold(s, HeapTier.ColdClean))
    }

    private def ingestFile(): Unit = if (file != null) {
      try if (!file.isEmpty) { file.finish(); cold.ingest(file) }
      finally close()
    }

    override def close(): Unit = if (file != null) { file.close(); file = null }
  }

  /**
   * A prefix store's cold keys sort by prefix first, not in the order they arrive: they go in
   * sorted write batches of bounded size ([[KeyOrderedPuts]]). A key is counted in the tier once its
   * write is done.
   */
  private final class InBatches(cold: StateColdTier, expectedKeys: () => Long)
      extends LoadPastBudget {
    private val puts = new KeyOrderedPuts(Evictor.MaxVictimsPerWrite)
    /** The heap form of each pending put's key (its cold form differs for prefix stores). */
    private val heapKeys = new Array[Array[Byte]](Evictor.MaxVictimsPerWrite)

    def add(key: Array[Byte], value: Array[Byte]): Unit = {
      val coldKey = cold.keys.encode(key)
      heapKeys(puts.size) = key
      puts.add(coldKey, 0, coldKey.length, value, 0, value.length)
      if (puts.isFull) write()
    }

    def finish(): Unit = if (puts.size > 0) write()

    private def write(): Unit = {
      val batch = puts.toWriteBatch
      try cold.writeEvicted(batch)
      finally batch.close()
      cold.expect(expectedKeys())
      var i = 0
      while (i < puts.size) {
        val k = heapKeys(i)
        cold.added(k, Platform.BYTE_ARRAY_OFFSET, k.length, HeapTier.hashOf(k))
        heapKeys(i) = null
        i += 1
      }
      puts.clear()
    }
  }
}
