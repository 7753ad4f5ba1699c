package spillstore.cold

import java.io.{File, IOException}
import java.nio.channels.{FileChannel, FileLock, OverlappingFileLockException}
import java.nio.file.{
  FileSystems, FileVisitResult, Files, NoSuchFileException, Path, SimpleFileVisitor,
  StandardOpenOption
}
import java.nio.file.attribute.{BasicFileAttributes, FileAttribute, PosixFilePermissions}
import java.util.UUID

import scala.collection.mutable
import scala.util.control.NonFatal

import org.apache.commons.io.FileUtils

import org.apache.spark.internal.Logging

/**
 * One directory per JVM under each local-dir parent, so that cold tiers a JVM never closed and
 * snapshot merges it never finished (SIGKILL, OOM kill, lost executor, providers never
 * unloaded) do not stay on disk forever:
 *
 * {{{
 *   <parent>/jvm-<pid>-<random>/jvm.lock                          locked by its JVM while it lives
 *   <parent>/jvm-<pid>-<random>/spillstore-<store>-<uuid>/        one cold tier (RocksDB)
 *   <parent>/jvm-<pid>-<random>/spillstore-snapshot-runs-<n>/     one snapshot merge's sorted runs
 * }}}
 *
 * State is user data: the directories created here are their user's alone (700) whatever the
 * umask, so what RocksDB and the merges write inside them is too.
 *
 * The lock is an OS lock (fcntl on Linux): the kernel drops it when the process dies, however it
 * dies, so "lock free" proves the owner is gone.
 *
 * | state                       | who creates / changes it                  | thread             |
 * |-----------------------------|-------------------------------------------|--------------------|
 * | `owned` (parent -> our dir) | [[jvmDirUnder]]; the shutdown hook        | any, under `owned` |
 * | our dir and its lock        | [[jvmDirUnder]]: created, locked, checked | any, under `owned` |
 * | dead JVMs' sibling dirs     | [[jvmDirUnder]] sweeps once per parent    | any, under `owned` |
 * | (and under sibling roots)   | (and the same parent in sibling `spark-*`)|                    |
 * | our dirs at normal exit     | the shutdown hook deletes them            | hook, under `owned`|
 * | sizes for metrics           | [[bytesOnDisk]] reads (a copy of `owned`) | any                |
 * |                             | (registered with `ExecutorStats` at init) |                    |
 *
 * Creation is rare (once per parent per JVM), so one monitor serializes all of it: task threads
 * spilling for the first time at once wait for the first one, then share its directory.
 *
 * Left alone by the sweep: anything not named `jvm-*`, and a `jvm-*` dir without a lock file
 * (its JVM may be between creating it and locking). So old-layout `spillstore-*` dirs directly
 * under the parent, from versions before this layout, are never deleted here: nothing proves
 * their JVM is gone without opening RocksDB's own lock file, which is not ours to take.
 */
object LocalDirs extends Logging {
  val LockFileName = "jvm.lock"
  private val Prefix = "jvm-"
  private val SparkRootPrefix = "spark-"

  /** The hint every local-dir error ends with. */
  val ConfHint: String = "check spark.local.dir / SPARK_LOCAL_DIRS or " +
    "spark.sql.streaming.stateStore.spillstore.localDir"

  /** Owner-only permissions where the file system has POSIX ones (not on Windows). */
  private val OwnerOnly: Seq[FileAttribute[_]] =
    if (!FileSystems.getDefault.supportedFileAttributeViews.contains("posix")) Nil
    else Seq(PosixFilePermissions.asFileAttribute(PosixFilePermissions.fromString("rwx------")))

  /** A per-JVM directory this JVM holds the lock of, until exit. */
  private final class Owned(val dir: File, channel: FileChannel, lock: FileLock) {
    def release(): Unit = {
      FileUtils.deleteQuietly(dir) // while still locked: no sweep can race the delete
      try lock.release()
      catch { case NonFatal(_) => }
      try channel.close()
      catch { case NonFatal(_) => }
    }
  }

  /** Owner: this object's callers, only while holding `owned`'s monitor. Keys: canonical paths. */
  private val owned = mutable.Map.empty[File, Owned]

  private lazy val shutdownHook: Unit = Runtime.getRuntime.addShutdownHook(
    new Thread(() =>
        owned.synchronized {
          owned.values.foreach(_.release())
          owned.clear()
        }, "spillstore-local-dirs-cleanup"))

  /**
   * This JVM's directory under `parent`, created (with `parent`) and locked on first use; that
   * first use also deletes the dirs of JVMs that are gone. Safe from any number of threads.
   */
  def jvmDirUnder(parent: File): File = {
    val key = ensureDirectory(parent).getCanonicalFile
    owned.synchronized {
      owned.get(key) match {
        case Some(o) if o.dir.isDirectory => o.dir
        case stale =>
          stale.foreach(_.release()) // deleted under us (e.g. by an operator): start over
          shutdownHook
          val o = claim(key)
          owned(key) = o
          (key +: siblingParents(key)).foreach(sweep)
          o.dir
      }
    }
  }

  /**
   * Bytes of the files under this JVM's directories: its cold tiers on local disk. Walked
   * outside the monitor; RocksDB deletes files while it compacts, so files that vanish during
   * the walk count as 0.
   */
  def bytesOnDisk(): Long = {
    val dirs = owned.synchronized(owned.values.map(_.dir.toPath).toList)
    var total = 0L
    val sum = new SimpleFileVisitor[Path] {
      override def visitFile(file: Path, attrs: BasicFileAttributes): FileVisitResult = {
        total += attrs.size()
        FileVisitResult.CONTINUE
      }
      override def visitFileFailed(file: Path, e: IOException): FileVisitResult =
        FileVisitResult.CONTINUE
    }
    dirs.foreach(d =>
      try Files.walkFileTree(d, sum)
      catch { case _: IOException => })
    total
  }

