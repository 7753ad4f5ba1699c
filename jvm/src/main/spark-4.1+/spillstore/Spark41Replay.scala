package spillstore

import org.apache.spark.sql.execution.streaming.state._

/** Spark 4.1+'s `SupportsFineGrainedReplay`: read-only replays and checkpoint ids. */
trait Spark41Replay extends SupportsFineGrainedReplay { self: SpillStoreProvider =>
  override def replayStateFromSnapshot(snapshotVersion: Long, endVersion: Long, readOnly: Boolean,
      snapshotVersionStateStoreCkptId: Option[String],
      endVersionStateStoreCkptId: Option[String]): StateStore = {
    Spark4Replay.checkNoCheckpointIds(this, "replayStateFromSnapshot (snapshotStartBatchId)",
      snapshotVersionStateStoreCkptId, endVersionStateStoreCkptId)
    replay(snapshotVersion, endVersion, writable = !readOnly)
  }

  override def replayReadStateFromSnapshot(snapshotVersion: Long, endVersion: Long,
      snapshotVersionStateStoreCkptId: Option[String],
      endVersionStateStoreCkptId: Option[String]): ReadStateStore = {
    Spark4Replay.checkNoCheckpointIds(this, "replayReadStateFromSnapshot (snapshotStartBatchId)",
      snapshotVersionStateStoreCkptId, endVersionStateStoreCkptId)
    replay(snapshotVersion, endVersion, writable = false)
  }

  override def getStateStoreChangeDataReader(startVersion: Long, endVersion: Long,
      colFamilyNameOpt: Option[String], endVersionStateStoreCkptId: Option[String])
      : SpillStoreChangeData.Reader = {
    Spark4Replay.checkNoCheckpointIds(this, "the change feed (readChangeFeed)",
      endVersionStateStoreCkptId)
    Spark4Replay.changeDataReader(this, startVersion, endVersion, colFamilyNameOpt)
  }
}
