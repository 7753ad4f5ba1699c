package spillstore

import java.io.File
import java.nio.file.Files
import java.util.concurrent.{CyclicBarrier, Executors, TimeUnit}
import java.util.concurrent.atomic.AtomicLong

import scala.concurrent.{Await, ExecutionContext, Future}
import scala.concurrent.duration._
import scala.util.Random

import org.apache.hadoop.conf.Configuration
import org.apache.hadoop.fs.Path
import org.scalatest.funsuite.AnyFunSuite

import org.apache.spark.{SparkException, TestTasks}
import org.apache.spark.sql.catalyst.expressions.{GenericInternalRow, UnsafeProjection}
import org.apache.spark.sql.execution.streaming.state.{
  RecordType, SpillStoreSparkBridge, StateStore, StateStoreCheckpointInfo
}
import org.apache.spark.sql.internal.SQLConf

import spillstore.checkpoint.CheckpointDir

/**
 * Checkpoint format v2 at the provider: per-attempt checkpoint ids, loads of exact (version,
 * id) pairs, and maintenance along the lineage Spark confirmed. Every store is opened in a
 * real task context (`TestTasks`), as an executor opens it; states are compared exactly with
 * a model.
 */
class CheckpointIdsSuite extends AnyFunSuite {
  import CheckpointIdsSuite._
  import SpillStoreProviderSuite._

  test("version 0 is empty; each commit reports a fresh id, its base, stable across calls") {
    withProvider(sqlConf = v2Conf()) { (p, dir) =>
      val (i1, m1) = batch(p, 0, None, Map.empty, seed = 1)
      assert(i1.partitionId === 0 && i1.batchVersion === 1 && i1.stateStoreCkptId.isDefined)
      assert(i1.baseStateStoreCkptId === None)
      val (i2, m2) = batch(p, 1, i1.stateStoreCkptId, m1, seed = 2)
      assert(i2.batchVersion === 2 && i2.baseStateStoreCkptId === i1.stateStoreCkptId)
      assert(i2.stateStoreCkptId !== i1.stateStoreCkptId)
      assert(names(dir) === Set(s"1_${i1.stateStoreCkptId.get}.journal",
        s"2_${i2.stateStoreCkptId.get}.journal"))
      assert(read(p, 2, i2.stateStoreCkptId) === m2)
      // Before its commit a v2 store has no id to report: that is a misuse, named.
      TestTasks.run(nextAttempt()) { _ =>
        val s = p.getStore(2, i2.stateStoreCkptId)
        val e = intercept[IllegalStateException](s.getStateStoreCheckpointInfo())
        assert(e.getMessage.contains("updating") && e.getMessage.contains(s.toString))
        s.abort()
      }
    }
  }

