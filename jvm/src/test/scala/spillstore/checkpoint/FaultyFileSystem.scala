package spillstore.checkpoint

import java.io.IOException
import java.net.URI

import org.apache.hadoop.fs.{FileStatus, FSDataInputStream, FSInputStream, Path, RawLocalFileSystem}

/**
 * The local file system under the scheme `faulty:` (registered for tests through
 * META-INF/services), whose reads of one named file fail with a given I/O error while a test
 * arms it: a real Hadoop file system failing as HDFS or S3 do when a task is interrupted. A
 * test may also fail the listings of one directory, as a LIST answered 503 by S3 or a namenode
 * failing over does, or hook listings and publishes (see `hooking`).
 */
class FaultyFileSystem extends RawLocalFileSystem {
  override def getUri: URI = URI.create("faulty:///")
  override def getScheme: String = "faulty"

  override def open(f: Path, bufferSize: Int): FSDataInputStream = {
    FaultyFileSystem.before(FaultyFileSystem.Open, f)
    val in = super.open(f, bufferSize)
    FaultyFileSystem.fault.filter(_.fileName == f.getName) match {
      case Some(fault) => new FSDataInputStream(new FaultyFileSystem.FailingStream(in, fault))
      case None => in
    }
  }

  override def rename(src: Path, dst: Path): Boolean = {
    FaultyFileSystem.before(FaultyFileSystem.Publish, dst)
    super.rename(src, dst)
  }

  override def listStatus(f: Path): Array[FileStatus] = {
    FaultyFileSystem.before(FaultyFileSystem.Listing, f)
    FaultyFileSystem.failingList.foreach { suffix =>
      if (f.toUri.getPath.stripSuffix("/").endsWith(suffix)) {
        throw new IOException(s"injected listing failure of $f")
      }
    }
    super.listStatus(f)
  }
}

/**
 * State: `fault`, `failingList` and `hook`, each owned by the test thread that calls `failing`,
 * `failingListsOf` or `hooking` (set for its body, cleared after); file system threads only
 * read them.
 */
object FaultyFileSystem {
  final case class Fault(fileName: String, afterBytes: Long, error: () => IOException)

  @volatile private var fault: Option[Fault] = None

  /** Runs `body` with reads of `fileName` failing with `error` after `afterBytes` bytes. */
  def failing[T](fileName: String, afterBytes: Long, error: () => IOException)(body: => T): T = {
    if (fault.isDefined)
      throw new IllegalStateException(s"FaultyFileSystem: already armed ($fault)")
    fault = Some(Fault(fileName, afterBytes, error))
    try body
    finally fault = None
  }

  @volatile private var failingList: Option[String] = None

  /** Runs `body` with every listing of a directory whose path ends in `suffix` failing. */
  def failingListsOf[T](suffix: String)(body: => T): T = {
    if (failingList.isDefined)
      throw new IllegalStateException(s"FaultyFileSystem: already failing $failingList")
    failingList = Some(suffix)
    try body
    finally failingList = None
  }

  /**
   * An operation a test can hook: a listing of a dir, a publish (the rename to a name), or an
   * open for reading.
   */
  sealed trait Op
  case object Listing extends Op
  case object Publish extends Op
  case object Open extends Op

  @volatile private var hook: Option[(Op, Path => Unit)] = None

  /**
   * Runs `body` with `run` called before every `op` (with its dir or file), on the thread
   * doing it: to fail it (by throwing) or to do something else first, as another executor
   * might. `run`'s own operations are not hooked.
   */
  def hooking[T](op: Op)(run: Path => Unit)(body: => T): T = {
    if (hook.isDefined) throw new IllegalStateException("FaultyFileSystem: already hooked")
    hook = Some(op -> run)
    try body
    finally hook = None
  }

  private val inHook = new ThreadLocal[Boolean] { override def initialValue(): Boolean = false }

  private def before(op: Op, path: Path): Unit = hook.foreach { case (o, run) =>
    if (o == op && !inHook.get) {
      inHook.set(true)
      try run(path)
      finally inHook.set(false)
    }
  }

  /** The checkpoint root `dir` (a local path) seen through this file system. */
  def uriOf(dir: String): String = s"faulty://${new java.io.File(dir).getAbsolutePath}"

  private final class FailingStream(in: FSDataInputStream, fault: Fault) extends FSInputStream {
    private var done = 0L // bytes returned so far; the read after `afterBytes` fails
    override def read(): Int = {
      if (done >= fault.afterBytes) throw fault.error()
      val b = in.read(); if (b >= 0) done += 1; b
    }
    override def read(b: Array[Byte], off: Int, len: Int): Int = {
      if (done >= fault.afterBytes) throw fault.error()
      val n = in.read(b, off, math.min(len.toLong, fault.afterBytes - done).toInt)
      if (n > 0) done += n
      n
    }
    override def seek(pos: Long): Unit = in.seek(pos)
    override def getPos: Long = in.getPos
    override def seekToNewSource(targetPos: Long): Boolean = in.seekToNewSource(targetPos)
    override def close(): Unit = in.close()
  }
}
