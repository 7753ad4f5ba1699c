package spillstore.faults

import java.io.File

import scala.util.Random

import org.apache.spark.sql.internal.SQLConf

import spillstore.SpillStoreProvider
import spillstore.SpillStoreProviderSuite._

/**
 * The process CrashInjectionSuite kills with SIGKILL: it resumes a store from the newest
 * committed version in its checkpoint and commits versions in a loop, while a second thread
 * runs snapshot and cleanup maintenance as Spark's pools would, under a memory budget small
 * enough that most of the state lives in the cold tier. Every batch is a function of
 * (seed, version) alone, so a batch redone after a crash is the batch that was lost, and the
 * reference state of any version can be computed without running this process.
 *
 * Usage: CrashWorker <checkpoint root> <seed> <max version>
 */
object CrashWorker {
  val MinDeltasForSnapshot = 2
  val MinBatchesToRetain = 3

  def conf: SQLConf = {
    val c = new SQLConf
    c.setConf(SQLConf.STATE_STORE_MIN_DELTAS_FOR_SNAPSHOT, MinDeltasForSnapshot)
    c.setConf(SQLConf.MIN_BATCHES_TO_RETAIN, MinBatchesToRetain)
    // A budget below the state (400 keys of ~100 bytes): kills also land mid-spill.
    c.setConfString("spark.sql.streaming.stateStore.spillstore.memoryBudget", "16k")
    c
  }

  /** Changes of the batch that commits `version` (value None = removal). */
  def batch(seed: Long, version: Long): Seq[(Long, Option[Long])] = {
    val rnd = new Random(seed * 1000003L + version)
    Seq.fill(40) {
      val k = rnd.nextInt(400).toLong
      k -> (if (rnd.nextInt(5) == 0) None else Some(rnd.nextLong()))
    }
  }

  /** The state of `version` with no faults. */
  def model(seed: Long, version: Long): Map[Long, Long] =
    (1L to version).foldLeft(Map.empty[Long, Long]) { (m, v) =>
      batch(seed, v).foldLeft(m) {
        case (acc, (k, Some(x))) => acc + (k -> x)
        case (acc, (k, None)) => acc - k
      }
    }

  /** Newest committed version, from the file names alone (files appear atomically). */
  def latestCommitted(storeDir: String): Long = {
    val names = Option(new File(storeDir).list()).toSeq.flatten
    val Name = """(\d+)\.(journal|snapshot)""".r
    names.collect { case Name(v, _) => v.toLong }.maxOption.getOrElse(0L)
  }

  def main(args: Array[String]): Unit = {
    val (root, seed, maxArg) = (args(0), args(1).toLong, args(2))
    withProvider(root, conf) { (p: SpillStoreProvider, dir: String) =>
      var v = latestCommitted(dir)
      @volatile var running = true
      val maintenance = new Thread(() => {
          while (running) {
            p.doSnapshotMaintenance()
            p.doCleanupMaintenance()
          }
        }, "maintenance")
      maintenance.setDaemon(true)
      val store0 = p.getStore(v) // recovery itself can be killed too
      store0.abort()
      println(s"started at $v")
      System.out.flush()
      maintenance.start()
      val max = maxArg.toLong
      while (v < max) {
        val s = p.getStore(v)
        batch(seed, v + 1).foreach {
          case (k, Some(x)) => s.put(key(k), value(x))
          case (k, None) => s.remove(key(k))
        }
        v = s.commit()
        println(s"committed $v")
      }
      running = false
      maintenance.join()
      println(s"done at $v")
    }
  }
}
