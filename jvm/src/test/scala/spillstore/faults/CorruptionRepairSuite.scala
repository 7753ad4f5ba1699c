package spillstore.faults

import java.io.{File, InterruptedIOException, IOException}
import java.nio.channels.ClosedByInterruptException
import java.nio.file.Files

import org.apache.hadoop.conf.Configuration
import org.apache.hadoop.fs.Path
import org.scalatest.funsuite.AnyFunSuite

import org.apache.spark.SparkException
import org.apache.spark.sql.execution.streaming.state.SpillStoreSparkBridge
import org.apache.spark.sql.internal.SQLConf

import spillstore.SpillStoreProvider
import spillstore.checkpoint.{CheckpointDir, FaultyFileSystem, StateFile}
import spillstore.SpillStoreProviderSuite._

/**
 * Damaged checkpoint files: a corrupt snapshot is rebuilt around from an older snapshot (or
 * version 0) and the journals after it, counted and set aside; a corrupt journal, which has no
 * other copy, is always an error naming the file.
 */
class CorruptionRepairSuite extends AnyFunSuite {
  import CorruptionRepairSuite._

  /** Snapshots at 3, 6, 9 (minDeltasForSnapshot=3), no cleanup: every journal 1..10 kept. */
  private def withHistory(f: (String, IndexedSeq[Map[Long, Long]]) => Unit): Unit = {
    withProvider(sqlConf = conf(minDeltas = 3, retain = 100)) { (p, dir) =>
      val expected = smallWorkload(p, versions = 10, seed = 11)
      assert(Seq(3, 6, 9).forall(v => new File(dir, s"$v.snapshot").exists()),
        new File(dir).list().toSeq)
      f(dir, expected)
    }
  }

  /** Every damage of `good`: truncations and single-bit flips at every `stride`-th byte. */
  private def damages(good: Array[Byte], stride: Int): Seq[(String, Array[Byte])] = {
    val n = good.length
    val cuts = (Seq(0, 1, 4, 8, 13, 17, 21, n / 3, n / 2, n - 13, n - 12, n - 8, n - 1) ++
      (24 until n by 97)).distinct.filter(l => l >= 0 && l < n)
    val flips = ((0 until 32) ++ (32 until n - 12 by stride) ++ (n - 12 until n)).distinct
    cuts.map(l => s"truncated to $l of $n bytes" -> good.take(l)) ++
    flips.flatMap(at =>
      Seq(0x01, 0x80).map { bit =>
        val b = good.clone(); b(at) = (b(at) ^ bit).toByte
        s"bit 0x${bit.toHexString} flipped at $at of $n bytes" -> b
      })
  }

  private def clearSetAside(dir: String): Unit =
    new File(dir).listFiles().filter(_.getName.contains(".corrupt-")).foreach(_.delete())

