package spillstore.metrics

import java.util.concurrent.ConcurrentHashMap

import scala.jdk.CollectionConverters._

import com.codahale.metrics.{Gauge, MetricRegistry}

/**
 * What spillstore publishes through Spark's metrics system (`spark.metrics.conf`: JMX,
 * PrometheusServlet, Graphite, ...), registered by [[spillstore.SpillStorePlugin]]:
 *  - source `spillstore` in every JVM that runs stores (each executor; the driver in local
 *    mode): [[ExecutorStats]]' counters, gauges and the commit timer;
 *  - source `spillstore.executors` on the driver: every figure summed over the executors'
 *    latest reports, so the driver's `/metrics/prometheus` covers the whole cluster.
 */
object SpillStoreMetricsSource {
  val JvmSourceName = "spillstore"
  val ExecutorsSourceName = "spillstore.executors"
  private val ReportingExecutors = "reportingExecutors"

  /** What each metric of either source means, by name (docs/monitoring.md's table). */
  val meanings: Seq[(String, String)] =
    ExecutorStats.meanings :+ (ReportingExecutors -> "executors whose latest report counts")

  /** An executor's figures. */
  def forExecutor(stats: ExecutorStats): MetricRegistry = {
    val r = new MetricRegistry
    stats.counters.foreach { case (name, c) => r.register(name, c) }
    stats.gauges.foreach { case (name, read) => r.register(name, gauge(read())) }
    r.register(ExecutorStats.CommitTimeName, stats.commitTime)
    r
  }

  private def gauge(read: => Long): Gauge[Long] = () => read

  /** One executor's figures ([[ExecutorStats.snapshot]]) as sent to the driver. */
  final case class ExecutorReport(executorId: String, values: Map[String, Long])

  /**
   * The driver's sums over executors. Owner: the driver plugin. `receive` runs on Spark's RPC
   * threads and gauges are read on sink threads; the map is concurrent and each report is
   * immutable. A report older than `staleAfterMillis` (a lost or stopped executor) no longer
   * counts, so sums of counters may drop then, as after a restart.
   */
  final class Executors(staleAfterMillis: Long,
      clock: () => Long = () => System.currentTimeMillis()) {
    private val latest = new ConcurrentHashMap[String, (Long, ExecutorReport)]

    def receive(report: ExecutorReport): Unit = latest.put(report.executorId, clock() -> report)

    private def fresh: Iterator[ExecutorReport] = {
      val now = clock()
      latest.values.asScala.iterator.collect {
        case (at, report) if now - at <= staleAfterMillis => report
      }
    }

    def sum(name: String): Long = fresh.map(_.values.getOrElse(name, 0L)).sum

    def registry(): MetricRegistry = {
      val r = new MetricRegistry
      ExecutorStats.names.foreach(name => r.register(name, gauge(sum(name))))
      r.register(ReportingExecutors, gauge(fresh.size.toLong))
      r
    }
  }
}
