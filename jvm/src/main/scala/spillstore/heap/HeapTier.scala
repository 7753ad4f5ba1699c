package spillstore.heap


import org.apache.spark.unsafe.Platform
import org.apache.spark.unsafe.array.ByteArrayMethods
import org.apache.spark.unsafe.hash.Murmur3_x86_32

/**
 * The live state as on-heap entries: a chained hash table whose nodes also carry the open
 * batch's flags and a CLOCK reference bit; the values a batch replaced are kept beside its
 * change list, so the entry of a key no batch is changing carries no undo field.
 *
 * Updates are in place. The first change of a key in a batch records its committed value and
 * appends the entry to the batch's change list, so the change list is the batch's squashed
 * journal, and commit or abort costs what the batch changed, never what the state holds.
 * A removal inside a batch leaves a tombstone (value null) that commit unlinks; until then
 * entries only get added, which is what makes removal during iteration safe.
 *
 * Iteration walks a dense array of all entries by index, so an iterator sees keys added after
 * it was created (as Spark's default provider's does) and is not disturbed by table growth.
 *
 * Recency is tracked CLOCK-style (second chance), not with a linked LRU list: an access only
 * sets a boolean in the entry it already read. A linked list costs four reference stores into
 * random old-generation objects per access, and under G1 each is a cross-region barrier; on
 * the API benchmark that made get+put 4.7x slower (docs/design.md).
 *
 * Not thread-safe: only the task thread that holds the open store touches it. Snapshots are
 * built from checkpoint files, never from this table.
 */
final class HeapTier(listener: HeapTier.Listener = HeapTier.NoListener) {
  import HeapTier._

  private var table = new Array[Entry](InitialCapacity)
  private var entriesInTable = 0
  /** All entries in the table, densely; commit and abort fill holes from the end. */
  private var dense = new Array[Entry](InitialCapacity)
  /**
   * 1 where the entry in the same slot of `dense` is pinned (changed in the open batch, or
   * selected for eviction), mirroring `Entry.pinned`. The CLOCK hand skips pinned slots without
   * touching their entries: late in a batch that misses a lot most of the heap is pinned, and
   * a sweep through the entries themselves cost a cache miss per slot (43 % of a 50 %-hit run).
   */
  private var pins = new Array[Byte](InitialCapacity)
  private var liveCount = 0L
  private var byteCount = 0L
  /** Position of the CLOCK hand in `dense`. */
  private var hand = 0
  /** The open batch's changed entries with the committed values they replaced. */
  private val changes = new ChangeList
  /** Keys the open batch added less keys it removed (committed state to now). */
  private var keyDelta = 0L

  def numLiveEntries: Long = liveCount
  def numChanges: Int = changes.size
  /** Live keys now less live keys of the committed state, both tiers. */
  def batchKeyDelta: Long = keyDelta

  /**
   * Entries' bytes; the hash table, the dense array, the pins and the change and undo lists
   * (4 bytes a reference with compressed oops, 1 a pin); the open batch's undo values; and what the
   * listener (the prefix index) keeps per entry.
   */
  def estimatedBytes: Long = byteCount + table.length.toLong * 4 + dense.length.toLong * 5 +
    changes.estimatedBytes + listener.estimatedBytes

  /** Entries (live or tombstones) at positions [0, numSlots); see [[entryAt]]. */
  def numSlots: Int = entriesInTable
  def entryAt(slot: Int): Entry = dense(slot)

  /**
   * The entry for the key, live or removed in the open batch (a tombstone), or null when the
   * heap knows nothing of the key. Marks a live entry used.
   */
  def lookup(base: AnyRef, offset: Long, length: Int, hash: Int): Entry = {
    val e = find(base, offset, length, hash)
    if (e != null && e.isLive) touch(e)
    e
  }


  /** Sets an entry's key and value (`kv`: the entry's key, then the new value) in the open batch. */
  def update(e: Entry, kv: Array[Byte]): Unit = {
    recordChange(e)
    setLive(e, kv)
    touch(e)
  }

  /** Adds a key the committed state does not have, in the open batch. */
  def insertChanged(hash: Int, kv: Array[Byte], keyLength: Int): Entry = {
    val e = insert(hash, kv, keyLength)
    recordChange(e)
    setLive(e, kv)
    e
  }

