package spillstore.bench

import java.nio.file.Files
import java.util.UUID

import scala.util.Random

import org.apache.hadoop.conf.Configuration

import org.apache.spark.sql.catalyst.expressions.{GenericInternalRow, UnsafeProjection, UnsafeRow}
import org.apache.spark.sql.execution.streaming.state._
import org.apache.spark.sql.internal.SQLConf
import org.apache.spark.sql.types.{LongType, StructField, StructType}

/**
 * StateStore-API benchmark: N keys preloaded, then batches of M read-modify-write records
 * (get + put of uniform random keys) and a commit, for each provider in one JVM, interleaved.
 *
 *   bin/sbt "spillstore/Test/runMain spillstore.bench.ApiBench [keys] [opsPerBatch] [batches]"
 *
 * Prints per provider the median batch time split into getStore (load), updates and commit,
 * and get+put records per second.
 */
object ApiBench {
  private val schema = StructType(Seq(StructField("v", LongType)))
  private val providers = Seq(
    "spillstore" -> "spillstore.SpillStoreProvider",
    "hdfs" -> "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider",
    "rocksdb" -> "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider")

  final case class Batch(loadMs: Double, updateMs: Double, commitMs: Double) {
    def totalMs: Double = loadMs + updateMs + commitMs
  }

  def main(args: Array[String]): Unit = {
    val keys = args.headOption.map(_.toInt).getOrElse(1000000)
    val ops = args.lift(1).map(_.toInt).getOrElse(100000)
    val batches = args.lift(2).map(_.toInt).getOrElse(10)
    println(s"keys=$keys opsPerBatch=$ops batches=$batches (get+put uniform), JVM max heap " +
      s"${Runtime.getRuntime.maxMemory() >> 20} MB")
    val instances = providers.map { case (name, cls) => name -> open(cls) }
    instances.foreach { case (name, p) =>
      val t = System.nanoTime()
      val s = p.getStore(0)
      var i = 0L
      while (i < keys) { s.put(row(i), row(i)); i += 1 }
      s.commit()
      println(f"$name%-10s preload ${(System.nanoTime() - t) / 1e6}%.0f ms")
    }
    val results = instances.map(_._1 -> IndexedSeq.newBuilder[Batch]).toMap
    val rnd = new Random(42)
    for (b <- 1 to batches; (name, p) <- instances) {
      results(name) += runBatch(p, b.toLong, keys, ops, rnd)
    }
    println(f"${"provider"}%-10s ${"load ms"}%9s ${"update ms"}%10s ${"commit ms"}%10s ${"batch ms"}%9s ${"ops/s"}%12s")
    results.toSeq.sortBy(r => providers.indexWhere(_._1 == r._1)).foreach { case (name, rb) =>
      val r = rb.result()
      def med(f: Batch => Double) = r.map(f).sorted.apply(r.size / 2)
      val opsPerSec = ops / (med(_.updateMs) / 1000)
      println(f"$name%-10s ${med(_.loadMs)}%9.1f ${med(_.updateMs)}%10.1f ${med(_.commitMs)}%10.1f ${med(_.totalMs)}%9.1f ${opsPerSec}%12.0f")
    }
    instances.foreach(_._2.close())
  }

  private def runBatch(p: StateStoreProvider, version: Long, keys: Int, ops: Int, rnd: Random): Batch = {
    val t0 = System.nanoTime()
    val s = p.getStore(version)
    val t1 = System.nanoTime()
    var i = 0
    while (i < ops) {
      val k = row(rnd.nextInt(keys).toLong)
      val old = s.get(k)
      s.put(k, row(if (old == null) 1L else old.getLong(0) + 1))
      i += 1
    }
    val t2 = System.nanoTime()
    s.commit()
    val t3 = System.nanoTime()
    Batch((t1 - t0) / 1e6, (t2 - t1) / 1e6, (t3 - t2) / 1e6)
  }

  private val proj = UnsafeProjection.create(schema)
  private def row(v: Long): UnsafeRow = proj(new GenericInternalRow(Array[Any](v)))

  private def open(cls: String): StateStoreProvider = {
    val sqlConf = new SQLConf
    sqlConf.setConfString("spark.sql.streaming.stateStore.rocksdb.trackTotalNumberOfRows", "false")
    sqlConf.setConfString("spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled", "true")
    val hadoopConf = new Configuration
    hadoopConf.set("sql.streaming.runId", UUID.randomUUID().toString)
    val p = StateStoreProvider.create(cls)
    p.init(StateStoreId(Files.createTempDirectory("bench").toString, 0, 0), schema, schema,
      NoPrefixKeyStateEncoderSpec(schema), useColumnFamilies = false, new StateStoreConf(sqlConf),
      hadoopConf, useMultipleValuesPerKey = false, stateSchemaProvider = None)
    p
  }
}
