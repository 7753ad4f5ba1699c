package spillstore

/** Spark 4.3: maintenance in two pools (snapshots, cleanup) instead of doMaintenance. */
trait SparkLineProvider extends SparkLine42Provider { self: SpillStoreProvider =>
  override def doSnapshotMaintenance(): Unit = snapshotMaintenance()
  override def doCleanupMaintenance(): Unit = cleanupMaintenance()
}

trait SparkLineStore extends SparkLine42Store { self: SpillStateStore => }
