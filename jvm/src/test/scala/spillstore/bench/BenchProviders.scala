package spillstore.bench

import java.nio.file.Files
import java.util.UUID

import org.apache.hadoop.conf.Configuration

import org.apache.spark.sql.catalyst.expressions.UnsafeRow
import org.apache.spark.sql.execution.streaming.state._
import org.apache.spark.sql.internal.SQLConf
import org.apache.spark.sql.types.{LongType, StructField, StructType}

/** The three providers under comparison, opened the way Spark opens them on an executor. */
object BenchProviders {
  val Spillstore = "spillstore"
  val Hdfs = "hdfs"
  val Rocksdb = "rocksdb"
  val All: Seq[String] = Seq(Spillstore, Hdfs, Rocksdb)

  private val classes = Map(
    Spillstore -> "spillstore.SpillStoreProvider",
    Hdfs -> "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider",
    Rocksdb -> "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider")

  /** One long column: the key and the value of every benchmark. */
  val schema: StructType = StructType(Seq(StructField("v", LongType)))

  /** A fresh checkpoint root for one provider. */
  def newRoot(): String = Files.createTempDirectory("spillstore-bench").toString

  /**
   * Opens `name` on `root` (partition 0 of operator 0). RocksDB gets its best settings
   * (changelog checkpointing on, row counting off); `spillstoreConf` are spillstore options,
   * named after `spark.sql.streaming.stateStore.spillstore.`.
   */
  def open(name: String, root: String, spillstoreConf: Map[String, String] = Map.empty)
      : StateStoreProvider = {
    val sqlConf = new SQLConf
    sqlConf.setConfString("spark.sql.streaming.stateStore.rocksdb.trackTotalNumberOfRows", "false")
    sqlConf.setConfString("spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled",
      "true")
    spillstoreConf.foreach { case (k, v) =>
      sqlConf.setConfString(s"spark.sql.streaming.stateStore.spillstore.$k", v)
    }
    val hadoopConf = new Configuration
    hadoopConf.set("sql.streaming.runId", UUID.randomUUID().toString)
    val p = StateStoreProvider.create(classes(name))
    p.init(StateStoreId(root, 0, 0), schema, schema, NoPrefixKeyStateEncoderSpec(schema),
      useColumnFamilies = false, new StateStoreConf(sqlConf), hadoopConf,
      useMultipleValuesPerKey = false, stateSchemaProvider = None)
    p
  }

  /** The value of a custom metric of a store, 0 if the provider has no such metric. */
  def customMetric(s: StateStore, name: String): Long =
    s.metrics.customMetrics.collectFirst { case (m, v) if m.name == name => v }.getOrElse(0L)

  /**
   * A reusable one-long `UnsafeRow`. Every provider copies what it is given, so one key row
   * and one value row per benchmark avoid measuring the benchmark's own allocation.
   */
  final class LongRow {
    val row: UnsafeRow = {
      val r = new UnsafeRow(1)
      r.pointTo(new Array[Byte](16), 16)
      r
    }
    def set(v: Long): UnsafeRow = { row.setLong(0, v); row }
  }
}
