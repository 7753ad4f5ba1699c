package spillstore.heap

import org.apache.spark.unsafe.Platform
import org.apache.spark.unsafe.array.ByteArrayMethods
import org.apache.spark.unsafe.hash.Murmur3_x86_32

import spillstore.checkpoint.StateFile

/**
 * The live state on the heap, without an object per entry: a chained hash table over entry
 * records ([[EntryRecords]]), with keys and values in [[Pages]]. An entry is named by its slot,
 * an `Int`; the values a batch replaced are kept beside its change list.
 *
 * Why no objects: at 25M keys in a 1 GB heap, entries as two objects each (a node and its key
 * and value array) were promoted by the million and then evicted, and G1 spent more CPU on them
 * than the task threads spent on the state. Records and pages are a few hundred arrays whatever
 * the number of entries.
 *
 * Updates write a new region and leave the old one as garbage (rows handed to Spark keep
 * pointing at it). The first change of a key in a batch keeps its committed region as the
 * undo and appends the slot to the batch's change list, so the change list is the batch's
 * squashed journal, and commit or abort costs what the batch changed, never what the state
 * holds. A removal inside a batch leaves a tombstone (the entry keeps its region, for its key)
 * that commit unlinks; until then entries only get added, which is what makes removal during
 * iteration safe.
 *
 * Slots are dense, [0, numSlots), and iteration walks them by index, so an iterator sees keys
 * added after it was created (as Spark's default provider's does) and is not disturbed by
 * table growth. Unlinking an entry moves the last one into its slot; its hash chain, its
 * page header, its change-list position and its pin follow it.
 *
 * The records' layout is [[EntryRecords]]'s, the choice of eviction victims [[Clock]]'s, giving
 * back the pages' garbage [[PageCompactor]]'s.
 *
 * Owned by the thread that may use its TieredState (see tiered.Ownership's state table): never
 * used by two threads at once, nothing synchronized. Snapshots are built from checkpoint files,
 * never from this table.
 */
final class HeapTier(listener: HeapTier.Listener = HeapTier.NoListener) {
  import HeapTier._
  import EntryRecords._

  private val pages = new Pages
  /** Head slot of each bucket's chain, -1 for none. */
  private var table = emptyTable(InitialCapacity)
  private var entriesInTable = 0
  private val records = new EntryRecords(InitialCapacity)
  /** Chooses eviction victims, never an entry the open batch changed (those are pinned). */
  private val clock = new Clock(records, InitialCapacity)
  private var liveCount = 0L
  /** The open batch's changed entries with the committed regions they replaced. */
  private val changes = new ChangeList(this)
  private val compactor = new PageCompactor(pages, records, changes)
  /** Keys the open batch added less keys it removed (committed state to now). */
  private var keyDelta = 0L
  /** Bytes allocated so far (regions, and each new entry's share of the arrays): growth. */
  private var allocated = 0L

  def numLiveEntries: Long = liveCount
  def numChanges: Int = changes.size
  /** Live keys now less live keys of the committed state, both tiers. */
  def batchKeyDelta: Long = keyDelta

  /**
   * Heap bytes: the pages, the table, the records and pins, the change list, and what the
   * listener (the prefix index) keeps per entry.
   */
  def estimatedBytes: Long = pages.estimatedBytes + table.length.toLong * 4 +
    records.estimatedBytes + clock.estimatedBytes + changes.estimatedBytes + listener.estimatedBytes

  /**
   * Bytes allocated since the tier was created: what the state grew by, entry by entry, where
   * [[estimatedBytes]] moves a page at a time.
   */
  def allocatedBytes: Long = allocated

  /** Bytes of pages holding no live key or value (see [[reclaim]]). */
  def garbageBytes: Long = pages.garbageBytes
  /** Bytes of the regions entries and undo values hold. */
  private[heap] def liveBytes: Long = pages.liveBytes
  def pageCount: Int = pages.pageCount

