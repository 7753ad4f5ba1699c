package spillstore.tiered

import java.io.File
import java.util.concurrent.locks.ReentrantLock

import scala.collection.mutable.ArrayBuffer
import scala.util.control.NonFatal

import org.rocksdb.WriteBatch

import org.apache.spark.internal.Logging
import org.apache.spark.sql.catalyst.expressions.UnsafeRow
import org.apache.spark.unsafe.Platform

import spillstore.checkpoint.StateFile
import spillstore.cold.{ColdKeyFilter, ColdKeys, ColdTier, ColdWrite}
import spillstore.heap.{HeapTier, KeyOrder, KeyValue, PrefixIndex}
import spillstore.memory.Spillable
import spillstore.metrics.{ExecutorStats, TierCounters}

/**
 * A provider's live state over two tiers: the heap tier (hot entries, the open batch) and the
 * cold tier (entries evicted to a local RocksDB). Reads see the union, the heap winning; a heap
 * miss loads the entry from RocksDB and promotes it. Eviction is write-back: an entry RocksDB
 * already holds unchanged is dropped without a write.
 *
 * Exactness: before the batch changes a key the heap lacks, the key is promoted from RocksDB
 * when it is there, so every changed entry knows whether it existed, and each entry knows what
 * RocksDB holds for it. That keeps journals, the key count and the cold tier exact.
 *
 * == Ownership ==
 * One call at a time uses the state, and nothing here is synchronized on the way: a get or a
 * put pays no lock. Whose call that is follows a state table. Moves between phases happen
 * under `lock` (taking it publishes everything the previous user wrote to the next); store
 * calls only check, with one volatile read, that their [[Lease]] is still the state's.
 *
 * {{{
 * phase    | lease | who may use the state (thread)           | moved on by (under `lock`)
 * ---------+-------+------------------------------------------+-------------------------------------
 * idle     | none  | a relief round holding `lock` (any        | a task's open: `acquire` -> owned
 *          |       | thread, only ever `tryLock`): "spilling"  | an unload: `close` -> closed (freed)
 * owned    | L     | L's stores, one call at a time: the task  | L's commit, abort or task end:
 *          |       | thread (loading a version is one call);   |   `release(L)` -> idle
 *          |       | on Spark 3.5 also the task's Python       | a newer attempt: `revoke` -> doomed
 *          |       | writer thread, serialized with the task   | an unload: `close` -> doomed
 *          |       | thread by the 3.5 adapter. Relief rounds  |
 *          |       | only ask L to shrink (`requestShrink`)    |
 * doomed   | Gone  | still L's call in flight, if any; nobody  | L's holder, on its next call or at
 *          |       | else (the provider moved on to a new      |   its end: `freeIfDoomedBy(L)`;
 *          |       | state, or was unloaded)                   | anyone once L's holder is gone:
 *          |       |                                           |   `freeIfAbandoned` -> closed (freed)
 * closed   | none  | nobody: every call throws                 | -
 * }}}
 *
 * A doomed state is never freed under a call in flight: its former owner frees it between
 * calls, or the provider's maintenance, open or unload once that owner can be in no call (its
 * task ended, or, outside a task, the thread that opened the store died). Until then it stays
 * in the memory budget. Any misuse (a call without the lease, a transition from the wrong phase)
 * throws `IllegalStateException` naming the state and its phase.
 */
