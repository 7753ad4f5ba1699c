package spillstore

import org.apache.spark.sql.execution.streaming.state._

/**
 * Spark 4.1+'s `SupportsFineGrainedReplay`: read-only replays, and with checkpoint format v2
 * the ids of the snapshot and end versions from Spark's commit log.
 */
trait Spark41Replay extends SupportsFineGrainedReplay { self: SpillStoreProvider =>
  override def replayStateFromSnapshot(snapshotVersion: Long, endVersion: Long, readOnly: Boolean,
      snapshotVersionStateStoreCkptId: Option[String],
      endVersionStateStoreCkptId: Option[String]): StateStore =
    replay(snapshotVersion, endVersion, writable = !readOnly, snapshotVersionStateStoreCkptId,
      endVersionStateStoreCkptId)

  override def replayReadStateFromSnapshot(snapshotVersion: Long, endVersion: Long,
      snapshotVersionStateStoreCkptId: Option[String],
      endVersionStateStoreCkptId: Option[String]): ReadStateStore =
    replay(snapshotVersion, endVersion, writable = false, snapshotVersionStateStoreCkptId,
      endVersionStateStoreCkptId)

  override def getStateStoreChangeDataReader(startVersion: Long, endVersion: Long,
      colFamilyNameOpt: Option[String], endVersionStateStoreCkptId: Option[String])
      : SpillStoreChangeData.Reader =
    Spark4Replay.changeDataReader(this, startVersion, endVersion, colFamilyNameOpt,
      endVersionStateStoreCkptId)
}
