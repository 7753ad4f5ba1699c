package spillstore.faults

import java.io.File
import java.nio.file.Files

import org.scalatest.funsuite.AnyFunSuite

import spillstore.TempDirs
import spillstore.checkpoint.FaultyFileSystem
import spillstore.SpillStoreProviderSuite._
import spillstore.faults.CorruptionRepairSuite.{conf, smallWorkload}

/**
 * A maintenance run that fails (a damaged file, a storage error) fails nothing else: Spark
 * answers an error thrown to its maintenance thread by unloading providers, which fails the
 * tasks holding them, so the provider keeps it, logs it and counts it, and the next run retries.
 * (tests/test_e2e_maintenance_faults.py runs the same through Spark's own maintenance.)
 */
class MaintenanceFailureSuite extends AnyFunSuite {
  private def flipMiddleByte(f: File): Unit = {
    val b = Files.readAllBytes(f.toPath)
    b(b.length / 2) = (b(b.length / 2) ^ 0x10).toByte
    Files.write(f.toPath, b)
  }

  /** The messages of `e` and its causes. */
  private def messages(e: Throwable): String =
    Iterator.iterate(e)(_.getCause).takeWhile(_ != null).map(_.getMessage).mkString(" | ")

  test("a damaged journal met by snapshot maintenance throws nothing: it is counted, the live " +
    "state goes on exactly, and a reload names the damage, never a missing file") {
    withProvider(sqlConf = conf(minDeltas = 4, retain = 100)) { (p, dir) =>
      val expected = smallWorkload(p, versions = 4, seed = 21, maintain = false)
      flipMiddleByte(new File(dir, "2.journal")) // bit rot the live state never reads again
      val before = p.executorStats.maintenanceFailures.getCount
      p.doSnapshotMaintenance() // snapshot of 4: 1..4 merged, 2 cannot be decoded
      p.doMaintenance() // what 3.5 to 4.2 call
      assert(!new File(dir, "4.snapshot").exists())
      assert(p.executorStats.maintenanceFailures.getCount - before === 2)
      // As an aggregation opens its store on 4.1+: read, then upgraded; the write store reports.
      val s = p.upgradeReadStoreToWriteStore(p.getReadStore(4), 4)
      assert(customMetric(s, "spillstoreMaintenanceFailures") === 2)
      assert(contents(s) === expected(4))
      s.abort()
      withProvider(rootOf(dir)) { (fresh, _) =>
        val e = intercept[Exception](fresh.getStore(4))
        val said = messages(e)
        assert(said.contains("2.journal") && said.contains("Corrupt"), said)
        assert(!said.contains("does not exist"), said)
      }
    }
  }

  test("past a damaged journal, the next commit writes a snapshot of the state it holds, heap " +
    "and cold tier, so that later versions load again; counted as a repair") {
    withProvider(sqlConf = conf(minDeltas = 4, retain = 100)) { (p, dir) =>
      val expected = smallWorkload(p, versions = 4, seed = 24, maintain = false)
      flipMiddleByte(new File(dir, "2.journal"))
      p.doSnapshotMaintenance()
      p.live.trySpill(Long.MaxValue, Long.MaxValue)
      assert(p.live.coldKeyCount > 0, "entries in RocksDB")
      val more = smallWorkload(p, versions = 1, seed = 25, from = 4, start = expected(4),
        maintain = false)
      assert(new File(dir, "5.snapshot").exists(), "the commit of 5 repairs")
      val s = p.getStore(5)
      assert(customMetric(s, "spillstoreSnapshotsRepaired") === 1)
      s.abort()
      val last = smallWorkload(p, versions = 1, seed = 26, from = 5, start = more(1),
        maintain = false)
      assert(!new File(dir, "6.snapshot").exists(), "one repair is enough")
      assert(customMetric(p.getStore(6), "spillstoreSnapshotsRepaired") === 0)
      assert(readAll(dir, 5) === more(1))
      assert(readAll(dir, 6) === last(1))
      p.doSnapshotMaintenance() // its merges start from the repair now
    }
  }

  test("a store whose listing fails keeps its maintenance failure: another store's task commits") {
    TempDirs.withTempDir("maintenance") { root =>
      val faulty = FaultyFileSystem.uriOf(root)
      withProvider(faulty, conf(minDeltas = 1, retain = 2)) { (failing, failingDir) =>
        withProvider(faulty, conf(minDeltas = 1, retain = 2), partition = 1) { (other, _) =>
          val a = smallWorkload(failing, versions = 3, seed = 23, maintain = false)
          val open = other.getStore(0) // another task's store, open while maintenance fails
          open.put(key(1), value(1))
          FaultyFileSystem.failingListsOf(s"0/${failing.stateStoreId.partitionId}") {
            failing.doSnapshotMaintenance()
            failing.doCleanupMaintenance()
            failing.doMaintenance()
          }
          assert(open.commit() === 1)
          assert(readAll(failingDir, 3) === a(3))
          val s = failing.getStore(3)
          // doMaintenance is both runs: four failures.
          assert(customMetric(s, "spillstoreMaintenanceFailures") === 4)
          s.abort()
          failing.doSnapshotMaintenance() // the fault gone, the next run does the work
          assert(new File(failingDir, "3.snapshot").exists())
        }
      }
    }
  }
}
