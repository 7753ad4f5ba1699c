package spillstore.checkpoint

import java.io.FileNotFoundException

import org.apache.spark.internal.Logging

/**
 * Deletes checkpoint files no version within retention needs, as Spark's providers do for
 * `spark.sql.streaming.minBatchesToRetain`: the newest `minVersionsToRetain` versions stay
 * loadable, so the store is kept from the newest snapshot at or below that horizon, and what
 * neither it nor a newer snapshot lists goes. What is referenced is read from the manifests in
 * storage on every run, never remembered (SPARK-55820: a remembered list went stale).
 *
 *  - The snapshot kept from must be whole: its manifest read to its end (it is small) and
 *    every part it lists there with the length it recorded (a format-2 snapshot: its first and
 *    last bytes). Kept from a damaged one, the store would lose the journals that are the only
 *    way back; then nothing is deleted.
 *  - Journals, snapshots and runs older than it go unless a retained manifest lists them
 *    (parts are shared: a journal a manifest adopted stays as long as it does). Runs go first,
 *    so that after a crash a manifest still names what the next run must finish deleting.
 *  - A run no manifest lists (a killed or racing writer's) goes once its version is below the
 *    snapshot kept from: a manifest of a later version lists only runs its base listed and the
 *    one it wrote itself, of its own version, so no retained version can come to list it. A run
 *    still being published is of a version at or above it and stays.
 *  - Temp files of writes never published (a killed executor's) go by the same version rule.
 * A directory holding another provider's files is left alone (loading it is the error that
 * names them).
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
      whole(keepFrom, listing) match {
        case None =>
          logWarning(s"Not cleaning up ${dir.path}: snapshot $keepFrom, which the retained " +
            "versions would be kept from, is damaged or misses a file it lists; the next load " +
            "rebuilds around it")
          0
        case Some(kept) => deleteBefore(kept, listing)
      }
    } catch {
      case e: ForeignFiles.ForeignFilesException =>
        logWarning(s"Not cleaning up: ${e.getMessage}")
        0
    }

  private def deleteBefore(kept: Manifest, listing: CheckpointDir.Listing): Int = {
    val keepFrom = kept.version
    val newer = listing.snapshots.filter(_ > keepFrom).toSeq.sorted.flatMap(readable)
    val listed = (kept +: newer).flatMap(_.names).toSet
    def unlisted(name: String) = !listed.contains(name)
    val runs = listing.runs.collect { case (n, v) if v < keepFrom && unlisted(n) => n }.toSeq
    val snapshots = listing.snapshots.filter(v =>
      v < keepFrom &&
        unlisted(Manifest.FullSnapshot(v).name)).toSeq.sorted
    val journals = listing.journals.filter(v =>
      v < keepFrom &&
        unlisted(Manifest.JournalFile(v).name)).toSeq.sorted
    val temps = listing.temps.collect { case (name, v) if v < keepFrom => name }.toSeq.sorted
    runs.sorted.foreach(dir.deleteNamed)
    snapshots.foreach(dir.delete(StateFile.Snapshot, _))
    journals.foreach(dir.delete(StateFile.Journal, _))
    temps.foreach(dir.deleteNamed)
    val deleted = runs.size + snapshots.size + journals.size + temps.size
    if (deleted > 0) {
      logInfo(s"Deleted from ${dir.path}, kept from snapshot $keepFrom: ${journals.size} " +
        s"journals, ${snapshots.size} snapshots, ${runs.size} runs and ${temps.size} temp files")
    }
    deleted
  }

  /** The manifest of `version` if it and every part it lists are whole. */
  private def whole(version: Long, listing: CheckpointDir.Listing): Option[Manifest] =
    readable(version).filter { m =>
      val ok = listing.hasParts(m) && (m.parts match {
        case Seq(Manifest.Part(Manifest.FullSnapshot(v), _, _, _, None)) =>
          dir.looksWhole(StateFile.Snapshot, v)
        case _ => true
      })
      ok
    }

  /**
   * The manifest of `version`; None if it is damaged or gone (it cannot be loaded, so what it
   * lists is not kept for it). Any other failure stops the cleanup: what it lists is unknown.
   */
  private def readable(version: Long): Option[Manifest] =
    try Some(dir.readManifest(version))
    catch {
      case e: StateFile.CorruptFileException =>
        logWarning(s"Snapshot $version of ${dir.path} is damaged: ${e.getMessage}")
        None
      case _: FileNotFoundException => None
    }
}
