package spillstore.metrics

import org.apache.spark.sql.execution.streaming.state.{
  StateStoreId, StateStoreInstanceMetric, StateStoreMetrics, StateStoreProvider,
  StateStoreSnapshotLastUploadInstanceMetric
}

/**
 * Snapshot lag as Spark 4.1+ shows it: each store reports the newest version its provider
 * wrote a snapshot of (-1 before the first) as Spark's own instance metric, which query
 * progress shows as `SnapshotLastUploaded.partition_<p>_<store>` for the stores lagging most.
 */
object SnapshotLag {
  /** Spark's metric (name, -1 initial value, newest wins when merged), not yet for one store. */
  private val LastUploaded = StateStoreSnapshotLastUploadInstanceMetric()

  /** `metrics` with the snapshot-lag instance metric of store `id`. */
  def withInstanceMetrics(metrics: StateStoreMetrics, id: StateStoreId,
      lastSnapshot: Long): StateStoreMetrics =
    metrics.copy(instanceMetrics =
      Map(LastUploaded.withNewId(id.partitionId, id.storeName) -> lastSnapshot))

  /** The provider's side: the instance metrics its stores report. */
  trait Provider extends StateStoreProvider {
    override def supportedInstanceMetrics: Seq[StateStoreInstanceMetric] = Seq(LastUploaded)
  }
}
