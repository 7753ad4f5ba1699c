package spillstore.heap

import java.util.{HashMap => JHashMap, LinkedHashSet => JLinkedHashSet}

import org.apache.spark.sql.catalyst.expressions.{BoundReference, UnsafeProjection, UnsafeRow}
import org.apache.spark.sql.types.StructType
import org.apache.spark.unsafe.Platform

/**
 * Index from a key's first `numPrefixCols` columns to the keys with that prefix, for
 * `prefixScan` (session windows). It follows the heap tier's membership, tombstones included,
 * so scans look each key up and filter on liveness. It holds copies of the keys, not slots:
 * entries move between slots as others leave.
 */
final class PrefixIndex(keySchema: StructType, numPrefixCols: Int) extends HeapTier.Listener {
  import PrefixIndex._
  private val groups = new JHashMap[UnsafeRow, JLinkedHashSet[Key]]()
  private var bytes = 0L
  private val keyRow = new UnsafeRow(keySchema.length)
  private val projectPrefix = UnsafeProjection.create(
    keySchema.fields.take(numPrefixCols).zipWithIndex.map { case (f, i) =>
      BoundReference(i, f.dataType, f.nullable)
    }.toSeq)

  def inserted(page: Array[Byte], offset: Int, length: Int): Unit = {
    val prefix = prefixOf(page, offset, length)
    var group = groups.get(prefix)
    if (group == null) {
      group = new JLinkedHashSet[Key]()
      groups.put(prefix.copy(), group)
      bytes += GroupBytes + prefix.getSizeInBytes
    }
    if (group.add(Key.copyOf(page, offset, length))) bytes += MemberBytes + length
  }

  def unlinked(page: Array[Byte], offset: Int, length: Int): Unit = {
    val prefix = prefixOf(page, offset, length)
    val group = groups.get(prefix)
    if (group != null && group.remove(Key.copyOf(page, offset, length))) {
      bytes -= MemberBytes + length
      if (group.isEmpty) {
        groups.remove(prefix)
        bytes -= GroupBytes + prefix.getSizeInBytes
      }
    }
  }

  def cleared(): Unit = {
    groups.clear()
    bytes = 0
  }

  def estimatedBytes: Long = bytes

  /** The keys that start with `prefix`, captured now (safe to modify the state while used). */
  def keysWithPrefix(prefix: UnsafeRow): Array[Array[Byte]] = {
    val group = groups.get(prefix)
    if (group == null) Array.empty else group.toArray(new Array[Key](group.size)).map(_.bytes)
  }

  private def prefixOf(page: Array[Byte], offset: Int, length: Int): UnsafeRow = {
    keyRow.pointTo(page, Platform.BYTE_ARRAY_OFFSET + offset, length)
    projectPrefix(keyRow)
  }

  /** The prefix row of a key's bytes; the row is reused by the next call. */
  def prefixOf(key: Array[Byte]): UnsafeRow = {
    keyRow.pointTo(key, key.length)
    projectPrefix(keyRow)
  }
}

object PrefixIndex {
  /** A key as a set member: equal by its bytes. */
  private final class Key(val bytes: Array[Byte]) {
    override def equals(o: Any): Boolean = o match {
      case k: Key => java.util.Arrays.equals(bytes, k.bytes)
      case _ => false
    }
    override def hashCode: Int = java.util.Arrays.hashCode(bytes)
  }

  private object Key {
    def copyOf(page: Array[Byte], offset: Int, length: Int): Key =
      new Key(java.util.Arrays.copyOfRange(page, offset, offset + length))
  }

  /**
   * A member of a group beyond its key bytes: a LinkedHashMap entry (40), its table slot (about
   * 6 at 0.75 load), the key holder (16) and the key array's header (16).
   */
  private val MemberBytes = 78L
  /**
   * A group beyond its prefix bytes: the prefix row copy (40 + a 16-byte array header), the
   * outer map's node (32) and slot (6), the LinkedHashSet (16) with its map (56) and first
   * table (80).
   */
  private val GroupBytes = 246L
}
