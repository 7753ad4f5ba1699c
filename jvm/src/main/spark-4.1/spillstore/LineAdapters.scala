package spillstore

import org.apache.spark.sql.execution.streaming.state._

import spillstore.metrics.SnapshotLag

/** Spark 4.1: getStore(version, ckptId) and the first upgradeReadStoreToWriteStore. */
trait ProviderAdapter extends Spark4ProviderAdapter with Spark41Replay with SnapshotLag.Provider {
  self: SpillStoreProvider =>
  override def getStore(version: Long, stateStoreCkptId: Option[String]): StateStore =
    open(version, writable = true, forceSnapshotOnCommit = false, upgrading = null,
      ckptId = stateStoreCkptId)

  override def upgradeReadStoreToWriteStore(
      readStore: ReadStateStore, version: Long, uniqueId: Option[String]): StateStore =
    upgrade(readStore, version, forceSnapshotOnCommit = false, ckptId = uniqueId)
}

trait StoreAdapter extends Spark41StoreAdapter { self: SpillStateStore => }
