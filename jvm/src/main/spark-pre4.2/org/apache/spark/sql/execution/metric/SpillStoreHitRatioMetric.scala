package org.apache.spark.sql.execution.metric

/**
 * The hit ratio metric before 4.2: the same sums and value as 4.2+'s (spark-4.2+), but up to
 * 4.1 Spark keeps `SQLMetric._value` private, so this one overrides `value` and `isZero`
 * instead of setting it.
 */
final class SpillStoreHitRatioMetric private[metric] () extends HitRatioSums {
  override def value: Long = ratio
  override def isZero: Boolean = lookups == 0
  override protected def sumsChanged(): Unit = ()
  override protected def empty(): HitRatioSums = new SpillStoreHitRatioMetric
}