  /** Entries (live or tombstones) at slots [0, numSlots). */
  def numSlots: Int = entriesInTable

  // ---------------------------------------------------------------- one entry, by slot

  def hashAt(slot: Int): Int = records.hash(slot)
  def keyLength(slot: Int): Int = records.keyLength(slot)
  def valueLength(slot: Int): Int = records.valueLength(slot)
  /** Whether the key has a value; false while the open batch has removed it (a tombstone). */
  def isLive(slot: Int): Boolean = records.has(slot, Live)
  /** Changed in the open batch: it is in the batch's change list. */
  def changed(slot: Int): Boolean = records.has(slot, Changed)
  /** Had a committed value before the open batch changed it. */
  def existed(slot: Int): Boolean = records.has(slot, Existed)
  /**
   * What the cold tier holds for this key: [[HeapTier.ColdAbsent]], [[HeapTier.ColdStale]] or
   * [[HeapTier.ColdClean]].
   */
  def cold(slot: Int): Byte = records.cold(slot)
  def setCold(slot: Int, c: Byte): Unit = records.setCold(slot, c)

  /** The page holding the entry's key, then its value, from [[keyOffset]]. */
  def page(slot: Int): Array[Byte] = pages.page(records.addr(slot))
  /** Index in [[page]] of the key's first byte. */
  def keyOffset(slot: Int): Int = Pages.offset(records.addr(slot))
  /** The entry's key and value as they are now; they stay valid after later changes. */
  def keyValue(slot: Int): KeyValue =
    new KeyValue(page(slot), keyOffset(slot), keyLength(slot), valueLength(slot))
  /** A copy of the key bytes. */
  def keyBytes(slot: Int): Array[Byte] = {
    val from = keyOffset(slot)
    java.util.Arrays.copyOfRange(page(slot), from, from + keyLength(slot))
  }
  /** A copy of the value bytes. */
  def valueBytes(slot: Int): Array[Byte] = {
    val from = keyOffset(slot) + keyLength(slot)
    java.util.Arrays.copyOfRange(page(slot), from, from + valueLength(slot))
  }
  /** Heap bytes the entry costs: its record, pin and table share, its region. */
  def entryBytes(slot: Int): Long =
    PerEntryBytes + Pages.HeaderBytes + regionLength(slot)

  /**
   * Reads the record and the first and last bytes of the entry at each of `slots`[0, n), in a
   * loop whose reads do not depend on one another, so that the CPU waits for many cache misses
   * at once rather than one per entry; a pass over the same entries that follows (the
   * journal's encoding, which waits on each entry in turn) then finds them in cache: a
   * commit's changed entries lie all over the tier (docs/benchmarks.md, section 1).
   */
  def prefetch(slots: Array[Int], n: Int): Unit = {
    var sum = 0
    var i = 0
    while (i < n) {
      val s = slots(i)
      val addr = records.addr(s)
      val page = pages.page(addr)
      val from = Pages.offset(addr)
      val length = records.keyLength(s) + (if (records.has(s, Live)) records.valueLength(s) else 0)
      if (length > 0) sum += page(from) + page(from + length - 1)
      i += 1
    }
    prefetched = sum
  }
  // Written so that the JIT keeps `prefetch`'s reads.
  @volatile private var prefetched = 0

  /** Unsigned order of two entries' keys, the order of checkpoint files. */
  def compareKeys(a: Int, b: Int): Int = {
    val ka = keyOffset(a)
    val kb = keyOffset(b)
    java.util.Arrays.compareUnsigned(page(a), ka, ka + keyLength(a), page(b), kb, kb + keyLength(b))
  }

  // ---------------------------------------------------------------- lookups and the open batch

