package spillstore.migrate

import java.io.DataInputStream
import java.nio.charset.StandardCharsets

import scala.jdk.CollectionConverters._

import com.fasterxml.jackson.databind.ObjectMapper
import org.apache.hadoop.conf.Configuration
import org.apache.hadoop.fs.{FileSystem, Path}

import org.apache.spark.sql.types.{DataType, StructType}

import spillstore.checkpoint.QueryCheckpoint
import spillstore.checkpoint.QueryCheckpoint.OffsetLogEntry
import spillstore.conf.SparkConfs

/**
 * What a streaming query's checkpoint holds, as far as moving its state goes: the offset and
 * commit logs, the provider and confs the newest offset-log entry records, and each stateful
 * operator's stores with their schemas. Read-only; every refusal is a
 * [[MigrationRefusedException]] naming the file at fault.
 *
 * Provider-independent files Spark writes per operator, all copied with the state:
 * `state/<op>/_metadata/metadata` (4.x: store names and prefix-key columns) and
 * `state/<op>/0[/<store>]/_metadata/schema` (key and value schema).
 */
final class CheckpointLayout(val root: Path, hadoopConf: Configuration) {
  import CheckpointLayout._

  val fs: FileSystem = root.getFileSystem(hadoopConf)
  if (!isDir(root)) refuse(s"$root is not a checkpoint directory")

  val offsets: Seq[Long] = numbered(QueryCheckpoint.offsetsDir(root))
  val commits: Seq[Long] = numbered(new Path(root, "commits"))
  def stateRoot: Path = new Path(root, "state")

  def offsetFile(batch: Long): Path = QueryCheckpoint.offsetFile(root, batch)

  /** The confs the newest offset-log entry records (Spark applies them on restart). */
  lazy val recordedConf: Map[String, String] =
    offsets.lastOption.fold(Map.empty[String, String])(b => readEntry(fs, offsetFile(b)).conf)

  def recordedProvider: Option[String] = recordedConf.get(SparkConfs.ProviderClass)

  /** The stateful operators under `state/`, in id order. */
  lazy val operators: Seq[Operator] =
    numbered(stateRoot).map(op => readOperator(op, new Path(stateRoot, op.toString)))

  private def readOperator(id: Long, dir: Path): Operator = {
    if (fs.exists(new Path(dir, "_stateSchema")) || fs.exists(new Path(dir, "_metadata/v2"))) {
      refuse(s"$dir: operator $id keeps transformWithState state (state schema v3), which " +
        "spillstore does not support")
    }
    val metadata = readOperatorMetadata(new Path(dir, "_metadata/metadata"))
    metadata.flatMap(_._1).filter(_.toLowerCase.contains("transformwithstate")).foreach { n =>
      refuse(s"$dir: operator $id is $n (transformWithState), which spillstore does not support")
    }
    // The directories, not the recorded partition count: a global limit runs in partition 0 only.
    val partitions = numbered(dir).map(_.toInt)
    if (!partitions.contains(0)) refuse(s"$dir: operator $id has no partition directory 0")
    val partition0 = new Path(dir, "0")
    val storeNames = metadata.map(_._2.keys.toSeq.sorted).getOrElse {
      val subStores = fs.listStatus(partition0).filter(s =>
        s.isDirectory &&
          !s.getPath.getName.startsWith("_") && !s.getPath.getName.startsWith(".") &&
          s.getPath.getName != "SSTs" && fs.exists(schemaFile(s.getPath))).map(_.getPath.getName)
      (if (subStores.isEmpty) Seq(DefaultStore) else Seq.empty[String]) ++ subStores.sorted
    }
    val stores = storeNames.map { name =>
      val storeDir = if (name == DefaultStore) partition0 else new Path(partition0, name)
      val (keySchema, valueSchema) = readSchema(schemaFile(storeDir), id, name)
      val prefix = metadata.flatMap(_._2.get(name)).getOrElse(inferPrefixColumns(keySchema))
      Store(name, keySchema, valueSchema, prefix)
    }
    Operator(id, metadata.flatMap(_._1), partitions, stores)
  }

