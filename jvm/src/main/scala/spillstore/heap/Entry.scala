package spillstore.heap

/**
 * One key of the heap tier. Key and value are the exact bytes of Spark's `UnsafeRow`s, copied
 * once on insert; a value array is never mutated after it is stored, so rows handed out to
 * Spark stay valid after later updates.
 *
 * The entry is also its own hash-chain node and open-batch undo record, and carries the CLOCK
 * reference bit, which keeps the per-key overhead to one object (see docs/design.md).
 */
final class Entry private[heap] (val hash: Int, val key: Array[Byte]) {
  /** Current value; null while the open batch has removed the key (a tombstone). */
  private[spillstore] var value: Array[Byte] = _
  /** The committed value before the open batch changed it, when [[Entry.Existed]] is set. */
  private[spillstore] var undo: Array[Byte] = _
  private[heap] var flags: Byte = 0
  /** Set on every access, cleared by the CLOCK hand as it passes: "recently used". */
  private[heap] var referenced: Boolean = true
  /** What the cold tier holds for this key: [[Entry.ColdAbsent]], `ColdStale` or `ColdClean`. */
  private[spillstore] var cold: Byte = Entry.ColdAbsent

  /** Position in the tier's dense entry array, which iteration walks. */
  private[heap] var slot: Int = -1
  private[heap] var chainNext: Entry = _

  def isLive: Boolean = value != null
  /** Position in the tier's dense array; stable while a batch is open. */
  def slotIndex: Int = slot
  private[spillstore] def changed: Boolean = (flags & Entry.Changed) != 0
  /** Had a committed value before the open batch changed it. */
  private[spillstore] def existed: Boolean = (flags & Entry.Existed) != 0
}

private[spillstore] object Entry {
  /** The cold tier has no value for the key. */
  final val ColdAbsent: Byte = 0
  /** The cold tier has an older value for the key: eviction must write, removal must delete. */
  final val ColdStale: Byte = 1
  /** The cold tier has exactly the entry's value: eviction can just drop the entry. */
  final val ColdClean: Byte = 2

  /** Changed in the open batch: it is in the batch's change list. */
  final val Changed: Byte = 1
  /** Had a committed value when the open batch first changed it (that value is in `undo`). */
  final val Existed: Byte = 2
  /** Chosen as an eviction victim, not yet dropped: the CLOCK hand must not choose it again. */
  final val Selected: Byte = 4

  /**
   * Heap bytes of an entry beyond its key and value bytes: the object (12 header + 4 hash +
   * 4 key + 4 value + 4 undo + 4 slot + 4 chain link + 3 flag bytes, padded to 40) and two
   * array headers (16 each). Its references in the hash table and the dense array are counted
   * with those arrays' capacity (HeapTier.estimatedBytes).
   */
  final val Overhead = 40 + 16 + 16

  /** Unsigned key order, the order of checkpoint files. */
  val ByKey: java.util.Comparator[Entry] =
    (a: Entry, b: Entry) => java.util.Arrays.compareUnsigned(a.key, b.key)

  def bytes(key: Array[Byte], value: Array[Byte]): Long =
    Overhead + key.length + (if (value == null) 0 else value.length)
}
