package org.apache.spark.sql.execution.streaming.state

import spillstore.SpillStoreProvider

/** Spark 4.0's own test jar against the 4.0 build. */
trait SpillStoreConformanceLine extends StateStoreSuiteBase[SpillStoreProvider] {
  self: SpillStoreConformanceSuite =>

  def spillstoreExclusions: Seq[(String, String)] = SpillStoreConformanceExclusions.common :+ (
    "two concurrent StateStores - one for read-only and one for read-write" ->
      ("opens a read store and a write store of one provider outside any task; spillstore " +
        "shares the live state between them only within one task attempt, and outside a task the " +
        "newer store takes over. What the test checks, in one task as 4.0's aggregation opens " +
        "them: OwnershipSuite's 'a read store then a write store opened by one task...', and " +
        "every aggregation of this line's end-to-end tests"))
}
