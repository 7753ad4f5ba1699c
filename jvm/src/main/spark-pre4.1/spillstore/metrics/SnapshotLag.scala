package spillstore.metrics

import org.apache.spark.sql.execution.streaming.state.{StateStoreId, StateStoreMetrics}

/** Spark 3.5 and 4.0 have no instance metrics: the store's metrics stay as they are. */
object SnapshotLag {
  def withInstanceMetrics(metrics: StateStoreMetrics, id: StateStoreId,
      lastSnapshot: Long): StateStoreMetrics = metrics
}
