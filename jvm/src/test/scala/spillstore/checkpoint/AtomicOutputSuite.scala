package spillstore.checkpoint

import java.io.{File, IOException}
import java.nio.file.Files

import org.apache.commons.io.IOUtils
import org.apache.hadoop.conf.Configuration
import org.apache.hadoop.fs.Path
import org.scalatest.funsuite.AnyFunSuite

import org.apache.spark.sql.execution.streaming.state.SpillStoreSparkShim.CheckpointFileManager

import spillstore.TempDirs.withTempDir
import spillstore.conf.SparkConfs

class AtomicOutputSuite extends AnyFunSuite {

  private def names(dir: String): Set[String] = new File(dir).list().toSet

  private def bytes(n: Int, seed: Int): Array[Byte] = Array.tabulate(n)(i => (i * 31 + seed).toByte)

  /** The creator CheckpointDir would use for `dir` with `conf`. */
  private def creatorFor(dir: String, conf: Configuration = new Configuration())
      : Path => AtomicOutput =
    AtomicOutput.creator(new Path(dir), conf,
      CheckpointFileManager.create(new Path(dir), conf)).create

  private def write(create: Path => AtomicOutput, target: Path, data: Array[Byte]): Unit = {
    val out = create(target)
    out.write(data, 0, data.length)
    out.publish()
  }

  test("a local file appears whole on publish, with no temp file or .crc left beside it") {
    withTempDir("atomic") { dir =>
      val create = creatorFor(dir)
      val out = create(new Path(dir, "1.journal"))
      out.write(bytes(100000, 1), 0, 100000)
      assert(!new File(dir, "1.journal").exists())
      assert(names(dir).exists(n => n.startsWith(".1.journal.") && n.endsWith(".tmp")), names(dir))
      out.publish()
      out.discard() // a no-op once published
      assert(names(dir) === Set("1.journal"))
      assert(Files.readAllBytes(new File(dir, "1.journal").toPath) sameElements bytes(100000, 1))
      val e = intercept[IllegalStateException](out.write(1))
      assert(e.getMessage.contains("1.journal") && e.getMessage.contains("published or discarded"))
    }
  }

  test("discard, or a failed publish, leaves the target as it was and no temp file") {
    withTempDir("atomic") { dir =>
      val create = creatorFor(dir)
      write(create, new Path(dir, "2.snapshot"), bytes(10, 2))
      val discarded = create(new Path(dir, "2.snapshot"))
      discarded.write(bytes(50, 3), 0, 50)
      discarded.discard()
      assert(names(dir) === Set("2.snapshot"))
      assert(Files.readAllBytes(new File(dir, "2.snapshot").toPath) sameElements bytes(10, 2))
      // A non-empty directory where the file goes: the rename fails.
      assert(new File(dir, "3.journal/x").mkdirs())
      val failing = create(new Path(dir, "3.journal"))
      failing.write(bytes(50, 4), 0, 50)
      intercept[IOException](failing.publish())
      assert(names(dir) === Set("2.snapshot", "3.journal"))
    }
  }

  test("replacing a file Hadoop wrote with a .crc: Hadoop's checked reads see the new file") {
    withTempDir("atomic") { dir =>
      val conf = new Configuration()
      val fm = CheckpointFileManager.create(new Path(dir), conf)
      val target = new Path(dir, "5.snapshot")
      val hadoop = fm.createAtomic(target, overwriteIfPossible = true)
      hadoop.write(bytes(3000, 5))
      hadoop.close()
      assert(names(dir).contains(".5.snapshot.crc"), names(dir))
      write(AtomicOutput.creator(new Path(dir), conf, fm).create, target, bytes(2000, 6))
      // Checked against the old .crc, this read would fail with a ChecksumException.
      val in = fm.open(target)
      try assert(IOUtils.toByteArray(in) sameElements bytes(2000, 6))
      finally in.close()
      assert(names(dir) === Set("5.snapshot"))
    }
  }

  test("a file manager the user chose writes every file, as Spark's providers do") {
    withTempDir("atomic") { dir =>
      val conf = new Configuration()
      val chosen = CheckpointFileManager.create(new Path(dir), conf).getClass.getName
      conf.set(SparkConfs.CheckpointFileManagerClass, chosen)
      write(creatorFor(dir, conf), new Path(dir, "7.journal"), bytes(10, 7))
      // Hadoop's local file system writes its checksum beside the file; java.nio does not.
      assert(names(dir) === Set("7.journal", ".7.journal.crc"))
    }
  }
}
