package org.apache.spark.sql.execution.streaming.state

import java.io.{InputStream, OutputStream}

import org.apache.hadoop.fs.Path

import com.codahale.metrics.MetricRegistry

import org.apache.spark.{SparkConf, SparkEnv}
import org.apache.spark.internal.Logging
import org.apache.spark.io.CompressionCodec
import org.apache.spark.metrics.source.Source
import org.apache.spark.util.Utils

/**
 * The one place where spillstore touches Spark members that are `private[spark]` or
 * `private[sql]`, for what every Spark line has alike. What differs between lines (the
 * coordinator reports, where `CheckpointFileManager` lives) is each line's
 * [[SpillStoreSparkShim]] (jvm/src/main/spark-4.1+ and spark-pre4.1).
 */
object SpillStoreSparkBridge extends Logging {
  /** Spark's codec by short or class name, the way Spark's own state stores create it. */
  def compressionCodec(name: String): Codec = {
    val conf = Option(SparkEnv.get).map(_.conf).getOrElse(new SparkConf)
    val codec = CompressionCodec.createCodec(conf, name)
    new Codec(CompressionCodec.getShortName(codec.getClass.getName), codec)
  }

  final class Codec private[SpillStoreSparkBridge] (val shortName: String, c: CompressionCodec) {
    def compress(out: OutputStream): OutputStream = c.compressedOutputStream(out)
    def decompress(in: InputStream): InputStream = c.compressedInputStream(in)
  }

  /** The executor's first local directory (as Spark's block manager uses), or java.io.tmpdir. */
  def localDir(): String = Option(SparkEnv.get).map(env => Utils.getLocalDir(env.conf))
    .getOrElse(System.getProperty("java.io.tmpdir"))

  // Spark's own errors for these (4.x); the line's SpillStoreSparkErrors builds them.
  def unexpectedVersion(version: Long): Throwable = SpillStoreSparkErrors.unexpectedVersion(version)

  def cannotReadStateFile(file: Path, cause: Throwable): Throwable =
    SpillStoreSparkErrors.cannotReadStateFile(file, cause)

  /** A file that is there but damaged (`cause` says where): unlike the above, never "missing". */
  def damagedStateFile(file: Path, cause: Throwable): Throwable =
    SpillStoreSparkErrors.damagedStateFile(file, cause)

  def cannotCommit(store: String, cause: Throwable): Throwable =
    SpillStoreSparkErrors.cannotCommit(store, cause)

  def missingSnapshotFile(file: Path, store: String): Throwable =
    SpillStoreSparkErrors.missingSnapshotFile(file, store)

  /**
   * Adds `registry` to this JVM's Spark metrics system as source `name` (its sinks, e.g. JMX
   * and the driver's PrometheusServlet, publish it); returns what removes it again. None
   * outside Spark.
   */
  def registerMetricsSource(name: String, registry: MetricRegistry): Option[() => Unit] =
    Option(SparkEnv.get).map { env =>
      val source = new Source {
        override val sourceName: String = name
        override val metricRegistry: MetricRegistry = registry
      }
      env.metricsSystem.registerSource(source)
      () => env.metricsSystem.removeSource(source)
    }
}
