package org.apache.spark.sql.execution.streaming.state

import org.apache.spark.sql.catalyst.expressions.UnsafeRow
import org.apache.spark.util.NextIterator

import spillstore.checkpoint.ChangeFeed

/**
 * spillstore's journals as the change data reader Spark's state data source consumes
 * (`NextIterator` is Spark-private, hence this package): (type, key, value or null, batch id),
 * where version v holds the changes of batch v - 1.
 */
object SpillStoreChangeData {
  type Reader = NextIterator[(RecordType.Value, UnsafeRow, UnsafeRow, Long)]

  def reader(feed: ChangeFeed, keyFields: Int, valueFields: Int): Reader =
    new NextIterator[(RecordType.Value, UnsafeRow, UnsafeRow, Long)] {
      override protected def getNext(): (RecordType.Value, UnsafeRow, UnsafeRow, Long) = {
        val change = feed.next()
        if (change == null) { finished = true; null }
        else {
          val key = row(keyFields, change._1)
          val batchId = feed.currentVersion - 1
          if (change._2 == null) (RecordType.DELETE_RECORD, key, null, batchId)
          else (RecordType.PUT_RECORD, key, row(valueFields, change._2), batchId)
        }
      }
      override protected def close(): Unit = feed.close()
    }

  private def row(fields: Int, bytes: Array[Byte]): UnsafeRow = {
    val r = new UnsafeRow(fields)
    r.pointTo(bytes, bytes.length)
    r
  }
}
