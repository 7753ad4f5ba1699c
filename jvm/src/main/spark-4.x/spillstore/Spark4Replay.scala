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

  /** Checkpoint ids are checkpoint format v2's, which spillstore refuses at init. */
  def checkNoCheckpointIds(provider: SpillStoreProvider, ids: Option[String]*): Unit =
    if (ids.exists(_.isDefined)) {
      throw Unsupported("checkpoint ids " +
          "(spark.sql.streaming.stateStore.checkpointFormatVersion=2)",
        s"store ${provider.stateStoreId}", "Set it to 1")
    }
}
