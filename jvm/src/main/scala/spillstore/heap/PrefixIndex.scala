package spillstore.heap

import java.util.{HashMap => JHashMap, LinkedHashSet => JLinkedHashSet}

import org.apache.spark.sql.catalyst.expressions.{BoundReference, UnsafeProjection, UnsafeRow}
import org.apache.spark.sql.types.StructType

/**
 * Index from a key's first `numPrefixCols` columns to the entries with that prefix, for
 * `prefixScan` (session windows). It follows the heap tier's membership, tombstones included,
 * so scans filter on liveness.
 */
final class PrefixIndex(keySchema: StructType, numPrefixCols: Int) extends HeapTier.Listener {
  import PrefixIndex._
  private val groups = new JHashMap[UnsafeRow, JLinkedHashSet[Entry]]()
  private var bytes = 0L
  private val keyRow = new UnsafeRow(keySchema.length)
  private val projectPrefix = UnsafeProjection.create(
    keySchema.fields.take(numPrefixCols).zipWithIndex.map { case (f, i) =>
      BoundReference(i, f.dataType, f.nullable)
    }.toSeq)

  def inserted(e: Entry): Unit = {
    val prefix = prefixOf(e)
    var group = groups.get(prefix)
    if (group == null) {
      group = new JLinkedHashSet[Entry]()
      groups.put(prefix.copy(), group)
      bytes += GroupBytes + prefix.getSizeInBytes
    }
    if (group.add(e)) bytes += MemberBytes
  }

  def unlinked(e: Entry): Unit = {
    val prefix = prefixOf(e)
    val group = groups.get(prefix)
    if (group != null && group.remove(e)) {
      bytes -= MemberBytes
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

  /** The entries whose key starts with `prefix`, captured now (safe to modify while used). */
  def entriesWithPrefix(prefix: UnsafeRow): Array[Entry] = {
    val group = groups.get(prefix)
    if (group == null) Array.empty else group.toArray(new Array[Entry](group.size))
  }

  private def prefixOf(e: Entry): UnsafeRow = {
    keyRow.pointTo(e.kv, e.keyLength)
    projectPrefix(keyRow)
  }

  /** The prefix row of a key's bytes; the row is reused by the next call. */
  def prefixOf(key: Array[Byte]): UnsafeRow = {
    keyRow.pointTo(key, key.length)
    projectPrefix(keyRow)
  }
}

object PrefixIndex {
  /** A member of a group: a LinkedHashMap entry (40) and its table slot (about 6 at 0.75 load). */
  private val MemberBytes = 46L
  /**
   * A group beyond its prefix bytes: the prefix row copy (40 + a 16-byte array header), the
   * outer map's node (32) and slot (6), the LinkedHashSet (16) with its map (56) and first
   * table (80).
   */
  private val GroupBytes = 246L
}
