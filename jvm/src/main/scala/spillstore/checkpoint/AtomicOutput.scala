package spillstore.checkpoint

import java.io.{BufferedOutputStream, File, OutputStream}
import java.nio.file.{Files, StandardCopyOption, StandardOpenOption}
import java.util.UUID

import org.apache.hadoop.conf.Configuration
import org.apache.hadoop.fs.{LocalFileSystem, Path, RawLocalFileSystem}

import org.apache.spark.sql.execution.streaming.state.SpillStoreSparkLine.CheckpointFileManager

/**
 * A file being written under a temporary name beside its target: `publish` makes it the target
 * (replacing any file of that name) in one rename, `discard` drops it. Either ends it.
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
}

object AtomicOutput {
  /** Conf of Spark's that chooses a `CheckpointFileManager`; set, it is used for every file. */
  val FileManagerConf = "spark.sql.streaming.checkpointFileManagerClass"

  /**
   * How `dir`'s files are created. On Hadoop's own local file system, unless the user chose a
   * file manager, with java.nio: Hadoop's local file system without its native library (as
   * Spark ships it) forks `chmod` for every file it creates (and its `.crc`) and `readlink` for
   * both sides of every rename (twice: the `.crc` is renamed too), which took two thirds of a
   * commit's wall time in a wall-clock profile. Elsewhere Spark's
   * `CheckpointFileManager`, as the other providers do.
   */
  def creator(dir: Path, hadoopConf: Configuration, fm: CheckpointFileManager): Path => AtomicOutput = {
    val throughFileManager: Path => AtomicOutput =
      target => new ThroughFileManager(fm.createAtomic(target, overwriteIfPossible = true))
    if (hadoopConf.get(FileManagerConf) != null) throughFileManager
    else dir.getFileSystem(hadoopConf) match {
      // Subclasses too: with Hive's jars on the class path (pyspark's are), `file:` is Hive's
      // ProxyLocalFileSystem, a LocalFileSystem with its own rename.
      case l: LocalFileSystem => target => new LocalFile(l.pathToFile(target))
      case r: RawLocalFileSystem => target => new LocalFile(r.pathToFile(target))
      case _ => throughFileManager
    }
  }

  /** Spark's atomic stream: close publishes, cancel discards. */
  private final class ThroughFileManager(
      out: CheckpointFileManager.CancellableFSDataOutputStream) extends AtomicOutput {
    override def write(b: Int): Unit = out.write(b)
    override def write(b: Array[Byte], off: Int, len: Int): Unit = out.write(b, off, len)
    override def flush(): Unit = out.flush()
    def publish(): Unit = out.close()
    def discard(): Unit = out.cancel()
  }

  /**
   * A local file written with java.nio, named as Spark names its temporary files
   * (`.<name>.<uuid>.tmp`, which listings skip). Like Hadoop's local files it is not synced to
   * disk on publish: a process crash loses nothing published, a machine crash may, as before.
   * Our files carry their own checksum, so none is written beside them; a `.<name>.crc` left
   * by a file of that name that Hadoop wrote is deleted before the rename, or Hadoop's readers
   * would check the new file against it.
   */
  private final class LocalFile(target: File) extends AtomicOutput {
    private val temp = new File(target.getParentFile, s".${target.getName}.${UUID.randomUUID()}.tmp")
    private val out = new BufferedOutputStream(
      Files.newOutputStream(temp.toPath, StandardOpenOption.CREATE_NEW, StandardOpenOption.WRITE),
      64 * 1024)
    private var open = true

    override def write(b: Int): Unit = { checkOpen(); out.write(b) }
    override def write(b: Array[Byte], off: Int, len: Int): Unit = { checkOpen(); out.write(b, off, len) }

    def publish(): Unit = {
      checkOpen()
      try {
        out.close()
        Files.deleteIfExists(new File(target.getParentFile, s".${target.getName}.crc").toPath)
        Files.move(temp.toPath, target.toPath, StandardCopyOption.ATOMIC_MOVE)
        open = false
      } catch {
        case e: Throwable =>
          try discard() catch { case c: Throwable => e.addSuppressed(c) }
          throw e
      }
    }

    def discard(): Unit = if (open) {
      open = false
      try out.close() finally Files.deleteIfExists(temp.toPath)
    }

    private def checkOpen(): Unit =
      if (!open) throw new IllegalStateException(s"$this is published or discarded")

    override def toString: String = s"the atomic write of $target"
  }
}
