package org.apache.spark.sql.execution.streaming.state

import java.io.{InputStream, OutputStream}
import java.util.UUID

import scala.util.control.NonFatal

import org.apache.hadoop.conf.Configuration
import org.apache.hadoop.fs.Path

import com.codahale.metrics.MetricRegistry

import org.apache.spark.{SparkConf, SparkEnv}
import org.apache.spark.internal.Logging
import org.apache.spark.io.CompressionCodec
import org.apache.spark.metrics.source.Source
import org.apache.spark.sql.errors.QueryExecutionErrors
import org.apache.spark.util.Utils

/**
 * The one place where spillstore touches Spark members that are `private[spark]` or
 * `private[sql]`. Everything version-sensitive about Spark internals lives here, so a build
 * for another Spark line only has to change this file.
 */
object SpillStoreSparkBridge extends Logging {
  /** Where Spark puts the query's run id in a store's Hadoop conf (StreamExecution.RUN_ID_KEY). */
  private val RunIdKey = "sql.streaming.runId"

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

  def unexpectedVersion(version: Long): Throwable =
    QueryExecutionErrors.unexpectedStateStoreVersion(version)

  def cannotReadStateFile(file: Path, cause: Throwable): Throwable =
    QueryExecutionErrors.failedToReadStreamingStateFileError(file, cause)

  def cannotCommit(store: String, cause: Throwable): Throwable =
    QueryExecutionErrors.failedToCommitStateFileError(store, cause)

  /** Tells the coordinator (commit validation) that `version` is committed. */
  def reportCommit(storeId: StateStoreId, hadoopConf: Configuration, version: Long): Unit =
    if (hadoopConf.get(RunIdKey) != null) { // else not inside a streaming query
      StateStore.reportCommitToCoordinator(version, storeId, hadoopConf)
    }

  /**
   * Tells the coordinator a snapshot of `version` exists. Without it the coordinator sees the
   * provider as lagging and (4.2+) forces a snapshot on every commit.
   */
  def reportSnapshotUploaded(
      storeId: StateStoreId, hadoopConf: Configuration, version: Long): Unit = {
    val runId = hadoopConf.get(RunIdKey)
    if (runId == null) return // not inside a streaming query (unit tests, state data source)
    try {
      val providerId = StateStoreProviderId(storeId, UUID.fromString(runId))
      StateStoreProvider.coordinatorRef.foreach(
        _.snapshotUploaded(providerId, version, System.currentTimeMillis()))
    } catch {
      case NonFatal(e) => logWarning(s"Could not report snapshot of version $version: $e")
    }
  }

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
