package spillstore.faults

import java.io.{BufferedReader, File, InputStreamReader}
import java.nio.file.Files
import java.util.concurrent.TimeUnit

import scala.util.Random

import org.scalatest.funsuite.AnyFunSuite

import spillstore.SpillStoreProviderSuite._

/**
 * kill -9 at random points of a process committing versions while snapshot and cleanup
 * maintenance run: after every kill, the newest committed version (as the files say) loads in
 * a fresh provider and equals the fault-free reference, and so does every retained version.
 * Trials come in chains of three on one checkpoint: a restarted worker recovers, goes on,
 * and is killed again (recovery itself can be hit).
 */
class CrashInjectionSuite extends AnyFunSuite {
  // `make test` runs 27 (9 chains); `make test-soak` many more.
  private val Trials = sys.env.getOrElse("SPILLSTORE_CRASH_TRIALS", "27").toInt
  private val ChainLength = 3

  private def startWorker(root: String, seed: Long): Process = {
    val java = new File(System.getProperty("java.home"), "bin/java").getPath
    val cmd = Seq(java, "-Xmx512m", "-XX:TieredStopAtLevel=1",
      s"-Djava.io.tmpdir=${System.getProperty("java.io.tmpdir")}", "-cp",
      System.getProperty("java.class.path")) ++
      sys.props.get("spillstore.test.jvmOpens").toSeq ++
      Seq("--add-opens=java.base/java.nio=ALL-UNNAMED",
        "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED",
        "--add-opens=java.base/java.lang=ALL-UNNAMED",
        "--add-opens=java.base/java.util=ALL-UNNAMED",
        "spillstore.faults.CrashWorker", root, seed.toString, "100000")
    new ProcessBuilder(cmd: _*).redirectErrorStream(true).start()
  }

  test(s"kill -9 during commits, snapshots and cleanup never loses or corrupts a version") {
    val rnd = new Random(42)
    var injected = 0
    var exact = 0
    var versionsChecked = 0
    val maxSeen = collection.mutable.ArrayBuffer.empty[Long]
    var root: String = null
    var seed = 0L
    val roots = collection.mutable.ArrayBuffer.empty[String]
    try for (trial <- 0 until Trials) {
        if (trial % ChainLength == 0) {
          root = Files.createTempDirectory("crash").toString
          roots += root
          seed = rnd.nextInt(1000000).toLong
        }
        val storeDir = new File(root, "0/0").getPath
        val before = CrashWorker.latestCommitted(storeDir)
        val worker = startWorker(root, seed)
        val out = new BufferedReader(new InputStreamReader(worker.getInputStream))
        // Kill during recovery now and then, otherwise some time into the commit loop.
        val started = Iterator.continually(out.readLine()).takeWhile(_ != null)
          .find(l => l.startsWith("started at") || l.contains("Exception"))
        assert(started.exists(_.startsWith("started at")), s"trial $trial: worker said $started")
        // Some kills hit recovery; the rest land after a random number of commits (up to 60:
        // snapshots every 2 and cleanup keeping 3 run all along), a few ms into the next one.
        val commits = if (rnd.nextInt(8) == 0) 0 else rnd.nextInt(60)
        Iterator.continually(out.readLine()).takeWhile(_ != null)
          .filter(_.startsWith("committed")).take(commits).foreach(_ => ())
        Thread.sleep(rnd.nextInt(15).toLong)
        worker.destroyForcibly() // SIGKILL
        assert(worker.waitFor(30, TimeUnit.SECONDS))
        assert(worker.exitValue() == 137, s"trial $trial: the worker exited by itself")
        injected += 1
        val latest = CrashWorker.latestCommitted(storeDir)
        assert(latest >= before,
          s"trial $trial: committed versions went back from $before to $latest")
        maxSeen += latest
        // A fresh provider (a new executor) loads every retained version exactly.
        val from = math.max(1L, latest - CrashWorker.MinBatchesToRetain)
        withProvider(root, CrashWorker.conf) { (p, _) =>
          for (v <- latest to from by -1) {
            val s = p.getReadStore(v)
            assert(contents(s) === CrashWorker.model(seed, v),
              s"trial $trial seed $seed version $v")
            versionsChecked += 1
          }
        }
        exact += 1
      }
    finally roots.foreach(spillstore.TempDirs.delete)
    info(s"$injected SIGKILLs injected, $exact recoveries exact ($versionsChecked versions " +
      s"checked against the reference); newest versions reached: ${maxSeen.mkString(",")}")
  }
}