  private def schemaFile(storeDir: Path): Path = new Path(storeDir, "_metadata/schema")

  /** (operator name, prefix-key columns per store name) from Spark 4.x's file. */
  private def readOperatorMetadata(file: Path): Option[(Option[String], Map[String, Int])] = {
    if (!fs.exists(file)) return None
    val lines = readLines(file)
    if (lines.headOption.contains("v2")) {
      refuse(s"$file: operator metadata v2 (transformWithState), which spillstore does not support")
    }
    if (lines.size < 2 || lines.head != "v1") {
      refuse(s"$file: not an operator metadata file this version understands " +
        s"(first line '${lines.headOption.getOrElse("")}')")
    }
    val json = Json.readTree(lines(1))
    val name = Option(json.path("operatorInfo").get("operatorName")).map(_.asText())
    val stores = json.path("stateStoreInfo").elements().asScala.toSeq
    val prefixes =
      stores.map(s => s.get("storeName").asText() -> s.path("numColsPrefixKey").asInt(0))
    Some((name, prefixes.toMap))
  }

  /** Key and value schema from Spark's schema file (format v1 or v2). */
  private def readSchema(file: Path, op: Long, store: String): (StructType, StructType) = {
    if (!fs.exists(file)) {
      refuse(s"$file does not exist: the key and value schema of operator $op's store " +
        s"'$store' are unknown (was spark.sql.streaming.stateStore.stateSchemaCheck disabled?)")
    }
    val in = new DataInputStream(fs.open(file))
    try {
      def chunked(): String = {
        val n = in.readInt()
        (0 until n).map(_ => in.readUTF()).mkString
      }
      val (k, v) = in.readUTF() match {
        case "v1" => (in.readUTF(), in.readUTF())
        case "v2" => (chunked(), chunked())
        case other => refuse(s"$file: state schema format $other is not supported " +
            "(v3 is transformWithState's)")
      }
      (DataType.fromJson(k).asInstanceOf[StructType], DataType.fromJson(v).asInstanceOf[StructType])
    } finally in.close()
  }

  private def readLines(file: Path): Seq[String] = {
    val in = fs.open(file)
    try scala.io.Source.fromInputStream(in, StandardCharsets.UTF_8.name).getLines().toList
    finally in.close()
  }

  private def isDir(p: Path): Boolean = fs.exists(p) && fs.getFileStatus(p).isDirectory

  private def numbered(dir: Path): Seq[Long] = QueryCheckpoint.numbered(fs, dir)
}

object CheckpointLayout {
  val DefaultStore = "default"
  private[migrate] val Json = new ObjectMapper()

  final case class Store(
      name: String, keySchema: StructType, valueSchema: StructType, prefixKeyColumns: Int)

  final case class Operator(id: Long, name: Option[String], partitions: Seq[Int],
      stores: Seq[Store])

  /**
   * Spark 3.5 records no prefix-key columns; only the session window uses prefix scans there,
   * and its key is the grouping columns followed by `sessionStartTime`.
   */
  private def inferPrefixColumns(keySchema: StructType): Int =
    if (keySchema.length > 1 && keySchema.last.name == "sessionStartTime") keySchema.length - 1
    else 0

  private[migrate] def refuse(message: String): Nothing =
    throw new MigrationRefusedException(message)

  /** An offset-log entry; a file that is not one is refused. */
  private[migrate] def readEntry(fs: FileSystem, file: Path): OffsetLogEntry =
    try OffsetLogEntry.read(fs, file)
    catch {
      case e: QueryCheckpoint.InvalidEntryException => refuse(e.getMessage)
    }
}

/** Migration cannot proceed; nothing was changed, or what was changed is resumable. */
final class MigrationRefusedException(message: String) extends IllegalStateException(message)
