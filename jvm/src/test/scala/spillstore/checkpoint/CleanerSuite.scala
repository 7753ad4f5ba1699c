package spillstore.checkpoint

import java.io.File
import java.nio.file.Files

import scala.jdk.CollectionConverters._
import scala.util.Random

import org.apache.commons.io.FileUtils
import org.scalatest.funsuite.AnyFunSuite

import spillstore.checkpoint.CheckpointDirs.withDirs

class CleanerSuite extends AnyFunSuite {
  /** A journal, or a format-2 snapshot (which holds entries, not a manifest). */
  private def write(dir: CheckpointDir, kind: StateFile.Kind, v: Long): Unit =
    dir.write(kind, v,
      if (kind == StateFile.Snapshot) StateFile.FullSnapshotFormat else StateFile.FormatVersion)(
      _.put(Array[Byte](v.toByte), Array[Byte](kind.id)))

  private def storeDir(dir: CheckpointDir): File = new File(dir.path.toUri)

  /** Every file under `root`, with its bytes (sub dirs included). */
  private def contents(root: File): Map[String, Seq[Byte]] =
    if (!root.exists()) Map.empty
    else FileUtils.listFiles(root, null, true).asScala
      .map(f =>
        root.toPath.relativize(f.toPath).toString -> Files.readAllBytes(f.toPath).toSeq).toMap

  /** Whether `v` can be loaded from `listing`: a snapshot at or below it (or none, version 0)
   *  with every journal after it. */
  private def loadable(listing: CheckpointDir.Listing, v: Long): Boolean =
    (listing.snapshots.filter(_ <= v) + 0L).exists(base => listing.missingJournal(base, v).isEmpty)

  /**
   * A store's files as maintenance leaves them: journals from a first one kept by an earlier
   * cleanup, snapshots here and there, sometimes a journal lost; plus files in and beside its
   * directory that are not its versions.
   */
  private def randomStore(dir: CheckpointDir, rnd: Random): Unit = {
    val latest = rnd.nextInt(30).toLong
    val firstJournal = 1L + rnd.nextInt(latest.toInt + 1)
    (firstJournal to latest).filter(_ => rnd.nextInt(25) != 0).foreach(write(dir, StateFile.Journal,
        _))
    (1L to latest).filter(_ => rnd.nextInt(4) == 0).foreach(write(dir, StateFile.Snapshot, _))
    if (firstJournal > 1) write(dir, StateFile.Snapshot, firstJournal - 1)
    val store = storeDir(dir)
    store.mkdirs()
    // Names listing does not take as a version's: a snapshot set aside as corrupt, a write in
    // progress, a sub dir that holds version names; and another store's journals.
    Seq("1.snapshot.corrupt-1700000000000", s".${latest + 1}.journal.6a1f.tmp", "notes.txt",
      "sub/1.journal", "sub/1.snapshot", "../other-store/1.journal",
      "../other-store/2.journal").foreach { n =>
      val f = new File(store, n)
      f.getParentFile.mkdirs()
      Files.write(f.toPath, n.getBytes)
    }
  }

  test("cleanup deletes exactly the files older than the newest snapshot at or below the " +
    "retention horizon, keeps every retained version loadable, and nothing else; a second " +
    "cleanup deletes nothing") {
    var cleaned = 0
    for (seed <- 1 to 60) withDirs("cleaner") { (dir, local) =>
      val rnd = new Random(seed)
      randomStore(dir, rnd)
      val root = storeDir(dir).getParentFile
      val before = dir.list()
      val files = contents(root)
      val retain = 1 + rnd.nextInt(8)
      val latest = before.latestVersion
      val keepFrom = before.latestSnapshotAtOrBelow(latest - retain)
      val expected = if (latest - retain <= 0 || keepFrom == 0) Set.empty[String]
      else (before.journals.filter(_ < keepFrom).map(v => s"ckpt/$v.journal") ++
      before.snapshots.filter(_ < keepFrom).map(v => s"ckpt/$v.snapshot"))
      val clue = s"seed $seed: retain $retain of $before"
      assert(new Cleaner(dir).cleanup(retain) === expected.size, clue)
      assert(contents(root) === files -- expected, clue)
      val after = dir.list()
      for (v <- math.max(1L, latest - retain) to latest) {
        assert(loadable(after, v) === loadable(before, v), s"$clue: version $v")
      }
      assert(new Cleaner(dir).cleanup(retain) === 0, clue)
      if (expected.nonEmpty) cleaned += 1
      assert(!local.exists())
    }
    assert(cleaned > 10, "too few seeds had files to delete")
  }

