package spillstore.checkpoint

import java.io.File
import java.util.{Arrays => JArrays}

/**
 * Every entry of one committed version, in unsigned key order, each key once with its value:
 * the parts of a base manifest merged with the journals after it ([[SortedChanges]]). One
 * streaming pass over sorted files with no lookups, so it is how a snapshot's run is written
 * ([[Snapshotter]]) and how a version is loaded (`recovery.Recovery`: replaying journals over a
 * loaded state instead cost a cold-tier read for each replayed key past the memory budget).
 */
object MergedVersion {
  /**
   * Visits the entries of `version`: `base`'s, overridden and removed by the journals
   * (base.version, version]. A journal that cannot be read fails with
   * [[SortedChanges.UnreadableJournal]]; a damaged or missing part of `base`, as
   * `CheckpointDir.asBase` says.
   */
  def foreach(dir: CheckpointDir, base: Manifest, version: Long, spillDir: () => File,
      maxOpenSources: Int = SortedChanges.DefaultMaxOpenSources)(
      visit: (Array[Byte], Array[Byte]) => Unit): Unit =
    merge(dir, base.parts, base.version, version, spillDir, maxOpenSources, keepRemovals = false)(
      visit)

  /**
   * Visits the merge of `parts` (oldest first) and the journals (after, version]: each key
   * once, with its newest value, or with null where the newest record removes it if
   * `keepRemovals` (the changes a run over older parts must keep) and not at all otherwise.
   *
   * The oldest part, usually most of the entries, is read straight into the merge; the others
   * and the journals go through a k-way merge, so a load of one big part costs what a load of
   * one snapshot file did.
   */
  def merge(dir: CheckpointDir, parts: Seq[Manifest.Part], after: Long, version: Long,
      spillDir: () => File, maxOpenSources: Int, keepRemovals: Boolean)(
      visit: (Array[Byte], Array[Byte]) => Unit): Unit = {
    val changes =
      SortedChanges.squash(dir, parts.drop(1), after, version, spillDir, maxOpenSources)
    def emit(k: Array[Byte], v: Array[Byte]): Unit = if (v != null || keepRemovals) visit(k, v)
    try {
      def changesBefore(key: Array[Byte]): Unit =
        while (changes.head != null &&
          (key == null || JArrays.compareUnsigned(changes.head._1, key) < 0)) {
          val (k, v) = changes.head
          emit(k, v)
          changes.advance()
        }
      parts.headOption.foreach { oldest =>
        dir.asBase(dir.pathOf(oldest.source))(dir.read(oldest) { (k, v) =>
          changesBefore(k)
          if (changes.head != null && JArrays.equals(changes.head._1, k)) {
            emit(k, changes.head._2)
            changes.advance()
          } else {
            emit(k, v)
          }
        })
      }
      changesBefore(null)
    } finally changes.close()
  }
}