  test("speculation: two executors commit the same version under different ids at once; " +
    "each id loads exactly its attempt's state, there and after a restart") {
    TempDirs.withTempDir("ids-speculation") { root =>
      val (chain, models) = withProvider(root, v2Conf()) { (p, _) => commitChain(p, 3, seed = 5) }
      val (base, baseModel) = (chain.last, models.last)
      val pool = Executors.newFixedThreadPool(2)
      implicit val ec: ExecutionContext = ExecutionContext.fromExecutor(pool)
      try {
        withProvider(root, v2Conf()) { (p1, dir) =>
          withProvider(root, v2Conf()) { (p2, _) =>
            val barrier = new CyclicBarrier(2)
            // Each attempt changes the same keys differently, and commits at the same moment.
            def attempt(p: SpillStoreProvider, n: Int) = Future {
              TestTasks.run(nextAttempt()) { _ =>
                // Projections are not thread-safe: each attempt has its own.
                val kp = UnsafeProjection.create(keySchema)
                val vp = UnsafeProjection.create(valueSchema)
                val s = p.getStore(3, base)
                (0L until 200L).foreach(k =>
                  s.put(kp(new GenericInternalRow(Array[Any](k))),
                    vp(new GenericInternalRow(Array[Any](k * 100 + n)))))
                barrier.await(1, TimeUnit.MINUTES)
                assert(s.commit() === 4)
                s.getStateStoreCheckpointInfo()
              }
            }
            val infos = Await.result(Future.sequence(Seq(attempt(p1, 1), attempt(p2, 2))),
              2.minutes)
            val ids = infos.map(_.stateStoreCkptId)
            assert(ids.distinct.size === 2 && ids.forall(_.isDefined))
            assert(infos.forall(i => i.batchVersion == 4 && i.baseStateStoreCkptId == base))
            def expected(n: Int) = baseModel ++ (0L until 200L).map(k => k -> (k * 100 + n))
            // Each provider loads both pairs exactly, whichever it committed itself.
            for (p <- Seq(p1, p2); (id, n) <- ids.zip(Seq(1, 2))) {
              assert(read(p, 4, id) === expected(n), s"$p at (4, $id)")
            }
            // A fresh provider (a restart, another executor) too.
            withProvider(root, v2Conf()) { (fresh, _) =>
              for ((id, n) <- ids.zip(Seq(1, 2))) assert(read(fresh, 4, id) === expected(n))
              assert(read(fresh, 3, base) === baseModel)
            }
            assert(ids.forall(id => new File(dir, s"4_${id.get}.journal").exists()))
          }
        }
      } finally pool.shutdownNow()
    }
  }

  test("a retried batch never overwrites the file of the attempt that committed before it") {
    withProvider(sqlConf = v2Conf()) { (p, dir) =>
      val (chain, models) = commitChain(p, 3, seed = 9)
      // The first attempt commits 4; the batch fails after that (Spark records no id for it).
      val (first, firstModel) = batch(p, 3, chain.last, models.last, seed = 10)
      val firstFile = new File(dir, s"4_${first.stateStoreCkptId.get}.journal")
      val firstBytes = Files.readAllBytes(firstFile.toPath)
      // The retry, here and on another executor, loads (3, id3) again: not the live 4.
      val (retry, retryModel) = batch(p, 3, chain.last, models.last, seed = 11)
      val (other, otherModel) = withProvider(rootOf(dir), v2Conf()) { (q, _) =>
        batch(q, 3, chain.last, models.last, seed = 12)
      }
      assert(Seq(first, retry, other).map(_.stateStoreCkptId).distinct.size === 3)
      assert(Files.readAllBytes(firstFile.toPath).sameElements(firstBytes))
      assert(read(p, 4, first.stateStoreCkptId) === firstModel)
      assert(read(p, 4, retry.stateStoreCkptId) === retryModel)
      assert(read(p, 4, other.stateStoreCkptId) === otherModel)
    }
  }

  test("snapshots and cleanup follow the confirmed lineage: losing attempts' files go, and " +
    "a losing attempt's snapshot never decides what the confirmed lineage keeps") {
    // No snapshot by maintenance's own schedule: only the ones forced on commit.
    val conf = v2Conf(minDeltas = 1000, retain = 3)
    withProvider(sqlConf = conf) { (p, dir) =>
      // The losing attempt at version 5 forces a snapshot that is newer than the confirmed
      // lineage's (at 2) and below the horizon (9 - 3).
      val (ids, models, losers) =
        raceChain(p, dir, conf, 9, seed = 0, loserSnapshotAt = 5, snapshotAt = 2)
      assert(new File(dir, s"5_${losers(5L)}.snapshot").exists(), "setup: the loser's snapshot")
      assert(new File(dir, s"2_${ids(2L).get}.snapshot").exists(), "setup: the lineage's")
      // Spark passes (9, id9) for the next batch: that confirms the whole lineage to 9.
      assert(read(p, 9, ids(9L)) === models(9L))
      p.doMaintenance()
      val left = names(dir)
      // Every retained version of the confirmed lineage loads exactly in a fresh provider.
      withProvider(rootOf(dir), conf) { (fresh, _) =>
        for (v <- 6L to 9L) assert(read(fresh, v, ids(v)) === models(v), s"version $v")
      }
      assert(left.contains(s"2_${ids(2L).get}.snapshot"), s"the lineage's base went: $left")
      val losing = left.filter(n => losers.values.exists(l => n.contains(l)))
      assert(losing.isEmpty, s"losing attempts' files left: $losing")
      // The runs left are the ones the confirmed lineage's snapshots list (the loser's went).
      val cd = checkpointDir(dir)
      val listed = left.filter(_.endsWith(".snapshot")).flatMap { n =>
        val (v, i) = n.stripSuffix(".snapshot").span(_ != '_')
        cd.readManifest(v.toLong, Some(i.drop(1))).names
      }
      assert(left.filter(_.endsWith(".run")).subsetOf(listed), s"unlisted runs: $left")
    }
  }

