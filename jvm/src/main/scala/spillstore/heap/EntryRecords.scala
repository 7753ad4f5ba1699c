package spillstore.heap

/**
 * The heap tier's entry records, one per slot, and the accessors for their fields: the layout
 * only. What the fields mean to the hash table and to a batch is [[HeapTier]]'s.
 *
 * A record is four longs, one 32-byte aligned block, so a lookup costs the table, one record
 * and the key's bytes:
 * {{{
 * long | high 32 bits                 | low 32 bits
 * -----+------------------------------+----------------------------------------------------
 * 0    | hash                         | key length (24 bits), flags (Changed ... cold state)
 * 1    | page address of the key and value ([[Pages]]: page index, offset)
 * 2    | next slot in the hash chain  | value length
 * 3    | -                            | position in the change list (while Changed)
 * }}}
 *
 * Records are kept in chunks of 1,024 (32 KB each: never humongous), added one at a time as
 * slots fill and given back as entries leave; the first chunk grows by doubling up to a whole
 * chunk, so that a small state stays small. The accessors are small final methods, inlined
 * into the tier's lookups: a field costs one read more (this object's chunks) than when the
 * tier held the arrays itself, and no allocation.
 *
 * {{{
 * state        | owner                     | who may change it
 * -------------+---------------------------+--------------------------------------------------
 * all fields   | its HeapTier              | the thread that may use the tier (tiered.Ownership's
 *              |                           | state table); never concurrently
 * }}}
 */
final class EntryRecords(firstSlots: Int) {
  import EntryRecords._

  private var chunks = Array(new Array[Long](firstSlots * 4))

  /** Heap bytes of the chunks; only the first is ever smaller than a whole chunk, and only
   *  while it is the only one. */
  def estimatedBytes: Long =
    if (chunks.length == 1) chunks(0).length * 8L else chunks.length * ChunkLongs * 8L

  @inline private def chunk(slot: Int): Array[Long] = chunks(slot >>> ChunkShift)
  @inline private def at(slot: Int): Int = (slot & ChunkMask) << 2

  @inline private def bits(slot: Int): Int = chunk(slot)(at(slot)).toInt
  @inline private def setBits(slot: Int, b: Int): Unit = {
    val c = chunk(slot); val i = at(slot)
    c(i) = (c(i) & HighBits) | (b & LowBits)
  }
  @inline def has(slot: Int, flag: Int): Boolean = (bits(slot) & flag) != 0
  @inline def set(slot: Int, flag: Int): Unit = setBits(slot, bits(slot) | flag)
  @inline def clear(slot: Int, flag: Int): Unit = setBits(slot, bits(slot) & ~flag)

  @inline def hash(slot: Int): Int = (chunk(slot)(at(slot)) >>> 32).toInt
  @inline def keyLength(slot: Int): Int = bits(slot) & KeyLengthMask
  /** Whether the key has this hash and length: the test before a key's bytes are compared. */
  @inline def hashAndLengthAre(slot: Int, hash: Int, keyLength: Int): Boolean = {
    val head = chunk(slot)(at(slot))
    (head >>> 32).toInt == hash && (head.toInt & KeyLengthMask) == keyLength
  }
  @inline def cold(slot: Int): Byte = ((bits(slot) >>> ColdShift) & 3).toByte
  @inline def setCold(slot: Int, c: Byte): Unit =
    setBits(slot, (bits(slot) & ~(3 << ColdShift)) | (c << ColdShift))

  @inline def addr(slot: Int): Long = chunk(slot)(at(slot) + 1)
  @inline def setAddr(slot: Int, a: Long): Unit = chunk(slot)(at(slot) + 1) = a

  @inline def next(slot: Int): Int = (chunk(slot)(at(slot) + 2) >>> 32).toInt
  @inline def setNext(slot: Int, n: Int): Unit = {
    val c = chunk(slot); val i = at(slot) + 2
    c(i) = (n.toLong << 32) | (c(i) & LowBits)
  }
  @inline def valueLength(slot: Int): Int = chunk(slot)(at(slot) + 2).toInt
  @inline def setValueLength(slot: Int, v: Int): Unit = {
    val c = chunk(slot); val i = at(slot) + 2
    c(i) = (c(i) & HighBits) | (v & LowBits)
  }

  @inline def changeAt(slot: Int): Int = chunk(slot)(at(slot) + 3).toInt
  @inline def setChangeAt(slot: Int, k: Int): Unit = chunk(slot)(at(slot) + 3) = k

  /** Writes the record of a new entry at `slot`, the slot after the last one in use. */
  def add(slot: Int, hash: Int, keyLength: Int, flags: Int, addr: Long, next: Int,
      valueLength: Int): Unit = {
    if ((slot >>> ChunkShift) == chunks.length) {
      chunks = java.util.Arrays.copyOf(chunks, chunks.length + 1)
      chunks(slot >>> ChunkShift) = new Array[Long](ChunkLongs)
    } else if (at(slot) == chunks(0).length) {
      chunks(0) = java.util.Arrays.copyOf(chunks(0), chunks(0).length * 2)
    }
    val c = chunk(slot)
    val i = at(slot)
    c(i) = (hash.toLong << 32) | (keyLength | flags)
    c(i + 1) = addr
    c(i + 2) = (next.toLong << 32) | (valueLength & LowBits)
    c(i + 3) = 0
  }

  /** Copies the record at `from` to `to`. */
  def copy(from: Int, to: Int): Unit = System.arraycopy(chunk(from), at(from), chunk(to), at(to), 4)

  /** Gives back the chunks, and the first chunk's room, that `inUse` slots leave spare. */
  def trim(inUse: Int): Unit = {
    // Chunks are added one at a time as slots fill, so none is kept spare.
    val chunksNeeded = math.max(1, (inUse + ChunkMask) >>> ChunkShift)
    if (chunks.length > chunksNeeded) chunks = java.util.Arrays.copyOf(chunks, chunksNeeded)
    val slots = math.max(firstSlots, Integer.highestOneBit(math.max(1, inUse * 2)) * 2)
    if (chunks.length == 1 && inUse * 4 * 4 < chunks(0).length && chunks(0).length > slots * 4) {
      chunks(0) = java.util.Arrays.copyOf(chunks(0), slots * 4)
    }
  }

  def clear(): Unit = chunks = Array(new Array[Long](firstSlots * 4))
}

object EntryRecords {
  private final val ChunkShift = 10
  private final val ChunkMask = (1 << ChunkShift) - 1
  private final val ChunkLongs = (1 << ChunkShift) * 4
  private final val LowBits = 0xFFFFFFFFL
  private final val HighBits = ~LowBits

  /** Keys are stored in 24 bits of the record: 16 MB, far above any UnsafeRow key seen. */
  final val MaxKeyLength = (1 << 24) - 1
  private final val KeyLengthMask = MaxKeyLength
  /** The flags, in the bits above the key length. */
  final val Changed = 1 << 24
  final val Existed = 1 << 25
  /** Chosen as an eviction victim, not yet dropped: the CLOCK hand must not choose it again. */
  final val Selected = 1 << 26
  final val Live = 1 << 27
  /** Set on every access, cleared by the CLOCK hand as it passes: "recently used". */
  final val Referenced = 1 << 28
  /** The cold state's two bits: [[HeapTier.ColdAbsent]], [[HeapTier.ColdStale]] or
   *  [[HeapTier.ColdClean]]. */
  private final val ColdShift = 29
}
