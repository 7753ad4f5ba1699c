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
 *
 * With checkpoint format v2 ([[cleanupConfirmed]]) a version has a file per commit attempt, and
 * only the confirmed lineage (the pairs Spark passed in, which its commit log holds) is what
 * retained versions are: the store is kept from the newest whole snapshot ON that lineage, so
 * a losing attempt's snapshot never decides what goes (it would take the confirmed lineage's
 * base and journals with it). Below that snapshot every id's files go as above; at or above it,
 * up to the confirmed tip, a journal or snapshot of another id is a losing or failed attempt's
 * and goes, with the runs only such snapshots list. Files above the tip (a batch running now)
 * stay, and what their manifests list.
 */
final class Cleaner(dir: CheckpointDir) extends Logging {

  /** Returns the number of files deleted. */
  def cleanup(minVersionsToRetain: Int): Int =
    foreignSafe {
      val listing = dir.list()
      cleanupFrom(listing, listing.latestVersion - minVersionsToRetain, None)
    }

  /**
   * Format v2: keeps the newest `minVersionsToRetain` versions of `confirmed` (whose tip is the
   * newest pair Spark passed in) loadable, and deletes the files of every other attempt at or
   * below the tip. Returns the number of files deleted.
   */
  def cleanupConfirmed(minVersionsToRetain: Int, confirmed: Lineage): Int = foreignSafe {
    val along = dir.along(confirmed)
    new Cleaner(along).cleanupFrom(along.list(), confirmed.tip - minVersionsToRetain,
      Some(confirmed))
  }

  private def foreignSafe(body: => Int): Int =
    try body
    catch {
      case e: ForeignFiles.ForeignFilesException =>
        logWarning(s"Not cleaning up: ${e.getMessage}")
        0
    }

  private def cleanupFrom(listing: CheckpointDir.Listing, horizon: Long,
      confirmed: Option[Lineage]): Int = {
    if (horizon <= 0) return 0
    val keepFrom = listing.latestSnapshotAtOrBelow(horizon)
    if (keepFrom == 0) return 0
    whole(keepFrom, listing) match {
      case None =>
        logWarning(s"Not cleaning up ${dir.path}: snapshot $keepFrom, which the retained " +
          "versions would be kept from, is damaged or misses a file it lists; the next load " +
          "rebuilds around it")
        0
      case Some(kept) => deleteBefore(kept, listing, confirmed)
    }
  }

  private def deleteBefore(kept: Manifest, listing: CheckpointDir.Listing,
      confirmed: Option[Lineage]): Int = {
    val keepFrom = kept.version
    // Format v2: the files of attempts that lost, at versions the confirmed lineage knows.
    val losing = confirmed.toSeq.flatMap(c =>
      listing.all.filter(n =>
        n.version >= keepFrom && n.version <= c.tip && c.knows(n.version) &&
          !c.has(n.version, n.id)))
    val losingSnapshots = losing.filter(_.kind == StateFile.Snapshot)
    // Snapshots above the confirmed tip, of any id, may be of the batch running now.
    val pending = confirmed.toSeq.flatMap(c =>
      listing.all.toSeq.filter(n =>
        n.kind == StateFile.Snapshot && n.version > c.tip).sortBy(_.version)
        .flatMap(n => readable(n.version, n.id)))
    val newer = listing.snapshots.filter(_ > keepFrom).toSeq.sorted.flatMap(readable(_))
    val listed = (kept +: (newer ++ pending)).flatMap(_.names).toSet
    def unlisted(name: String) = !listed.contains(name)
    val losersRuns = losingSnapshots.flatMap(n => readable(n.version, n.id)).flatMap(_.names)
      .filter(n => listing.runs.contains(n) && unlisted(n))
    val runs = (listing.runs.collect { case (n, v) if v < keepFrom && unlisted(n) => n }.toSeq ++
      losersRuns).distinct
    val snapshots = listing.snapshots.filter(v =>
      v < keepFrom &&
        unlisted(dir.file(StateFile.Snapshot, v).getName)).toSeq.sorted
    val journals = listing.journals.filter(v =>
      v < keepFrom &&
        unlisted(dir.file(StateFile.Journal, v).getName)).toSeq.sorted
    val temps = listing.temps.collect { case (name, v) if v < keepFrom => name }.toSeq.sorted
    // Below keepFrom, other ids' files go as the lineage's do (the view lists only its own).
    val older = confirmed.toSeq.flatMap(c =>
      listing.all.toSeq.filter(n =>
        n.version < keepFrom && !c.has(n.version, n.id) && unlisted(n.name)))
    val others = (older ++ losing.filter(n => unlisted(n.name))).map(_.name).distinct.sorted
    runs.sorted.foreach(dir.deleteNamed)
    snapshots.foreach(dir.delete(StateFile.Snapshot, _))
    journals.foreach(dir.delete(StateFile.Journal, _))
    others.foreach(dir.deleteNamed)
    temps.foreach(dir.deleteNamed)
    val deleted = runs.size + snapshots.size + journals.size + others.size + temps.size
    if (deleted > 0) {
      logInfo(s"Deleted from ${dir.path}, kept from snapshot $keepFrom: ${journals.size} " +
        s"journals, ${snapshots.size} snapshots, ${runs.size} runs, ${others.size} other " +
        s"attempts' files and ${temps.size} temp files")
    }
    deleted
  }

  /** The manifest of `version` if it and every part it lists are whole. */
  private def readable(version: Long): Option[Manifest] =
    readable(version, dir.lineage.idOf(version))

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
  private def readable(version: Long, id: Option[String]): Option[Manifest] =
    try Some(dir.readManifest(version, id))
    catch {
      case e: StateFile.CorruptFileException =>
        logWarning(s"Snapshot $version of ${dir.path} is damaged: ${e.getMessage}")
        None
      case _: FileNotFoundException => None
    }
}
