package spillstore.cold

import java.io.File

import scala.sys.process._

import org.apache.hadoop.conf.Configuration
import org.apache.hadoop.fs.Path

import org.apache.spark.sql.execution.streaming.state.SpillStoreSparkBridge

import spillstore.checkpoint.{CheckpointDir, Snapshotter, StateFile}
import spillstore.metrics.ExecutorStats

/**
 * A child JVM of LocalDirsSweepSuite: snapshots a checkpoint with its merge runs under the
 * given parent, and never finishes: the last journal is a named pipe nobody writes, so the
 * merge blocks opening it, with the runs of the journals before it on disk. Prints `merging`
 * first; the test kills it.
 *
 * Usage: SnapshotRunsHolder <parent> <checkpoint dir>
 */
object SnapshotRunsHolder {
  def main(args: Array[String]): Unit = {
    val checkpoint = new File(args(1))
    val dir = new CheckpointDir(new Path(checkpoint.toURI), new Configuration,
      SpillStoreSparkBridge.compressionCodec("lz4"))
    // Journal 4 too, so that the snapshot's plan merges every journal (journal 3 lists as
    // empty), rather than listing journal 4 alone.
    for (v <- Seq(1L, 2L, 4L)) dir.write(StateFile.Journal, v) { w =>
      (0 until 10).foreach(i => w.record(s"key-$v-$i".getBytes, new Array[Byte](10)))
    }
    val stuck = new File(checkpoint, "3.journal")
    assert(Seq("mkfifo", stuck.getPath).! == 0, s"mkfifo $stuck failed")
    println("merging")
    System.out.flush()
    // A fan-in of 2 merges journals 1 and 2 into a run before journal 3 is opened.
    new Snapshotter(dir, () => new File(args(0)), new ExecutorStats, maxOpenSources = 2)
      .snapshot(4, dir.list())
    sys.error("the merge was to block on the named pipe")
  }
}
