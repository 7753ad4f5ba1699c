package org.apache.spark.sql.execution.datasources.v2.state

import org.apache.spark.sql.{Encoder, SQLContext}
import org.apache.spark.sql.execution.streaming.MemoryStream

/** Spark 4.0 keeps MemoryStream in `execution.streaming` (4.1 moved it to `.runtime`). */
object SpillStoreStateDataSourceLine {
  def memoryStream[A: Encoder](implicit sqlContext: SQLContext): MemoryStream[A] = MemoryStream[A]
}