  test("a corrupt newest snapshot is rebuilt from the older snapshot and journals, counted") {
    withHistory { (dir, expected) =>
      val f = new File(dir, "9.snapshot")
      val good = Files.readAllBytes(f.toPath)
      val trials = damages(good, stride = 3)
      var harmless = 0
      var newer = Seq.empty[String]
      for ((damage, bytes) <- trials) {
        Files.write(f.toPath, bytes)
        withProvider(rootOf(dir)) { (fresh, _) =>
          val opened =
            try Right(fresh.getStore(10))
            catch {
              case e: StateFile.UnreadableFormatException => Left(e)
            }
          opened match {
            case Left(e) =>
              // The format field flipped into a newer spillstore's: refused and left in place,
              // as a newer file must be; never read as something else.
              newer :+= damage
              assert(f.exists() && e.getMessage.contains("9.snapshot"), damage)
            case Right(s) =>
              // Always the exact state: rebuilt around the damage, or (for a bit the codec
              // ignores, e.g. LZ4's compression-level bits) read as written, records and CRC32C
              // intact.
              assert(contents(s) === expected(10), damage)
              val repaired = customMetric(s, "spillstoreSnapshotsRepaired")
              s.abort()
              if (repaired == 0) {
                harmless += 1
                assert(f.exists() && readAll(dir, 9) === expected(9), damage)
              } else {
                assert(repaired === 1, damage)
                // Set aside under a name listing ignores, kept as evidence; the next load is
                // clean.
                assert(!f.exists(), damage)
                assert(new File(dir).list().exists(_.startsWith("9.snapshot.corrupt-")), damage)
                val again = fresh.getStore(9)
                assert(contents(again) === expected(9), damage)
                assert(customMetric(again, "spillstoreSnapshotsRepaired") === 0, damage)
                again.abort()
              }
          }
        }
        clearSetAside(dir)
      }
      assert(harmless < trials.size / 20, s"$harmless of ${trials.size} damages went unnoticed")
      // Format 3 -> 2 (bit 0x01 of its last byte) is a manifest in a format that has none:
      // damage, never a format-2 snapshot of entries.
      assert(newer === Nil)
      info(s"${trials.size} damaged copies of 9.snapshot: ${trials.size - harmless} " +
        s"detected and repaired, $harmless changed no record (codec-ignored bits) and read " +
        "exactly")
    }
  }

  test("several corrupt snapshots in a row fall back to version 0 and all journals") {
    withHistory { (dir, expected) =>
      for (v <- Seq(3, 6, 9)) {
        val f = new File(dir, s"$v.snapshot")
        Files.write(f.toPath, Files.readAllBytes(f.toPath).take(30))
      }
      withProvider(rootOf(dir)) { (fresh, _) =>
        val s = fresh.getStore(10)
        assert(contents(s) === expected(10))
        assert(customMetric(s, "spillstoreSnapshotsRepaired") === 3)
        s.abort()
      }
    }
  }

  test("a corrupt snapshot with no older base left is an error naming it, and stays in place") {
    withHistory { (dir, _) =>
      // As cleanup keeping from snapshot 6 would.
      Seq("1.journal", "2.journal", "3.journal", "3.snapshot", "4.journal", "5.journal",
        "6.journal")
        .foreach(n => assert(new File(dir, n).delete(), n))
      val f = new File(dir, "6.snapshot")
      val good = Files.readAllBytes(f.toPath)
      val flipped = good.clone()
      flipped(good.length / 2) = (flipped(good.length / 2) ^ 0x01).toByte
      for ((damage, bytes) <- Seq("truncated by a byte" -> good.take(good.length - 1),
          "a body bit flipped" -> flipped)) {
        Files.write(f.toPath, bytes)
        withProvider(rootOf(dir)) { (fresh, _) =>
          // Twice: setting the only base aside would make the next load fail with "no base".
          for (attempt <- 1 to 2) {
            val e = intercept[SparkException](fresh.getStore(7))
            // Not CANNOT_READ_STREAMING_STATE_FILE, whose message says the file does not exist.
            assert(e.getCondition === "CANNOT_LOAD_STATE_STORE.UNCATEGORIZED",
              s"$damage, attempt $attempt")
            assert(f.exists(), s"$damage, attempt $attempt: the only base was renamed")
            assert(new File(dir).list().forall(!_.contains(".corrupt-")), damage)
            assert(e.getCause.getMessage.contains("6.snapshot"), e.getCause.getMessage)
            assert(e.getCause.getMessage.contains("left in place"), s"$damage: ${e.getCause}")
          }
        }
      }
      Files.write(f.toPath, good) // restored from a copy, the version loads again
      withProvider(rootOf(dir)) { (fresh, _) =>
        val s = fresh.getStore(7)
        assert(customMetric(s, "spillstoreSnapshotsRepaired") === 0)
        s.abort()
      }
    }
  }