  /**
   * The slot of the key's entry, live or removed in the open batch (a tombstone), or -1 when
   * the heap knows nothing of the key. Marks a live entry used.
   */
  def lookup(base: AnyRef, offset: Long, length: Int, hash: Int): Int = {
    val s = find(base, offset, length, hash)
    if (s >= 0 && isLive(s)) touch(s)
    s
  }

  /** [[lookup]] without marking the entry used. */
  def find(base: AnyRef, offset: Long, length: Int, hash: Int): Int = {
    var s = table(hash & (table.length - 1))
    while (s >= 0) {
      if (records.hashAndLengthAre(s, hash, length)) {
        val a = records.addr(s)
        if (ByteArrayMethods.arrayEquals(pages.page(a),
            Platform.BYTE_ARRAY_OFFSET + Pages.offset(a),
            base, offset, length)) return s
      }
      s = records.next(s)
    }
    -1
  }

  /** Sets an entry's value (a row's bytes) in the open batch; its key stays. */
  def update(slot: Int, valueBase: AnyRef, valueOffset: Long, valueLength: Int): Unit = {
    checkValueLength(valueLength)
    val first = !changed(slot)
    recordChange(slot)
    val oldLength = regionLength(slot)
    val old = rewrite(slot, valueBase, valueOffset, valueLength)
    // The region the batch found is the undo, freed at commit; later ones are the batch's own.
    if (!first && changes.undoAddr(records.changeAt(slot)) != old) pages.free(old, oldLength)
    setLive(slot)
    touch(slot)
    payCompaction(slot)
  }

  /** Adds a key the committed state does not have, in the open batch; returns its slot. */
  def insertChanged(hash: Int, keyBase: AnyRef, keyOffset: Long, keyLength: Int,
      valueBase: AnyRef, valueOffset: Long, valueLength: Int): Int = {
    val s = insert(hash, keyBase, keyOffset, keyLength, valueBase, valueOffset, valueLength)
    recordChange(s)
    setLive(s)
    payCompaction(s)
    s
  }

  /** Removes a live entry in the open batch (it stays as a tombstone until commit). */
  def removeEntry(slot: Int): Unit = {
    recordChange(slot)
    setDead(slot)
  }

  /** The open batch's changed entries, each once, in first-change order (read only). */
  private[spillstore] def changeList: ChangeList = changes

  /** Makes the open batch's changes the committed state. */
  def commitBatch(): Unit = {
    var k = 0
    while (k < changes.size) {
      val s = changes.slot(k)
      val undo = changes.undoAddr(k)
      if (undo >= 0 && undo != records.addr(s))
        pages.free(undo, keyLength(s) + changes.undoValueLength(k))
      // Cleared first: an entry moved by the unlink below must not be looked up in the list.
      records.clear(s, Changed | Existed)
      if (!isLive(s)) unlink(s) else clock.unpin(s)
      k += 1
    }
    resetChanges()
  }

  /** Restores the committed state from before the open batch. */
  def abortBatch(): Unit = {
    var k = changes.size - 1
    while (k >= 0) {
      val s = changes.slot(k)
      val undo = changes.undoAddr(k)
      records.clear(s, Changed | Existed)
      if (undo >= 0) {
        val now = records.addr(s)
        if (now != undo) {
          pages.free(now, regionLength(s))
          records.setAddr(s, undo)
          records.setValueLength(s, changes.undoValueLength(k))
        }
        setLive(s)
        clock.unpin(s)
      } else {
        setDead(s)
        unlink(s)
      }
      k -= 1
    }
    resetChanges()
  }

  private def resetChanges(): Unit = {
    changes.clear()
    keyDelta = 0
  }

  // ---------------------------------------------------------------- outside any batch

  /** Adds a committed entry outside any batch (recovery, promotion); returns its slot. */
  def insertCommitted(hash: Int, key: Array[Byte], value: Array[Byte], cold: Byte): Int = {
    val s = insert(hash, key, Platform.BYTE_ARRAY_OFFSET, key.length,
      value, Platform.BYTE_ARRAY_OFFSET, value.length)
    setLive(s)
    setCold(s, cold)
    payCompaction(s)
    s
  }

