package spillstore.checkpoint

import java.io.{BufferedOutputStream, File, OutputStream}
import java.nio.file.{Files, StandardCopyOption, StandardOpenOption}
import java.util.UUID

import scala.util.control.NonFatal

import org.apache.hadoop.conf.Configuration
import org.apache.hadoop.fs.{
  CommonPathCapabilities, FileSystem, FSDataOutputStream, LocalFileSystem, Path,
  RawLocalFileSystem
}

import org.apache.spark.sql.execution.streaming.state.SpillStoreSparkShim.CheckpointFileManager

import spillstore.conf.SparkConfs

/**
 * A file being written that appears at its target whole or not at all: `publish` makes it the
 * target (replacing any file of that name), `discard` drops it. Either ends it.
 *
 * | state     | who may call                     | moves to                               |
 * |-----------|----------------------------------|----------------------------------------|
 * | open      | the one thread writing the file  | published (publish), discarded         |
 * | published | nobody (discard is a no-op)      | -                                      |
 * | discarded | nobody (discard is a no-op)      | -                                      |
 */
abstract class AtomicOutput extends OutputStream {
  def publish(): Unit
  def discard(): Unit

  /**
   * Sends what is written so far to the storage, where that opens the connection the rest
   * will take (an HDFS block's pipeline); for files opened before their body is known.
   */
  def sendAhead(): Unit = ()
}

object AtomicOutput {

  /**
   * How `dir`'s files are created, unless the user chose a file manager (then through it, as
   * Spark's providers do):
   *  - on Hadoop's own local file system, with java.nio ([[LocalFile]]): Hadoop's local file
   *    system without its native library (as Spark ships it) forks `chmod` for every file it
   *    creates (and its `.crc`) and `readlink` for both sides of every rename (twice: the `.crc`
   *    is renamed too), which took two thirds of a commit's wall time in a wall-clock profile;
   *  - where files appear only when their stream closes ([[publishesOnClose]]: S3A), straight
   *    to the target's name ([[Direct]]): a temp file and a rename (on an object store existence
   *    checks, a copy and a delete) would buy nothing but requests;
   *  - elsewhere (HDFS, ...) a temp file renamed through Spark's `CheckpointFileManager`
   *    ([[ViaRename]]).
   */
  def creator(dir: Path, hadoopConf: Configuration, fm: CheckpointFileManager): Creator = {
    val fs = dir.getFileSystem(hadoopConf)
    val local = fs.isInstanceOf[LocalFileSystem] || fs.isInstanceOf[RawLocalFileSystem]
    val throughFileManager = Creator(needsDir = true, opensEarly = !local)(fm match {
      case renames: CheckpointFileManager.RenameHelperMethods =>
        target => new ViaRename(fm, renames, target)
      case _ =>
        target => new ThroughFileManager(fm.createAtomic(target, overwriteIfPossible = true))
    })
    if (hadoopConf.get(SparkConfs.CheckpointFileManagerClass) != null) throughFileManager
    else fs match {
      // Subclasses too: with Hive's jars on the class path (pyspark's are), `file:` is Hive's
      // ProxyLocalFileSystem, a LocalFileSystem with its own rename.
      case l: LocalFileSystem =>
        Creator(needsDir = true)(target => new LocalFile(l.pathToFile(target)))
      case r: RawLocalFileSystem =>
        Creator(needsDir = true)(target => new LocalFile(r.pathToFile(target)))
      // An object store has no directories to create: a file's name is its whole key.
      case _ if publishesOnClose(fs, dir) =>
        Creator(needsDir = false)(target => new Direct(fs, target))
      case _ => throughFileManager
    }
  }

  /**
   * Creates a dir's files; `needsDir`: the dir must exist before the first is created;
   * `opensEarly`: opening a file costs a round trip to remote storage, which opening it before
   * its body is known ([[EarlyFile]]) takes off the writer's path (not so for local files, nor
   * where a file is sent whole at close).
   */
  final case class Creator(needsDir: Boolean, opensEarly: Boolean = false)(
      val create: Path => AtomicOutput)

  /**
   * Whether a file `fs` creates under `dir` stays invisible until its stream closes and an
   * aborted stream leaves nothing: Hadoop's path capability for abortable output streams, which
   * object stores that upload on close declare (S3A), and file systems that show a file while
   * it is written (HDFS, local) do not.
   */
  def publishesOnClose(fs: FileSystem, dir: Path): Boolean =
    fs.hasPathCapability(dir, CommonPathCapabilities.ABORTABLE_STREAM)

  /** S3A's option to skip a create's existence and parent-directory checks (Hadoop 3.4+; older
   *  versions ignore options they do not know, and check). */
  private val CreatePerformance = "fs.s3a.create.performance"