  test("an I/O error reading a snapshot is not damage: the load fails, nothing is set aside") {
    withHistory { (dir, expected) =>
      val root = FaultyFileSystem.uriOf(rootOf(dir))
      val f = new File(dir, "9.snapshot")
      val length = f.length()
      // In the header, in the compressed body, in the footer; as HDFS and S3 clients fail when
      // query.stop() interrupts the task reading.
      val faults = Seq[(Long, () => IOException)](
        0L -> (() => new InterruptedIOException("interrupted in the header")),
        40L -> (() => new ClosedByInterruptException),
        length - 6 -> (() => new InterruptedIOException("interrupted in the footer")))
      for ((after, fault) <- faults) {
        val expectedError = fault().getClass
        FaultyFileSystem.failing("9.snapshot", after, fault) {
          withProvider(root) { (fresh, _) =>
            val e = intercept[IOException](fresh.getStore(10))
            assert(e.getClass === expectedError, s"after $after bytes: $e")
          }
        }
        assert(f.exists() && new File(dir).list().forall(!_.contains(".corrupt-")),
          s"after $after bytes: ${new File(dir).list().toSeq}")
        // The fault gone, the next attempt reads the same snapshot: exact, nothing repaired.
        withProvider(root) { (fresh, _) =>
          val s = fresh.getStore(10)
          assert(contents(s) === expected(10))
          assert(customMetric(s, "spillstoreSnapshotsRepaired") === 0)
          s.abort()
        }
      }
    }
  }

  // Format 1 (unsorted journals) was written by development builds only: no release reads it.
  for ((format, writer) <- Seq(StateFile.ReadableFormats.max + 1 -> "newer", 1 -> "older"))
    test(s"a snapshot of format $format ($writer) is an error naming both formats, not damage") {
      withHistory { (dir, _) =>
        val f = new File(dir, "9.snapshot")
        assert(f.delete())
        val cd = new CheckpointDir(new Path(dir), new Configuration,
          SpillStoreSparkBridge.compressionCodec("lz4"))
        cd.write(StateFile.Snapshot, 9, format)(_ => ())
        withProvider(rootOf(dir)) { (fresh, _) =>
          val e = intercept[StateFile.UnreadableFormatException](fresh.getStore(10))
          Seq(f.toString, s"file format $format",
            s"the formats it reads: ${StateFile.ReadableFormats.mkString(", ")}",
            s"$writer spillstore").foreach { part =>
            assert(e.getMessage.contains(part), s"'$part' not in: ${e.getMessage}")
          }
        }
        assert(f.exists() && new File(dir).list().forall(!_.contains(".corrupt-")),
          new File(dir).list().toSeq)
      }
    }

  test("a corrupt journal is never skipped, even with an older base: error naming it") {
    withHistory { (dir, expected) =>
      for (v <- Seq(8, 10)) { // after snapshot 6 (and before 9), and after snapshot 9
        val f = new File(dir, s"$v.journal")
        val good = Files.readAllBytes(f.toPath)
        val trials = damages(good, stride = 1)
        var harmless = 0
        for ((damage, bytes) <- trials) {
          Files.write(f.toPath, bytes)
          withProvider(rootOf(dir)) { (fresh, _) =>
            // Version v needs journal v after snapshot v-2 or v-1; older bases exist too.
            val loaded: Either[Exception, Map[Long, Long]] =
              try Right(contents(fresh.getStore(v)))
              catch {
                case e: SparkException => Left(e)
                case e: StateFile.UnreadableFormatException => Left(e)
              }
            loaded match {
              case Left(e: StateFile.UnreadableFormatException) =>
                // Format 2 -> 3: refused as a newer spillstore's file, named, never skipped.
                assert(damage.startsWith("bit 0x1 flipped at 7 ") &&
                    e.getMessage.contains(s"$v.journal"), s"$damage: $e")
              case Left(e: SparkException) =>
                assert(e.getCondition === "CANNOT_LOAD_STATE_STORE.UNCATEGORIZED", damage)
                assert(e.getCause.getMessage.contains(s"$v.journal"), s"$damage: ${e.getCause}")
              case Left(e) => throw e
              case Right(state) =>
                // Only a bit no record depends on (LZ4's compression-level bits): exact state.
                harmless += 1
                assert(state === expected(v), s"$v.journal $damage was read as valid")
            }
            // The provider stays usable for versions that do not need the journal.
            val ok = fresh.getStore(v - 1)
            assert(contents(ok) === expected(v - 1), damage)
            ok.abort()
          }
        }
        assert(harmless < trials.size / 20, s"$harmless of ${trials.size} damages went unnoticed")
        info(s"${trials.size} damaged copies of $v.journal: ${trials.size - harmless} detected " +
          s"and named, none skipped; $harmless changed no record and read exactly")
        Files.write(f.toPath, good)
        assert(new File(dir).list().forall(!_.contains(".corrupt-")))
      }
      assert(readAll(dir, 10) === expected(10))
    }
  }