  /** Creates the directory `name` under `parent` (this JVM's dir), owner-only. */
  def createOwnerOnly(parent: File, name: String): File = {
    val dir = new File(parent, name)
    try Files.createDirectory(dir.toPath, OwnerOnly: _*)
    catch {
      case e: IOException => throw new IllegalStateException(
          s"spillstore cannot create its local directory $dir ($e); $ConfHint", e)
    }
    dir
  }

  /**
   * Creates `dir` and any missing parents, owner-only. "Already exists" is success: threads
   * (and JVMs) spilling for the first time at once all create it. Fails only if it cannot be a
   * directory.
   */
  private def ensureDirectory(dir: File): File = {
    try Files.createDirectories(dir.toPath, OwnerOnly: _*)
    catch {
      case e: IOException => throw new IllegalStateException(s"spillstore cannot create its " +
            s"local directory $dir ($e); $ConfHint", e)
    }
    dir
  }

  /**
   * Creates and locks a new per-JVM dir. A sweep in another JVM may see the dir before its lock
   * file is locked, take that lock and delete the dir: then our lock is missing or on a deleted
   * file, and we start over under a new name. Once ours is locked and still in place, no sweep
   * deletes it (sweeps delete only what they hold the lock of).
   */
  private def claim(parent: File): Owned = {
    val attempts = 5
    Iterator.continually(tryClaim(parent)).take(attempts).collectFirst { case Some(o) => o }
      .getOrElse(throw new IllegalStateException(s"spillstore could not lock a per-JVM " +
          s"directory under $parent in $attempts attempts: other JVMs kept deleting it; $ConfHint"))
  }

  private def tryClaim(parent: File): Option[Owned] = {
    val dir = new File(parent,
      s"$Prefix${ProcessHandle.current().pid()}-${UUID.randomUUID().toString.take(8)}")
    val lockFile = new File(dir, LockFileName).toPath
    val channel =
      try {
        Files.createDirectory(dir.toPath, OwnerOnly: _*)
        FileChannel.open(lockFile, StandardOpenOption.CREATE_NEW, StandardOpenOption.WRITE)
      } catch {
        case _: NoSuchFileException => return None // swept between the two calls
        case e: IOException => throw new IllegalStateException(
            s"spillstore cannot create its per-JVM directory $dir ($e); $ConfHint", e)
      }
    val lock =
      try channel.tryLock()
      catch { case NonFatal(e) => channel.close(); throw e }
    if (lock != null && Files.exists(lockFile)) Some(new Owned(dir, channel, lock))
    else { channel.close(); None } // a sweep won: it deletes the dir
  }

  /**
   * Where else dead JVMs' dirs of the same application may be: Spark gives each executor a local
   * root of its own, `<dir>/spark-<uuid>` (on a standalone worker `<dir>` is the application's
   * dir on that worker), so the default parent `<root>/spillstore` of an executor that replaces
   * a killed one is never the killed one's. The same subdirectory of the sibling `spark-*`
   * roots; none when `parent` is not in such a root.
   */
  private def siblingParents(parent: File): Seq[File] = {
    val root = parent.getParentFile
    if (root == null || !root.getName.startsWith(SparkRootPrefix)) Nil
    else Option(root.getParentFile).flatMap(d => Option(d.listFiles())).toSeq.flatten
      .filter(r => r.getName.startsWith(SparkRootPrefix) && r.getName != root.getName)
      .map(r => new File(r, parent.getName))
      .filter(_.isDirectory)
  }

  /** Deletes sibling per-JVM dirs whose lock is free (their JVM is gone); logs what it reclaimed. */
  private def sweep(parent: File): Unit = {
    val ours = owned.values.map(_.dir.getName).toSet
    val candidates = Option(parent.listFiles()).toSeq.flatten
      .filter(d => d.getName.startsWith(Prefix) && !ours.contains(d.getName) && d.isDirectory)
    var dirs = 0
    var bytes = 0L
    candidates.foreach { d =>
      deleteIfDead(d).foreach { b => dirs += 1; bytes += b }
    }
    if (dirs > 0) {
      logInfo(s"Reclaimed the local directories (cold tiers, snapshot merge runs) of $dirs JVMs " +
        s"that are gone ($bytes bytes) under $parent")
    }
  }

  /** Bytes deleted, if `dir`'s lock was free; None if its JVM may be alive (or it has no lock). */
  private def deleteIfDead(dir: File): Option[Long] = {
    val channel =
      try FileChannel.open(new File(dir, LockFileName).toPath, StandardOpenOption.WRITE)
      catch { case _: IOException => return None } // no lock file: not provably dead
    try {
      // Never one of ours: closing a second channel on a file this JVM has locked can drop
      // that lock (POSIX), hence the skip by name in sweep. Overlapping would mean this JVM
      // holds it after all: alive.
      val lock =
        try channel.tryLock()
        catch { case _: OverlappingFileLockException => null }
      if (lock == null) None
      else {
        val bytes =
          try FileUtils.sizeOfDirectory(dir)
          catch { case NonFatal(_) => 0L }
        FileUtils.deleteQuietly(dir)
        Some(bytes)
      }
    } catch {
      case e: IOException =>
        logWarning(s"spillstore could not check whether $dir belongs to a live JVM; left it", e)
        None
    } finally channel.close() // releases the lock, after the delete
  }
}
