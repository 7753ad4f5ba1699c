package spillstore.heap

import org.apache.spark.unsafe.Platform

/**
 * One key of the heap tier. Its key and value are the exact bytes of Spark's `UnsafeRow`s,
 * packed in one array, `kv` (key bytes, then value bytes), made once per put; an array is never
 * mutated after it is stored, so rows handed out to Spark stay valid after later updates.
 *
 * The entry is also its own hash-chain node and carries the open batch's flags, the CLOCK
 * reference bit and what the cold tier holds, packed with the key length into one int: the
 * object is 32 bytes and the key and value share one array header, 80 bytes in all for a
 * 16-byte key and value where separate arrays and fields took 104 (docs/benchmarks.md).
 * The value a batch replaced is kept by the heap tier's change list, not here.
 */
final class Entry private[heap] (val hash: Int, private[spillstore] var kv: Array[Byte],
    packedKeyLength: Int) {
  import Entry._

  if (packedKeyLength > MaxKeyLength || packedKeyLength < 0) {
    throw new IllegalArgumentException(s"spillstore cannot hold a key of $packedKeyLength " +
      s"bytes: keys are limited to $MaxKeyLength bytes")
  }

  /** Key length (low 24 bits) and the flags above it. */
  private var bits: Int = packedKeyLength | Referenced

  /** Position in the tier's dense entry array, which iteration walks. */
  private[heap] var slot: Int = -1
  private[heap] var chainNext: Entry = _

  def keyLength: Int = bits & KeyLengthMask
  /** Bytes of the value; meaningful while the entry is live. */
  def valueLength: Int = kv.length - keyLength
  /** Offset of the value in `kv` as `Platform` addresses it. */
  def valueOffset: Long = Platform.BYTE_ARRAY_OFFSET + keyLength

  /** Whether the key has a value; false while the open batch has removed it (a tombstone). */
  def isLive: Boolean = (bits & Live) != 0
  /** Position in the tier's dense array; stable while a batch is open. */
  def slotIndex: Int = slot
  /** Changed in the open batch: it is in the batch's change list. */
  private[spillstore] def changed: Boolean = (bits & Changed) != 0
  /** Had a committed value before the open batch changed it. */
  private[spillstore] def existed: Boolean = (bits & Existed) != 0
  /** What the cold tier holds for this key: [[Entry.ColdAbsent]], `ColdStale` or `ColdClean`. */
  private[spillstore] def cold: Byte = ((bits >>> ColdShift) & 3).toByte
  private[spillstore] def cold_=(c: Byte): Unit = bits = (bits & ~(3 << ColdShift)) | (c << ColdShift)

  private[heap] def has(flag: Int): Boolean = (bits & flag) != 0
  private[heap] def set(flag: Int): Unit = bits |= flag
  private[heap] def clear(flag: Int): Unit = bits &= ~flag
  /** Whether the CLOCK hand must skip it: changed in the open batch or selected. */
  private[heap] def pinned: Boolean = (bits & (Changed | Selected)) != 0

  /** A copy of the key bytes (for RocksDB, whose Java API takes whole arrays). */
  def keyBytes: Array[Byte] = java.util.Arrays.copyOf(kv, keyLength)
  /** A copy of the value bytes. */
  def valueBytes: Array[Byte] = java.util.Arrays.copyOfRange(kv, keyLength, kv.length)

  /** Heap bytes of the entry beyond its slots in the tier's arrays: object and `kv`. */
  def bytes: Long = Overhead + kv.length
}

private[spillstore] object Entry {
  /** The cold tier has no value for the key. */
  final val ColdAbsent: Byte = 0
  /** The cold tier has an older value for the key: eviction must write, removal must delete. */
  final val ColdStale: Byte = 1
  /** The cold tier has exactly the entry's value: eviction can just drop the entry. */
  final val ColdClean: Byte = 2

  /** Keys are stored in 24 bits of the entry: 16 MB, far above any UnsafeRow key seen. */
  final val MaxKeyLength: Int = (1 << 24) - 1
  private final val KeyLengthMask = MaxKeyLength
  private[heap] final val Changed = 1 << 24
  private[heap] final val Existed = 1 << 25
  /** Chosen as an eviction victim, not yet dropped: the CLOCK hand must not choose it again. */
  private[heap] final val Selected = 1 << 26
  private[heap] final val Live = 1 << 27
  /** Set on every access, cleared by the CLOCK hand as it passes: "recently used". */
  private[heap] final val Referenced = 1 << 28
  private final val ColdShift = 29

  /**
   * Heap bytes of an entry beyond its key and value bytes: the object (12 header + 4 hash +
   * 4 kv + 4 bits + 4 slot + 4 chain link = 32) and one array header (16). Its references in
   * the hash table and the dense array are counted with those arrays' capacity
   * (HeapTier.estimatedBytes).
   */
  final val Overhead = 32 + 16

  /** Key and value bytes in one new array, as entries hold them. */
  def pack(keyBase: AnyRef, keyOffset: Long, keyLength: Int,
      valueBase: AnyRef, valueOffset: Long, valueLength: Int): Array[Byte] = {
    val kv = new Array[Byte](keyLength + valueLength)
    copy(keyBase, keyOffset, kv, 0, keyLength)
    copy(valueBase, valueOffset, kv, keyLength, valueLength)
    kv
  }

  // Rows on the heap are byte arrays: System.arraycopy is an intrinsic, where Unsafe's
  // copyMemory pays a fixed cost that dominates at a row's few dozen bytes.
  private def copy(base: AnyRef, offset: Long, to: Array[Byte], at: Int, length: Int): Unit =
    base match {
      case bytes: Array[Byte] =>
        System.arraycopy(bytes, (offset - Platform.BYTE_ARRAY_OFFSET).toInt, to, at, length)
      case _ => Platform.copyMemory(base, offset, to, Platform.BYTE_ARRAY_OFFSET + at, length)
    }

  def pack(key: Array[Byte], value: Array[Byte]): Array[Byte] = {
    val kv = java.util.Arrays.copyOf(key, key.length + value.length)
    System.arraycopy(value, 0, kv, key.length, value.length)
    kv
  }

  /** Unsigned key order, the order of checkpoint files. */
  val ByKey: java.util.Comparator[Entry] = (a: Entry, b: Entry) =>
    java.util.Arrays.compareUnsigned(a.kv, 0, a.keyLength, b.kv, 0, b.keyLength)
}
