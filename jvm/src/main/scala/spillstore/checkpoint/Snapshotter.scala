package spillstore.checkpoint

import java.nio.ByteBuffer
import java.util.{Arrays => JArrays, HashMap => JHashMap}

import org.apache.spark.internal.Logging

/**
 * Writes full snapshots from checkpoint files alone: the newest earlier snapshot (sorted by key)
 * merged with the journals after it. It never reads the live heap, so it runs on a maintenance
 * thread without stopping or copying the task thread's state, and it sees spilled and heap
 * entries alike.
 *
 * Memory: the distinct keys changed since the base snapshot, held while merging.
 */
final class Snapshotter(dir: CheckpointDir) extends Logging {

  /**
   * Snapshots the newest committed version if at least `minDeltas` journals follow the newest
   * snapshot. Returns the version snapshotted.
   */
  def snapshotIfDue(minDeltas: Int): Option[Long] = {
    val listing = dir.list()
    val latest = listing.journals.maxOption.getOrElse(0L)
    val base = listing.latestSnapshotAtOrBelow(latest)
    if (latest - base >= minDeltas) snapshot(latest, listing) else None
  }

  /** Writes the snapshot of `version`, unless it exists or its inputs are incomplete. */
  def snapshot(version: Long, listing: CheckpointDir.Listing): Option[Long] = {
    val base = listing.latestSnapshotAtOrBelow(version)
    if (base == version) return None
    listing.missingJournal(base, version) match {
      case Some(gap) =>
        logWarning(s"Not snapshotting ${dir.path} at version $version: journal $gap is missing")
        None
      case None =>
        // A corrupt base snapshot is set aside and an older base used (see withNewestGoodBase).
        val (used, written) = dir.withNewestGoodBase(listing, version) { (base, readBase) =>
          val changes = squashedChanges(base, version)
          base -> dir.write(StateFile.Snapshot, version) { out =>
            var next = 0 // first change not yet written
            def emitChangesBefore(key: Array[Byte]): Unit = {
              while (next < changes.length &&
                (key == null || JArrays.compareUnsigned(changes(next)._1, key) < 0)) {
                val (k, v) = changes(next)
                if (v != null) out.put(k, v)
                next += 1
              }
            }
            if (base > 0) {
              readBase { (k, v) =>
                emitChangesBefore(k)
                if (next < changes.length && JArrays.equals(changes(next)._1, k)) {
                  val changed = changes(next)._2
                  if (changed != null) out.put(k, changed)
                  next += 1
                } else {
                  out.put(k, v)
                }
              }
            }
            emitChangesBefore(null)
          }
        }
        logInfo(s"Wrote snapshot of version $version to ${dir.path} (${written.records} " +
          s"entries, ${written.bytes} bytes, from snapshot $used + ${version - used} journals)")
        Some(version)
    }
  }

  /** The final value (null = removed) of every key changed in journals (base, version]. */
  private def squashedChanges(base: Long, version: Long): Array[(Array[Byte], Array[Byte])] = {
    val latest = new JHashMap[ByteBuffer, Array[Byte]]()
    var v = base + 1
    while (v <= version) {
      dir.read(StateFile.Journal, v) { (k, value) => latest.put(ByteBuffer.wrap(k), value) }
      v += 1
    }
    val out = new Array[(Array[Byte], Array[Byte])](latest.size)
    var i = 0
    latest.forEach { (k, value) => out(i) = (k.array, value); i += 1 }
    JArrays.sort(out, (a: (Array[Byte], Array[Byte]), b: (Array[Byte], Array[Byte])) =>
      JArrays.compareUnsigned(a._1, b._1))
    out
  }
}
