package org.apache.spark.sql.execution.datasources.v2.state

import org.apache.spark.sql.{Encoder, SQLContext}
import org.apache.spark.sql.execution.streaming.runtime.MemoryStream

/** Spark 4.1+ keeps MemoryStream in `execution.streaming.runtime`. */
object SpillStoreStateDataSourceLine {
  def memoryStream[A: Encoder](implicit sqlContext: SQLContext): MemoryStream[A] = MemoryStream[A]
}
