package spillstore

import org.apache.spark.sql.execution.streaming.state._

/**
 * Spark 4.0: getStore(version, ckptId); no upgrade, so a task opens a read store and then a
 * write store (they share the task's lease), and Spark aborts the read store at task end.
 * Fine-grained replay without checkpoint ids (4.0's state data source passes none: on a
 * format-v2 checkpoint its loads by v1 names fail naming the missing file and the reason).
 */
trait ProviderAdapter extends Spark4ProviderAdapter with SupportsFineGrainedReplay {
  self: SpillStoreProvider =>
  override def getStore(version: Long, stateStoreCkptId: Option[String]): StateStore =
    open(version, writable = true, forceSnapshotOnCommit = false, upgrading = null,
      ckptId = stateStoreCkptId)

  override def replayStateFromSnapshot(snapshotVersion: Long, endVersion: Long): StateStore =
    replay(snapshotVersion, endVersion, writable = true)

  override def replayReadStateFromSnapshot(snapshotVersion: Long, endVersion: Long)
      : ReadStateStore = replay(snapshotVersion, endVersion, writable = false)

  override def getStateStoreChangeDataReader(startVersion: Long, endVersion: Long,
      colFamilyNameOpt: Option[String])
      : SpillStoreChangeData.Reader =
    Spark4Replay.changeDataReader(this, startVersion, endVersion, colFamilyNameOpt)
}

trait StoreAdapter extends Spark4StoreAdapter { self: SpillStateStore => }
