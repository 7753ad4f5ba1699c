package org.apache.spark.sql.execution.streaming.state

/** Spark 4.2's own test jar against the 4.2 build. */
trait SpillStoreConformanceLine extends SpillStoreConformance41 {
  self: SpillStoreConformanceSuite =>
  def spillstoreExclusions: Seq[(String, String)] =
    SpillStoreConformanceExclusions.common
}
