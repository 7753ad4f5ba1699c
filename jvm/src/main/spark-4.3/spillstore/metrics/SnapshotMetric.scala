package spillstore.metrics

import org.apache.spark.sql.execution.streaming.state.{
  StateStoreCustomMetric, StateStoreCustomSizeMetric
}

/** A figure measured at commit (4.3: `isSnapshot`, so Spark does not add it up over batches). */
trait SnapshotMetric extends StateStoreCustomMetric {
  override def isSnapshot: Boolean = true
}

object SnapshotMetric {
  /** A size measured at commit: 4.3's `StateStoreCustomSizeMetric(name, desc, isSnapshot)`. */
  def size(name: String, desc: String): StateStoreCustomSizeMetric =
    StateStoreCustomSizeMetric(name, desc, isSnapshot = true)
}
