package spillstore.cold

import java.io.File
import java.nio.file.Files
import java.util.concurrent.TimeUnit

import scala.collection.mutable.ArrayBuffer

import org.apache.commons.io.FileUtils
import org.apache.commons.io.filefilter.{FalseFileFilter, TrueFileFilter}
import org.scalatest.funsuite.AnyFunSuite

/**
 * Cold tiers left by other JVMs under a shared parent: a killed JVM's are reclaimed by the next
 * JVM's first cold tier there (or, in Spark's per-JVM `spark-*` roots, in a sibling root); a live
 * JVM's are never touched; a normal exit removes its own.
 */
class LocalDirsSweepSuite extends AnyFunSuite {

  /** A ColdTierHolder child JVM with a cold tier under `parent`, and that tier's directory. */
  private def startHolder(parent: File): (Process, File) = {
    val (child, dir) =
      ChildJvm.start("spillstore.cold.ColdTierHolder", Seq(parent.getPath), "cold ")
    (child, new File(dir))
  }

  private def listing(dir: File): Set[String] =
    FileUtils.listFiles(dir, null, true).toArray.map(_.toString).toSet

  /**
   * Runs `body` with a child JVM holding a cold tier under a shared parent (and that tier's
   * directory); `body` returns this JVM's own cold tier there, if it opened one. Then checks
   * that only this JVM's directory is left under the parent, and cleans everything up.
   */
  private def withHolder(body: (File, Process, File) => ColdTier): Unit = {
    val root = Files.createTempDirectory("spillstore-sweep").toFile
    var child: Process = null
    var mine: ColdTier = null
    try {
      val parent = new File(root, "shared")
      val (c, childDir) = startHolder(parent)
      child = c
      mine = body(parent, child, childDir)
      assert(parent.list().toSet == Set(mine.dir.getParentFile.getName),
        s"left under $parent: ${parent.list().mkString(", ")}")
    } finally {
      ChildJvm.stop(child)
      if (mine != null) mine.close()
      FileUtils.deleteQuietly(root)
    }
  }

  test("a SIGKILLed JVM's cold tier is deleted at the next JVM's first cold tier there") {
    withHolder { (parent, child, childDir) =>
      assert(childDir.isDirectory && listing(childDir).nonEmpty)
      child.destroyForcibly() // SIGKILL: no shutdown hook runs
      assert(child.waitFor(30, TimeUnit.SECONDS) && child.exitValue() == 137)
      assert(childDir.isDirectory, "SIGKILL left nothing to reclaim")
      val mine = ColdTier.create(parent, "next")
      assert(!childDir.exists(), s"the killed JVM's cold tier $childDir is still there")
      mine
    }
  }

  test("a live JVM's cold tier is never touched, and its normal exit deletes it") {
    withHolder { (parent, child, childDir) =>
      val before = listing(childDir)
      val mine = ColdTier.create(parent, "next") // this JVM's first cold tier here: it sweeps
      assert(child.isAlive)
      assert(listing(childDir) == before, s"the live JVM's cold tier $childDir was changed")
      assert(ChildJvm.exit(child) == 0)
      assert(!childDir.exists(), s"a normally exiting JVM left its unclosed cold tier $childDir")
      mine
    }
  }

  test("a SIGKILLed executor's cold tier in its own spark-* root is deleted at the next " +
    "executor's first cold tier in a sibling root; a live one's is not touched") {
    // <app dir>/spark-<uuid>/spillstore: each executor's default parent on a standalone worker
    val root = Files.createTempDirectory("spillstore-sweep").toFile
    val children = ArrayBuffer.empty[Process]
    var mine: ColdTier = null
    try {
      val (dead, deadDir) = startHolder(new File(root, "spark-dead/spillstore"))
      children += dead
      val (live, liveDir) = startHolder(new File(root, "spark-live/spillstore"))
      children += live
      val (other, otherDir) = startHolder(new File(root, "other/spillstore"))
      children += other
      val liveBefore = listing(liveDir)
      dead.destroyForcibly()
      other.destroyForcibly()
      assert(dead.waitFor(30, TimeUnit.SECONDS) && dead.exitValue() == 137)
      assert(other.waitFor(30, TimeUnit.SECONDS) && other.exitValue() == 137)
      mine = ColdTier.create(new File(root, "spark-next/spillstore"), "next")
      assert(!deadDir.getParentFile.exists(),
        s"the killed executor's dir ${deadDir.getParentFile} is still there")
      assert(live.isAlive && listing(liveDir) == liveBefore, s"$liveDir was changed")
      assert(otherDir.isDirectory, s"$otherDir is not in a spark-* root: not ours to sweep")
    } finally {
      children.foreach(ChildJvm.stop)
      if (mine != null) mine.close()
      FileUtils.deleteQuietly(root)
    }
  }

  test("a SIGKILLed JVM's snapshot merge runs are deleted at the next JVM's first use of the dir") {
    val root = Files.createTempDirectory("spillstore-sweep").toFile
    var child: Process = null
    var mine: ColdTier = null
    try {
      val parent = new File(root, "shared")
      val (c, _) = ChildJvm.start("spillstore.cold.SnapshotRunsHolder",
        Seq(parent.getPath, new File(root, "checkpoint").getPath), "merging")
      // Its merge blocks opening journal 3, a named pipe: its runs stay until it is killed.
      child = c
      def runDirs: Seq[File] = FileUtils.listFilesAndDirs(parent, FalseFileFilter.INSTANCE,
        TrueFileFilter.INSTANCE).toArray(Array.empty[File]).toSeq
        .filter(_.getName.startsWith("spillstore-snapshot-runs-"))
      val deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30)
      while (runDirs.forall(d =>
          Option(d.list()).forall(_.isEmpty)) && System.nanoTime() < deadline) {
        Thread.sleep(10)
      }
      val runs = runDirs
      assert(runs.size == 1 && runs.head.list().nonEmpty, s"the child's runs: $runs")
      child.destroyForcibly() // SIGKILL: no shutdown hook runs
      assert(child.waitFor(30, TimeUnit.SECONDS) && child.exitValue() == 137)
      mine = ColdTier.create(parent, "next")
      assert(!runs.head.exists(), s"the killed JVM's snapshot runs ${runs.head} are still there")
      assert(parent.list().toSet == Set(mine.dir.getParentFile.getName),
        s"left under $parent: ${parent.list().mkString(", ")}")
    } finally {
      ChildJvm.stop(child)
      if (mine != null) mine.close()
      Files.deleteIfExists(new File(root,
          "checkpoint/3.journal").toPath) // deleting opens it: blocks
      FileUtils.deleteQuietly(root)
    }
  }
}
