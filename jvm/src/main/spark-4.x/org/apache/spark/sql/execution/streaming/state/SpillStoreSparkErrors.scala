package org.apache.spark.sql.execution.streaming.state

import org.apache.hadoop.fs.Path

import org.apache.spark.sql.errors.QueryExecutionErrors

/** Spark 4.x's error conditions for a bad version, an unreadable or missing file, a failed
 * commit. */
object SpillStoreSparkErrors {
  def unexpectedVersion(version: Long): Throwable =
    QueryExecutionErrors.unexpectedStateStoreVersion(version)

  def cannotReadStateFile(file: Path, cause: Throwable): Throwable =
    QueryExecutionErrors.failedToReadStreamingStateFileError(file, cause)

  /** Not Spark's read error, whose message says the file does not exist: the cause names it. */
  def damagedStateFile(file: Path, cause: Throwable): Throwable =
    QueryExecutionErrors.cannotLoadStore(cause)

  /** As Spark's HDFS provider reports a snapshot it was asked to replay from and lacks. */
  def missingSnapshotFile(file: Path, store: String): Throwable =
    QueryExecutionErrors.cannotLoadStore(StateStoreErrors.stateStoreSnapshotFileNotFound(
        file.toString, store))

  def cannotCommit(store: String, cause: Throwable): Throwable =
    QueryExecutionErrors.failedToCommitStateFileError(store, cause)
}
