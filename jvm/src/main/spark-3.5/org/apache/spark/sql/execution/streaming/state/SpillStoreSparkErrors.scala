package org.apache.spark.sql.execution.streaming.state

import org.apache.hadoop.fs.Path

/**
 * Spark 3.5 has no error conditions for these; the exceptions and messages are the ones 3.5's
 * HDFS provider throws.
 */
object SpillStoreSparkErrors {
  def unexpectedVersion(version: Long): Throwable =
    new IllegalArgumentException(s"Version cannot be less than 0 (got $version)")

  def cannotReadStateFile(file: Path, cause: Throwable): Throwable =
    new IllegalStateException(s"Error reading streaming state file $file", cause)

  def damagedStateFile(file: Path, cause: Throwable): Throwable =
    new IllegalStateException(s"Streaming state file $file is damaged: ${cause.getMessage}", cause)

  def missingSnapshotFile(file: Path, store: String): Throwable =
    new IllegalStateException(s"Error reading snapshot file $file of $store: it does not exist")

  def cannotCommit(store: String, cause: Throwable): Throwable =
    new IllegalStateException(s"Error committing version into $store", cause)
}
