package spillstore

import java.io.File

import scala.util.control.NonFatal

import org.apache.spark.sql.execution.streaming.state.{
  SpillStoreSparkBridge, SpillStoreSparkShim, StateStoreConf
}

import org.apache.spark.network.util.JavaUtils

import spillstore.cold.ColdMemory
import spillstore.conf.{ConfKey, SparkConfs}
import spillstore.conf.ConfKey.literal
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
  /** The default cold-tier directory's name, in Spark's first local dir. */
  private val LocalSubdir = "spillstore"
  private val ColdTierMemory = "coldTierMemory"
  /** Read by [[SpillStorePlugin]] from the Spark conf, not by stores. */
  val MetricsReportInterval = "metricsReportInterval"

  /** spillstore's own keys, for validation and the README's conf table. */
  val Keys: Seq[ConfKey] = MemoryConf.Keys ++ Seq(
    ConfKey(Prefix + LocalDir, s"Spark's first local dir + `/$LocalSubdir`",
      "where the cold tier's RocksDB instances and snapshot merges' sorted runs live, in a " +
        "per-JVM dir `jvm-<pid>-<random>/` (one instance per store, deleted when the store is " +
        "unloaded; runs when their merge ends; the JVM's dir at its normal exit, a killed " +
        "JVM's at the next JVM's first spill or merge under the same dir, or, in Spark's " +
        "per-executor `spark-*` roots, under the same dir of a sibling root: on a standalone " +
        "worker, the next executor of the application there); directories spillstore creates " +
        "there are owner-only (700); never the checkpoint location"),
    ConfKey(Prefix + ColdTierMemory,
      s"half of the heap budget, within " +
        s"${ColdMemory.MinBytes >> 20}m–${ColdMemory.MaxDefaultBytes >> 30}g",
      "native memory all cold tiers (RocksDB) of an executor share: one block cache for their " +
        "data blocks that their memtables are charged to (up to half of it), as Spark's " +
        s"RocksDB provider's `boundedMemoryUsage`; a size ≥ `${ColdMemory.MinBytes >> 20}m`. " +
        "The first store that spills " +
        "in an executor fixes it for the JVM's life. Outside it: index and filter blocks " +
        "(about 1.5 bytes per cold key), memtables of stores that stopped writing (at most two " +
        "of min(16 MB, an eighth of this) each), and memtables over the share while RocksDB's " +
        "background flushes lag the writes"),
    ConfKey(Prefix + MetricsReportInterval, literal(SpillStorePlugin.DefaultReportInterval),
      "how often each executor sends its figures to the driver's `spillstore.executors` " +
        "metrics source (a Spark duration); read from the Spark conf when the application " +
        "starts, by the plugin (`spark.plugins=spillstore.SpillStorePlugin`)"))

  /** [[Keys]]' names after the prefix, as confs arrive. */
  private val KnownNames: Set[String] = Keys.map(_.key.stripPrefix(Prefix)).toSet

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
    val bytes =
      try Some(JavaUtils.byteStringAsBytes(value))
      catch {
        case _: NumberFormatException | _: IllegalArgumentException => None
      }
    bytes.filter(_ >= ColdMemory.MinBytes).getOrElse(throw new IllegalArgumentException(
        s"Invalid $Prefix$ColdTierMemory=$value: expected a size >= ${ColdMemory.MinBytes >> 20}m " +
          "such as 128m or 1g"))
  }

  def apply(storeConf: StateStoreConf): SpillStoreConf = {
    val unknown = storeConf.sqlConfs.keys.filter(_.startsWith(Prefix))
      .map(_.stripPrefix(Prefix)).filterNot(KnownNames.contains).toSeq.sorted
    if (unknown.nonEmpty) {
      val known = KnownNames.toSeq.sorted.mkString(", ")
      throw new IllegalArgumentException(
        s"Unknown spillstore conf ${unknown.map(Prefix + _).mkString(", ")}; " +
          s"known keys under $Prefix: $known")
    }
    val codec =
      try SpillStoreSparkBridge.compressionCodec(storeConf.compressionCodec)
      catch {
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
        .getOrElse(new File(SpillStoreSparkBridge.localDir(), LocalSubdir)),
      memory = MemoryConf.fromOptions(opts),
      coldTierMemory = opts.get(ColdTierMemory).map(v => checkColdTierMemory(v.trim)),
      minDeltasForSnapshot = storeConf.minDeltasForSnapshot,
      minVersionsToRetain = storeConf.minVersionsToRetain,
      reportCommits = SpillStoreSparkShim.commitValidationEnabled(storeConf),
      reportSnapshotUploads = SpillStoreSparkShim.reportSnapshotUploadLag(storeConf))
  }
}
