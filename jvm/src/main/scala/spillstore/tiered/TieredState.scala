package spillstore.tiered

import java.io.File

import scala.util.control.NonFatal

import org.apache.spark.internal.Logging
import org.apache.spark.sql.catalyst.expressions.UnsafeRow
import org.apache.spark.unsafe.Platform

import spillstore.checkpoint.StateFile
import spillstore.cold.{ColdKeyFilter, ColdTier}
import spillstore.heap.{HeapTier, KeyOrder, KeyValue, PrefixIndex}
import spillstore.memory.{Budget, Spillable}
import spillstore.metrics.{ExecutorStats, TierCounters}

/**
 * A provider's live state over two tiers: the heap tier (hot entries, the open batch) and the
 * cold tier (entries evicted to a local RocksDB). Reads see the union, the heap winning; a heap
 * miss loads the entry from RocksDB and promotes it.
 *
 * Exactness: before the batch changes a key the heap lacks, the key is promoted from RocksDB
 * when it is there, so every changed entry knows whether it existed, and each entry knows what
 * RocksDB holds for it. That keeps journals, the key count and the cold tier exact.
 *
 * Its parts, each with one job: `Ownership` (who may use the state, when: the lease and phase
 * table), `HeapTier` and `StateColdTier` (the two tiers), `LiveIterators` (the batch's
 * iterations), `Evictor` (write-back to RocksDB) and `TierCounting`. This class is the
 * two-tier view over them (reads, writes, the batch's end, recovery; `LoadPastBudget` takes what a
 * snapshot load brings past the budget) and the memory manager's `Spillable`: it reports
 * growth to its `Budget` and evicts what that asks, and publishes its sizes in volatile
 * fields, which relief rounds read from any thread.
 */
