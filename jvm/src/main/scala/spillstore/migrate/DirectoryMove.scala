package spillstore.migrate

import org.apache.hadoop.fs.{FileStatus, FileSystem, Path}

/**
 * Moves a directory so that a kill at any point, then the same move again, finishes it.
 *
 * Where the file system renames a directory atomically (HDFS, the local one) that is one
 * rename. Elsewhere (object stores: S3A renames a directory by copying each object, then
 * deleting them) a directory rename killed part-way leaves both directories partial, and a
 * second rename would nest one in the other. There each file moves on its own (an object
 * store's copy appears whole or not at all): a file already at the destination with the
 * source's length only has its source deleted, so a re-run moves what is left.
 *
 * `byFile` chooses the second way on any file system (tests of it on the local one, through
 * the system property `spillstore.migrate.moveByFile`). `halt(n)` runs after the n-th file
 * moved (tests stop the JVM there).
 */
private[migrate] final class DirectoryMove(fs: FileSystem, val byFile: Boolean) {

  /** Moves `from` (a directory or a file) to `to`; done when `from` no longer exists. */
  def apply(from: Path, to: Path, halt: Int => Unit = _ => ()): Unit = {
    if (!fs.exists(from)) return
    if (!byFile) {
      if (fs.exists(to)) {
        throw new java.io.IOException(s"Migration: cannot move $from to $to, which exists")
      }
      rename(from, to)
      return
    }
    val status = fs.getFileStatus(from)
    if (status.isFile) {
      moveFile(status, to)
      halt(1)
      return
    }
    val files = fs.listFiles(from, true)
    val prefix = from.toUri.getPath.stripSuffix("/") + "/"
    var moved = 0
    while (files.hasNext) {
      val f = files.next()
      moveFile(f, new Path(to, f.getPath.toUri.getPath.stripPrefix(prefix)))
      moved += 1
      halt(moved)
    }
    fs.delete(from, true) // the directories (object stores: their markers) left
  }

  private def moveFile(f: FileStatus, dest: Path): Unit = {
    val there = if (fs.exists(dest)) Some(fs.getFileStatus(dest).getLen) else None
    if (there.contains(f.getLen)) fs.delete(f.getPath, false) // moved; its delete was not
    else {
      there.foreach(_ => fs.delete(dest, false)) // not what the source holds: replaced
      fs.mkdirs(dest.getParent)
      rename(f.getPath, dest)
    }
  }

  private def rename(from: Path, to: Path): Unit =
    if (!fs.rename(from, to))
      throw new java.io.IOException(s"Migration: could not rename $from to $to")
}

private[migrate] object DirectoryMove {
  /** Schemes whose file systems rename a directory in one atomic step. */
  private val AtomicRenames = Set("file", "hdfs", "viewfs")

  def byFile(fs: FileSystem): Boolean =
    sys.props.get("spillstore.migrate.moveByFile").contains("true") ||
      !AtomicRenames.contains(fs.getScheme)
}
