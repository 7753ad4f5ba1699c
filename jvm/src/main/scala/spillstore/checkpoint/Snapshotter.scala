package spillstore.checkpoint

import java.io.File
import java.util.concurrent.atomic.AtomicLong

import org.apache.spark.internal.Logging

import spillstore.cold.LocalDirs
import spillstore.metrics.ExecutorStats

/**
 * Writes full snapshots from checkpoint files alone: the newest earlier snapshot (sorted by key)
 * merged with the journals after it. It never reads the live heap, so it runs on a maintenance
 * thread without stopping or copying the task thread's state, and it sees spilled and heap
 * entries alike. The one exception is a repair ([[snapshotFrom]]): past a damaged journal the
 * files cannot make a snapshot, and the state a provider holds is the only copy left.
 *
 * Journals are sorted by key, so a snapshot is one streaming merge; memory and the run files
 * under `spillDir` (the executor's local dir) are bounded as [[SortedChanges]] describes.
 *
 * State: [[lastWritten]] is written by the thread that wrote a snapshot (a maintenance thread,
 * or a task committing with a forced snapshot; the provider lets one at a time snapshot) and
 * read by any thread (task threads, for the store's metrics).
 */
final class Snapshotter(dir: CheckpointDir, spillDir: () => File, stats: ExecutorStats,
    maxKeysInMemory: Int = SortedChanges.DefaultMaxKeysInMemory,
    maxOpenSources: Int = SortedChanges.DefaultMaxOpenSources)
    extends Logging {

  /**
   * Runs go in this JVM's dir under `spillDir`: a JVM killed mid-merge leaves them where the
   * next JVM's sweep reclaims them, as it does cold tiers ([[LocalDirs]]).
   */
  private val runsParent = () => LocalDirs.jvmDirUnder(spillDir())

  private val newestWritten = new AtomicLong(-1L)

  /**
   * The newest version this snapshotter wrote a snapshot of, -1 before its first: what Spark
   * 4.1+ shows as the store's snapshot lag (its providers, too, count only their own uploads).
   */
  def lastWritten: Long = newestWritten.get()

  /**
   * Snapshots the newest version up to `committed` (the newest its provider knows committed:
   * a journal past it may not be) if at least `minDeltas` journals follow the newest snapshot.
   * Returns the version snapshotted.
   */
  def snapshotIfDue(minDeltas: Int, committed: Long): Option[Long] = {
    val listing =
      try dir.list()
      catch {
        case e: ForeignFiles.ForeignFilesException =>
          logWarning(s"Not snapshotting: ${e.getMessage}")
          return None
      }
    val latest = listing.journals.filter(_ <= committed).reduceOption(_ max _).getOrElse(0L)
    val base = listing.latestSnapshotAtOrBelow(latest)
    if (latest - base >= minDeltas) snapshot(latest, listing) else None
  }

  /**
   * Writes the snapshot of `version` from `entries`, its whole content (each key once, in any
   * order): a provider's live state, when a journal it holds a version past is damaged.
   */
  def snapshotFrom(version: Long, entries: Iterator[(Array[Byte], Array[Byte])]): Unit = {
    val sorted = SortedChanges.sort(dir, entries, runsParent, maxKeysInMemory, maxOpenSources)
    val written =
      try dir.write(StateFile.Snapshot, version)(out => sorted.drain(out.put))
      finally sorted.close()
    wrote(version, written, "the live state")
  }

  private def wrote(version: Long, written: CheckpointDir.Written, from: String): Unit = {
    stats.snapshotBytes.inc(written.bytes)
    newestWritten.accumulateAndGet(version, (a: Long, b: Long) => math.max(a, b))
    logInfo(s"Wrote snapshot of version $version to ${dir.path} (${written.records} " +
      s"entries, ${written.bytes} bytes, from $from)")
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
        // An older base is used around a corrupt one (see withNewestGoodBase).
        val (used, written) = dir.withNewestGoodBase(listing, version) { (base, readBase) =>
          base -> dir.write(StateFile.Snapshot, version) { out =>
            MergedVersion.foreach(dir, base, version, readBase, runsParent, maxOpenSources)(
              out.put)
          }
        }
        wrote(version, written, s"snapshot $used + ${version - used} journals")
        Some(version)
    }
  }
}
