package org.apache.spark.sql.execution.streaming.state

/** Tests of every 4.x line's StateStoreSuiteBase that do not apply to spillstore, and why. */
object SpillStoreConformanceExclusions {
  /** Test-name prefix -> why. */
  val common: Seq[(String, String)] = Seq(
    "SPARK-18342: commit fails when rename fails" ->
      "asserts the built-in providers' class names (HDFSStateStore / RocksDBStateStore) in the message",
    "StateStore.get" ->
      "asserts HDFSBackedStateStoreProvider's file name (1.delta) and error condition")

  /** Why Spark's memory test cannot apply when every entry spills. */
  val memoryWithEverythingSpilled: (String, String) = "reports memory usage" ->
    ("asserts that memoryUsedBytes grows with one committed entry; spillstore reports its heap " +
      "there, and with a one-byte budget the entry leaves the heap at the commit (its cold-key " +
      "filter, whose first layer made the heap grow before, gets no share of such a budget)")
}