  test("snapshot maintenance snapshots only confirmed pairs; a load needs no journal older " +
    "than the newest snapshot on its lineage") {
    val conf = v2Conf(minDeltas = 2, retain = 100)
    withProvider(sqlConf = conf) { (p, dir) =>
      val (chain, models) = commitChain(p, 6, seed = 21, maintain = true)
      // Committed but not yet passed back by Spark: not snapshotted.
      val (unconfirmed, _) = batch(p, 6, chain.last, models.last, seed = 22)
      p.doMaintenance()
      assert(!names(dir).exists(_.startsWith(s"7_${unconfirmed.stateStoreCkptId.get}.snapshot")))
      val snapshots = names(dir).filter(_.endsWith(".snapshot"))
      assert(snapshots.nonEmpty && snapshots.forall(n => chain.flatten.exists(n.contains)),
        snapshots)
      // Loading from the newest snapshot on the lineage needs no journal it does not list.
      val newest = (6 to 1 by -1).find(v =>
        new File(dir, s"${v}_${chain(v).get}.snapshot").exists()).get
      val listed = checkpointDir(dir).readManifest(newest, chain(newest)).names
      val older = names(dir).filter(n =>
        n.endsWith(".journal") &&
          n.split("_")(0).toLong <= newest && !listed(n))
      older.foreach(n => assert(new File(dir, n).delete()))
      withProvider(rootOf(dir), conf) { (fresh, _) =>
        assert(read(fresh, 6, chain.last) === models.last)
      }
    }
  }

  test("a restart loads exactly the (version, id) asked for, from a snapshot on its lineage") {
    val conf = v2Conf(minDeltas = 3, retain = 100)
    TempDirs.withTempDir("ids-restart") { root =>
      val (chain, models) =
        withProvider(root, conf) { (p, _) => commitChain(p, 10, seed = 31, maintain = true) }
      for (v <- Seq(10, 7, 4, 1, 0)) withProvider(root, conf) { (fresh, _) =>
        assert(read(fresh, v, chain(v)) === models(v), s"version $v")
      }
      // An id no attempt committed: Spark's missing-file error naming it.
      withProvider(root, conf) { (fresh, _) =>
        val e = intercept[SparkException](read(fresh, 5, Some(java.util.UUID.randomUUID.toString)))
        assert(e.getCondition === "CANNOT_LOAD_STATE_STORE.CANNOT_READ_STREAMING_STATE_FILE")
      }
    }
  }

