package org.apache.spark.sql.execution.metric

import org.apache.spark.SparkContext

/**
 * How a store's (hits, lookups) travel as one long through Spark's custom metric sums, and
 * how the metric is created, for every line's `SpillStoreHitRatioMetric` (spark-4.2+ and
 * spark-pre4.2: how it keeps its value differs).
 */
object HitRatioPacking {
  /** Spark's name for metrics the SQL tab shows as avg (min, med, max) over tasks (base 10). */
  private[metric] val AverageMetricType = "average"
  private[metric] val Unset = -1L

  /** A registered metric, shown as `desc` in the SQL tab. */
  def create(sc: SparkContext, desc: String): SpillStoreHitRatioMetric = {
    val m = new SpillStoreHitRatioMetric
    m.register(sc, Some(desc), countFailedValues = false)
    m
  }

  /** Lookups per packed value stay below this, so that sums of a few do not carry into hits. */
  private val MaxLookups = 1L << 29

  /**
   * One store's (hits, lookups) as one long: hits in the high 32 bits, lookups in the low ones.
   * Beyond 2^29 lookups both are scaled down alike, which keeps the ratio.
   */
  def pack(hits: Long, lookups: Long): Long = {
    require(0 <= hits && hits <= lookups, s"hits $hits must be within 0..lookups ($lookups)")
    var h = hits
    var l = lookups
    while (l >= MaxLookups) { h >>= 1; l >>= 1 }
    (h << 32) | l
  }

  def hitsOf(packed: Long): Long = packed >>> 32
  def lookupsOf(packed: Long): Long = packed & 0xFFFFFFFFL
}
