package spillstore.faults

import java.io.File
import java.util.concurrent.{CountDownLatch, CyclicBarrier, Executors, TimeUnit}

import scala.concurrent.{Await, ExecutionContext, Future}
import scala.concurrent.duration._

import org.scalatest.funsuite.AnyFunSuite

import org.apache.spark.sql.catalyst.expressions.{GenericInternalRow, UnsafeProjection}

import spillstore.SpillStoreProviderSuite._
import spillstore.TempDirs

/**
 * Zombie and speculative attempts: two executors (providers) committing the same version of
 * the same store at once, and a zombie store writing while a newer attempt takes over.
 */
class ZombieSuite extends AnyFunSuite {

  test("a journal whose commit did not return to this provider is never snapshotted: the " +
    "retried batch's journal of that version is what loads") {
    withProvider(sqlConf = CorruptionRepairSuite.conf(minDeltas = 4, retain = 100)) { (p, dir) =>
      val base = commitVersions(p, versions = 3, seed = 31, keys = 50, ops = 20)
      // Version 4 published by an attempt whose commit never returned here: as a commit whose
      // publish succeeded and whose answer was lost (aborted), or another executor's attempt.
      withProvider(rootOf(dir)) { (other, _) =>
        val lost = other.getStore(3)
        (0L until 50L).foreach(k => lost.put(key(k), value(-1)))
        assert(lost.commit() === 4)
      }
      p.doSnapshotMaintenance() // due at 4, were the lost attempt's journal trusted
      assert(!new File(dir, "4.snapshot").exists(), "snapshotted a version it never committed")
      val retry = p.getStore(3)
      (0L until 50L).foreach(k => retry.put(key(k), value(k)))
      assert(retry.commit() === 4)
      p.doSnapshotMaintenance()
      val expected = base(3) ++ (0L until 50L).map(k => k -> k)
      assert(readAll(dir, 4) === expected)
      new File(dir).listFiles().filter(_.getName.endsWith(".journal")).foreach(_.delete())
      assert(readAll(dir, 4) === expected, "the snapshot of 4 is not the retry's")
    }
  }

  test("two executors committing the same version at once leave one attempt's state, valid") {
    val pool = Executors.newFixedThreadPool(2)
    implicit val ec: ExecutionContext = ExecutionContext.fromExecutor(pool)
    val rounds = 60
    var sameWins, firstWins, secondWins = 0
    try {
      for (round <- 0 until rounds) {
        TempDirs.withTempDir("zombie") { root =>
          val base = withProvider(root) { (p, _) => commitVersions(p, versions = 3, seed = round) }
          val same = round % 3 == 0
          // Attempt a changes keys 0..299 (or, for `same`, exactly what b does).
          def changes(attempt: Int): Seq[(Long, Long)] =
            (0L until 300L).map(k => k -> (if (same) k * 7 + round else k * 1000 + attempt))
          withProvider(root) { (p1, dir) =>
            withProvider(root) { (p2, _) =>
              val barrier = new CyclicBarrier(2)
              val stores = Seq(p1.getStore(3), p2.getStore(3))
              val commits = stores.zipWithIndex.map { case (s, i) =>
                Future {
                  // Own projections: the shared helpers reuse one row and are not thread-safe.
                  val kp = UnsafeProjection.create(keySchema)
                  val vp = UnsafeProjection.create(valueSchema)
                  changes(i).foreach { case (k, x) =>
                    s.put(kp(new GenericInternalRow(Array[Any](k))),
                      vp(new GenericInternalRow(Array[Any](x))))
                  }
                  barrier.await()
                  s.commit()
                }
              }
              commits.foreach(c => assert(Await.result(c, 60.seconds) === 4))
              val loaded = readAll(dir, 4)
              val a = base(3) ++ changes(0)
              val b = base(3) ++ changes(1)
              assert(loaded === a || loaded === b, s"round $round: a mix of both attempts")
              if (same) sameWins += 1 else if (loaded === a) firstWins += 1 else secondWins += 1
              // No stray or half-written file under a name the store reads.
              val names = new File(dir).list().toSeq
              assert(names.filter(_.matches("""\d+\.(journal|snapshot)""")).sorted ===
                  Seq("1.journal", "2.journal", "3.journal", "4.journal"), names)
            }
          }
        }
      }
      info(s"$rounds rounds of two concurrent commits of version 4: every file valid; " +
        s"same contents $sameWins, first attempt's state $firstWins, second's $secondWins")
    } finally pool.shutdownNow()
  }

  test("a zombie writing while a newer attempt takes over never leaks into any version") {
    withProvider() { (p, dir) =>
      var version = 0L
      var expected = Map.empty[Long, Long]
      val rounds = 300
      @volatile var zombieRejected = 0L
      for (round <- 0 until rounds) {
        val zombie = p.getStore(version)
        @volatile var go = true
        val writing = new CountDownLatch(1)
        val kp = UnsafeProjection.create(keySchema)
        val vp = UnsafeProjection.create(valueSchema)
        val t = new Thread(() => {
          try {
            var i = 0L
            while (go) {
              zombie.put(kp(new GenericInternalRow(Array[Any](i % 500))),
                vp(new GenericInternalRow(Array[Any](-1L))))
              writing.countDown()
              i += 1
            }
          } catch { case _: IllegalStateException => zombieRejected += 1 }
        })
        t.start()
        assert(writing.await(10, TimeUnit.SECONDS), s"round $round: the zombie never wrote")
        val winner = p.getStore(version) // replaces the zombie, aborting its batch
        winner.put(key(round % 500), value(round))
        expected += (round % 500).toLong -> round.toLong
        version = winner.commit()
        // The zombie must be stopped by its own next call, not by the test: `go` only ends a
        // zombie that was never stopped, so that the count below can say so.
        t.join(10000)
        go = false
        t.join()
        val live = contents(p.getReadStore(version))
        assert(live === expected, s"round $round: zombie writes in the live state")
      }
      assert(readAll(dir, version) === expected, "zombie writes in the checkpoint")
      // Each zombie was writing when the takeover came: every one must have been stopped.
      assert(zombieRejected === rounds, s"only $zombieRejected of $rounds zombies were stopped")
    }
  }
}