  test("switching an existing v1 checkpoint to v2: (v, None) loads v1 names, then ids") {
    TempDirs.withTempDir("ids-switch") { root =>
      val v1 = new SQLConf
      v1.setConf(SQLConf.STATE_STORE_MIN_DELTAS_FOR_SNAPSHOT, 2)
      val v1Models = withProvider(root, v1) { (p, _) =>
        commitVersions(p, versions = 5, seed = 41, maintain = true)
      }
      val conf = v2Conf(minDeltas = 2, retain = 3)
      withProvider(root, conf) { (p, dir) =>
        assert(read(p, 5, None) === v1Models(5))
        val (first, m6) = batch(p, 5, None, v1Models(5), seed = 42)
        assert(first.batchVersion === 6 && first.baseStateStoreCkptId === None)
        val (chain, models) = commitChain(p, 6, seed = 43, from = 6, start = m6,
          startId = first.stateStoreCkptId, maintain = true)
        assert(read(p, 12, chain.last) === models.last)
        withProvider(root, conf) { (fresh, _) =>
          // The versions cleanup retains (3 below the newest confirmed, 12).
          for (i <- 3 to 6) assert(read(fresh, 6 + i, chain(i)) === models(i), s"version ${6 + i}")
        }
        assert((1 to 5).exists(v => !names(dir).contains(s"$v.journal")),
          s"cleanup kept every v1 file: ${names(dir)}")
      }
    }
  }

  test("a write store iterated after its commit (complete mode on 4.0) reads its own " +
    "attempt's version, and confirms nothing: a losing attempt never decides what cleanup keeps") {
    val conf = v2Conf(minDeltas = 1, retain = 1)
    withProvider(sqlConf = conf) { (p, dir) =>
      val (chain, models) = commitChain(p, 3, seed = 51, maintain = true)
      // Attempt a commits 4 here and iterates its store after the commit, as 4.0 does.
      val (a, modelA) = TestTasks.run(nextAttempt()) { _ =>
        val s = p.getStore(3, chain.last)
        val next = change(s, models.last, new Random(52))
        s.commit()
        (s.getStateStoreCheckpointInfo(), contents(s) -> next)
      } match { case (info, (seen, next)) => assert(seen === next); (info, next) }
      // Attempt b, on another executor, is the one Spark records; it passes (4, b) on.
      val (b, modelB) = withProvider(rootOf(dir), conf) { (q, _) =>
        batch(q, 3, chain.last, models.last, seed = 53)
      }
      assert(read(p, 4, b.stateStoreCkptId) === modelB)
      p.doMaintenance()
      withProvider(rootOf(dir), conf) { (fresh, _) =>
        assert(read(fresh, 4, b.stateStoreCkptId) === modelB)
      }
      assert(modelA !== modelB, "setup: the attempts differ")
      assert(!names(dir).contains(s"4_${a.stateStoreCkptId.get}.snapshot"),
        s"the losing attempt was snapshotted: ${names(dir)}")
    }
  }

  test("the state data source with ids (4.1+): snapshotStartBatchId and the change feed read " +
    "exactly the lineage Spark recorded, never a losing attempt's files of the same versions") {
    val conf = v2Conf(minDeltas = 1000, retain = 100)
    withProvider(sqlConf = conf) { (p, dir) =>
      val (ids, models, _) =
        raceChain(p, dir, conf, 8, seed = 60, loserSnapshotAt = 3, snapshotAt = 3)
      assert(names(dir).count(_.startsWith("3_")) === 4, s"setup: ${names(dir)}")
      withProvider(rootOf(dir), conf) { (reader, _) =>
        for (end <- 3L to 8L) {
          val s = reader.replayReadStateFromSnapshot(3, end, ids(3L), ids(end))
          assert(contents(s) === models(end), s"from 3 to $end")
        }
        assert(contents(reader.replayReadStateFromSnapshot(0, 8, None, ids(8L))) === models(8L))
        for ((start, end) <- Seq((1L, 8L), (4L, 6L), (8L, 8L))) {
          val feed = reader.getStateStoreChangeDataReader(start, end, None, ids(end))
          val got =
            try feed.map { case (kind, k, v, batchId) =>
                (batchId + 1, k.getLong(0),
                  if (kind == RecordType.DELETE_RECORD) None else Some(v.getLong(0)))
              }.toSet
            finally feed.closeIfNeeded()
          val expected = (start to end).flatMap { v =>
            val (before, after) = (models(v - 1), models(v))
            (before.keySet ++ after.keySet).filter(k => before.get(k) != after.get(k))
              .map(k => (v, k, after.get(k)))
          }.toSet
          assert(got === expected, s"change feed $start to $end")
        }
        // The snapshot of a run the end's lineage does not pass through: named, not read.
        val loser = names(dir).collectFirst {
          case n if n.startsWith("3_") && n.endsWith(".snapshot") && !n.contains(ids(3L).get) =>
            n.stripPrefix("3_").stripSuffix(".snapshot")
        }.get
        val e = intercept[IllegalArgumentException](
          reader.replayReadStateFromSnapshot(3, 8, Some(loser), ids(8L)))
        assert(e.getMessage.contains(loser) && e.getMessage.contains("not on the lineage"))
      }
    }
  }