  /** Replaces a committed entry's value outside any batch (recovery). */
  def setCommitted(slot: Int, value: Array[Byte]): Unit = {
    val oldLength = regionLength(slot)
    pages.free(rewrite(slot, value, Platform.BYTE_ARRAY_OFFSET, value.length), oldLength)
    setLive(slot)
    if (cold(slot) == ColdClean) setCold(slot, ColdStale)
    payCompaction(slot)
  }

  /**
   * Drops a committed entry the open batch has not changed (recovery replaying a removal,
   * eviction: its victims are never changed entries, which are pinned). The last slot's entry
   * moves into its slot: drop several in descending slot order.
   */
  def dropCommitted(slot: Int): Unit = {
    setDead(slot)
    records.clear(slot, Changed | Existed | Selected)
    unlink(slot)
  }

  /** The next eviction victim ([[Clock.nextVictim]]), selected until [[dropCommitted]] or
   *  [[unselect]]; -1 if none. */
  def nextVictim(): Int = clock.nextVictim(entriesInTable)
  /** Returns a selected victim that was not evicted after all. */
  def unselect(slot: Int): Unit = clock.unselect(slot)

  def clear(): Unit = {
    listener.cleared()
    pages.clear()
    table = emptyTable(InitialCapacity)
    records.clear()
    clock.clear()
    compactor.clear()
    entriesInTable = 0
    liveCount = 0
    resetChanges()
  }

  // ---------------------------------------------------------------- membership

  private def insert(hash: Int, keyBase: AnyRef, keyOffset: Long, keyLength: Int,
      valueBase: AnyRef, valueOffset: Long, valueLength: Int): Int = {
    if (keyLength > MaxKeyLength) {
      throw new IllegalArgumentException(s"spillstore cannot hold a key of $keyLength " +
        s"bytes: keys are limited to $MaxKeyLength bytes")
    }
    checkValueLength(valueLength)
    if (entriesInTable >= table.length - (table.length >>> 2)) rehash(table.length * 2)
    val s = entriesInTable
    clock.add(s)
    allocated += PerEntryBytes
    val a = allocate(keyLength + valueLength, s)
    val p = pages.page(a)
    copy(keyBase, keyOffset, p, Pages.offset(a), keyLength)
    copy(valueBase, valueOffset, p, Pages.offset(a) + keyLength, valueLength)
    val bucket = hash & (table.length - 1)
    records.add(s, hash, keyLength, Referenced, a, table(bucket), valueLength)
    table(bucket) = s
    entriesInTable += 1
    listener.inserted(p, Pages.offset(a), keyLength)
    s
  }

  /** Refuses, before anything changes, a value no checkpoint file could be read back with. */
  private def checkValueLength(valueLength: Int): Unit = if (valueLength > MaxValueLength) {
    throw new IllegalArgumentException(s"spillstore cannot hold a value of $valueLength " +
      s"bytes: values are limited to $MaxValueLength bytes (the largest record its checkpoint " +
      "files are read back with)")
  }

  /**
   * Gives the entry a new region: its key, then the value's bytes. Returns the old region's
   * address, which stays as it is (rows may point into it); the caller decides when it is
   * garbage.
   */
  private def rewrite(slot: Int, valueBase: AnyRef, valueOffset: Long, valueLength: Int): Long = {
    val old = records.addr(slot)
    val keyLen = keyLength(slot)
    val a = allocate(keyLen + valueLength, slot)
    val p = pages.page(a)
    System.arraycopy(pages.page(old), Pages.offset(old), p, Pages.offset(a), keyLen)
    copy(valueBase, valueOffset, p, Pages.offset(a) + keyLen, valueLength)
    records.setAddr(slot, a)
    records.setValueLength(slot, valueLength)
    old
  }

