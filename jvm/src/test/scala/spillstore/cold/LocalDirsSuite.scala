package spillstore.cold

import java.io.File
import java.nio.file.Files
import java.nio.file.attribute.PosixFilePermissions
import java.util.concurrent.{CyclicBarrier, Executors, TimeUnit}

import scala.collection.mutable.ArrayBuffer
import scala.jdk.CollectionConverters._

import org.apache.commons.io.FileUtils
import org.apache.commons.io.filefilter.{FalseFileFilter, TrueFileFilter}
import org.scalatest.funsuite.AnyFunSuite

/** Cold tiers' local directories within one JVM: racing first spills, bad paths, the layout. */
class LocalDirsSuite extends AnyFunSuite {
  private val LocalDirKey = "spark.sql.streaming.stateStore.spillstore.localDir"

  private def withTempRoot(body: File => Unit): Unit = {
    val root = Files.createTempDirectory("spillstore-localdirs").toFile
    try body(root)
    finally FileUtils.deleteQuietly(root)
  }

  test("16 threads spilling first at once under a parent that does not exist yet all succeed") {
    val Threads = 16
    val Parents = 30
    val pool = Executors.newFixedThreadPool(Threads)
    withTempRoot { root =>
      try {
        for (round <- 0 until Parents) {
          // Nested, so that the losers also race on the intermediate directories.
          val parent = new File(root, s"p$round/a/b")
          val barrier = new CyclicBarrier(Threads)
          val results = (0 until Threads).map { t =>
            pool.submit(() => { barrier.await(); ColdTier.create(parent, s"t$t") })
          }
          val tiers = ArrayBuffer.empty[ColdTier]
          val failures = ArrayBuffer.empty[Throwable]
          results.foreach { f =>
            try tiers += f.get(60, TimeUnit.SECONDS)
            catch { case e: java.util.concurrent.ExecutionException => failures += e.getCause }
          }
          try {
            assert(failures.isEmpty,
              s"round $round: ${failures.size} of $Threads creations " +
                s"failed, first: ${failures.headOption.map(_.toString).getOrElse("")}")
            assert(tiers.map(_.dir).distinct.size == Threads)
            assert(tiers.forall(_.dir.isDirectory), s"round $round: a cold tier has no directory")
          } finally tiers.foreach(_.close())
        }
      } finally {
        pool.shutdownNow()
        pool.awaitTermination(60, TimeUnit.SECONDS)
      }
    }
  }

  test("a parent that cannot be a directory fails naming the directory and the conf key") {
    withTempRoot { root =>
      val file = new File(root, "a-file")
      Files.write(file.toPath, Array[Byte](1))
      for (parent <- Seq(file, new File(file, "cold"), new File(file, "cold/deeper"))) {
        val e = intercept[IllegalStateException](ColdTier.create(parent, "bad"))
        assert(e.getMessage.contains(parent.getPath), e.getMessage)
        assert(e.getMessage.contains(LocalDirKey), e.getMessage)
      }
      assert(file.isFile && root.list().toSeq == Seq("a-file"), "a failed creation left files")
    }
  }

  test("stores of one JVM share one locked per-JVM directory; what is not a dead JVM's stays") {
    withTempRoot { root =>
      val parent = new File(root, "cold")
      // Present before this JVM's first cold tier here: none of it belongs to a dead JVM that
      // can be proven dead (no lock file to take), so the sweep must leave all of it.
      val foreign = Seq("jvm-1-nolockfile", "notes", "spillstore-op0-p0-default-olduuid")
        .map(new File(parent, _))
      foreign.foreach { d =>
        assert(d.mkdirs()); Files.write(new File(d, "f").toPath, Array[Byte](7))
      }
      val a = ColdTier.create(parent, "a")
      val b =
        try ColdTier.create(parent, "b")
        catch { case e: Throwable => a.close(); throw e }
      try {
        val jvmDir = a.dir.getParentFile
        assert(b.dir.getParentFile == jvmDir, s"${a.dir} and ${b.dir} are in different dirs")
        val pid = ProcessHandle.current().pid()
        assert(jvmDir.getParentFile == parent && jvmDir.getName.startsWith(s"jvm-$pid-"),
          s"cold tier ${a.dir} is not in a per-JVM dir under $parent")
        assert(new File(jvmDir, LocalDirs.LockFileName).isFile, s"no lock file in $jvmDir")
        foreign.foreach(d => assert(new File(d, "f").isFile, s"the sweep touched $d"))
      } finally { a.close(); b.close() }
      assert(!a.dir.exists() && !b.dir.exists(), "closing a cold tier keeps deleting its dir")
    }
  }

  test("directories spillstore creates are its user's alone (700), whatever the umask") {
    withTempRoot { root =>
      val local = new File(root, "local")
      // A JVM cannot set its umask: the child runs under 022, which leaves other users r-x.
      val (child, tier) = ChildJvm.start("spillstore.cold.ColdTierHolder",
        Seq(new File(local, "spill").getPath), "cold ", umask = Some("022"))
      try {
        val dirs =
          FileUtils.listFilesAndDirs(local, FalseFileFilter.INSTANCE, TrueFileFilter.INSTANCE)
            .asScala.map(_.toPath).toList
        assert(dirs.contains(new File(tier).toPath), s"the child's cold tier $tier is not in $dirs")
        val open =
          dirs.map(d => d -> PosixFilePermissions.toString(Files.getPosixFilePermissions(d)))
            .filter(_._2 != "rwx------")
        assert(open.isEmpty, s"directories others can read: ${open.mkString(", ")}")
        assert(ChildJvm.exit(child) == 0)
      } finally ChildJvm.stop(child)
    }
  }
}
