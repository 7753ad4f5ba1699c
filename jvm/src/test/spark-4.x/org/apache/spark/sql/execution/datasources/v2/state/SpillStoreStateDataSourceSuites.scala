package org.apache.spark.sql.execution.datasources.v2.state

import org.apache.spark.sql.execution.streaming.state.SpillStoreExcludedTests
import org.apache.spark.sql.internal.SQLConf

import spillstore.SpillStoreProvider

/**
 * Spark's own state data source suites (each line's test jar) against spillstore: the change
 * feed (`readChangeFeed`) and the reads, `snapshotStartBatchId` included, as on the HDFS
 * provider. They live in Spark's package for the base suites' package-private helpers.
 */
class SpillStoreStateDataSourceChangeDataReaderSuite extends StateDataSourceChangeDataReaderSuite
  with SpillStoreExcludedTests {
  // The HDFS provider logs every put of a batch; spillstore's journal keeps each key's last
  // change of the batch (a join row put unmatched, then matched, is one record).
  override def spillstoreExclusions: Seq[(String, String)] = Seq(
    "read stream-stream join state change feed" ->
      "expects each put of a batch, spillstore journals each key's last change")

  override protected def newStateStoreProvider(): SpillStoreProvider = new SpillStoreProvider

  override def beforeAll(): Unit = {
    super.beforeAll()
    spark.conf.set(SQLConf.STATE_STORE_PROVIDER_CLASS.key, classOf[SpillStoreProvider].getName)
  }
}

class SpillStoreStateDataSourceReadSuite extends StateDataSourceReadSuite {
  override protected def newStateStoreProvider(): SpillStoreProvider = new SpillStoreProvider

  override def beforeAll(): Unit = {
    super.beforeAll()
    spark.conf.set(SQLConf.STATE_STORE_PROVIDER_CLASS.key, classOf[SpillStoreProvider].getName)
  }
}