  /** Removes a live entry in the open batch (it stays as a tombstone until commit). */
  def removeEntry(e: Entry): Unit = {
    recordChange(e)
    setDead(e)
  }

  /** The open batch's changed entries, each once, in first-change order (read only). */
  private[spillstore] def changeList: ChangeList = changes

  /** Makes the open batch's changes the committed state. */
  def commitBatch(): Unit = {
    var i = 0
    while (i < changes.size) {
      val e = changes.entry(i)
      if (!e.isLive) unlink(e) else pins(e.slot) = 0
      e.clear(Entry.Changed | Entry.Existed)
      i += 1
    }
    resetChanges()
  }

  /** Restores the committed state from before the open batch. */
  def abortBatch(): Unit = {
    var i = changes.size - 1
    while (i >= 0) {
      val e = changes.entry(i)
      if (e.existed) { setLive(e, changes.undo(i)); pins(e.slot) = 0 } else { setDead(e); unlink(e) }
      e.clear(Entry.Changed | Entry.Existed)
      i -= 1
    }
    resetChanges()
  }

  private def resetChanges(): Unit = {
    changes.clear()
    keyDelta = 0
  }

  /** Adds a committed entry outside any batch (recovery, promotion). */
  def insertCommitted(hash: Int, kv: Array[Byte], keyLength: Int, cold: Byte): Entry = {
    val e = insert(hash, kv, keyLength)
    setLive(e, kv)
    e.cold = cold
    e
  }

  /** Replaces a committed entry's key and value outside any batch (recovery). */
  def setCommitted(e: Entry, kv: Array[Byte]): Unit = {
    setLive(e, kv)
    if (e.cold == Entry.ColdClean) e.cold = Entry.ColdStale
  }

  /** Drops a committed entry outside any batch (recovery replaying a removal, eviction). */
  def dropCommitted(e: Entry): Unit = {
    setDead(e)
    unlink(e)
    e.clear(Entry.Changed | Entry.Existed | Entry.Selected)
  }

  /**
   * The next eviction victim by CLOCK: the first entry at or after the hand that was not used
   * since the hand last passed (passing clears the bit), is not changed in the open batch
   * (pinned until commit) and was not selected already. Null if two sweeps find none. The
   * victim stays selected until [[dropCommitted]] or [[unselect]].
   */
  def nextVictim(): Entry = {
    var budget = 2 * entriesInTable
    while (budget > 0) {
      if (hand >= entriesInTable) hand = 0
      val slot = hand
      hand += 1
      budget -= 1
      if (pins(slot) == 0) {
        val e = dense(slot)
        if (e.has(Entry.Referenced)) e.clear(Entry.Referenced)
        else if (e.isLive) { e.set(Entry.Selected); pins(slot) = 1; return e }
      }
    }
    null
  }

  /** Returns a selected victim that was not evicted after all. */
  def unselect(e: Entry): Unit = { e.clear(Entry.Selected); pins(e.slot) = 0 }

  def clear(): Unit = {
    listener.cleared()
    table = new Array[Entry](InitialCapacity)
    dense = new Array[Entry](InitialCapacity)
    pins = new Array[Byte](InitialCapacity)
    entriesInTable = 0
    liveCount = 0
    byteCount = 0
    hand = 0
    resetChanges()
  }

  private def find(base: AnyRef, offset: Long, length: Int, hash: Int): Entry = {
    var e = table(hash & (table.length - 1))
    while (e != null) {
      if (e.hash == hash && e.keyLength == length &&
        ByteArrayMethods.arrayEquals(e.kv, Platform.BYTE_ARRAY_OFFSET, base, offset, length)) {
        return e
      }
      e = e.chainNext
    }
    null
  }

  private def insert(hash: Int, kv: Array[Byte], keyLength: Int): Entry = {
    if (entriesInTable >= table.length - (table.length >>> 2)) grow()
    val e = new Entry(hash, kv, keyLength)
    val slot = hash & (table.length - 1)
    e.chainNext = table(slot)
    table(slot) = e
    if (entriesInTable == dense.length) resizeDense(dense.length * 2)
    e.slot = entriesInTable
    dense(entriesInTable) = e
    entriesInTable += 1
    byteCount += e.bytes
    listener.inserted(e)
    e
  }

