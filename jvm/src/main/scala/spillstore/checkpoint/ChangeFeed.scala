package spillstore.checkpoint

import java.io.{Closeable, FileNotFoundException}

import org.apache.spark.sql.execution.streaming.state.SpillStoreSparkBridge

/**
 * The changes of versions `start` to `end` of a store, read from its journals: each version's
 * changed keys once, in key order, with their final value (null: removed). Spark's state data
 * source serves this as the change feed (`readChangeFeed`).
 *
 * Pull-based, one journal open at a time: `next()` until it returns null, then `close()`.
 * Used by one thread (the reading task); not thread-safe.
 */
final class ChangeFeed(dir: CheckpointDir, start: Long, end: Long) extends Closeable {
  if (start < 1 || start > end) {
    throw new IllegalArgumentException(s"ChangeFeed of ${dir.path}: versions $start to $end " +
      "are not a range of committed versions (they start at 1)")
  }
  dir.list().missingJournal(start - 1, end).foreach { v =>
    val f = dir.file(StateFile.Journal, v)
    throw SpillStoreSparkBridge.cannotReadStateFile(f,
      new FileNotFoundException(
        s"$f does not exist: the changes of version $v were deleted or never committed"))
  }

  private var version = start - 1
  private var reader: StateFile.Reader = _
  private var stream: Closeable = _

  /** The version of the record `next()` returned last. */
  def currentVersion: Long = version

  /** The next (key, value or null) change, or null at the end. */
  def next(): (Array[Byte], Array[Byte]) = {
    while (true) {
      if (reader != null) {
        val record =
          try reader.next()
          catch {
            case e: Exception => throw StateFile.unreadable(dir.file(StateFile.Journal, version), e)
          }
        if (record != null) return record
        closeJournal()
      }
      if (version == end) return null
      version += 1
      val (r, s) = dir.open(StateFile.Journal, version)
      reader = r
      stream = s
    }
    null
  }

  private def closeJournal(): Unit = if (stream != null) {
    stream.close()
    stream = null
    reader = null
  }

  override def close(): Unit = closeJournal()
}
