package spillstore.checkpoint

import org.scalatest.funsuite.AnyFunSuite

import spillstore.checkpoint.CheckpointDirs.withDirs
import spillstore.metrics.ExecutorStats

/** What the snapshot-lag metric (Spark 4.1+) reports: the newest snapshot this snapshotter wrote. */
class SnapshotterLastWrittenSuite extends AnyFunSuite {
  private def journal(dir: CheckpointDir, v: Long): Unit =
    dir.write(StateFile.Journal, v) { w => w.put(Array(v.toByte), Array(v.toByte)) }

  test("-1 until a snapshot is written, then its version; a snapshot not due or not written " +
    "leaves it, and another snapshotter on the same files counts only its own") {
    withDirs("snapshotter-last") { (dir, local) =>
      val snapshotter = new Snapshotter(dir, () => local, new ExecutorStats)
      (1L to 3L).foreach(journal(dir, _))
      assert(snapshotter.lastWritten === -1L)
      assert(snapshotter.snapshotIfDue(minDeltas = 4, committed = 3) === None)
      assert(snapshotter.snapshotIfDue(minDeltas = 3, committed = 2) === None, "3 not committed")
      assert(snapshotter.lastWritten === -1L)

      assert(snapshotter.snapshotIfDue(minDeltas = 3, committed = 3) === Some(3L))
      assert(snapshotter.lastWritten === 3L)
      assert(snapshotter.snapshot(3L, dir.list()) === None, "exists already")
      assert(snapshotter.lastWritten === 3L)

      (4L to 5L).foreach(journal(dir, _))
      assert(snapshotter.snapshot(5L, dir.list()) === Some(5L))
      assert(snapshotter.lastWritten === 5L)
      // A gap in the journals: no snapshot, the last one written stands.
      journal(dir, 7L)
      assert(snapshotter.snapshot(7L, dir.list()) === None)
      assert(snapshotter.lastWritten === 5L)

      // A provider loaded anew (another executor) has written nothing yet.
      assert(new Snapshotter(dir, () => local, new ExecutorStats).lastWritten === -1L)
    }
  }
}