  test("a reader whose conf says v1 follows the ids it is given (Spark 4.3's state data " +
    "source: the format is in the commit log, not in the offset log its conf comes from)") {
    val conf = v2Conf(minDeltas = 2, retain = 100)
    TempDirs.withTempDir("ids-reader") { root =>
      val (chain, models) =
        withProvider(root, conf) { (p, _) => commitChain(p, 6, seed = 71, maintain = true) }
      withProvider(root) { (reader, _) => assert(read(reader, 6, chain(6)) === models(6)) }
      withProvider(root) { (reader, dir) =>
        val snapshot = (5 to 1 by -1).find(v =>
          new File(dir, s"${v}_${chain(v).get}.snapshot").exists()).get
        val s = reader.replayReadStateFromSnapshot(snapshot, 6, chain(snapshot), chain(6))
        assert(contents(s) === models(6))
      }
      withProvider(root) { (reader, _) =>
        val feed = reader.getStateStoreChangeDataReader(6, 6, None, chain(6))
        try assert(feed.map(_._2.getLong(0)).toSet === models(6).keySet.filter(k =>
            models(5).get(k) != models(6).get(k)) ++ models(5).keySet.diff(models(6).keySet))
        finally feed.closeIfNeeded()
      }
      // A write would commit v1 names onto an id's lineage: still refused.
      withProvider(root) { (writer, _) =>
        val e = intercept[UnsupportedOperationException](
          TestTasks.run(nextAttempt())(_ => writer.getStore(6, chain(6))))
        assert(e.getMessage.contains("run it with 2"))
      }
    }
  }

  test("with checkpoint format v1, an id is refused and the info carries none, as before") {
    withProvider() { (p, _) =>
      TestTasks.run(nextAttempt()) { _ =>
        val s = p.getStore(0)
        s.put(key(1), value(1))
        s.commit()
        assert(s.getStateStoreCheckpointInfo() === StateStoreCheckpointInfo(0, 1, None, None))
      }
      val e = intercept[UnsupportedOperationException](
        TestTasks.run(nextAttempt())(_ => p.getStore(1, Some(java.util.UUID.randomUUID.toString))))
      assert(e.getMessage.contains("checkpointFormatVersion"))
    }
  }
}

object CheckpointIdsSuite {
  import SpillStoreProviderSuite._

  private val attempts = new AtomicLong(1000)
  def nextAttempt(): Long = attempts.incrementAndGet()

  def v2Conf(minDeltas: Int = 10, retain: Int = 100): SQLConf = {
    val c = new SQLConf
    c.setConfString("spark.sql.streaming.stateStore.checkpointFormatVersion", "2")
    c.setConf(SQLConf.STATE_STORE_MIN_DELTAS_FOR_SNAPSHOT, minDeltas)
    c.setConf(SQLConf.MIN_BATCHES_TO_RETAIN, retain)
    c
  }

  def names(dir: String): Set[String] = new File(dir).list().toSet

  def checkpointDir(dir: String): CheckpointDir =
    new CheckpointDir(new Path(dir), new Configuration,
      SpillStoreSparkBridge.compressionCodec("lz4"))