  test("snapshot maintenance over a corrupt base snapshot rebuilds from an older base") {
    withProvider(sqlConf = conf(minDeltas = 3, retain = 100)) { (p, dir) =>
      val expected = smallWorkload(p, versions = 10, seed = 12)
      val f = new File(dir, "9.snapshot")
      Files.write(f.toPath, Files.readAllBytes(f.toPath).take(40))
      // Versions 10..12 on the live state (no reload), then maintenance snapshots 12 from 6.
      val more = smallWorkload(p, versions = 2, seed = 13, from = 10, start = expected(10))
      assert(new File(dir, "12.snapshot").exists())
      val s = p.getStore(12)
      assert(customMetric(s, "spillstoreSnapshotsRepaired") === 1)
      s.abort()
      // Nothing but the new snapshot is needed for 12.
      new File(dir).listFiles().filter(_.getName.endsWith(".journal")).foreach(_.delete())
      assert(readAll(dir, 12) === more(2))
    }
  }

  test("cleanup after a repair keeps what the retained versions need") {
    withProvider(sqlConf = conf(minDeltas = 3, retain = 2)) { (p, dir) =>
      val first = smallWorkload(p, versions = 8, seed = 14, maintain = false)
      p.doSnapshotMaintenance() // 8.snapshot
      val f = new File(dir, "8.snapshot")
      assert(f.exists())
      val later = smallWorkload(p, versions = 4, seed = 15, from = 8, start = first(8),
        maintain = false)
      Files.write(f.toPath, Files.readAllBytes(f.toPath).take(50))
      withProvider(rootOf(dir), conf(minDeltas = 100, retain = 2)) { (fresh, _) =>
        val s = fresh.getStore(12)
        assert(contents(s) === later(4))
        s.abort()
        // Had the corrupt 8.snapshot stayed listed, cleanup would keep from it and delete the
        // journals 1..7 that are now the only way to rebuild versions 8..12.
        fresh.doCleanupMaintenance()
      }
      for (v <- 10 to 12) assert(readAll(dir, v) === later(v - 8), s"version $v")
    }
  }
}

object CorruptionRepairSuite {
  def conf(minDeltas: Int, retain: Int): SQLConf = {
    val c = new SQLConf
    c.setConf(SQLConf.STATE_STORE_MIN_DELTAS_FOR_SNAPSHOT, minDeltas)
    c.setConf(SQLConf.MIN_BATCHES_TO_RETAIN, retain)
    c
  }

  /** commitVersions on 60 keys, so that files stay small enough to damage byte by byte. */
  def smallWorkload(p: SpillStoreProvider, versions: Int, seed: Int, from: Int = 0,
      start: Map[Long, Long] = Map.empty, maintain: Boolean = true): IndexedSeq[Map[Long, Long]] =
    commitVersions(p, versions, seed, maintain, keys = 60, ops = 20, from = from, start = start)
}
