package spillstore.checkpoint

import java.nio.charset.StandardCharsets

import scala.jdk.CollectionConverters._

import com.fasterxml.jackson.databind.{JsonNode, ObjectMapper}
import com.fasterxml.jackson.databind.node.ObjectNode
import org.apache.commons.io.IOUtils
import org.apache.hadoop.conf.Configuration
import org.apache.hadoop.fs.{FileSystem, Path}

import org.apache.spark.sql.streaming.StreamingQuery

import spillstore.conf.SparkConfs

/**
 * A streaming query's checkpoint as Spark lays it out, where it matters beyond one store: the
 * running query's checkpoint root and the offset log (`offsets/<batch>`), whose newest entry
 * records the provider and confs Spark reapplies on restart. The provider check reads it;
 * migration reads it and rewrites the provider in it.
 */
object QueryCheckpoint {

  private val Json = new ObjectMapper()

  def offsetsDir(root: Path): Path = new Path(root, "offsets")

  def offsetFile(root: Path, batch: Long): Path = new Path(offsetsDir(root), batch.toString)

  /** The numbered entries of `dir` (a log or `state/`), in order; none if it is not a directory. */
  def numbered(fs: FileSystem, dir: Path): Seq[Long] =
    if (!(fs.exists(dir) && fs.getFileStatus(dir).isDirectory)) Seq.empty
    else fs.listStatus(dir).map(_.getPath.getName).filter(n => n.nonEmpty && n.forall(_.isDigit))
      .map(_.toLong).sorted.toSeq

  /** The provider the newest offset-log entry under `root` records; None for a new query. */
  def recordedProvider(root: Path, hadoopConf: Configuration): Option[String] = {
    val fs = root.getFileSystem(hadoopConf)
    numbered(fs, offsetsDir(root)).lastOption
      .flatMap(b => OffsetLogEntry.read(fs, offsetFile(root, b)).conf.get(SparkConfs.ProviderClass))
  }

  /** A running query's checkpoint root (Spark's query internals, on every Spark line). */
  def checkpointRoot(query: StreamingQuery): String = {
    val execution = query.getClass.getMethod("streamingQuery").invoke(query)
    execution.getClass.getMethod("resolvedCheckpointRoot").invoke(execution).toString
  }

  /** A file that is not an offset-log entry; the message names it. */
  final class InvalidEntryException(message: String) extends IllegalStateException(message)

  /**
   * One offset-log entry: a version line, the metadata JSON line (batch watermark, timestamp and
   * the confs Spark reapplies on restart), then one line per source offset.
   */
  final case class OffsetLogEntry(lines: Seq[String], metadata: JsonNode) {
    /** The confs the entry records. */
    def conf: Map[String, String] = {
      val c = metadata.get("conf")
      if (c == null) Map.empty
      else Json.convertValue(c, classOf[java.util.Map[String, Object]]).asScala
        .map { case (k, v) => k -> String.valueOf(v) }.toMap
    }

    /** The same entry recording the confs `set` (the provider, the checkpoint format). */
    def withConf(set: Map[String, String]): String = {
      val updated = metadata.deepCopy[ObjectNode]()
      val conf = updated.path("conf") match {
        case o: ObjectNode => o
        case _ => updated.putObject("conf")
      }
      set.foreach { case (k, v) => conf.put(k, v) }
      (lines.head +: Json.writeValueAsString(updated) +: lines.drop(2)).mkString("\n")
    }
  }

  object OffsetLogEntry {
    /** Throws [[InvalidEntryException]] if `file` is not an entry. */
    def read(fs: FileSystem, file: Path): OffsetLogEntry = {
      val in = fs.open(file)
      val text =
        try new String(IOUtils.toByteArray(in), StandardCharsets.UTF_8)
        finally in.close()
      val lines = text.split("\n", -1).toSeq
      if (lines.size < 2 || !lines.head.startsWith("v")) {
        throw new InvalidEntryException(
          s"$file is not an offset-log entry (a version line, then metadata)")
      }
      val metadata =
        try Json.readTree(lines(1))
        catch {
          case e: Exception =>
            throw new InvalidEntryException(s"$file: its metadata line is not JSON: $e")
        }
      OffsetLogEntry(lines, metadata)
    }
  }
}
