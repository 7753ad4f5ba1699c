package org.apache.spark.sql.execution.streaming.state

import spillstore.SpillStoreProvider

/** What 4.1's StateStoreSuiteBase added and 4.2's (run on 4.2 and 4.3) keeps. */
trait SpillStoreConformance41 extends StateStoreSuiteBase[SpillStoreProvider] {
  self: SpillStoreConformanceSuite =>

  override def newStoreProviderWithClonedConf(storeId: StateStoreId): SpillStoreProvider =
    provider(storeId, sqlConf = cloneSQLConf())

  override def newStoreProviderNoInit(): SpillStoreProvider = new SpillStoreProvider
}
