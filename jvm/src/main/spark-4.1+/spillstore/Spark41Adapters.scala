package spillstore

import org.apache.spark.sql.catalyst.expressions.UnsafeRow
import org.apache.spark.sql.execution.streaming.state._

/** What 4.1 added to the store API and every later line keeps: release, lists of values. */
trait Spark41StoreAdapter extends Spark4StoreAdapter { self: SpillStateStore =>
  /** Ends this view; a write view released unfinished is aborted. */
  override def release(): Unit = abort()

  override def putList(key: UnsafeRow, values: Array[UnsafeRow], colFamilyName: String): Unit =
    unsupported("multiple values per key")
  override def mergeList(key: UnsafeRow, values: Array[UnsafeRow], colFamilyName: String): Unit =
    unsupported("multiple values per key")
}
