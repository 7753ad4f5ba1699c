package spillstore.checkpoint

import java.io.FileNotFoundException

import scala.util.control.NonFatal

import org.apache.hadoop.conf.Configuration
import org.apache.hadoop.fs.{FileStatus, Path}

import org.apache.spark.sql.execution.streaming.checkpointing.CheckpointFileManager
import org.apache.spark.sql.execution.streaming.state.SpillStoreSparkBridge

import spillstore.checkpoint.StateFile.Kind

/**
 * One store's checkpoint directory: `<version>.journal` for every committed version >= 1 and
 * `<version>.snapshot` for the versions maintenance has snapshotted. Files are created
 * atomically through Spark's `CheckpointFileManager` (temp file, then rename on close).
 */
final class CheckpointDir(
    val path: Path, hadoopConf: Configuration, codec: SpillStoreSparkBridge.Codec) {
  private val fm = CheckpointFileManager.create(path, hadoopConf)
  @volatile private var dirCreated = false

  def file(kind: Kind, version: Long): Path = new Path(path, s"$version.${kind.suffix}")

  /** Writes a file atomically and returns its size; nothing is visible if `body` throws. */
  def write(kind: Kind, version: Long)(body: StateFile.Writer => Unit): CheckpointDir.Written = {
    if (!dirCreated) { fm.mkdirs(path); dirCreated = true }
    val atomic = fm.createAtomic(file(kind, version), overwriteIfPossible = true)
    try {
      val writer = new StateFile.Writer(atomic, kind, version, codec)
      body(writer)
      writer.finish()
      atomic.close()
      CheckpointDir.Written(writer.numBytes, writer.numRecords)
    } catch {
      case NonFatal(e) =>
        try atomic.cancel() catch { case NonFatal(c) => e.addSuppressed(c) }
        throw e
    }
  }

  /** Reads every record of a file in order (value null = removal); returns the record count. */
  def read(kind: Kind, version: Long)(visit: (Array[Byte], Array[Byte]) => Unit): Long = {
    val f = file(kind, version)
    val length = f.getFileSystem(hadoopConf).getFileStatus(f).getLen
    val in = fm.open(f)
    try {
      new StateFile.Reader(in, length, f.toString, kind, version,
        SpillStoreSparkBridge.compressionCodec).foreach(visit)
    } finally in.close()
  }

  def list(): CheckpointDir.Listing = {
    val statuses = try fm.list(path) catch {
      case _: FileNotFoundException => Array.empty[FileStatus]
    }
    val byKind = statuses.toSeq.flatMap(s => CheckpointDir.parse(s.getPath.getName))
    CheckpointDir.Listing(
      journals = byKind.collect { case (StateFile.Journal, v) => v }.toSet,
      snapshots = byKind.collect { case (StateFile.Snapshot, v) => v }.toSet)
  }

  def delete(kind: Kind, version: Long): Unit = fm.delete(file(kind, version))
}

object CheckpointDir {
  final case class Written(bytes: Long, records: Long)

  final case class Listing(journals: Set[Long], snapshots: Set[Long]) {
    def latestVersion: Long = (journals ++ snapshots).maxOption.getOrElse(0L)
    def latestSnapshotAtOrBelow(v: Long): Long = snapshots.filter(_ <= v).maxOption.getOrElse(0L)
    /** The first version in (from, to] with no journal, if any. */
    def missingJournal(from: Long, to: Long): Option[Long] =
      (from + 1 to to).find(v => !journals.contains(v))
  }

  private val Name = """(\d+)\.(journal|snapshot)""".r

  private def parse(name: String): Option[(Kind, Long)] = name match {
    case Name(v, "journal") => Some((StateFile.Journal, v.toLong))
    case Name(v, "snapshot") => Some((StateFile.Snapshot, v.toLong))
    case _ => None
  }
}