  /**
   * What the outputs below share: writes go to `out` while open; `publish` runs
   * `publishWritten`, and discards when that fails; `discard` runs `dropWritten` once.
   * Writers flush for their own framing only, so `out` buffers and forwards no flush: a flush
   * reaching a remote stream can cost a packet or a request.
   */
  private abstract class OneShot extends AtomicOutput {
    protected def out: OutputStream
    protected def publishWritten(): Unit
    protected def dropWritten(): Unit
    private var open = true

    override def write(b: Int): Unit = { checkOpen(); out.write(b) }
    override def write(b: Array[Byte], off: Int, len: Int): Unit = {
      checkOpen(); out.write(b, off, len)
    }
    override def flush(): Unit = checkOpen()

    final def publish(): Unit = {
      checkOpen()
      try {
        publishWritten()
        open = false
      } catch {
        case e: Throwable =>
          try discard()
          catch { case c: Throwable => e.addSuppressed(c) }
          throw e
      }
    }

    final def discard(): Unit = if (open) {
      open = false
      dropWritten()
    }

    private def checkOpen(): Unit =
      if (!open) throw new IllegalStateException(s"$this is published or discarded")
  }

  private def buffered(out: OutputStream) = new BufferedOutputStream(out, 64 * 1024)

  /**
   * Written to its name where files appear on close ([[publishesOnClose]]): close publishes it
   * whole, replacing any file of that name (one PUT on S3A), abort drops it.
   */
  private final class Direct(fs: FileSystem, target: Path) extends OneShot {
    // Recursive: a non-recursive create checks that the parent "directory" exists, a request.
    private val stream: FSDataOutputStream =
      fs.createFile(target).overwrite(true).recursive().opt(CreatePerformance, true).build()
    protected val out: OutputStream = buffered(stream)

    protected def publishWritten(): Unit = { out.flush(); stream.close() }
    protected def dropWritten(): Unit = stream.abort()

    override def toString: String = s"the write of $target"
  }

  /**
   * A temp file beside the target (`.<name>.<uuid>.tmp`, which listings skip), renamed to it
   * through Spark's file manager. A failure on the way deletes the temp file (as far as the
   * file system lets it): Spark's own atomic stream leaves it behind when its close fails, as
   * on HDFS with the datanode down.
   */
  private final class ViaRename(fm: CheckpointFileManager,
      renames: CheckpointFileManager.RenameHelperMethods, target: Path)
      extends OneShot {
    private val temp = new Path(target.getParent, s".${target.getName}.${UUID.randomUUID()}.tmp")
    private val stream = renames.createTempFile(temp)
    protected val out: OutputStream = buffered(stream)

    protected def publishWritten(): Unit = {
      out.flush()
      stream.close()
      renames.renameTempFile(temp, target, true)
    }

    protected def dropWritten(): Unit = {
      try stream.close()
      catch { case NonFatal(_) => } // it failed already, or its bytes are dropped
      finally fm.delete(temp)
    }

    override def sendAhead(): Unit = { out.flush(); stream.hflush() }

    override def toString: String = s"the atomic write of $target"
  }

  /** Spark's atomic stream, for a file manager without temp-file methods: close publishes,
   *  cancel discards. */
  private final class ThroughFileManager(
      stream: CheckpointFileManager.CancellableFSDataOutputStream)
      extends OneShot {
    protected val out: OutputStream = buffered(stream)
    protected def publishWritten(): Unit = { out.flush(); stream.close() }
    protected def dropWritten(): Unit = stream.cancel()
    override def sendAhead(): Unit = { out.flush(); stream.hflush() }
    override def toString: String = s"the atomic write of $stream"
  }

  /**
   * A local file written with java.nio, named as Spark names its temporary files
   * (`.<name>.<uuid>.tmp`, which listings skip). Like Hadoop's local files it is not synced to
   * disk on publish: a process crash loses nothing published, a machine crash may, as before.
   * Our files carry their own checksum, so none is written beside them; a `.<name>.crc` left
   * by a file of that name that Hadoop wrote is deleted before the rename, or Hadoop's readers
   * would check the new file against it.
   */
  private final class LocalFile(target: File) extends OneShot {
    private val temp =
      new File(target.getParentFile, s".${target.getName}.${UUID.randomUUID()}.tmp")
    protected val out: OutputStream = buffered(
      Files.newOutputStream(temp.toPath, StandardOpenOption.CREATE_NEW, StandardOpenOption.WRITE))

    protected def publishWritten(): Unit = {
      out.close()
      Files.deleteIfExists(new File(target.getParentFile, s".${target.getName}.crc").toPath)
      Files.move(temp.toPath, target.toPath, StandardCopyOption.ATOMIC_MOVE)
    }

    protected def dropWritten(): Unit =
      try out.close()
      finally Files.deleteIfExists(temp.toPath)

    override def toString: String = s"the atomic write of $target"
  }
}
