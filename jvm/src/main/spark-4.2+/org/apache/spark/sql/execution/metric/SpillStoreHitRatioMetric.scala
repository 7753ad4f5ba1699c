package org.apache.spark.sql.execution.metric

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
 * read) and `register` are Spark-private. The sums are [[HitRatioSums]]'.
 */
final class SpillStoreHitRatioMetric private[metric] () extends HitRatioSums {
  override protected def sumsChanged(): Unit = _value = ratio
  override protected def empty(): HitRatioSums = new SpillStoreHitRatioMetric
}
