package org.apache.spark.sql.execution.streaming.state

/** Spark 4.3 runs Spark 4.2's test jar (4.3's is not on the Maven repository). */
trait SpillStoreConformanceLine extends SpillStoreConformance41 {
  self: SpillStoreConformanceSuite =>
  def spillstoreExclusions: Seq[(String, String)] =
    SpillStoreConformanceExclusions.common.filterNot(_._1 == "StateStore.get") ++ Seq(
      "StateStore.get" ->
        ("asserts HDFSBackedStateStoreProvider's file name (1.delta) and error condition; also calls " +
          "StateStore.removeFromLoadedProvidersAndClose with its 4.2 signature (NoSuchMethodError on 4.3)"),
      "SPARK-34270: StateStoreMetrics.combine" -> SizeMetricBreak,
      "SPARK-35763: StateStoreCustomMetric withNewDesc" -> SizeMetricBreak,
      "SPARK-48997: maintenance threads with exceptions" ->
        ("exercises Spark's maintenance pool with the test jar's HDFS-based provider that fails in " +
          "doMaintenance, which 4.3's pool no longer calls; it never touches the provider under test")
    )

  private def SizeMetricBreak = "written against 4.2's StateStoreCustomSizeMetric(name, desc), " +
    "which 4.3 replaced by (name, desc, isSnapshot): NoSuchMethodError; spillstore's own metric " +
    "tests cover the 4.3 constructor"
}
