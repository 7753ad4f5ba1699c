package spillstore.faults

import java.io.File
import java.util.concurrent.atomic.AtomicLong

import scala.collection.concurrent.TrieMap

import org.scalatest.funsuite.AnyFunSuite

import org.apache.spark.SparkException

import spillstore.SpillStoreProviderSuite._

/**
 * Snapshot and cleanup maintenance running in loops on their own threads (as Spark's two
 * maintenance pools do) while the task thread commits, and a reader on another "executor"
 * loads recent versions meanwhile: no file is lost, none is read half-written, and every
 * retained version loads exactly.
 */
class MaintenanceConcurrencySuite extends AnyFunSuite {
  private val PaceEvery = 40

  test("snapshot and cleanup loops concurrent with commits and readers keep every version exact") {
    val retain = 4
    withProvider(sqlConf = CorruptionRepairSuite.conf(minDeltas = 2, retain = retain)) { (p, dir) =>
      val expected = TrieMap[Long, Map[Long, Long]](0L -> Map.empty)
      @volatile var running = true
      @volatile var latest = 0L
      val errors = new java.util.concurrent.ConcurrentLinkedQueue[Throwable]()
      val snapshots, cleanups, reads, vanished = new AtomicLong
      def loop(name: String)(body: => Unit): Thread = {
        val t = new Thread(() => {
            try while (running) body
            catch { case e: Throwable => errors.add(e) }
          }, name)
        t.start(); t
      }
      val threads = Seq(
        loop("snapshot") { p.doSnapshotMaintenance(); snapshots.incrementAndGet() },
        loop("cleanup") { p.doCleanupMaintenance(); cleanups.incrementAndGet() },
        loop("reader") {
          val v = latest
          withProvider(rootOf(dir)) { (fresh, _) =>
            try {
              val got = contents(fresh.getReadStore(v))
              assert(got == expected(v), s"reader: version $v differs")
              reads.incrementAndGet()
            } catch {
              // A version older than retention may lose its files while it loads; never
              // may a file be read as corrupt or half-written.
              case e: SparkException
                  if e.getMessage.contains("does not exist") ||
                    e.getCause.isInstanceOf[java.io.FileNotFoundException] =>
                vanished.incrementAndGet()
            }
          }
        })
      commitVersions(p, versions = 400, seed = 5, keys = 1000, ops = 50,
        onCommit = (v, model) => {
          expected(v) = model
          latest = v
          // Every PaceEvery versions the commits wait for an exact load alongside them: on a
          // busy machine the reader could otherwise fall behind retention for the whole run.
          if (v % PaceEvery == 0) {
            val before = reads.get
            val deadline = System.nanoTime() + 30L * 1000 * 1000 * 1000
            while (reads.get == before && errors.isEmpty && System.nanoTime() < deadline) {
              Thread.sleep(1)
            }
          }
        })
      running = false
      threads.foreach(_.join(60000))
      errors.forEach(e => throw e)
      p.doMaintenance()
      for (v <- 400L - retain to 400L) {
        withProvider(rootOf(dir)) { (fresh, _) =>
          assert(contents(fresh.getReadStore(v)) === expected(v), s"version $v")
        }
      }
      assert(new File(dir).list().count(_.endsWith(".snapshot")) <= retain + 1)
      // The loops really ran alongside the commits, and loads found their version.
      assert(snapshots.get > 0 && cleanups.get > 0, s"$snapshots snapshots, $cleanups cleanups")
      assert(reads.get >= 400 / PaceEvery, s"$reads loads exact, $vanished raced past retention")
    }
  }
}
