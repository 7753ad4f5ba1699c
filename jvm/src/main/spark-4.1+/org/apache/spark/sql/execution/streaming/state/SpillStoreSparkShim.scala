package org.apache.spark.sql.execution.streaming.state

import java.util.UUID

import scala.util.control.NonFatal

import org.apache.hadoop.conf.Configuration

import org.apache.spark.internal.Logging

/**
 * The Spark-private calls of 4.1+ (commit validation and snapshot-lag reports to the state
 * store coordinator) and where this line keeps `CheckpointFileManager`.
 */
object SpillStoreSparkShim extends Logging {
  type CheckpointFileManager =
    org.apache.spark.sql.execution.streaming.checkpointing.CheckpointFileManager
  val CheckpointFileManager =
    org.apache.spark.sql.execution.streaming.checkpointing.CheckpointFileManager

  /** Where Spark puts the query's run id in a store's Hadoop conf (StreamExecution.RUN_ID_KEY). */
  private val RunIdKey = "sql.streaming.runId"

  /** Whether the coordinator validates commits (then [[reportCommit]] must report them). */
  def commitValidationEnabled(conf: StateStoreConf): Boolean = conf.commitValidationEnabled

  /** Whether the coordinator tracks snapshot lag (then snapshots must be reported). */
  def reportSnapshotUploadLag(conf: StateStoreConf): Boolean = conf.reportSnapshotUploadLag

  /** Tells the coordinator (commit validation) that `version` is committed. */
  def reportCommit(storeId: StateStoreId, hadoopConf: Configuration, version: Long): Unit =
    if (hadoopConf.get(RunIdKey) != null) { // else not inside a streaming query
      StateStore.reportCommitToCoordinator(version, storeId, hadoopConf)
    }

  /**
   * Tells the coordinator a snapshot of `version` exists. Without it the coordinator sees the
   * provider as lagging and (4.2+) forces a snapshot on every commit.
   */
  def reportSnapshotUploaded(
      storeId: StateStoreId, hadoopConf: Configuration, version: Long): Unit = {
    val runId = hadoopConf.get(RunIdKey)
    if (runId == null) return // not inside a streaming query (unit tests, state data source)
    try {
      val providerId = StateStoreProviderId(storeId, UUID.fromString(runId))
      StateStoreProvider.coordinatorRef.foreach(
        _.snapshotUploaded(providerId, version, System.currentTimeMillis()))
    } catch {
      case NonFatal(e) => logWarning(s"Could not report snapshot of version $version: $e")
    }
  }
}
