package spillstore.heap

import java.util.{Arrays => JArrays}

/**
 * The open batch's changed entries (slots of `tier`), each once, in first-change order, with
 * the committed region each one replaced (for abort: its page address and value length, or -1
 * when the key had no committed value) and an 8-byte prefix of its key (for [[KeyOrder]]).
 *
 * Owned by its [[HeapTier]] and used under the same rule: only the thread holding the open
 * store touches it. The tier keeps the slots current when entries move.
 *
 * Chunked, 1024 changes a chunk (24 KB). The first chunk starts at 64 changes and doubles up
 * to a whole chunk; between batches only a 64-change first chunk stays (1.5 KB, a store's fixed
 * heap at rest, which eviction cannot free: many small stores under a small budget). As one
 * doubling array, a batch that changes a million keys grew arrays of megabytes,
 * and in a 1 GB heap every array of 512 KB or more is a humongous object: G1 gives it whole
 * regions and may start a concurrent cycle for it (most of the cycles of a 25M-key run were
 * started so).
 *
 * The prefix is taken when the entry joins the list, while its key is in the cache: the sort at
 * commit then reads these arrays instead of every key twice more (once to find the bytes all
 * keys share, once for the prefix; a fifth of the commit in the API benchmark's profile). It is
 * the 8 bytes (zero-padded) after `offset`, which is the number of bytes the keys of the
 * previous batch all shared; [[alignPrefixes]] retakes them at commit if this batch's keys share
 * a different number (a prefix taken past the shared bytes would order keys wrongly, one taken
 * before them would tell few keys apart).
 */
final class ChangeList(tier: HeapTier) {
  import ChangeList._

  private var slots = Array(new Array[Int](FirstChunkSize))
  private var undoAddrs = Array(new Array[Long](FirstChunkSize))
  private var undoValueLengths = Array(new Array[Int](FirstChunkSize))
  private var prefixes = Array(new Array[Long](FirstChunkSize))
  private var count = 0

  /** Where this batch's prefixes are taken: the shared length of the previous batch's keys. */
  private var offset = 0
  /** The batch's first key (its first `shared` bytes are shared by every key so far). */
  private var firstKey: Array[Byte] = _
  private var shared = 0

  def size: Int = count
  def slot(i: Int): Int = slots(i >>> ChunkShift)(i & ChunkMask)
  private[heap] def setSlot(i: Int, s: Int): Unit = slots(i >>> ChunkShift)(i & ChunkMask) = s
  /** The page address of the committed key and value the batch replaced, or -1. */
  def undoAddr(i: Int): Long = undoAddrs(i >>> ChunkShift)(i & ChunkMask)
  private[heap] def setUndoAddr(i: Int, a: Long): Unit =
    undoAddrs(i >>> ChunkShift)(i & ChunkMask) = a
  def undoValueLength(i: Int): Int = undoValueLengths(i >>> ChunkShift)(i & ChunkMask)
  /** Key bytes [offset, offset + 8) of `slot(i)`'s key as an unsigned big-endian long. */
  def prefix(i: Int): Long = prefixes(i >>> ChunkShift)(i & ChunkMask)

  /** Changes the allocated chunks hold; only the first may be smaller than a whole chunk. */
  private def capacity: Int = if (slots.length == 1) slots(0).length else slots.length * ChunkSize

  /** Heap bytes: the slots of every allocated chunk (the undo values are in the pages). */
  def estimatedBytes: Long = capacity.toLong * SlotBytes

  /** Appends a changed entry; returns its position. */
  def add(slot: Int, undoAddr: Long, undoValueLength: Int): Int = {
    if (count == capacity) {
      if (capacity < ChunkSize) resizeFirstChunk(capacity * 2) else addChunk()
    }
    val c = count >>> ChunkShift
    val i = count & ChunkMask
    slots(c)(i) = slot
    undoAddrs(c)(i) = undoAddr
    undoValueLengths(c)(i) = undoValueLength
    val page = tier.page(slot)
    val from = tier.keyOffset(slot)
    val keyLength = tier.keyLength(slot)
    if (count == 0) {
      firstKey = JArrays.copyOfRange(page, from, from + keyLength); shared = keyLength
    } else shared = sharedLength(firstKey, 0, shared, page, from, keyLength)
    prefixes(c)(i) = prefixAt(page, from, keyLength, offset)
    count += 1
    count - 1
  }

  /** Makes every prefix start at the bytes this batch's keys do not all share. */
  def alignPrefixes(): Unit = if (count > 0 && shared != offset) {
    offset = shared
    var i = 0
    while (i < count) {
      val s = slot(i)
      prefixes(i >>> ChunkShift)(i & ChunkMask) =
        prefixAt(tier.page(s), tier.keyOffset(s), tier.keyLength(s), offset)
      i += 1
    }
  }

  /** Empties the list for the next batch, keeping a small first chunk. */
  def clear(): Unit = {
    if (count > 0) offset = shared
    if (slots.length > 1) {
      slots = JArrays.copyOf(slots, 1)
      undoAddrs = JArrays.copyOf(undoAddrs, 1)
      undoValueLengths = JArrays.copyOf(undoValueLengths, 1)
      prefixes = JArrays.copyOf(prefixes, 1)
    }
    if (slots(0).length > FirstChunkSize) resizeFirstChunk(FirstChunkSize)
    count = 0
    firstKey = null
    shared = 0
  }

  private def resizeFirstChunk(size: Int): Unit = {
    slots(0) = JArrays.copyOf(slots(0), size)
    undoAddrs(0) = JArrays.copyOf(undoAddrs(0), size)
    undoValueLengths(0) = JArrays.copyOf(undoValueLengths(0), size)
    prefixes(0) = JArrays.copyOf(prefixes(0), size)
  }

  private def addChunk(): Unit = {
    slots = JArrays.copyOf(slots, slots.length + 1)
    undoAddrs = JArrays.copyOf(undoAddrs, undoAddrs.length + 1)
    undoValueLengths = JArrays.copyOf(undoValueLengths, undoValueLengths.length + 1)
    prefixes = JArrays.copyOf(prefixes, prefixes.length + 1)
    slots(slots.length - 1) = new Array[Int](ChunkSize)
    undoAddrs(undoAddrs.length - 1) = new Array[Long](ChunkSize)
    undoValueLengths(undoValueLengths.length - 1) = new Array[Int](ChunkSize)
    prefixes(prefixes.length - 1) = new Array[Long](ChunkSize)
  }
}

object ChangeList {
  private val ChunkShift = 10
  private val ChunkSize = 1 << ChunkShift
  private val ChunkMask = ChunkSize - 1
  private val FirstChunkSize = 64
  /** A slot, an undo address and value length, a prefix. */
  private val SlotBytes = 24

  /**
   * How many of `first`'s `shared` bytes from `firstFrom` the key `key`[from, from + length)
   * shares.
   */
  def sharedLength(first: Array[Byte], firstFrom: Int, shared: Int, key: Array[Byte], from: Int,
      length: Int): Int =
    if (shared == 0) 0
    else {
      val m = JArrays.mismatch(first, firstFrom, firstFrom + shared, key, from,
        from + math.min(shared, length))
      if (m >= 0) m else shared
    }

  /**
   * Bytes [at, at + 8) of the key `key`[from, from + length) as an unsigned big-endian long,
   * zero-padded.
   */
  def prefixAt(key: Array[Byte], from: Int, length: Int, at: Int): Long = {
    var p = 0L
    var j = 0
    while (j < 8) {
      val k = at + j
      p = (p << 8) | (if (k < length) key(from + k) & 0xFFL else 0L)
      j += 1
    }
    p
  }
}
