package spillstore.recovery

import java.io.{File, FileNotFoundException}

import scala.util.control.NonFatal

import org.apache.hadoop.fs.Path

import org.apache.spark.internal.Logging
import org.apache.spark.sql.execution.streaming.state.SpillStoreSparkBridge

import spillstore.checkpoint.{
  CheckpointDir, ForeignFiles, Lineage, Manifest, MergedVersion, SortedChanges, StateFile
}
import spillstore.tiered.TieredState

/**
 * Rebuilds a committed version from the checkpoint directory: the parts of the newest snapshot
 * at or below it merged with the journals after that snapshot ([[MergedVersion]]), loaded into
 * an empty state in key order.
 *
 * With checkpoint format v2 a recovery works along one lineage ([[along]]): the files of that
 * lineage's ids, never another attempt's.
 *
 * @param spillDir where a merge of old-format or many journals writes its sorted runs
 */
final class Recovery(dir: CheckpointDir, spillDir: () => File) extends Logging {

  /** This recovery along `l` (see [[CheckpointDir.along]]). */
  def along(l: Lineage): Recovery = new Recovery(dir.along(l), spillDir)

  /** The files of the pair (`version`, `id`) Spark passed in (`CheckpointDir.lineageOf`). */
  def lineageOf(version: Long, id: Option[String], checkpointIds: Boolean,
      deep: Boolean): Lineage = dir.lineageOf(version, id, checkpointIds, deep)

  /**
   * Loads exactly `version` into `state`, which is cleared first; returns the version of the
   * snapshot it was loaded from (0: journals only).
   */
  def load(version: Long, state: TieredState): Long = {
    if (version == 0) { state.clear(); return 0L }
    val start = System.nanoTime()
    val listing = dir.list()
    val base = listing.latestSnapshotAtOrBelow(version)
    checkJournals(listing, base, version)
    val used = journalErrors(dir.withNewestGoodBase(listing, version) { base =>
      state.clear() // each try at a base starts empty: a corrupt one may have loaded a part
      state.loadVersion(MergedVersion.foreach(dir, base, version, spillDir))
      base.version
    })
    logInfo(s"Loaded version $version of ${dir.path} (snapshot $used + ${version - used} " +
      s"journals, ${state.numKeys} keys: ${state.heap.numLiveEntries} on the heap, " +
      s"${state.coldKeyCount} in the cold tier) in " +
      s"${(System.nanoTime() - start) / 1000000} ms")
    used
  }

  /**
   * Loads `version` from exactly the snapshot of `snapshotVersion` (0: from empty) and the
   * journals after it, as Spark's state data source asks (`snapshotStartBatchId`); no
   * fallback to another snapshot.
   */
  def loadFromSnapshot(snapshotVersion: Long, version: Long, state: TieredState): Unit = {
    if (snapshotVersion < 0 || snapshotVersion > version) {
      throw new IllegalArgumentException(s"Recovery of ${dir.path}: snapshot version " +
        s"$snapshotVersion must be between 0 and the version to load, $version")
    }
    val listing = dir.list()
    if (snapshotVersion > 0 && !listing.snapshots.contains(snapshotVersion)) {
      throw SpillStoreSparkBridge.missingSnapshotFile(
        dir.file(StateFile.Snapshot, snapshotVersion), dir.path.toString)
    }
    checkJournals(listing, snapshotVersion, version)
    state.clear()
    journalErrors {
      try {
        val base =
          if (snapshotVersion == 0) Manifest.empty(0)
          else dir.asBase(dir.file(StateFile.Snapshot, snapshotVersion))(
            dir.readManifest(snapshotVersion))
        state.loadVersion(MergedVersion.foreach(dir, base, version, spillDir))
      } catch {
        case CheckpointDir.BadBase(f, e) => throw unreadable(f, e)
      }
    }
  }

  /** Moves `state` from committed version `from` forward to `to` by replaying journals. */
  def rollForward(from: Long, to: Long, state: TieredState): Unit = {
    checkJournals(dir.list(), from, to)
    replayJournals(from, to, state)
  }

  private def checkJournals(listing: CheckpointDir.Listing, from: Long, to: Long): Unit =
    listing.missingJournal(from, to).foreach { v =>
      val f = dir.file(StateFile.Journal, v)
      // A version asked for by its v1 name that only checkpoint ids name: the checkpoint was
      // written with format v2 and the caller passed no id (Spark 4.0's state data source).
      val idsOnly = dir.lineage.idOf(v).isEmpty && listing.all.exists(n =>
        n.kind == StateFile.Journal && n.version == v && n.id.isDefined)
      val hint =
        if (!idsOnly) ""
        else "; this checkpoint names its versions by checkpoint ids (spark.sql.streaming." +
        s"stateStore.checkpointFormatVersion=2), and version $to was asked for without one"
      throw SpillStoreSparkBridge.cannotReadStateFile(f,
        new FileNotFoundException(
          s"$f does not exist: version $to of this store cannot be rebuilt " +
            s"(it needs journals ${from + 1} to $to after snapshot $from)$hint"))
    }

  private def replayJournals(from: Long, to: Long, state: TieredState): Unit = {
    var v = from + 1
    while (v <= to) { applyFile(StateFile.Journal, v, state.applyCommitted); v += 1 }
  }

  private def applyFile(kind: StateFile.Kind, version: Long,
      apply: (Array[Byte], Array[Byte]) => Unit): Unit =
    try dir.read(kind, version)(apply)
    catch {
      case e: SortedChanges.UnreadableJournal => throw e // merged in while this file was read
      case NonFatal(e) => throw unreadable(dir.file(kind, version), e)
    }

  /** `body`, with a journal a merge could not read reported as Spark reports a state file. */
  private def journalErrors[T](body: => T): T =
    try body
    catch {
      case e: SortedChanges.UnreadableJournal => throw unreadable(e.file, e.getCause)
    }

  private def unreadable(file: Path, e: Throwable): Throwable = e match {
    // Not the file's fault: their own messages say what to do.
    case _: StateFile.UnreadableFormatException | _: ForeignFiles.ForeignFilesException => e
    case _ => StateFile.unreadable(file, e)
  }
}
