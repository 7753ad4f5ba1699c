package org.apache.spark.sql.execution.streaming.state

import org.apache.hadoop.conf.Configuration

/**
 * Spark 3.5 and 4.0: the coordinator has neither commit validation nor snapshot-lag tracking,
 * so there is nothing to report; `CheckpointFileManager` is still in `execution.streaming`.
 */
object SpillStoreSparkShim {
  type CheckpointFileManager = org.apache.spark.sql.execution.streaming.CheckpointFileManager
  val CheckpointFileManager = org.apache.spark.sql.execution.streaming.CheckpointFileManager

  def commitValidationEnabled(conf: StateStoreConf): Boolean = false

  def reportSnapshotUploadLag(conf: StateStoreConf): Boolean = false

  def reportCommit(storeId: StateStoreId, hadoopConf: Configuration, version: Long): Unit = ()

  def reportSnapshotUploaded(
      storeId: StateStoreId, hadoopConf: Configuration, version: Long): Unit = ()
}
