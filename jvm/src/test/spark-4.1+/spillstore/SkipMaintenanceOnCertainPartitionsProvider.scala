package spillstore

/**
 * spillstore whose maintenance never runs on partitions 0 and 1, as the providers of Spark's
 * StateStoreInstanceMetricSuite: those stores write no snapshot, so their snapshot-lag metric
 * must stay at its initial value while the others report their snapshots.
 */
class SkipMaintenanceOnCertainPartitionsProvider extends SpillStoreProvider {
  private def skipped: Boolean = stateStoreId.partitionId == 0 || stateStoreId.partitionId == 1

  override private[spillstore] def snapshotMaintenance(): Unit =
    if (!skipped) super.snapshotMaintenance()

  override private[spillstore] def cleanupMaintenance(): Unit =
    if (!skipped) super.cleanupMaintenance()
}
