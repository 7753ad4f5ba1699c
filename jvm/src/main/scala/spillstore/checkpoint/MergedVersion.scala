package spillstore.checkpoint

import java.io.File
import java.util.{Arrays => JArrays}

/**
 * Every entry of one committed version, in unsigned key order, each key once with its value:
 * a base snapshot merged with the journals after it ([[SortedChanges]]). One streaming pass over
 * sorted files with no lookups, so it is how a snapshot is written ([[Snapshotter]]) and how a
 * version is loaded (`recovery.Recovery`: replaying journals over a loaded state instead cost a
 * cold-tier read for each replayed key past the memory budget).
 */
object MergedVersion {
  /**
   * Visits the entries of `version`: those `readBase` visits (the snapshot of `base`; not called
   * when `base` is 0), overridden and removed by the journals (base, version]. A journal that
   * cannot be read fails with [[SortedChanges.UnreadableJournal]]; what `readBase` throws passes
   * through as it is.
   */
  def foreach(dir: CheckpointDir, base: Long, version: Long,
      readBase: ((Array[Byte], Array[Byte]) => Unit) => Unit, spillDir: () => File,
      maxOpenSources: Int = SortedChanges.DefaultMaxOpenSources)(
      visit: (Array[Byte], Array[Byte]) => Unit): Unit = {
    val changes = SortedChanges.squash(dir, base, version, spillDir, maxOpenSources)
    try {
      def changesBefore(key: Array[Byte]): Unit =
        while (changes.head != null &&
          (key == null || JArrays.compareUnsigned(changes.head._1, key) < 0)) {
          val (k, v) = changes.head
          if (v != null) visit(k, v)
          changes.advance()
        }
      if (base > 0) {
        readBase { (k, v) =>
          changesBefore(k)
          if (changes.head != null && JArrays.equals(changes.head._1, k)) {
            val changed = changes.head._2
            if (changed != null) visit(k, changed)
            changes.advance()
          } else {
            visit(k, v)
          }
        }
      }
      changesBefore(null)
    } finally changes.close()
  }
}
