package spillstore.recovery

import java.io.FileNotFoundException

import scala.util.control.NonFatal

import org.apache.spark.internal.Logging
import org.apache.spark.sql.execution.streaming.state.SpillStoreSparkBridge

import spillstore.checkpoint.{CheckpointDir, StateFile}
import spillstore.heap.HeapTier

/**
 * Rebuilds a committed version from the checkpoint directory: the newest snapshot at or below
 * it, then the journals after that snapshot, in order.
 */
final class Recovery(dir: CheckpointDir) extends Logging {

  /** Loads exactly `version` into `heap`, which is cleared first. */
  def load(version: Long, heap: HeapTier): Unit = {
    heap.clear()
    if (version == 0) return
    val start = System.nanoTime()
    val listing = dir.list()
    val base = listing.latestSnapshotAtOrBelow(version)
    checkJournals(listing, base, version)
    if (base > 0) applyFile(StateFile.Snapshot, base, heap)
    replayJournals(base, version, heap)
    logInfo(s"Loaded version $version of ${dir.path} (snapshot $base + ${version - base} " +
      s"journals, ${heap.numLiveEntries} keys) in ${(System.nanoTime() - start) / 1000000} ms")
  }

  /** Moves `heap` from committed version `from` forward to `to` by replaying journals. */
  def rollForward(from: Long, to: Long, heap: HeapTier): Unit = {
    checkJournals(dir.list(), from, to)
    replayJournals(from, to, heap)
  }

  private def checkJournals(listing: CheckpointDir.Listing, from: Long, to: Long): Unit =
    listing.missingJournal(from, to).foreach { v =>
      val f = dir.file(StateFile.Journal, v)
      throw SpillStoreSparkBridge.cannotReadStateFile(f, new FileNotFoundException(
        s"$f does not exist: version $to of this store cannot be rebuilt " +
          s"(it needs journals ${from + 1} to $to after snapshot $from)"))
    }

  private def replayJournals(from: Long, to: Long, heap: HeapTier): Unit = {
    var v = from + 1
    while (v <= to) { applyFile(StateFile.Journal, v, heap); v += 1 }
  }

  private def applyFile(kind: StateFile.Kind, version: Long, heap: HeapTier): Unit =
    try dir.read(kind, version)(heap.applyCommitted) catch {
      case NonFatal(e) =>
        throw SpillStoreSparkBridge.cannotReadStateFile(dir.file(kind, version), e)
    }
}
