package org.apache.spark.sql.execution.metric

import org.apache.spark.util.AccumulatorV2

/**
 * The hit ratio metric before 4.2: the same sums and value as 4.2+'s (spark-4.2+), but up to
 * 4.1 Spark keeps `SQLMetric._value` private, so this one overrides `value` and `isZero`
 * instead of setting it.
 */
final class SpillStoreHitRatioMetric private[metric] ()
  extends SQLMetric(HitRatioPacking.AverageMetricType, HitRatioPacking.Unset) {
  private var hits = 0L
  private var lookups = 0L

  override def value: Long =
    if (lookups == 0) HitRatioPacking.Unset else hits * 1000 / lookups

  override def isZero: Boolean = lookups == 0

  override def add(packed: Long): Unit = {
    hits += HitRatioPacking.hitsOf(packed)
    lookups += HitRatioPacking.lookupsOf(packed)
  }

  override def merge(other: AccumulatorV2[Long, Long]): Unit = other match {
    case o: SpillStoreHitRatioMetric =>
      hits += o.hits
      lookups += o.lookups
    case _ => throw new UnsupportedOperationException(
      s"Cannot merge ${getClass.getName} with ${other.getClass.getName}")
  }

  override def reset(): Unit = {
    hits = 0
    lookups = 0
  }

  override def copy(): SpillStoreHitRatioMetric = {
    val c = new SpillStoreHitRatioMetric
    c.hits = hits
    c.lookups = lookups
    c
  }
}
