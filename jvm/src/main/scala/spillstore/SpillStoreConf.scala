package spillstore

import java.io.File

import scala.util.control.NonFatal

import org.apache.spark.sql.execution.streaming.state.{SpillStoreSparkBridge, SpillStoreSparkShim, StateStoreConf}

import org.apache.spark.network.util.JavaUtils

import spillstore.cold.ColdMemory
import spillstore.conf.SparkConfs
import spillstore.memory.MemoryConf

/**
 * spillstore's view of the configuration, validated once at provider init.
 *
 * Provider options are SQL confs under [[SpillStoreConf.Prefix]]: Spark forwards to providers
 * only confs under `spark.sql.streaming.stateStore.`, and only those explicitly set.
 * A key under the prefix that spillstore does not know is an error, so a typo cannot silently
 * fall back to a default.
 */
final case class SpillStoreConf(
    codec: SpillStoreSparkBridge.Codec,
    localDir: File,
    memory: MemoryConf,
    coldTierMemory: Option[Long],
    minDeltasForSnapshot: Int,
    minVersionsToRetain: Int,
    reportCommits: Boolean,
    reportSnapshotUploads: Boolean)

object SpillStoreConf {
  val Prefix: String = MemoryConf.Prefix

  private val LocalDir = "localDir"
  private val ColdTierMemory = "coldTierMemory"
  /** Read by [[SpillStorePlugin]] from the Spark conf, not by stores. */
  val MetricsReportInterval = "metricsReportInterval"

  /** spillstore's own keys (name after the prefix -> doc), for validation and the README. */
  val Keys: Map[String, String] = MemoryConf.Keys ++ Map(
    LocalDir -> ("directory for the cold tier's RocksDB instances (default: the first of " +
      "Spark's local dirs, spark.local.dir / SPARK_LOCAL_DIRS); never the checkpoint location"),
    ColdTierMemory -> ("native memory all cold tiers (RocksDB) of an executor share: one block " +
      "cache for data blocks that memtables are charged to (default: half of the heap " +
      "budget, within 16m and 1g; a size >= 16m such as 128m). Fixed by the first store that " +
      "spills in the executor"),
    MetricsReportInterval -> ("how often each executor sends its spillstore figures to the " +
      "driver's `spillstore.executors` metrics source (default: 10s; a Spark duration; needs " +
      "spark.plugins=spillstore.SpillStorePlugin)"))

  /**
   * The cold tier's directory is created on the first eviction, possibly hours in: reject at
   * init what can never work (empty, or a path through a regular file).
   */
  private def checkLocalDir(value: String): File = {
    def reject(why: String): Nothing = throw new IllegalArgumentException(
      s"$Prefix$LocalDir=$value is invalid: $why. Valid: a path to a directory that exists or " +
        "can be created, on local disk (never the checkpoint location)")
    if (value.trim.isEmpty) reject("the path is empty")
    val dir = new File(value).getAbsoluteFile
    var existing = dir
    while (existing != null && !existing.exists()) existing = existing.getParentFile
    if (existing != null && !existing.isDirectory) reject(s"$existing is not a directory")
    dir
  }

  private def checkColdTierMemory(value: String): Long = {
    val bytes = try Some(JavaUtils.byteStringAsBytes(value)) catch {
      case _: NumberFormatException | _: IllegalArgumentException => None
    }
    bytes.filter(_ >= ColdMemory.MinBytes).getOrElse(throw new IllegalArgumentException(
      s"Invalid $Prefix$ColdTierMemory=$value: expected a size >= 16m such as 128m or 1g"))
  }

  def apply(storeConf: StateStoreConf): SpillStoreConf = {
    val unknown = storeConf.sqlConfs.keys.filter(_.startsWith(Prefix))
      .map(_.stripPrefix(Prefix)).filterNot(Keys.contains).toSeq.sorted
    if (unknown.nonEmpty) {
      val known = if (Keys.isEmpty) "none in this version" else Keys.keys.toSeq.sorted.mkString(", ")
      throw new IllegalArgumentException(
        s"Unknown spillstore conf ${unknown.map(Prefix + _).mkString(", ")}; " +
          s"known keys under $Prefix: $known")
    }
    val codec = try SpillStoreSparkBridge.compressionCodec(storeConf.compressionCodec) catch {
      case NonFatal(e) => throw new IllegalArgumentException(
        s"${SparkConfs.CompressionCodec}=${storeConf.compressionCodec} is not a compression codec Spark can create " +
          s"(use lz4, lzf, snappy or zstd): ${e.getMessage}", e)
    }
    val opts = storeConf.sqlConfs.collect {
      case (k, v) if k.startsWith(Prefix) => k.stripPrefix(Prefix) -> v
    }
    SpillStoreConf(
      codec = codec,
      localDir = opts.get(LocalDir).map(checkLocalDir)
        .getOrElse(new File(SpillStoreSparkBridge.localDir(), "spillstore")),
      memory = MemoryConf.fromOptions(opts),
      coldTierMemory = opts.get(ColdTierMemory).map(v => checkColdTierMemory(v.trim)),
      minDeltasForSnapshot = storeConf.minDeltasForSnapshot,
      minVersionsToRetain = storeConf.minVersionsToRetain,
      reportCommits = SpillStoreSparkShim.commitValidationEnabled(storeConf),
      reportSnapshotUploads = SpillStoreSparkShim.reportSnapshotUploadLag(storeConf))
  }
}