  test("temp files of writes never published go once their version is below the one kept " +
    "from; newer ones, which a writer may still publish, stay") {
    withDirs("cleaner") { (dir, _) =>
      (1L to 10L).foreach(write(dir, StateFile.Journal, _))
      Seq(5L, 8L).foreach(write(dir, StateFile.Snapshot, _))
      val uuid = "0c8d2f9e-4b1a-4e52-9f1e-6f2d3c4b5a69"
      val names = Seq(s".3.journal.$uuid.tmp", s".7.snapshot.$uuid.tmp", s".9.journal.$uuid.tmp",
        s".11.journal.$uuid.tmp")
      names.foreach(n => Files.write(new File(storeDir(dir), n).toPath, Array[Byte](1)))
      assert(new Cleaner(dir).cleanup(2) === 7 + 1 + 2, "journals 1-7, snapshot 5, two temps")
      assert(names.filter(n => new File(storeDir(dir), n).exists()) ===
        Seq(s".9.journal.$uuid.tmp", s".11.journal.$uuid.tmp"))
    }
  }

  test("a snapshot at the horizon is kept from; one just above it is not") {
    for ((snapshot, keepFrom) <- Seq(7L -> 7L, 8L -> 4L)) withDirs("cleaner") { (dir, _) =>
      (1L to 10L).foreach(write(dir, StateFile.Journal, _))
      Seq(4L, snapshot).foreach(write(dir, StateFile.Snapshot, _))
      assert(new Cleaner(dir).cleanup(3) === (keepFrom - 1) + Seq(4L, snapshot).count(_ < keepFrom),
        s"snapshot $snapshot")
      val left = dir.list()
      assert(left.journals === (keepFrom to 10L).toSet && left.snapshots === Set(4L,
        snapshot).filter(_ >= keepFrom))
    }
  }

  test("nothing goes while the horizon is at or below version 0 or below every snapshot") {
    withDirs("cleaner") { (dir, _) =>
      val cleaner = new Cleaner(dir)
      assert(cleaner.cleanup(1) === 0, "a directory not created yet")
      (1L to 6L).foreach(write(dir, StateFile.Journal, _))
      assert(cleaner.cleanup(1) === 0, "no snapshot")
      write(dir, StateFile.Snapshot, 3)
      assert(Seq(4, 6, 7, Int.MaxValue).map(cleaner.cleanup) === Seq(0, 0, 0, 0),
        "horizon 2 or below")
      assert(dir.list().journals === (1L to 6L).toSet && dir.list().snapshots === Set(3L))
    }
  }

  test(
    "a damaged or foreign snapshot to keep from, or another provider's file, leaves every file alone") {
    val damage: Seq[(String, (CheckpointDir, File) => Unit)] = Seq(
      "an empty snapshot" -> ((_, f) => Files.write(f.toPath, Array.emptyByteArray)),
      "a snapshot truncated after its header" -> { (_, f) =>
        Files.write(f.toPath, Files.readAllBytes(f.toPath).take(30))
      },
      "a snapshot missing its last byte" -> { (_, f) =>
        Files.write(f.toPath, Files.readAllBytes(f.toPath).dropRight(1))
      },
      "a snapshot with a damaged magic" -> { (_, f) =>
        val b = Files.readAllBytes(f.toPath); b(0) = (b(0) ^ 1).toByte; Files.write(f.toPath, b)
      },
      "an HDFS provider's snapshot (lz4 stream)" -> ((_, f) =>
        Files.write(f.toPath, "LZ4Block-rest".getBytes)),
      "an HDFS provider's delta" -> ((dir, _) =>
        Files.write(new File(storeDir(dir), "11.delta").toPath, Array[Byte](0))),
      "RocksDB's changelog" -> ((dir, _) =>
        Files.write(new File(storeDir(dir), "2.changelog").toPath, Array[Byte](0))))
    for ((what, harm) <- damage) withDirs("cleaner") { (dir, _) =>
      (1L to 10L).foreach(write(dir, StateFile.Journal, _))
      Seq(2L, 5L).foreach(write(dir, StateFile.Snapshot, _))
      harm(dir, new File(dir.file(StateFile.Snapshot, 5).toUri))
      val files = contents(storeDir(dir))
      assert(new Cleaner(dir).cleanup(2) === 0, what)
      assert(contents(storeDir(dir)) === files, what)
    }
  }

  test("a damaged snapshot older than the one kept from is deleted like any other") {
    withDirs("cleaner") { (dir, _) =>
      (1L to 10L).foreach(write(dir, StateFile.Journal, _))
      Seq(2L, 5L).foreach(write(dir, StateFile.Snapshot, _))
      Files.write(new File(dir.file(StateFile.Snapshot, 2).toUri).toPath, Array[Byte](1, 2))
      assert(new Cleaner(dir).cleanup(2) === 4 + 1)
      assert(dir.list().journals === (5L to 10L).toSet && dir.list().snapshots === Set(5L))
    }
  }
}