  /** At the end of a write that gave `slot` a new region, once every address is current again
   *  (an evacuation may move any region): pays the compactor's debt for it. */
  private def payCompaction(slot: Int): Unit =
    compactor.allocated(regionLength(slot), entriesInTable)

  /** Bytes of the entry's current region (key and value). */
  private def regionLength(slot: Int): Int = keyLength(slot) + valueLength(slot)

  private def allocate(length: Int, owner: Int): Long = {
    allocated += length + Pages.HeaderBytes
    pages.allocate(length, owner)
  }

  /** Takes a tombstone out of the table; the last slot's entry moves into its slot. */
  private def unlink(slot: Int): Unit = {
    listener.unlinked(page(slot), keyOffset(slot), keyLength(slot))
    val bucket = hashAt(slot) & (table.length - 1)
    replaceLink(bucket, slot, records.next(slot))
    pages.free(records.addr(slot), regionLength(slot))
    entriesInTable -= 1
    val last = entriesInTable
    if (last != slot) move(last, slot)
    clock.unpin(last)
  }

  /** Makes whatever pointed at slot `from` in the chain of `bucket` point at `to`. */
  private def replaceLink(bucket: Int, from: Int, to: Int): Unit = {
    var s = table(bucket)
    if (s == from) table(bucket) = to
    else {
      while (records.next(s) != from) s = records.next(s)
      records.setNext(s, to)
    }
  }

  /** Moves the entry in slot `from` to the free slot `to`, with everything that names it. */
  private def move(from: Int, to: Int): Unit = {
    records.copy(from, to)
    clock.moved(from, to)
    replaceLink(hashAt(to) & (table.length - 1), from, to)
    pages.setOwner(records.addr(to), to)
    if (changed(to)) {
      val k = records.changeAt(to)
      changes.setSlot(k, to)
      val undo = changes.undoAddr(k)
      if (undo >= 0 && undo != records.addr(to)) pages.setOwner(undo, to)
    }
  }

  private def setLive(slot: Int): Unit = if (!isLive(slot)) {
    records.set(slot, Live)
    liveCount += 1
    if (changed(slot)) keyDelta += 1
  }

  /** Makes a linked entry a tombstone; it keeps its region for its key. */
  private def setDead(slot: Int): Unit = if (isLive(slot)) {
    records.clear(slot, Live)
    liveCount -= 1
    if (changed(slot)) keyDelta -= 1
  }

  private def recordChange(slot: Int): Unit = if (!changed(slot)) {
    val live = isLive(slot)
    records.set(slot, if (live) Changed | Existed else Changed)
    records.setChangeAt(slot,
      changes.add(slot, if (live) records.addr(slot) else -1L, valueLength(slot)))
    clock.pin(slot)
    // Conservative: after an abort the cold copy is rewritten once more than needed.
    if (cold(slot) == ColdClean) setCold(slot, ColdStale)
  }

  // Written only when clear, so hot entries' cache lines are not dirtied on every read.
  private def touch(slot: Int): Unit =
    if (!records.has(slot, Referenced)) records.set(slot, Referenced)

  // ---------------------------------------------------------------- giving memory back

  /**
   * Gives back what many departed entries (evictions, removals, updates) left: table, record
   * and pin capacity at a quarter full now, and pages at the pace [[PageCompactor.settle]] sets,
   * paid as the tier allocates.
   */
  def trimToSize(): Unit = {
    if (entriesInTable * 4 < table.length && table.length > InitialCapacity) {
      var capacity = table.length
      while (entriesInTable * 4 < capacity && capacity > InitialCapacity) capacity /= 2
      rehash(capacity)
    }
    records.trim(entriesInTable)
    clock.trim(entriesInTable)
    compactor.settle(entriesInTable)
  }