  /** (version, id)'s state, read in a task of its own. */
  def read(p: SpillStoreProvider, version: Long, id: Option[String]): Map[Long, Long] =
    TestTasks.run(nextAttempt())(_ => contents(p.getReadStore(version, id)))

  /**
   * One batch as a task attempt of its own: loads (`version`, `id`), applies random puts and
   * removes to the store and to `model` (its state), commits; returns Spark's info, checked
   * stable across calls, and the new model.
   */
  def batch(p: SpillStoreProvider, version: Long, id: Option[String], model: Map[Long, Long],
      seed: Int, force: Boolean = false): (StateStoreCheckpointInfo, Map[Long, Long]) =
    TestTasks.run(nextAttempt()) { _ =>
      val s = p.getStore(version, id, forceSnapshotOnCommit = force)
      val next = change(s, model, new Random(seed))
      assert(s.commit() == version + 1)
      val info = s.getStateStoreCheckpointInfo()
      assert(s.getStateStoreCheckpointInfo() == info, "checkpoint info changed between calls")
      (info, next)
    }

  /**
   * `versions` batches on `p`, each first attempted by a losing attempt on another provider of
   * `dir` (another executor) from the same base: Spark records the winners, `p`'s. The losing
   * attempt of `loserSnapshotAt` and `p`'s of `snapshotAt` force snapshots. Returns the
   * winners' ids and models by version (0: none, empty) and the losers' ids by version.
   */
  def raceChain(p: SpillStoreProvider, dir: String, conf: SQLConf, versions: Int, seed: Int,
      loserSnapshotAt: Long, snapshotAt: Long)
      : (Map[Long, Option[String]], Map[Long, Map[Long, Long]], Map[Long, String]) = {
    var ids = Map(0L -> Option.empty[String])
    var models = Map(0L -> Map.empty[Long, Long])
    var losers = Map.empty[Long, String]
    for (v <- 0L until versions.toLong) {
      val (lost, _) = withProvider(rootOf(dir), conf) { (q, _) =>
        batch(q, v, ids(v), models(v), seed = seed + 100 + v.toInt,
          force = v + 1 == loserSnapshotAt)
      }
      losers += (v + 1) -> lost.stateStoreCkptId.get
      val (won, next) = batch(p, v, ids(v), models(v), seed = seed + v.toInt,
        force = v + 1 == snapshotAt)
      ids += (v + 1) -> won.stateStoreCkptId
      models += (v + 1) -> next
    }
    (ids, models, losers)
  }

  /**
   * Commits `versions` batches from (`from`, `startId`), each loading the id the one before
   * committed (as Spark passes it back); returns the id and model of every version from
   * `from` on.
   */
  def commitChain(p: SpillStoreProvider, versions: Int, seed: Int, maintain: Boolean = false,
      from: Long = 0, start: Map[Long, Long] = Map.empty, startId: Option[String] = None)
      : (IndexedSeq[Option[String]], IndexedSeq[Map[Long, Long]]) = {
    var id = startId
    var model = start
    val ids = IndexedSeq.newBuilder[Option[String]] += id
    val models = IndexedSeq.newBuilder[Map[Long, Long]] += model
    for (v <- from until from + versions) {
      val (info, next) = batch(p, v, id, model, seed * 1000 + v.toInt)
      id = info.stateStoreCkptId
      model = next
      ids += id
      models += model
      if (maintain) {
        // Spark confirms a pair by passing it in; maintenance then trusts it.
        read(p, v + 1, id)
        p.doMaintenance()
      }
    }
    (ids.result(), models.result())
  }

  def change(s: StateStore, model: Map[Long, Long], rnd: Random): Map[Long, Long] = {
    var m = model
    for (_ <- 0 until 100) {
      val k = rnd.nextInt(150).toLong
      if (rnd.nextInt(4) == 0) { s.remove(key(k)); m -= k }
      else { val x = rnd.nextLong(); s.put(key(k), value(x)); m += k -> x }
    }
    m
  }
}
