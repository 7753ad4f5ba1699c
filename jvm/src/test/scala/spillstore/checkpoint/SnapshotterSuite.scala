package spillstore.checkpoint

import scala.collection.mutable
import scala.jdk.CollectionConverters._
import scala.util.Random

import org.apache.commons.io.FileUtils
import org.scalatest.funsuite.AnyFunSuite

import spillstore.checkpoint.CheckpointDirs.withDirs
import spillstore.cold.LocalDirs
import spillstore.metrics.ExecutorStats

class SnapshotterSuite extends AnyFunSuite {
  private def key(rnd: Random): Array[Byte] = {
    val k = new Array[Byte](1 + rnd.nextInt(3)) // few, short keys: many repeats and removals
    rnd.nextBytes(k) // negative bytes too: unsigned order matters
    k
  }

  private def readAll(dir: CheckpointDir, kind: StateFile.Kind, v: Long)
      : Seq[(Seq[Byte], Seq[Byte])] = {
    val out = Seq.newBuilder[(Seq[Byte], Seq[Byte])]
    dir.read(kind, v)((k, value) => out += (k.toSeq -> Option(value).map(_.toSeq).orNull))
    out.result()
  }

  /** Every entry of version `v`, as its snapshot's manifest and parts hold it, in their order. */
  private def readVersion(dir: CheckpointDir, v: Long, local: java.io.File)
      : Seq[(Seq[Byte], Seq[Byte])] = {
    val out = Seq.newBuilder[(Seq[Byte], Seq[Byte])]
    MergedVersion.foreach(dir, dir.readManifest(v), v, () => local)((k, value) =>
      out += (k.toSeq -> value.toSeq))
    out.result()
  }

  private def unsignedSorted(keys: Seq[Seq[Byte]]): Boolean =
    keys.zip(keys.drop(1)).forall { case (a, b) =>
      java.util.Arrays.compareUnsigned(a.toArray, b.toArray) < 0
    }

  // A tiny fan-in forces run files and merges of open sources.
  test(
    "snapshots from journals equal the state, sorted, with bounded fan-in, and leave no run behind") {
    for (seed <- 1 to 5) withDirs("snapshotter") { (dir, local) =>
      val rnd = new Random(seed)
      val model = mutable.Map.empty[Seq[Byte], Seq[Byte]]
      val tiny = new Snapshotter(dir, () => local, new ExecutorStats, maxOpenSources = 3)
      for (v <- 1L to 24L) {
        val batch = mutable.LinkedHashMap.empty[Seq[Byte], Array[Byte]] // squashed, as journals are
        (0 until rnd.nextInt(60)).foreach { _ =>
          val k = key(rnd)
          batch(k.toSeq) = if (rnd.nextInt(4) == 0) null else key(rnd)
        }
        val records = batch.toSeq.sortWith((a, b) =>
          java.util.Arrays.compareUnsigned(a._1.toArray, b._1.toArray) < 0)
        dir.write(StateFile.Journal, v) { w =>
          records.foreach { case (k, value) => w.record(k.toArray, value) }
        }
        batch.foreach { case (k, value) =>
          if (value == null) model -= k else model(k) = value.toSeq
        }
        if (v % 8 == 0) { // snapshots over a base snapshot, too
          assert(tiny.snapshot(v, dir.list()) === Some(v))
          val snap = readVersion(dir, v, local)
          assert(unsignedSorted(snap.map(_._1)), s"seed $seed v $v: not sorted")
          assert(snap.toMap === model.toMap, s"seed $seed v $v")
          // Only this JVM's dir (and its lock) stays: runs live inside it (see LocalDirs).
          assert(FileUtils.listFiles(local, null, true).asScala.map(_.getName).forall(
              _ == LocalDirs.LockFileName), "run files left behind")
          assert(local.list().forall(_.startsWith(s"jvm-${ProcessHandle.current().pid()}-")),
            s"runs outside this JVM's dir: ${local.list().mkString(", ")}")
        }
      }
      assert(local.isDirectory, "with 3 open sources, runs must have been written")
    }
  }

  test(
    "a file is written in key order: an out-of-order or repeated key is refused, naming the file") {
    withDirs("snapshotter") { (dir, _) =>
      for (keys <- Seq(Seq(Array[Byte](2), Array[Byte](1)), Seq(Array[Byte](1), Array[Byte](1)),
          Seq(Array[Byte](-1), Array[Byte](1)))) { // unsigned: 0xff sorts after 0x01
        val e = intercept[IllegalArgumentException] {
          dir.write(StateFile.Journal, 5) { w => keys.foreach(k => w.put(k, k)) }
        }
        assert(e.getMessage.contains("journal 5") && e.getMessage.contains("ascending"))
      }
      assert(dir.list().journals.isEmpty, "a refused file must not be published")
    }
  }

  test("format 2 files are read; format 1 (development builds' unsorted journals) and a newer " +
    "format are refused, naming the file, its format and the formats read") {
    withDirs("snapshotter") { (dir, _) =>
      dir.write(StateFile.Journal, 1)(w => {
        w.remove(Array[Byte](1)); w.put(Array[Byte](2), Array[Byte](0))
      })
      assert(readAll(dir, StateFile.Journal, 1) === Seq(Seq[Byte](1) -> null,
        Seq[Byte](2) -> Seq[Byte](0)))
      for ((v, format, writer) <-
          Seq((2, 1, "older"), (3, StateFile.ReadableFormats.max + 1, "newer"))) {
        dir.write(StateFile.Journal, v, format)(w => w.put(Array[Byte](1), Array[Byte](7)))
        val e = intercept[StateFile.UnreadableFormatException](readAll(dir, StateFile.Journal, v))
        Seq(s"$v.journal", s"file format $format", "the formats it reads: 2, 3",
          s"$writer spillstore").foreach { part =>
          assert(e.getMessage.contains(part), s"'$part' not in: ${e.getMessage}")
        }
      }
    }
  }
}
