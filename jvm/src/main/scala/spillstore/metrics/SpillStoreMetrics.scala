package spillstore.metrics

import org.apache.spark.sql.execution.streaming.state.{StateStoreCustomMetric, StateStoreCustomSizeMetric, StateStoreCustomSumMetric, StateStoreCustomTimingMetric}

/**
 * The custom metrics every spillstore store reports. Spark adds them up over partitions for
 * query progress and the SQL tab, so each is a count or a size that sums meaningfully.
 */
object SpillStoreMetrics {
  val CacheHits = StateStoreCustomSumMetric("spillstoreCacheHits",
    "spillstore: lookups answered from the heap")
  val CacheMisses = StateStoreCustomSumMetric("spillstoreCacheMisses",
    "spillstore: lookups that had to read the cold tier")
  val JournalBytes = StateStoreCustomSumMetric("spillstoreJournalBytes",
    "spillstore: bytes of journal files written by commits")
  val JournalRecords = StateStoreCustomSumMetric("spillstoreJournalRecords",
    "spillstore: changed keys written to journals")
  val CommitTime = StateStoreCustomTimingMetric("spillstoreCommitTimeMs",
    "spillstore: time writing journals on commit")
  // Named as Spark's HDFS provider names it, so dashboards work across providers.
  val ForcedSnapshots = StateStoreCustomSumMetric("forceSnapshotCount",
    "spillstore: snapshots written on commit because Spark asked for one (snapshot lag)")
  val HeapBytes = StateStoreCustomSizeMetric("spillstoreHeapBytes",
    "spillstore: estimated heap bytes of live state", isSnapshot = true)
  val HeapEntries = StateStoreCustomSizeMetric("spillstoreHeapEntries",
    "spillstore: entries held on the heap", isSnapshot = true)

  val all: Seq[StateStoreCustomMetric] =
    Seq(CacheHits, CacheMisses, JournalBytes, JournalRecords, CommitTime, ForcedSnapshots,
      HeapBytes, HeapEntries)
}