final class TieredState(
    name: String,
    prefixIndex: Option[PrefixIndex],
    localDir: () => File,
    budget: Budget,
    stats: ExecutorStats,
    openCold: (File, String) => ColdTier = ColdTier.create,
    onFreed: TieredState => Unit = _ => ())
    extends Spillable with Logging {
  import TieredState._

  val heap = new HeapTier(prefixIndex.getOrElse(HeapTier.NoListener))
  private val cold = new StateColdTier(name, prefixIndex, localDir,
    math.min(ColdKeyFilter.MaxBytes, budget.fixedShareBytes), openCold,
    budget.reserveFixed(this, _), budget.releaseFixed(this, _))
  private val counting = new TierCounting(stats)
  private val iterators = new LiveIterators(this, heap, cold, prefixIndex)
  private val evictor = new Evictor(heap, cold, counting, iterators, () => publish())
  /** Who may use this state, and when: callers take, check and end leases there. */
  val ownership = new Ownership(this, () => freeMemory(), () => onFreed(this))
  /** Live keys of the committed state, both tiers (exact). */
  private var committedKeys = 0L

  @volatile private var publishedBytes = 0L
  @volatile private var publishedEntries = 0L
  @volatile private var publishedFixedBytes = 0L
  @volatile private var publishedColdBytes = 0L
  /** Growth since the memory manager last heard of us. */
  private var unreportedBytes = 0L
  /** The budget's [[Budget.reportEveryBytes]] as of the last report; the owner's. */
  private var reportEveryBytes = budget.reportEveryBytes

  def counters: TierCounters = counting.now
  /** What happened since the last committed batch, this batch's lookups included. */
  def batchCounters: TierCounters = counting.sinceBatch
  /** [[batchCounters]], closing the batch: what follows counts towards the next one. */
  def takeBatchCounters(): TierCounters = counting.takeBatch()

  // ---------------------------------------------------------------- ownership (`Ownership`)

  /**
   * Ends lease `l` if it is current (on its holder's thread, between calls): honours what the
   * memory manager asked meanwhile (an owned state cannot be spilled by others), then goes idle.
   * False when `l` already ended: a second release (the task's completion listener after a
   * commit) only frees a state `l` was the last owner of. `lastLook` runs after those evictions
   * while `l` still owns the state: a commit reads its figures there (RocksDB is read only by
   * its user).
   */
  def release(l: Lease, reason: String, lastLook: () => Unit = () => ()): Boolean = {
    if (!ownership.holds(l)) { ownership.freeIfDoomedBy(l); false }
    else {
      iterators.endBatch()
      // The batch has ended (committed or aborted): an eviction that fails here (the cold
      // tier's disk) must not fail it; the next growth report or relief round tries again.
      try {
        try keepToBudget()
        catch {
          case NonFatal(e) => logWarning(s"$this could not evict on release ($reason); the " +
                s"next batch or relief round retries: ${e.getMessage}", e)
        }
        lastLook()
      } finally ownership.end(l, reason)(publishCounters())
      ownership.freeIfDoomedBy(l)
      // A relief round that asked while the state was still ours found it owned (its
      // trySpill returns 0): now that it is idle and unlocked, honour the request as trySpill
      // would, and tell the budget, which still counts the size it last heard of. Checked
      // after the unlock, so a request made later finds the state idle. The batch has ended
      // (a commit's version is durable), so a failed eviction is the budget's to retry.
      if (evictor.shrinkRequested) {
        try trySpill(0, 0)
        catch {
          case NonFatal(e) =>
            logWarning(s"$this could not honour a shrink request after its owner let go " +
                s"($reason); the next relief round retries: ${e.getMessage}", e)
        } finally budget.shrank(this)
      }
      true
    }
  }

  private def freeMemory(): Unit = { // under the ownership lock; each part even if one fails
    try {
      iterators.endBatch()
      heap.clear()
    } finally {
      try cold.close()
      finally {
        publish()
        publishCounters()
      }
    }
  }

  /**
   * Under the ownership lock: adds what happened since the last call to the executor's figures,
   * and takes the cold tier's size for them (RocksDB is read only by its user).
   */
  private def publishCounters(): Unit = {
    counting.publishToExecutor()
    publishedColdBytes = cold.bytes
  }

  // ---------------------------------------------------------------- reads and writes

  /**
   * The key and value for `key`, or null. Their bytes are never modified: the rows Spark makes
   * of them stay valid after later changes.
   */
  def get(key: UnsafeRow): KeyValue = {
    val hash = key.hashCode
    val s = heap.lookup(key.getBaseObject, key.getBaseOffset, key.getSizeInBytes, hash)
    if (s >= 0 || !mayBeCold(key, hash)) {
      counting.hits += 1
      if (s < 0 || !heap.isLive(s)) null else heap.keyValue(s)
    } else {
      counting.misses += 1
      val before = heap.allocatedBytes
      val loaded = promote(hash, copyOf(key))
      if (loaded < 0) null
      else {
        val kv = heap.keyValue(loaded) // before eviction may take the entry out again
        grew(heap.allocatedBytes - before)
        kv
      }
    }
  }

  /** Sets `key` to `value` in the open batch (both copied). */
  def put(key: UnsafeRow, value: UnsafeRow): Unit = {
    val hash = key.hashCode
    val before = heap.allocatedBytes
    val keyLength = key.getSizeInBytes
    val s = heap.lookup(key.getBaseObject, key.getBaseOffset, keyLength, hash)
    val target = if (s >= 0 || !mayBeCold(key, hash)) s else promote(hash, copyOf(key))
    if (target >= 0)
      heap.update(target, value.getBaseObject, value.getBaseOffset, value.getSizeInBytes)
    else heap.insertChanged(hash, key.getBaseObject, key.getBaseOffset, keyLength,
      value.getBaseObject, value.getBaseOffset, value.getSizeInBytes)
    grew(heap.allocatedBytes - before)
  }

  /** Removes `key` in the open batch; a no-op when it is absent. */
  def remove(key: UnsafeRow): Unit = {
    val hash = key.hashCode
    val s = heap.lookup(key.getBaseObject, key.getBaseOffset, key.getSizeInBytes, hash)
    val before = heap.allocatedBytes
    val target = if (s >= 0 || !mayBeCold(key, hash)) s else promote(hash, copyOf(key))
    if (target >= 0 && heap.isLive(target)) heap.removeEntry(target)
    grew(heap.allocatedBytes - before)
  }

  private def mayBeCold(key: UnsafeRow, hash: Int): Boolean =
    cold.mayHold(key.getBaseObject, key.getBaseOffset, key.getSizeInBytes, hash)

  /**
   * Loads `key` from the cold tier into the heap, clean; its slot, or -1 if RocksDB lacks it.
   * The caller reports the growth once it is done with the entry (eviction may take it out
   * again).
   */
  private def promote(hash: Int, key: Array[Byte]): Int = {
    val value = cold.get(key)
    if (value == null) return -1
    counting.coldLoads += 1
    heap.insertCommitted(hash, key, value, HeapTier.ColdClean)
  }

  def numKeys: Long = committedKeys + heap.batchKeyDelta

  /** Both tiers' live entries, a live view (see `LiveIterators.iterator`). */
  def iterator(): Iterator[KeyValue] with AutoCloseable = iterators.iterator()
  /** Live entries whose key starts with `prefix`'s columns, both tiers, captured now. */
  def prefixScan(prefix: UnsafeRow): Array[KeyValue] = iterators.prefixScan(prefix)

  // ---------------------------------------------------------------- commit and abort

  /** Writes the open batch's net changes; no side effects, so a failed write can abort. */
  def writeJournal(out: StateFile.RecordSink): Unit = {
    // Journals are in key order so that snapshots merge them without sorting (StateFile).
    val changes = KeyOrder.sorted(heap.changeList, heap)
    // In chunks, each prefetched first: see HeapTier.prefetch.
    val chunk = new Array[Int](JournalChunk)
    while (changes.hasNext) {
      var n = 0
      while (n < JournalChunk && changes.hasNext) { chunk(n) = changes.next(); n += 1 }
      heap.prefetch(chunk, n)
      var i = 0
      while (i < n) {
        val s = chunk(i)
        if (heap.isLive(s))
          out.putPacked(heap.page(s), heap.keyOffset(s), heap.keyLength(s), heap.valueLength(s))
        else if (heap.existed(s)) {
          out.removePacked(heap.page(s), heap.keyOffset(s), heap.keyLength(s))
        }
        i += 1
      }
    }
  }

  /**
   * Makes the open batch the committed state (after its journal is durable). The cold tier's
   * deletes are written first: if that write fails, nothing has changed and the batch is still
   * open, so an abort restores exactly the committed state (entries, cold bookkeeping).
   */
  def commitBatch(): Unit = {
    cold.deleteRemoved(heap)
    committedKeys = numKeys
    heap.commitBatch()
    heap.trimToSize()
    endBatch()
  }

  def abortBatch(): Unit = {
    heap.abortBatch()
    heap.trimToSize()
    endBatch()
  }

  private def endBatch(): Unit = {
    iterators.endBatch()
    publish()
  }

  // ---------------------------------------------------------------- recovery

  /** Empties both tiers (before loading a version from the checkpoint). */
  def clear(): Unit = {
    iterators.endBatch()
    heap.clear()
    cold.close()
    committedKeys = 0
    publish()
  }

  /**
   * Loads a committed version into this cleared state: `read` calls its argument with each
   * entry, once, in unsigned key order (a snapshot merged with its journals,
   * `checkpoint.MergedVersion`), and returns once its files are verified. Entries go to the heap
   * until the budget first asks this state to evict; from then on `LoadPastBudget` writes the rest
   * straight to the cold tier (and, for plain keys, the heap's share too, so that the entries
   * the first batches evict are already there). The load itself evicts nothing; what the budget
   * asks is evicted at its end. Keys are unique, so unlike [[applyCommitted]] it never asks the
   * cold tier whether a key is there. If `read` fails, what was loaded stays: clear the state
   * before another try.
   */
  def loadVersion(read: ((Array[Byte], Array[Byte]) => Unit) => Unit): Unit = {
    var toCold: LoadPastBudget = null
    try {
      read { (key, value) =>
        committedKeys += 1
        if (toCold != null) toCold.add(key, value)
        else {
          val before = heap.allocatedBytes
          heap.insertCommitted(HeapTier.hashOf(key), key, value, HeapTier.ColdAbsent)
          if (grew(heap.allocatedBytes - before, evict = false)) {
            toCold = LoadPastBudget(cold, heap, () => committedKeys)
          }
        }
      }
      if (toCold != null) toCold.finish()
    } finally if (toCold != null) toCold.close()
    if (toCold != null) keepToBudget()
  }

  /** Applies one committed record (a null value removes) outside any batch. */
  def applyCommitted(key: Array[Byte], value: Array[Byte]): Unit = {
    val hash = HeapTier.hashOf(key)
    val s = heap.lookup(key, Platform.BYTE_ARRAY_OFFSET, key.length, hash)
    val inCold = s < 0 && cold.mayHold(key, Platform.BYTE_ARRAY_OFFSET, key.length, hash) &&
      cold.get(key) != null
    if (value != null) {
      val before = heap.allocatedBytes
      if (s >= 0) heap.setCommitted(s, value)
      else {
        heap.insertCommitted(hash, key, value,
          if (inCold) HeapTier.ColdStale else HeapTier.ColdAbsent)
        if (!inCold) committedKeys += 1
      }
      grew(heap.allocatedBytes - before)
    } else if (s >= 0 || inCold) {
      if (inCold || heap.cold(s) != HeapTier.ColdAbsent) cold.delete(key)
      if (s >= 0) heap.dropCommitted(s)
      committedKeys -= 1
    }
  }

  // ---------------------------------------------------------------- memory (Spillable)

  /**
   * Counts `bytes` of growth; true if it took a report that found the state over budget, which
   * is then evicted unless `evict` is false (a load, which evicts at its end).
   */
  private def grew(bytes: Long, evict: Boolean = true): Boolean = {
    unreportedBytes += math.max(bytes, 0)
    if (unreportedBytes >= reportEveryBytes ||
      evictor.overShrinkTarget(publishedBytes + unreportedBytes, heap.numLiveEntries)) {
      unreportedBytes = 0
      reportEveryBytes = budget.reportEveryBytes
      publish()
      if (evict) keepToBudget() else evictor.shrinkRequested || !budget.report(this).isEmpty
    } else false
  }

  /**
   * On the owner's thread: honours a pending shrink request, then evicts what the budget asks
   * until it asks nothing more (or nothing more can go: pinned entries, open iterators).
   * Returns whether anything was asked.
   */
  private def keepToBudget(): Boolean = {
    val requested = evictor.shrinkRequested
    evictor.shrinkIfRequested()
    var e = budget.report(this)
    val asked = requested || !e.isEmpty
    while (!e.isEmpty && evictor.evict(e.bytes, e.entries) > 0) e = budget.report(this)
    asked
  }

  /**
   * Evicts at least `bytes` and `entries` (see `Evictor.evict`); returns the bytes freed.
   * Only the owner, or another thread while the state is idle, may call it.
   */
  def evict(bytes: Long, entries: Long): Long = evictor.evict(bytes, entries)

  private def publish(): Unit = {
    publishedBytes = evictor.residentBytes
    publishedEntries = heap.numLiveEntries
    publishedFixedBytes = cold.filterBytes + HeapTier.EmptyBytes
  }

  def coldKeyCount: Long = cold.keyCount
  /** Layers of the cold-key filter: what a lookup of an absent key probes. */
  def coldFilterLayers: Int = cold.filterLayers
  def coldBytes: Long = cold.bytes

  override def heapBytes: Long = publishedBytes
  override def heapEntries: Long = publishedEntries
  override def fixedBytes: Long = publishedFixedBytes
  override def spilledBytes: Long = publishedColdBytes
  override def lastUsedNanos: Long = ownership.lastUsedNanos
  override def canShrink: Boolean = ownership.canShrink

  /**
   * Evicts only from an idle state, and never waits: see `Ownership`. Another round whose
   * trySpill found the lock taken by this one got 0 and left its request to this one: so once
   * unlocked, this checks again and honours any request that came meanwhile (if the state is
   * still idle and no one else has the lock, who would then do the same).
   */
  override def trySpill(bytes: Long, entries: Long): Long = {
    var freed = 0L
    var askBytes = bytes
    var askEntries = entries
    var ran = true
    while (ran) {
      ran = false
      freed += ownership.ifIdle(0L) {
        ran = true
        val f = evictor.evict(askBytes, askEntries) + evictor.shrinkIfRequested()
        publishCounters()
        f
      }
      askBytes = 0L
      askEntries = 0L
      ran &&= evictor.shrinkRequested
    }
    freed
  }

  override def requestShrink(targetBytes: Long, targetEntries: Long): Unit =
    evictor.requestShrink(targetBytes, targetEntries)

  override def toString: String = s"spillstore live state $name"
}

object TieredState {
  /** Changed entries the journal prefetches at a time: their lines fit a core's L2 cache. */
  private val JournalChunk = 512
  private def copyOf(row: UnsafeRow): Array[Byte] =
    HeapTier.copyOf(row.getBaseObject, row.getBaseOffset, row.getSizeInBytes)
}
