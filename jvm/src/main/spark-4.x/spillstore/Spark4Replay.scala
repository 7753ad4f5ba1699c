package spillstore

import org.apache.spark.sql.execution.streaming.state.{SpillStoreChangeData, StateStore}

/** What every 4.x line's `SupportsFineGrainedReplay` does alike; each line's adapter only
 * matches Spark's signatures. */
private[spillstore] object Spark4Replay {
  def changeDataReader(provider: SpillStoreProvider, startVersion: Long, endVersion: Long,
      colFamilyNameOpt: Option[String]): SpillStoreChangeData.Reader = {
    colFamilyNameOpt.filter(_ != StateStore.DEFAULT_COL_FAMILY_NAME).foreach { cf =>
      throw Unsupported(s"column families (asked for '$cf')", s"store ${provider.stateStoreId}")
    }
    SpillStoreChangeData.reader(provider.changeFeed(startVersion, endVersion),
      provider.keySchema.length, provider.valueSchema.length)
  }

  /**
   * The state data source's snapshot reads and change feed with checkpoint ids (a format-v2
   * checkpoint, Spark 4.1+) are not built yet; its plain reads (getReadStore with an id) are.
   */
  def checkNoCheckpointIds(provider: SpillStoreProvider, what: String,
      ids: Option[String]*): Unit =
    if (ids.exists(_.isDefined)) {
      throw Unsupported(
        s"$what with checkpoint ids (a checkpoint written with " +
          "spark.sql.streaming.stateStore.checkpointFormatVersion=2)",
        s"store ${provider.stateStoreId}",
        "spillstore does not support this yet; read the state without snapshotStartBatchId " +
          "or readChangeFeed")
    }
}
