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
  private val groups = new JHashMap[UnsafeRow, JLinkedHashSet[Entry]]()
  private val keyRow = new UnsafeRow(keySchema.length)
  private val projectPrefix = UnsafeProjection.create(
    keySchema.fields.take(numPrefixCols).zipWithIndex.map { case (f, i) =>
      BoundReference(i, f.dataType, f.nullable)
    }.toSeq)

  def inserted(e: Entry): Unit =
    groups.computeIfAbsent(prefixOf(e).copy(), _ => new JLinkedHashSet[Entry]()).add(e)

  def unlinked(e: Entry): Unit = {
    val prefix = prefixOf(e)
    val group = groups.get(prefix)
    if (group != null) {
      group.remove(e)
      if (group.isEmpty) groups.remove(prefix)
    }
  }

  def cleared(): Unit = groups.clear()

  /** The entries whose key starts with `prefix`, captured now (safe to modify while used). */
  def entriesWithPrefix(prefix: UnsafeRow): Array[Entry] = {
    val group = groups.get(prefix)
    if (group == null) Array.empty else group.toArray(new Array[Entry](group.size))
  }

  private def prefixOf(e: Entry): UnsafeRow = prefixOf(e.key)

  /** The prefix row of a key's bytes; the row is reused by the next call. */
  def prefixOf(key: Array[Byte]): UnsafeRow = {
    keyRow.pointTo(key, key.length)
    projectPrefix(keyRow)
  }
}
