package spillstore.checkpoint

import org.apache.spark.internal.Logging

/**
 * Deletes checkpoint files no version within retention needs, as Spark's providers do for
 * `spark.sql.streaming.minBatchesToRetain`: the newest `minVersionsToRetain` versions stay
 * loadable, so everything older than the newest snapshot at or below that horizon goes.
 *
 * Before anything is deleted, that snapshot's first and last bytes are read (two small
 * requests: its magic, and the footer that pins its length): kept from by name alone, another
 * provider's file or a damaged or truncated one would cost the journals that are the only way
 * back. A directory holding another provider's files is left alone (loading it is the
 * error that names them). Temp files of writes never published (a killed executor's) go too
 * once their version is below the one kept from: no writer of so old a version is running.
 */
final class Cleaner(dir: CheckpointDir) extends Logging {

  /** Returns the number of files deleted. */
  def cleanup(minVersionsToRetain: Int): Int =
    try {
      val listing = dir.list()
      val horizon = listing.latestVersion - minVersionsToRetain
      if (horizon <= 0) return 0
      val keepFrom = listing.latestSnapshotAtOrBelow(horizon)
      if (keepFrom == 0) return 0
      val doomed =
        listing.journals.filter(_ < keepFrom).toSeq.map(StateFile.Journal -> _) ++
          listing.snapshots.filter(_ < keepFrom).toSeq.map(StateFile.Snapshot -> _)
      val leftTemps = listing.temps.collect { case (name, v) if v < keepFrom => name }.toSeq.sorted
      if (doomed.isEmpty && leftTemps.isEmpty) return 0
      if (!dir.looksWhole(StateFile.Snapshot, keepFrom)) {
        logWarning(s"Not cleaning up ${dir.path}: snapshot $keepFrom, which the retained " +
          "versions would be kept from, is damaged; the next load rebuilds around it")
        return 0
      }
      doomed.sortBy(_._2).foreach { case (kind, v) => dir.delete(kind, v) }
      leftTemps.foreach(dir.deleteTemp)
      logInfo(s"Deleted ${doomed.size} files older than version $keepFrom from ${dir.path}" +
        (if (leftTemps.isEmpty) ""
         else s", and ${leftTemps.size} temp files of unpublished writes"))
      doomed.size + leftTemps.size
    } catch {
      case e: ForeignFiles.ForeignFilesException =>
        logWarning(s"Not cleaning up: ${e.getMessage}")
        0
    }
}