  /** Evacuates pages to give back about `bytes` ([[PageCompactor.reclaim]]); returns the bytes
   *  given back. */
  def reclaim(bytes: Long): Long = compactor.reclaim(bytes, entriesInTable)

  /** Garbage bytes owed back, paid as the tier allocates (tests). */
  private[heap] def compactionOwed: Long = compactor.owedBytes

  private def rehash(capacity: Int): Unit = {
    table = emptyTable(capacity)
    val mask = capacity - 1
    // Rebuilt from the records: each slot joins its bucket's chain.
    var s = 0
    while (s < entriesInTable) {
      val bucket = hashAt(s) & mask
      records.setNext(s, table(bucket))
      table(bucket) = s
      s += 1
    }
  }
}

object HeapTier {
  private val InitialCapacity = 64

  /** The cold tier has no value for the key. */
  final val ColdAbsent: Byte = 0
  /** The cold tier has an older value for the key: eviction must write, removal must delete. */
  final val ColdStale: Byte = 1
  /** The cold tier has exactly the entry's value: eviction can just drop the entry. */
  final val ColdClean: Byte = 2

  /** What a journal or snapshot reader accepts: a larger value would commit and never load. */
  private val MaxValueLength = StateFile.MaxRecordBytes

  /** What an empty tier keeps (its smallest arrays, the change list's first chunk): eviction
   *  cannot free it. */
  lazy val EmptyBytes: Long = new HeapTier().estimatedBytes

  /**
   * Heap bytes of an entry beyond its region: its record (32), pin (1) and table slot (4 bytes
   * at a load of 0.375 to 0.75, about 7).
   */
  val PerEntryBytes = 40

  private def emptyTable(capacity: Int): Array[Int] = {
    val t = new Array[Int](capacity)
    java.util.Arrays.fill(t, -1)
    t
  }

  // Rows on the heap are byte arrays: System.arraycopy is an intrinsic, where Unsafe's
  // copyMemory pays a fixed cost that dominates at a row's few dozen bytes.
  private def copy(base: AnyRef, offset: Long, to: Array[Byte], at: Int, length: Int): Unit =
    base match {
      case bytes: Array[Byte] =>
        System.arraycopy(bytes, (offset - Platform.BYTE_ARRAY_OFFSET).toInt, to, at, length)
      case _ => Platform.copyMemory(base, offset, to, Platform.BYTE_ARRAY_OFFSET + at, length)
    }

  /** Seam for structures that follow the table's membership (the prefix index). */
  trait Listener {
    /** An entry with this key (bytes [offset, offset + length) of `page`) joined the table. */
    def inserted(page: Array[Byte], offset: Int, length: Int): Unit
    /** The entry with this key left the table. */
    def unlinked(page: Array[Byte], offset: Int, length: Int): Unit
    def cleared(): Unit
    /** Heap bytes the listener keeps for the entries it follows; counted in the budget. */
    def estimatedBytes: Long
  }

  object NoListener extends Listener {
    def inserted(page: Array[Byte], offset: Int, length: Int): Unit = ()
    def unlinked(page: Array[Byte], offset: Int, length: Int): Unit = ()
    def cleared(): Unit = ()
    def estimatedBytes: Long = 0L
  }

  /** The hash Spark's `UnsafeRow.hashCode` gives the same bytes. */
  def hashOf(bytes: Array[Byte]): Int = hashOf(bytes, 0, bytes.length)

  /** `hashOf` of bytes [offset, offset + length) of `bytes`. */
  def hashOf(bytes: Array[Byte], offset: Int, length: Int): Int =
    Murmur3_x86_32.hashUnsafeWords(bytes, Platform.BYTE_ARRAY_OFFSET + offset, length, 42)

  def copyOf(base: AnyRef, offset: Long, length: Int): Array[Byte] = {
    val a = new Array[Byte](length)
    Platform.copyMemory(base, offset, a, Platform.BYTE_ARRAY_OFFSET, length)
    a
  }
}