  private def unlink(e: Entry): Unit = {
    val slot = e.hash & (table.length - 1)
    var prev: Entry = null
    var cur = table(slot)
    while (cur ne e) { prev = cur; cur = cur.chainNext }
    if (prev == null) table(slot) = e.chainNext else prev.chainNext = e.chainNext
    e.chainNext = null
    entriesInTable -= 1
    val last = dense(entriesInTable)
    dense(e.slot) = last
    pins(e.slot) = pins(entriesInTable)
    last.slot = e.slot
    dense(entriesInTable) = null
    pins(entriesInTable) = 0
    e.slot = -1
    byteCount -= e.bytes
    listener.unlinked(e)
  }

  /** Gives a linked entry `kv` (its own key first) and makes it live. */
  private def setLive(e: Entry, kv: Array[Byte]): Unit = {
    byteCount += kv.length - e.kv.length
    e.kv = kv
    if (!e.isLive) {
      e.set(Entry.Live)
      liveCount += 1
      if (e.changed) keyDelta += 1
    }
  }

  /** Makes a linked entry a tombstone; it keeps `kv` for its key. */
  private def setDead(e: Entry): Unit = if (e.isLive) {
    e.clear(Entry.Live)
    liveCount -= 1
    if (e.changed) keyDelta -= 1
  }

  private def recordChange(e: Entry): Unit = if (!e.changed) {
    e.set(if (e.isLive) Entry.Changed | Entry.Existed else Entry.Changed)
    changes.add(e, if (e.isLive) e.kv else null)
    pins(e.slot) = 1
    // Conservative: after an abort the cold copy is rewritten once more than needed.
    if (e.cold == Entry.ColdClean) e.cold = Entry.ColdStale
  }

  // Written only when clear, so hot entries' cache lines are not dirtied on every read.
  private def touch(e: Entry): Unit = if (!e.has(Entry.Referenced)) e.set(Entry.Referenced)

  /**
   * Gives back array capacity after many entries left (evictions, removals), so that the heap
   * can actually get under a budget: at a quarter full, both arrays halve (or more).
   */
  def trimToSize(): Unit = {
    if (entriesInTable * 4 < table.length && table.length > InitialCapacity) {
      var capacity = table.length
      while (entriesInTable * 4 < capacity && capacity > InitialCapacity) capacity /= 2
      rehash(capacity)
    }
    if (entriesInTable * 4 < dense.length && dense.length > InitialCapacity) {
      resizeDense(math.max(InitialCapacity, entriesInTable * 2))
    }
  }

  private def resizeDense(capacity: Int): Unit = {
    dense = java.util.Arrays.copyOf(dense, capacity)
    pins = java.util.Arrays.copyOf(pins, capacity)
  }

  private def grow(): Unit = rehash(table.length * 2)

  private def rehash(capacity: Int): Unit = {
    val old = table
    table = new Array[Entry](capacity)
    val mask = table.length - 1
    var i = 0
    while (i < old.length) {
      var e = old(i)
      while (e != null) {
        val next = e.chainNext
        val slot = e.hash & mask
        e.chainNext = table(slot)
        table(slot) = e
        e = next
      }
      i += 1
    }
  }
}

object HeapTier {
  private val InitialCapacity = 64

  /** Seam for structures that follow the table's membership (the prefix index). */
  trait Listener {
    def inserted(e: Entry): Unit
    def unlinked(e: Entry): Unit
    def cleared(): Unit
    /** Heap bytes the listener keeps for the entries it follows; counted in the budget. */
    def estimatedBytes: Long
  }

  object NoListener extends Listener {
    def inserted(e: Entry): Unit = ()
    def unlinked(e: Entry): Unit = ()
    def cleared(): Unit = ()
    def estimatedBytes: Long = 0L
  }

  /** The hash Spark's `UnsafeRow.hashCode` gives the same bytes. */
  def hashOf(bytes: Array[Byte]): Int = hashOf(bytes, bytes.length)

  /** [[hashOf]] of the first `length` bytes (a key packed with its value). */
  def hashOf(bytes: Array[Byte], length: Int): Int =
    Murmur3_x86_32.hashUnsafeWords(bytes, Platform.BYTE_ARRAY_OFFSET, length, 42)

  def copyOf(base: AnyRef, offset: Long, length: Int): Array[Byte] = {
    val a = new Array[Byte](length)
    Platform.copyMemory(base, offset, a, Platform.BYTE_ARRAY_OFFSET, length)
    a
  }
}
