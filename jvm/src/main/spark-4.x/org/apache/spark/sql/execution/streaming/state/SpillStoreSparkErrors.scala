package org.apache.spark.sql.execution.streaming.state

import org.apache.hadoop.fs.Path

import org.apache.spark.sql.errors.QueryExecutionErrors

/** Spark 4.x's error conditions for a bad version, an unreadable file, a failed commit. */
object SpillStoreSparkErrors {
  def unexpectedVersion(version: Long): Throwable =
    QueryExecutionErrors.unexpectedStateStoreVersion(version)

  def cannotReadStateFile(file: Path, cause: Throwable): Throwable =
    QueryExecutionErrors.failedToReadStreamingStateFileError(file, cause)

  def cannotCommit(store: String, cause: Throwable): Throwable =
    QueryExecutionErrors.failedToCommitStateFileError(store, cause)
}
