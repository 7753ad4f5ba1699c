package spillstore.heap

import java.util.{Arrays => JArrays}

/**
 * The open batch's changed entries, each once, in first-change order, with the committed `kv`
 * each one replaced (for abort) and an 8-byte prefix of its key (for [[KeyOrder]]).
 *
 * Owned by its [[HeapTier]] and used under the same rule: only the thread holding the open
 * store touches it.
 *
 * Chunked, 1024 slots a chunk (16 KB with the undo and prefix slots; one chunk stays between
 * batches, a store's fixed heap at rest). As doubling arrays, a batch that changes a million
 * keys grew arrays of megabytes, and in a 1 GB heap every array of 512 KB or more is a
 * humongous object: G1 gives it whole regions and may start a concurrent cycle for it (57 of
 * the 63 cycles in the 25M-key profile, docs/benchmarks.md).
 *
 * The prefix is taken when the entry joins the list, while its key is in the cache: the sort at
 * commit then reads these arrays instead of every key twice more (once to find the bytes all
 * keys share, once for the prefix; a fifth of the commit in the API benchmark's profile). It is
 * the 8 bytes (zero-padded) after `offset`, which is the number of bytes the keys of the
 * previous batch all shared; [[alignPrefixes]] retakes them at commit if this batch's keys share
 * a different number (a prefix taken past the shared bytes would order keys wrongly, one taken
 * before them would tell few keys apart).
 */
final class ChangeList {
  import ChangeList._

  private var entries = new Array[Array[Entry]](1)
  private var undos = new Array[Array[Array[Byte]]](1)
  private var prefixes = new Array[Array[Long]](1)
  entries(0) = new Array[Entry](ChunkSize)
  undos(0) = new Array[Array[Byte]](ChunkSize)
  prefixes(0) = new Array[Long](ChunkSize)
  /** Allocated chunks: slots [0, chunks * ChunkSize). */
  private var chunks = 1
  private var count = 0
  /** Bytes of the undo values the list holds (array headers included). */
  private var undoByteCount = 0L

  /** Where this batch's prefixes are taken: the shared length of the previous batch's keys. */
  private var offset = 0
  /** The first key of the batch (`firstKv`'s first `shared` bytes are shared by every key). */
  private var firstKv: Array[Byte] = _
  private var shared = 0

  def size: Int = count
  def entry(i: Int): Entry = entries(i >>> ChunkShift)(i & ChunkMask)
  /** The committed `kv` the batch replaced, or null if the key had no committed value. */
  def undo(i: Int): Array[Byte] = undos(i >>> ChunkShift)(i & ChunkMask)
  /** Key bytes [offset, offset + 8) of `entry(i)` as an unsigned big-endian long. */
  def prefix(i: Int): Long = prefixes(i >>> ChunkShift)(i & ChunkMask)

  /** Heap bytes: the slots of every allocated chunk and the undo values. */
  def estimatedBytes: Long = chunks.toLong * ChunkSize * SlotBytes + undoByteCount

  def add(e: Entry, undo: Array[Byte]): Unit = {
    if (count == chunks * ChunkSize) addChunk()
    val c = count >>> ChunkShift
    val i = count & ChunkMask
    entries(c)(i) = e
    undos(c)(i) = undo
    if (undo != null) undoByteCount += undo.length + ArrayHeader
    val kv = e.kv
    val keyLength = e.keyLength
    if (count == 0) { firstKv = kv; shared = keyLength }
    else shared = sharedLength(firstKv, shared, kv, keyLength)
    prefixes(c)(i) = prefixAt(kv, keyLength, offset)
    count += 1
  }

  /** Makes every prefix start at the bytes this batch's keys do not all share. */
  def alignPrefixes(): Unit = if (count > 0 && shared != offset) {
    offset = shared
    var i = 0
    while (i < count) {
      val e = entry(i)
      prefixes(i >>> ChunkShift)(i & ChunkMask) = prefixAt(e.kv, e.keyLength, offset)
      i += 1
    }
  }

  /** Empties the list for the next batch, keeping the first chunk. */
  def clear(): Unit = {
    if (count > 0) offset = shared
    if (chunks > 1) {
      entries = JArrays.copyOf(entries, 1)
      undos = JArrays.copyOf(undos, 1)
      prefixes = JArrays.copyOf(prefixes, 1)
      chunks = 1
    }
    JArrays.fill(entries(0).asInstanceOf[Array[AnyRef]], 0, math.min(count, ChunkSize), null)
    JArrays.fill(undos(0).asInstanceOf[Array[AnyRef]], 0, math.min(count, ChunkSize), null)
    count = 0
    undoByteCount = 0
    firstKv = null
    shared = 0
  }

  private def addChunk(): Unit = {
    if (chunks == entries.length) {
      entries = JArrays.copyOf(entries, chunks * 2)
      undos = JArrays.copyOf(undos, chunks * 2)
      prefixes = JArrays.copyOf(prefixes, chunks * 2)
    }
    entries(chunks) = new Array[Entry](ChunkSize)
    undos(chunks) = new Array[Array[Byte]](ChunkSize)
    prefixes(chunks) = new Array[Long](ChunkSize)
    chunks += 1
  }
}

object ChangeList {
  private val ChunkShift = 10
  private val ChunkSize = 1 << ChunkShift
  private val ChunkMask = ChunkSize - 1
  /** An entry and an undo reference (4 bytes each with compressed oops) and a prefix. */
  private val SlotBytes = 16
  private val ArrayHeader = 16

  /** How many of `first`'s first `shared` bytes the key (`kv`'s first `keyLength` bytes) shares. */
  def sharedLength(first: Array[Byte], shared: Int, kv: Array[Byte], keyLength: Int): Int =
    if (shared == 0) 0
    else {
      val m = JArrays.mismatch(first, 0, shared, kv, 0, math.min(shared, keyLength))
      if (m >= 0) m else shared
    }

  /** Bytes [from, from + 8) of the key (`kv`'s first `keyLength` bytes) as an unsigned
   *  big-endian long, zero-padded. */
  def prefixAt(kv: Array[Byte], keyLength: Int, from: Int): Long = {
    var p = 0L
    var j = 0
    while (j < 8) {
      val at = from + j
      p = (p << 8) | (if (at < keyLength) kv(at) & 0xffL else 0L)
      j += 1
    }
    p
  }
}
