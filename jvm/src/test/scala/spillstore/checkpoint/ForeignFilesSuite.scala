package spillstore.checkpoint

import java.io.File
import java.nio.file.Files
import java.util.UUID

import org.apache.hadoop.conf.Configuration
import org.scalatest.funsuite.AnyFunSuite

import org.apache.spark.sql.execution.streaming.state.{
  NoPrefixKeyStateEncoderSpec, StateStoreConf, StateStoreId, StateStoreProvider
}

import spillstore.SpillStoreProviderSuite._
import spillstore.TempDirs
import spillstore.faults.CorruptionRepairSuite.{conf, smallWorkload}

/**
 * Files another state store provider wrote in a store directory: never read as spillstore's,
 * renamed, deleted or counted; loading such a directory is an error naming them, whose
 * provider they are and how to move the query (Spark's `StreamSuite` "recover from a Spark
 * v2.1 checkpoint" restarts the default provider's checkpoint on the session's provider).
 */
class ForeignFilesSuite extends AnyFunSuite {
  private val HdfsProvider = ForeignFiles.HdfsProvider

  /**
   * Versions 1..6 of partition 0 of operator 0 written by Spark's HDFS provider under
   * `<checkpoint>/state` (deltas, and snapshots every two versions); `f` gets the checkpoint
   * and the store directory.
   */
  private def withHdfsCheckpoint(f: (String, String) => Unit): Unit =
    TempDirs.withTempDir("foreign") { checkpoint =>
      val p = StateStoreProvider.create(HdfsProvider)
      val hadoopConf = new Configuration
      hadoopConf.set("sql.streaming.runId", UUID.randomUUID().toString)
      p.init(StateStoreId(s"$checkpoint/state", 0, 0), keySchema, valueSchema,
        NoPrefixKeyStateEncoderSpec(keySchema), useColumnFamilies = false,
        new StateStoreConf(conf(minDeltas = 1, retain = 100)), hadoopConf,
        useMultipleValuesPerKey = false, stateSchemaProvider = None)
      try {
        for (v <- 0 until 6) {
          val s = p.getStore(v)
          s.put(key(v), value(v))
          assert(s.commit() === v + 1)
          p.doMaintenance()
        }
      } finally p.close()
      f(checkpoint, p.stateStoreId.storeCheckpointLocation().toUri.getPath)
    }

  private def names(dir: String): Set[String] = new File(dir).list().toSet

  test("a store directory of Spark's HDFS provider is an error naming its files; nothing changes") {
    withHdfsCheckpoint { (checkpoint, storeDir) =>
      val before = names(storeDir)
      val snapshots = before.filter(_.endsWith(".snapshot"))
      assert((1 to 6).forall(v => before(s"$v.delta")) && snapshots.size >= 2, before)
      withProvider(s"$checkpoint/state", conf(minDeltas = 1, retain = 1)) { (p, _) =>
        for (version <- Seq(6L, 3L)) {
          val e = intercept[IllegalStateException](p.getStore(version))
          (Seq("1.delta", "6.delta", HdfsProvider, s"python -m spillstore migrate $checkpoint") ++
            snapshots).foreach { part =>
            assert(e.getMessage.contains(part), s"'$part' not in: ${e.getMessage}")
          }
          if (version == 6) info(e.getMessage)
        }
        // Maintenance neither snapshots nor cleans up a directory of another provider's files.
        p.doMaintenance()
      }
      assert(names(storeDir) === before)
    }
  }

  test("another provider's snapshot among spillstore's files is never a base, renamed or deleted") {
    withHdfsCheckpoint { (_, hdfsDir) =>
      val hdfsSnapshot = names(hdfsDir).filter(_.endsWith(".snapshot")).max
      withProvider(sqlConf = conf(minDeltas = 3, retain = 100)) { (p, dir) =>
        smallWorkload(p, versions = 10, seed = 21)
        val f = new File(dir, "9.snapshot")
        Files.copy(new File(hdfsDir, hdfsSnapshot).toPath, f.toPath,
          java.nio.file.StandardCopyOption.REPLACE_EXISTING)
        val before = names(dir)
        withProvider(rootOf(dir), conf(minDeltas = 100, retain = 1)) { (fresh, _) =>
          val e = intercept[IllegalStateException](fresh.getStore(10))
          Seq(s"$dir holds", "9.snapshot (written by", HdfsProvider, "python -m spillstore migrate")
            .foreach { part =>
              assert(e.getMessage.contains(part), s"'$part' not in: ${e.getMessage}")
            }
          // Cleanup would keep from 9 and delete everything before it: it must not trust it.
          fresh.doCleanupMaintenance()
        }
        assert(names(dir) === before)
      }
    }
  }

  test("RocksDB's files are named as its: archives, changelogs (checkpoint v2 too), SSTs") {
    TempDirs.withTempDir("foreign") { checkpoint =>
      val storeDir = new File(s"$checkpoint/state/0/0")
      val rocksDb = Seq("1.zip", "2.changelog", s"3_${UUID.randomUUID()}.zip",
        s"3_${UUID.randomUUID()}.changelog")
      assert(new File(storeDir, "SSTs").mkdirs())
      rocksDb.foreach(n => assert(new File(storeDir, n).createNewFile(), n))
      withProvider(s"$checkpoint/state") { (p, _) =>
        val e = intercept[IllegalStateException](p.getStore(3))
        (rocksDb ++ Seq("SSTs", ForeignFiles.RocksDbProvider)).foreach { part =>
          assert(e.getMessage.contains(part), s"'$part' not in: ${e.getMessage}")
        }
      }
      assert(names(storeDir.getPath) === rocksDb.toSet + "SSTs")
    }
  }
}
