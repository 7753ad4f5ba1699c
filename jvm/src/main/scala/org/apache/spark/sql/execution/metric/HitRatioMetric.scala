package org.apache.spark.sql.execution.metric

import org.apache.spark.SparkContext

/** Creates the line's hit ratio metric, whose constructor only Spark's metric package sees. */
object HitRatioMetric {
  /** A registered metric, shown as `desc` in the SQL tab. */
  def create(sc: SparkContext, desc: String): SQLMetric = {
    val m = new SpillStoreHitRatioMetric
    m.register(sc, Some(desc), countFailedValues = false)
    m
  }
}
