package org.apache.spark.sql.execution.metric

import org.apache.spark.util.AccumulatorV2

/**
 * How a store's (hits, lookups) travel as one long through Spark's custom metric sums, for
 * every line's `SpillStoreHitRatioMetric` (spark-4.2+ and spark-pre4.2: how it keeps its value
 * differs), which `HitRatioMetric` creates.
 */
object HitRatioPacking {
  /** Spark's name for metrics the SQL tab shows as avg (min, med, max) over tasks (base 10). */
  private[metric] val AverageMetricType = "average"
  private[metric] val Unset = -1L

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

/**
 * The sums every line's `SpillStoreHitRatioMetric` keeps: hits and lookups of everything added
 * (packed, [[HitRatioPacking.pack]]) or merged. Lines differ only in how the ratio becomes the
 * metric's value ([[sumsChanged]]): 4.2+ sets Spark's `_value`, older lines override `value`.
 */
abstract class HitRatioSums
    extends SQLMetric(HitRatioPacking.AverageMetricType, HitRatioPacking.Unset) {
  protected var hits = 0L
  protected var lookups = 0L

  /** hits / lookups in per mille; unset without lookups. */
  protected def ratio: Long = if (lookups == 0) HitRatioPacking.Unset else hits * 1000 / lookups

  /** After every change of the sums. */
  protected def sumsChanged(): Unit

  /** A new, empty metric of the same line. */
  protected def empty(): HitRatioSums

  override def add(packed: Long): Unit = {
    hits += HitRatioPacking.hitsOf(packed)
    lookups += HitRatioPacking.lookupsOf(packed)
    sumsChanged()
  }

  override def merge(other: AccumulatorV2[Long, Long]): Unit = other match {
    case o: HitRatioSums =>
      hits += o.hits
      lookups += o.lookups
      sumsChanged()
    case _ => throw new UnsupportedOperationException(
        s"Cannot merge ${getClass.getName} with ${other.getClass.getName}")
  }

  override def reset(): Unit = {
    hits = 0
    lookups = 0
    sumsChanged()
  }

  override def copy(): HitRatioSums = {
    val c = empty()
    c.hits = hits
    c.lookups = lookups
    c.sumsChanged()
    c
  }
}
