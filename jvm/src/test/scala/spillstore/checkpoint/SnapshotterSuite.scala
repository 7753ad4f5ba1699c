package spillstore.checkpoint

import java.io.File
import java.nio.file.Files

import scala.collection.mutable
import scala.util.Random

import org.apache.commons.io.FileUtils
import org.apache.hadoop.conf.Configuration
import org.apache.hadoop.fs.Path
import org.scalatest.funsuite.AnyFunSuite

import org.apache.spark.sql.execution.streaming.state.SpillStoreSparkBridge

class SnapshotterSuite extends AnyFunSuite {
  private def withDirs(body: (CheckpointDir, File) => Unit): Unit = {
    val root = Files.createTempDirectory("snapshotter").toFile
    try {
      val dir = new CheckpointDir(new Path(new File(root, "ckpt").toURI), new Configuration,
        SpillStoreSparkBridge.compressionCodec("lz4"))
      body(dir, new File(root, "local"))
    } finally FileUtils.deleteQuietly(root)
  }

  private def key(rnd: Random): Array[Byte] = {
    val k = new Array[Byte](1 + rnd.nextInt(3)) // few, short keys: many repeats and removals
    rnd.nextBytes(k)                            // negative bytes too: unsigned order matters
    k
  }

  private def readAll(dir: CheckpointDir, kind: StateFile.Kind, v: Long): Seq[(Seq[Byte], Seq[Byte])] = {
    val out = Seq.newBuilder[(Seq[Byte], Seq[Byte])]
    dir.read(kind, v)((k, value) => out += (k.toSeq -> Option(value).map(_.toSeq).orNull))
    out.result()
  }

  test("with a tiny key budget, snapshots spill sorted runs and still equal the state, sorted, and leave no run behind") {
    for (seed <- 1 to 5) withDirs { (dir, local) =>
      val rnd = new Random(seed)
      val model = mutable.Map.empty[Seq[Byte], Seq[Byte]]
      val tiny = new Snapshotter(dir, () => local, maxKeysInMemory = 7)
      for (v <- 1L to 24L) {
        val batch = mutable.LinkedHashMap.empty[Seq[Byte], Array[Byte]] // squashed, as journals are
        (0 until rnd.nextInt(60)).foreach { _ =>
          val k = key(rnd)
          batch(k.toSeq) = if (rnd.nextInt(4) == 0) null else key(rnd)
        }
        dir.write(StateFile.Journal, v) { w =>
          batch.foreach { case (k, value) => if (value == null) w.remove(k.toArray) else w.put(k.toArray, value) }
        }
        batch.foreach { case (k, value) => if (value == null) model -= k else model(k) = value.toSeq }
        if (v % 8 == 0) { // snapshots over a base snapshot, too
          assert(tiny.snapshot(v, dir.list()) === Some(v))
          val snap = readAll(dir, StateFile.Snapshot, v)
          assert(snap.map(_._1) === snap.map(_._1).sortWith((a, b) =>
            java.util.Arrays.compareUnsigned(a.toArray, b.toArray) < 0), s"seed $seed v $v: not sorted")
          assert(snap.toMap === model.toMap, s"seed $seed v $v")
          assert(Option(local.listFiles()).forall(_.isEmpty), "run files left behind")
        }
      }
      assert(local.isDirectory, "with 7 keys in memory, runs must have been spilled")
    }
  }
}
