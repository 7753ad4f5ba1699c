package spillstore

import org.apache.spark.sql.execution.streaming.state.{SpillStoreChangeData, StateStore}

/** What every 4.x line's `SupportsFineGrainedReplay` does alike; each line's adapter only
 * matches Spark's signatures. */
private[spillstore] object Spark4Replay {
  def changeDataReader(provider: SpillStoreProvider, startVersion: Long, endVersion: Long,
      colFamilyNameOpt: Option[String],
      endId: Option[String] = None): SpillStoreChangeData.Reader = {
    colFamilyNameOpt.filter(_ != StateStore.DEFAULT_COL_FAMILY_NAME).foreach { cf =>
      throw Unsupported(s"column families (asked for '$cf')", s"store ${provider.stateStoreId}")
    }
    SpillStoreChangeData.reader(provider.changeFeed(startVersion, endVersion, endId),
      provider.keySchema.length, provider.valueSchema.length)
  }
}