final class TieredState(
    name: String,
    prefixIndex: Option[PrefixIndex],
    localDir: () => File,
    onGrowth: TieredState => Unit,
    reportEveryBytes: Long = TieredState.ReportEveryBytes,
    coldFilterMaxBytes: Long = ColdKeyFilter.MaxBytes,
    openCold: (File, String) => ColdTier = ColdTier.create,
    onFreed: TieredState => Unit = _ => ()) extends Spillable with Logging {
  import TieredState._

  private val lock = new ReentrantLock()
  /** The owner's lease; null while idle or closed, [[Lease.Gone]] while doomed. */
  @volatile private var lease: Lease = _
  /** While doomed: the lease whose holder frees the state. Under `lock`. */
  private var doomedBy: Lease = _
  @volatile private var closed = false
  @volatile private var freed = false

  val heap = new HeapTier(prefixIndex.getOrElse(HeapTier.NoListener))
  private val coldKeys: ColdKeys =
    prefixIndex.map(p => new ColdKeys.Prefixed(p.prefixOf)).getOrElse(ColdKeys.Plain)
  private var cold: ColdTier = _
  /** Keys the cold tier holds (exact). */
  private var coldCount = 0L
  /** Keys the cold tier may hold: most lookups of absent keys never reach RocksDB. */
  private val coldFilter = new ColdKeyFilter(maxBytes = coldFilterMaxBytes)
  /** Live keys of the committed state, both tiers (exact). */
  private var committedKeys = 0L

  // Cumulative statistics. Lookups count on the task thread; evictions may also be made by
  // other threads while the state is released, so a batch reports what happened since the
  // previous one committed (see takeBatchCounters).
  private var hits = 0L
  private var misses = 0L
  private var coldLoads = 0L
  @volatile private var evictions = 0L
  @volatile private var writeBacks = 0L
  private var baseline = TierCounters.Zero
  /** The counters as last added to [[ExecutorStats]]; under `lock`. */
  private var reportedToExecutor = TierCounters.Zero

  def counters: TierCounters = TierCounters(hits, misses, coldLoads, evictions, writeBacks)

  /** What happened since the last committed batch, this batch's lookups included. */
  def batchCounters: TierCounters = counters - baseline

  /** [[batchCounters]], closing the batch: what follows counts towards the next one. */
  def takeBatchCounters(): TierCounters = {
    val now = counters
    val batch = now - baseline
    baseline = now
    batch
  }

  @volatile private var lastUsed = System.nanoTime()
  @volatile private var publishedBytes = 0L
  @volatile private var publishedEntries = 0L
  @volatile private var publishedFixedBytes = 0L
  @volatile private var publishedColdBytes = 0L
  @volatile private var shrinkToBytes = Long.MaxValue
  @volatile private var shrinkToEntries = Long.MaxValue
  /** Growth since the memory manager last heard of us. */
  private var unreportedBytes = 0L
  /** Iterators of this batch not yet exhausted: eviction would disturb them. */
  private var openIterators = 0
  /** Cold-tier scans of this batch's iterators; closed when the batch or the lease ends. */
  private val openScans = new ArrayBuffer[ColdTier.Scan]
  /** Counts ended batches: an iterator is valid only in the batch that created it. */
  private var batchEpoch = 0L

  // ---------------------------------------------------------------- ownership

  /** Runs `body` holding the lock: phase changes, and a relief round's eviction. */
  private def locked[T](body: => T): T = {
    lock.lock()
    try body finally lock.unlock()
  }

  /** Checks, at the start of a store call, that `l` still owns the state. */
  def enter(l: Lease): Unit = if (lease ne l) leaseLost(l)

  private def leaseLost(l: Lease): Nothing = {
    freeIfDoomedBy(l) // we are between calls: if ours to free, free it now
    throw new IllegalStateException(s"${l.holder} cannot use $this: its lease ended (" +
      s"${Option(l.endedBy).getOrElse("unknown")}); the state is $phase")
  }

  /** Whether `l` is the current lease. */
  def holds(l: Lease): Boolean = l != null && (lease eq l)

  /** The current lease; null when idle or closed, [[Lease.Gone]] when doomed. */
  def currentLease: Lease = lease

  /**
   * Gives the idle state to a new lease for `holder` (a task attempt, or -1 outside a task);
   * `holderIdle` tells when the holder can be in no call (see [[freeIfAbandoned]]).
   */
  def acquire(holder: String, taskAttemptId: Long,
      holderIdle: () => Boolean = () => false): Lease = locked {
    if (closed || lease != null) {
      throw new IllegalStateException(s"$holder cannot acquire $this: it is $phase")
    }
    val l = new Lease(holder, taskAttemptId, this, holderIdle)
    lease = l
    lastUsed = System.nanoTime()
    l
  }

  /**
   * A newer attempt takes over from the owner, whose call may be in flight: the state is doomed
   * (left to the owner to free) and the caller must use a new state. Returns false if the state
   * was not owned (nothing to revoke).
   */
  def revoke(reason: String): Boolean = locked {
    if (lease == null || (lease eq Lease.Gone)) false
    else { doom(reason); true }
  }

  private def doom(reason: String): Unit = {
    lease.endedBy = reason
    doomedBy = lease
    lease = Lease.Gone
  }

  /**
   * Ends lease `l` if it is current (on its holder's thread, between calls): honours what the
   * memory manager asked meanwhile (an owned state cannot be spilled by others), then goes idle.
   * Returns false when `l` already ended, so a second release (the task's completion listener
   * after a commit) does nothing, except freeing a state `l` was the last owner of.
   * `lastLook` runs after those evictions, while `l` still owns the state: a commit reads the
   * figures it reports there (RocksDB is read only by its user), evictions its end made room
   * for included.
   */
  def release(l: Lease, reason: String, lastLook: () => Unit = () => ()): Boolean = {
    if (l == null || (lease ne l)) { freeIfDoomedBy(l); false }
    else {
      closeScans()
      try { settle(reason); lastLook() } finally locked {
        if (lease eq l) { // else revoked or unloaded meanwhile: doomed, freed below
          publishCounters()
          l.endedBy = reason
          lease = null
          lastUsed = System.nanoTime()
        }
      }
      freeIfDoomedBy(l)
      // A relief round that asked while the state was still ours found it owned (its
      // trySpill returns 0): now that it is idle and unlocked, honour the request as trySpill
      // would. Checked after the unlock, so a request made later finds the state idle.
      if (shrinkToBytes != Long.MaxValue || shrinkToEntries != Long.MaxValue) trySpill(0, 0)
      true
    }
  }

  /**
   * The growth hook as the owner lets go. Its batch has ended (committed or aborted), so an
   * eviction that fails here (the cold tier's disk) must not fail the commit or abort that
   * ended it: it is logged, and the next growth report or relief round tries again.
   */
  private def settle(reason: String): Unit =
    try onGrowth(this) catch {
      case NonFatal(e) =>
        logWarning(s"$this could not evict on release ($reason); the next batch or relief " +
          s"round retries: ${e.getMessage}", e)
    }

  /** Frees the state if it is doomed and `l` was its owner; on `l`'s holder's thread. */
  def freeIfDoomedBy(l: Lease): Unit = if (l != null) locked {
    if (doomedBy eq l) freeDoomed()
  }

  /**
   * Frees a doomed state whose former owner can be in no call (see the class doc) and has not
   * freed it; on any thread. Returns whether it did.
   */
  def freeIfAbandoned(): Boolean = locked {
    doomedBy != null && doomedBy.holderIdle() && { freeDoomed(); true }
  }

  private def freeDoomed(): Unit = {
    doomedBy = null
    lease = null
    free()
  }

  /**
   * Unloads: frees the state now if no task owns it; else dooms it, and its owner frees it
   * between calls (its next call throws). Either way the state is closed for new leases.
   */
  def close(): Unit = locked {
    if (!closed) {
      closed = true
      if (lease == null) free()
      else if (lease ne Lease.Gone) doom("its provider was unloaded (closed)")
    }
  }

  /** Whether the state was unloaded (closed for new leases), freed or not yet. */
  def isClosed: Boolean = closed

  /** Whether its memory was given back (closed, and no owner left to free it). */
  def isFreed: Boolean = freed

  private def free(): Unit = {
    closed = true
    closeScans()
    heap.clear()
    closeCold()
    publish()
    publishCounters()
    freed = true
    onFreed(this)
  }

  /**
   * Under `lock`: adds what happened since the last call to the executor's figures, and takes
   * the cold tier's size for them (RocksDB is read only by its user, never by a metrics thread).
   */
  private def publishCounters(): Unit = {
    val now = counters
    ExecutorStats.addTier(now - reportedToExecutor)
    reportedToExecutor = now
    publishedColdBytes = coldBytes
  }

  private def phase: String =
    if (lease eq Lease.Gone) "doomed (unloaded or taken over; its last owner frees it)"
    else if (closed) "closed (unloaded)"
    else if (lease != null) s"owned by ${lease.holder}"
    else "idle"

  // ---------------------------------------------------------------- reads and writes

  /**
   * The key and value for `key`, or null. Their bytes are never modified: the rows Spark makes
   * of them stay valid after later changes.
   */
  def get(key: UnsafeRow): KeyValue = {
    val hash = key.hashCode
    val s = heap.lookup(key.getBaseObject, key.getBaseOffset, key.getSizeInBytes, hash)
    if (s >= 0 || !mayBeCold(key, hash)) {
      hits += 1
      if (s < 0 || !heap.isLive(s)) null else heap.keyValue(s)
    } else {
      misses += 1
      val before = heap.allocatedBytes
      val loaded = promote(hash, copyOf(key))
      if (loaded < 0) null else {
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
    if (target >= 0) heap.update(target, value.getBaseObject, value.getBaseOffset, value.getSizeInBytes)
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
    mayBeCold(key.getBaseObject, key.getBaseOffset, key.getSizeInBytes, hash)

  private def mayBeCold(base: AnyRef, offset: Long, length: Int, hash: Int): Boolean =
    coldCount > 0 && coldFilter.mightContain(base, offset, length, hash)

  /**
   * Loads `key` from the cold tier into the heap, clean; its slot, or -1 if RocksDB lacks it.
   * The caller reports the growth once it is done with the entry (eviction may take it out
   * again).
   */
  private def promote(hash: Int, key: Array[Byte]): Int = {
    val value = cold.get(coldKeys.encode(key))
    if (value == null) return -1
    coldLoads += 1
    heap.insertCommitted(hash, key, value, HeapTier.ColdClean)
  }

  def numKeys: Long = committedKeys + heap.batchKeyDelta

  // ---------------------------------------------------------------- commit and abort

  /** Writes the open batch's net changes; no side effects, so a failed write can abort. */
  def writeJournal(out: StateFile.RecordSink): Unit = {
    // Journals are in key order so that snapshots merge them without sorting (StateFile).
    val changes = KeyOrder.sorted(heap.changeList, heap)
    while (changes.hasNext) {
      val s = changes.next()
      if (heap.isLive(s)) out.putPacked(heap.page(s), heap.keyOffset(s), heap.keyLength(s), heap.valueLength(s))
      else if (heap.existed(s)) out.removePacked(heap.page(s), heap.keyOffset(s), heap.keyLength(s))
    }
  }

  /**
   * Makes the open batch the committed state (after its journal is durable). The cold tier's
   * deletes are written first: if that write fails, nothing has changed and the batch is still
   * open, so an abort restores exactly the committed state (entries, cold bookkeeping).
   */
  def commitBatch(): Unit = {
    val changes = heap.changeList
    var deleted = 0
    var deletes: WriteBatch = null
    try {
      var i = 0
      // Only entries the cold tier holds need a delete: none while it is closed.
      while (cold != null && i < changes.size) {
        val s = changes.slot(i)
        if (!heap.isLive(s) && heap.cold(s) != HeapTier.ColdAbsent) {
          if (deletes == null) deletes = ColdTier.newBatch()
          deletes.delete(coldKeys.encode(heap.keyBytes(s)))
          deleted += 1
        }
        i += 1
      }
      if (deletes != null) cold.write(deletes)
    } finally if (deletes != null) deletes.close()
    committedKeys = numKeys
    coldCount -= deleted
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
    closeScans()
    publish()
  }

  /** Closes this batch's cold scans (native iterators); their iterators are done. */
  private def closeScans(): Unit = {
    openScans.foreach(_.close())
    openScans.clear()
    openIterators = 0
    batchEpoch += 1
  }

  // ---------------------------------------------------------------- iteration

  /**
   * Live entries of both tiers, each key once, heap winning, as a live view like a
   * ConcurrentHashMap iterator: it looks one entry ahead, returns values as of `next()` (or as
   * of the look-ahead for an entry removed since) and sees keys added while it runs.
   *
   * First the cold tier: keys the heap held when the iterator was created are left to the heap
   * part; a key promoted since is returned here with the heap's value. Then the heap, by slot:
   * entries added since creation that RocksDB holds were the cold part's. Eviction waits until
   * the iterator is exhausted, so RocksDB and the slots do not change under it.
   */
  def iterator(): Iterator[KeyValue] with AutoCloseable = {
    openIterators += 1
    val heapAtStart = heap.numSlots
    val epoch = batchEpoch
    new Iterator[KeyValue] with AutoCloseable {
      private val scan = if (coldCount == 0) null else cold.scan(null, _ => true)
      if (scan != null) openScans += scan
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
          val key = coldKeys.decode(ck)
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
        if (epoch == batchEpoch) {
          openIterators -= 1
          if (scan != null) { scan.close(); openScans -= scan }
        }
      }

      private def lookAhead(s: Int, kv: KeyValue): Unit = { aheadSlot = s; ahead = kv }

      private def checkUsable(what: String): Unit = {
        if (epoch != batchEpoch) throw new IllegalStateException(
          s"$what on an iterator of $this whose batch has ended (committed, aborted or released)")
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
    if (coldCount > 0) {
      val start = coldKeys.asInstanceOf[ColdKeys.Prefixed].rangeStart(prefix)
      val scan = cold.scan(start, startsWith(_, start))
      try scan.foreach { case (ck, v) =>
        val key = coldKeys.decode(ck)
        if (heap.find(key, Platform.BYTE_ARRAY_OFFSET, key.length, HeapTier.hashOf(key)) < 0) {
          out += KeyValue.of(key, v)
        }
      } finally scan.close()
    }
    out.toArray
  }

  // ---------------------------------------------------------------- recovery

  /** Empties both tiers (before loading a version from the checkpoint). */
  def clear(): Unit = {
    closeScans()
    heap.clear()
    closeCold()
    committedKeys = 0
    publish()
  }

  /**
   * Adds one entry of a snapshot being loaded into a cleared state: snapshot keys are unique,
   * so unlike [[applyCommitted]] it never asks the cold tier whether the key is there.
   */
  def loadSnapshotEntry(key: Array[Byte], value: Array[Byte]): Unit = {
    val before = heap.allocatedBytes
    heap.insertCommitted(HeapTier.hashOf(key), key, value, HeapTier.ColdAbsent)
    committedKeys += 1
    grew(heap.allocatedBytes - before)
  }

  /** Applies one committed record (a null value removes) outside any batch. */
  def applyCommitted(key: Array[Byte], value: Array[Byte]): Unit = {
    val hash = HeapTier.hashOf(key)
    val s = heap.lookup(key, Platform.BYTE_ARRAY_OFFSET, key.length, hash)
    val inCold = s < 0 && mayBeCold(key, Platform.BYTE_ARRAY_OFFSET, key.length, hash) &&
      cold.get(coldKeys.encode(key)) != null
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
      if (inCold || heap.cold(s) != HeapTier.ColdAbsent) deleteCold(key)
      if (s >= 0) heap.dropCommitted(s)
      committedKeys -= 1
    }
  }

  private def deleteCold(key: Array[Byte]): Unit = {
    val batch = ColdTier.newBatch()
    try { batch.delete(coldKeys.encode(key)); cold.write(batch) } finally batch.close()
    coldCount -= 1
  }

  // ---------------------------------------------------------------- eviction

  private def grew(bytes: Long): Unit = {
    unreportedBytes += math.max(bytes, 0)
    if (unreportedBytes >= reportEveryBytes || publishedBytes + unreportedBytes > shrinkToBytes ||
      heap.numLiveEntries > shrinkToEntries) {
      unreportedBytes = 0
      publish()
      onGrowth(this)
    }
  }

  /** The owner honours a pending shrink request, if any; called from the growth hook. */
  def shrinkIfRequested(): Unit = {
    val bytes = shrinkToBytes
    val entries = shrinkToEntries
    if (bytes != Long.MaxValue || entries != Long.MaxValue) {
      shrinkToBytes = Long.MaxValue
      shrinkToEntries = Long.MaxValue
      evict(residentBytes - bytes, heap.numLiveEntries - entries)
    }
  }

  /**
   * Evicts at least `bytes` and `entries` (coldest first, by CLOCK) unless only pinned entries
   * are left or an iterator of this batch is still open. Returns the bytes freed. Only the
   * owner, or another thread while the state is released, may call it.
   */
  def evict(bytes: Long, entries: Long): Long = {
    if ((bytes <= 0 && entries <= 0) || openIterators > 0) return 0
    val before = residentBytes
    heap.trimToSize() // spare capacity goes first: a state with no entries left has some
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
      writeBytes += ColdWrite.putBytes(heap.keyLength(victim), heap.valueLength(victim))
    }
    if (n == 0) return 0
    // RocksDB first: if the write fails, the heap still has every entry.
    val written = try writeBack(victims, n) catch {
      case e: Throwable =>
        (0 until n).foreach(i => heap.unselect(victims(i)))
        throw e
    }
    coldFilter.expect(heap.numLiveEntries) // only until its first layer exists
    (0 until n).foreach { i =>
      val v = victims(i)
      if (heap.cold(v) == HeapTier.ColdAbsent) {
        coldCount += 1
        if (coldFilter.add(heap.page(v), Platform.BYTE_ARRAY_OFFSET + heap.keyOffset(v),
          heap.keyLength(v), heap.hashAt(v))) {
          logInfo(s"Cold-key filter of $name gave up at $coldCount keys (limit " +
            s"$coldFilterMaxBytes bytes of the memory budget): misses read RocksDB again")
        }
      }
    }
    // Dropping moves the last slot's entry into the freed one: highest slots first, so that no
    // victim is moved before its turn.
    java.util.Arrays.sort(victims, 0, n)
    var i = n - 1
    while (i >= 0) { heap.dropCommitted(victims(i)); i -= 1 }
    heap.trimToSize()
    evictions += n
    writeBacks += written
    publish()
    n
  }

  /**
   * Writes the victims whose value RocksDB lacks, in one write in key order; returns how many.
   * In key order, RocksDB's memtable inserts each key next to where the previous one went (its
   * skip list keeps that position): 583 ns a key written against 753 in eviction order, sorting
   * included (`spillstore.bench.ColdWriteBench`, 7,490 16-byte keys a write).
   */
  private def writeBack(victims: Array[Int], count: Int): Int = {
    val dirty = victims.take(count).filter(heap.cold(_) != HeapTier.ColdClean)
    val n = dirty.length
    if (n == 0) return 0
    val keys = new Array[Array[Byte]](n)
    val keyOffsets = new Array[Int](n)
    val keyLengths = new Array[Int](n)
    var size = 0L
    var i = 0
    while (i < n) {
      val v = dirty(i)
      if (coldKeys eq ColdKeys.Plain) {
        keys(i) = heap.page(v); keyOffsets(i) = heap.keyOffset(v); keyLengths(i) = heap.keyLength(v)
      } else { val k = coldKeys.encode(heap.keyBytes(v)); keys(i) = k; keyLengths(i) = k.length }
      size += ColdWrite.putBytes(keyLengths(i), heap.valueLength(v))
      i += 1
    }
    val write = new ColdWrite(Math.toIntExact(size))
    KeyOrder.order(keys, keyOffsets, keyLengths, n).foreach { j =>
      val v = dirty(j)
      write.put(keys(j), keyOffsets(j), keyLengths(j), heap.page(v),
        heap.keyOffset(v) + heap.keyLength(v), heap.valueLength(v))
    }
    val batch = write.toWriteBatch
    try ensureCold().write(batch) finally batch.close()
    n
  }

  private def ensureCold(): ColdTier = {
    if (cold == null) {
      cold = openCold(localDir(), name)
      logInfo(s"$name starts spilling: opened its cold tier in ${cold.dir}")
    }
    cold
  }

  private def closeCold(): Unit = {
    if (cold != null) {
      logInfo(s"$name stops spilling: closing its cold tier ($coldCount keys, ${cold.dir})")
      cold.close()
      cold = null
    }
    coldCount = 0
    coldFilter.clear()
  }

  /** What this state keeps on the heap: the heap tier and the cold tier's key filter. */
  private def residentBytes: Long = heap.estimatedBytes + coldFilter.bytes

  private def publish(): Unit = {
    publishedBytes = residentBytes
    publishedEntries = heap.numLiveEntries
    publishedFixedBytes = coldFilter.bytes + HeapTier.EmptyBytes
  }

  def coldKeyCount: Long = coldCount
  /** Layers of the cold-key filter: what a lookup of an absent key probes. */
  def coldFilterLayers: Int = coldFilter.layerCount
  def coldBytes: Long = if (cold == null) 0L else cold.approximateBytes

  // ---------------------------------------------------------------- Spillable

  override def heapBytes: Long = publishedBytes
  override def heapEntries: Long = publishedEntries
  override def fixedBytes: Long = publishedFixedBytes
  override def spilledBytes: Long = publishedColdBytes
  /** In use now counts as used now: an owned state must not look cold. */
  override def lastUsedNanos: Long = if (lease != null) System.nanoTime() else lastUsed

  /** Evicts only from an idle state, and never waits: see the ownership table. */
  override def trySpill(bytes: Long, entries: Long): Long = {
    if (lease != null || !lock.tryLock()) return 0L
    try {
      if (closed || lease != null) 0L
      else {
        val freed = evict(bytes, entries)
        shrinkIfRequested()
        publishCounters()
        freed
      }
    } finally lock.unlock()
  }

  override def requestShrink(targetBytes: Long, targetEntries: Long): Unit = {
    shrinkToBytes = targetBytes
    shrinkToEntries = targetEntries
  }

  override def toString: String = s"spillstore live state $name"
}

/**
 * One task attempt's right to use a [[TieredState]] (see its ownership table): the read and
 * write stores a task opens on a provider share it. `taskAttemptId` is -1 outside a task.
 */
final class Lease private[tiered] (val holder: String, val taskAttemptId: Long,
    val state: TieredState, private[tiered] val holderIdle: () => Boolean) {
  /** Why the lease ended, once it has; for error messages. */
  @volatile private[spillstore] var endedBy: String = _

  override def toString: String = s"Lease($holder)"
}

object Lease {
  /** The lease of a doomed state: nobody's; see [[TieredState]]'s ownership table. */
  private[tiered] val Gone =
    new Lease("nobody (the state was unloaded or taken over)", -1, null, () => true)
}

object TieredState {
  /** The heap reports growth to the memory manager in steps of at most this many bytes. */
  val ReportEveryBytes: Long = 64L << 10

  /**
   * Victims per RocksDB write. Bounds what one eviction holds at once: the victim list (64 KB of
   * references, below the 512 KB at which G1 allocates an array as humongous in a 1 GB heap;
   * a 25M-key run allocated 390 larger lists) and the native `WriteBatch`, which is outside
   * `coldTierMemory`. It does not lower G1's work: Spark's own large arrays start its cycles too.
   */
  private[tiered] val MaxVictimsPerWrite = 16384

  /**
   * Bytes of puts per RocksDB write (victims are added until the write reaches it): keeps the
   * write's one array ([[ColdWrite]]) below G1's humongous size for entries of up to a few KB.
   */
  private[tiered] val MaxBytesPerWrite = 256 << 10

  private def copyOf(row: UnsafeRow): Array[Byte] =
    HeapTier.copyOf(row.getBaseObject, row.getBaseOffset, row.getSizeInBytes)

  private def startsWith(a: Array[Byte], prefix: Array[Byte]): Boolean =
    a.length >= prefix.length &&
      java.util.Arrays.equals(a, 0, prefix.length, prefix, 0, prefix.length)
}
