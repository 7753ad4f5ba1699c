package org.apache.spark.sql.execution.metric

import org.apache.spark.util.AccumulatorV2

/**
 * A hit ratio that stays a ratio when Spark adds it up. Spark adds every store's custom metric
 * values (`+=`) into one accumulator per operator and task, merges the tasks' on the driver,
 * and puts the merged value in query progress; a plain average metric therefore shows a sum of
 * ratios. Here each store adds its (hits, lookups) packed into one long
 * ([[HitRatioPacking.pack]]); packed values add up field by field (Spark's own
 * `StateStoreMetrics.combine` sums a join's four stores the same way), this accumulator keeps
 * the two sums, and its value is hits / lookups of everything added, in per mille.
 *
 * So query progress gets the operator's hit ratio (per mille), and the SQL tab, which shows an
 * "average" metric's per-task values as avg (min, med, max) divided by 10, shows each task's
 * ratio in percent. Without lookups the metric is zero (unset) and Spark leaves it out.
 *
 * It lives in Spark's package because `_value` (which `value`, `isZero` and the task updates
 * read) and `register` are Spark-private; all three are kept consistent by `update`.
 */
final class SpillStoreHitRatioMetric private[metric] ()
  extends SQLMetric(HitRatioPacking.AverageMetricType, HitRatioPacking.Unset) {
  private var hits = 0L
  private var lookups = 0L

  private def update(): Unit =
    _value = if (lookups == 0) HitRatioPacking.Unset else hits * 1000 / lookups

  override def add(packed: Long): Unit = {
    hits += HitRatioPacking.hitsOf(packed)
    lookups += HitRatioPacking.lookupsOf(packed)
    update()
  }

  override def merge(other: AccumulatorV2[Long, Long]): Unit = other match {
    case o: SpillStoreHitRatioMetric =>
      hits += o.hits
      lookups += o.lookups
      update()
    case _ => throw new UnsupportedOperationException(
      s"Cannot merge ${getClass.getName} with ${other.getClass.getName}")
  }

  override def reset(): Unit = {
    hits = 0
    lookups = 0
    update()
  }

  override def copy(): SpillStoreHitRatioMetric = {
    val c = new SpillStoreHitRatioMetric
    c.hits = hits
    c.lookups = lookups
    c.update()
    c
  }
}
