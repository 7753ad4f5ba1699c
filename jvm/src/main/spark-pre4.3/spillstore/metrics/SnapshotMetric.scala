package spillstore.metrics

import org.apache.spark.sql.execution.streaming.state.{
  StateStoreCustomMetric, StateStoreCustomSizeMetric
}

/** A figure measured at commit. Before 4.3 Spark has no `isSnapshot`: a plain custom metric. */
trait SnapshotMetric extends StateStoreCustomMetric

object SnapshotMetric {
  /** A size measured at commit: `StateStoreCustomSizeMetric(name, desc)` before 4.3. */
  def size(name: String, desc: String): StateStoreCustomSizeMetric =
    StateStoreCustomSizeMetric(name, desc)
}
