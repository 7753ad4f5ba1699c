package spillstore

import java.util.{Map => JMap}
import java.util.concurrent.{Executors, ScheduledExecutorService, TimeUnit}

import scala.jdk.CollectionConverters._
import scala.util.control.NonFatal

import org.apache.spark.SparkContext
import org.apache.spark.api.plugin.{DriverPlugin, ExecutorPlugin, PluginContext, SparkPlugin}
import org.apache.spark.internal.Logging
import org.apache.spark.network.util.JavaUtils
import org.apache.spark.sql.execution.streaming.state.SpillStoreSparkBridge

import spillstore.metrics.{ExecutorStats, SpillStoreMetricsSource}
import spillstore.metrics.SpillStoreMetricsSource.ExecutorReport

/**
 * spillstore's Spark plugin (`spark.plugins=spillstore.SpillStorePlugin`, which
 * `spillstore.configure` sets): publishes spillstore's executor-wide figures through Spark's
 * metrics system (see `SpillStoreMetricsSource`). Each executor registers its source and
 * reports its figures to the driver every [[SpillStorePlugin.ReportIntervalKey]]; the driver
 * sums them into a source of its own.
 *
 * Threads: Spark calls `init`/`registerMetrics`/`shutdown` once each; `receive` on RPC threads;
 * reports go out on one daemon thread per executor ("spillstore-metrics-report").
 */
class SpillStorePlugin extends SparkPlugin {
  override def driverPlugin(): DriverPlugin = new SpillStorePlugin.Driver
  override def executorPlugin(): ExecutorPlugin = new SpillStorePlugin.Executor
}

object SpillStorePlugin extends Logging {
  /** How often executors report to the driver (a Spark duration, e.g. `10s`). */
  val ReportIntervalKey: String = SpillStoreConf.Prefix + SpillStoreConf.MetricsReportInterval
  /** A constant (inlined), so SpillStoreConf's key docs read it without initializing this object. */
  final val DefaultReportInterval = "10s"

  private[spillstore] def reportIntervalMillis(value: String): Long = {
    val ms =
      try JavaUtils.timeStringAsMs(value)
      catch {
        case NonFatal(e) => throw new IllegalArgumentException(
            s"$ReportIntervalKey=$value is not a duration (${e.getMessage}); use e.g. 10s or 500ms",
            e)
      }
    if (ms <= 0) {
      throw new IllegalArgumentException(s"$ReportIntervalKey=$value must be positive, e.g. 10s")
    }
    ms
  }

  /** Runs each step of a plugin's shutdown even if an earlier one fails. */
  private def quietly(what: String)(body: => Unit): Unit =
    try body
    catch { case NonFatal(e) => logWarning(s"spillstore plugin: $what failed", e) }

  final class Driver extends DriverPlugin {
    private var intervalMillis = 0L
    private var local = false
    private var executors: SpillStoreMetricsSource.Executors = _
    private var unregister: Seq[() => Unit] = Nil

    override def init(sc: SparkContext, ctx: PluginContext): JMap[String, String] = {
      val interval = sc.getConf.get(ReportIntervalKey, DefaultReportInterval)
      intervalMillis = reportIntervalMillis(interval)
      local = sc.isLocal
      executors = new SpillStoreMetricsSource.Executors(staleAfterMillis = 3 * intervalMillis)
      Map(ReportIntervalKey -> interval).asJava
    }

    /** After Spark's metrics system has started (with the application id in metric names). */
    override def registerMetrics(appId: String, ctx: PluginContext): Unit = {
      val own = if (local) {
        // The local executor's source: registered here, not by the executor plugin, which
        // runs before the metrics system knows the application id.
        Seq(SpillStoreMetricsSource.JvmSourceName ->
          SpillStoreMetricsSource.forExecutor(ExecutorScope.current.stats))
      } else Nil
      unregister = (own :+ (SpillStoreMetricsSource.ExecutorsSourceName -> executors.registry()))
        .flatMap { case (name, registry) =>
          SpillStoreSparkBridge.registerMetricsSource(name, registry)
        }
    }

    override def receive(message: AnyRef): AnyRef = message match {
      case r: ExecutorReport => executors.receive(r); null
      case other => throw new IllegalArgumentException(s"spillstore plugin: unexpected $other")
    }

    override def shutdown(): Unit = unregister.foreach(u => quietly("removing a source")(u()))
  }

  final class Executor extends ExecutorPlugin {
    private var reporter: ScheduledExecutorService = _
    private var unregister: Option[() => Unit] = None
    /** This executor's figures: the scope of the SparkEnv the plugin starts in. */
    private var stats: ExecutorStats = _

    override def init(ctx: PluginContext, extraConf: JMap[String, String]): Unit = {
      val interval = reportIntervalMillis(
        Option(extraConf.get(ReportIntervalKey)).getOrElse(DefaultReportInterval))
      stats = ExecutorScope.current.stats
      if (ctx.executorID != "driver") { // in local mode the driver plugin registers it
        unregister = SpillStoreSparkBridge.registerMetricsSource(
          SpillStoreMetricsSource.JvmSourceName, SpillStoreMetricsSource.forExecutor(stats))
      }
      reporter = Executors.newSingleThreadScheduledExecutor { r =>
        val t = new Thread(r, "spillstore-metrics-report")
        t.setDaemon(true)
        t
      }
      reporter.scheduleWithFixedDelay(() => report(ctx), interval, interval, TimeUnit.MILLISECONDS)
    }

    private def report(ctx: PluginContext): Unit =
      try ctx.send(ExecutorReport(ctx.executorID, stats.snapshot()))
      catch {
        case NonFatal(e) => logDebug(s"spillstore plugin: report to the driver failed: $e")
      }

    override def shutdown(): Unit = {
      if (reporter != null) quietly("stopping the reporter")(reporter.shutdownNow())
      unregister.foreach(u => quietly("removing the source")(u()))
    }
  }
}
