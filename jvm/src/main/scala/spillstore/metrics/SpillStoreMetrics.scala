package spillstore.metrics

import org.apache.spark.SparkContext
import org.apache.spark.sql.execution.metric.{SQLMetric, SQLMetrics}
import org.apache.spark.sql.execution.streaming.state.{StateStoreCustomMetric, StateStoreCustomSizeMetric, StateStoreCustomSumMetric, StateStoreCustomTimingMetric}

/**
 * A per-store value the SQL tab shows as "avg (min, med, max)" over tasks. Spark's average
 * metric keeps one decimal: report value x 10. A store that has nothing to report leaves the
 * metric out, so it does not drag the average.
 */
final case class StateStoreCustomAverageMetric(name: String, desc: String)
  extends StateStoreCustomMetric {
  override def withNewDesc(desc: String): StateStoreCustomAverageMetric = copy(desc = desc)
  override def createSQLMetric(sparkContext: SparkContext): SQLMetric =
    SQLMetrics.createAverageMetric(sparkContext, desc)
}

/** A count measured at commit (not added up over batches), shown as a plain number. */
final case class StateStoreCustomCountGauge(name: String, desc: String)
  extends StateStoreCustomMetric {
  override def isSnapshot: Boolean = true
  override def withNewDesc(desc: String): StateStoreCustomCountGauge = copy(desc = desc)
  override def createSQLMetric(sparkContext: SparkContext): SQLMetric =
    SQLMetrics.createMetric(sparkContext, desc)
}

/**
 * The custom metrics every spillstore store reports. Spark adds them up over partitions for
 * query progress and the SQL tab, so each is a count or a size that sums meaningfully.
 */
object SpillStoreMetrics {
  // In query progress Spark sums custom metrics over partitions, which makes this one a sum of
  // percentages there; progress readers derive the ratio from hits and misses instead.
  val CacheHitRatio = StateStoreCustomAverageMetric("spillstoreCacheHitRatio",
    "spillstore: cache hit ratio (%)")
  val CacheHits = StateStoreCustomSumMetric("spillstoreCacheHits",
    "spillstore: lookups answered from the heap")
  val CacheMisses = StateStoreCustomSumMetric("spillstoreCacheMisses",
    "spillstore: lookups that had to read the cold tier")
  val ColdLoads = StateStoreCustomSumMetric("spillstoreColdLoads",
    "spillstore: entries loaded back from the cold tier (RocksDB) into the heap")
  val Evictions = StateStoreCustomSumMetric("spillstoreEvictions",
    "spillstore: entries evicted from the heap to the cold tier")
  val WriteBacks = StateStoreCustomSumMetric("spillstoreWriteBacks",
    "spillstore: evicted entries that had to be written to RocksDB (the rest were clean)")
  val ColdEntries = StateStoreCustomCountGauge("spillstoreColdEntries",
    "spillstore: entries held in the cold tier")
  val ColdBytes = StateStoreCustomSizeMetric("spillstoreColdBytes",
    "spillstore: bytes of the cold tier's RocksDB (files and memtables)", isSnapshot = true)
  val JournalBytes = StateStoreCustomSumMetric("spillstoreJournalBytes",
    "spillstore: bytes of journal files written by commits")
  val JournalRecords = StateStoreCustomSumMetric("spillstoreJournalRecords",
    "spillstore: changed keys written to journals")
  val CommitTime = StateStoreCustomTimingMetric("spillstoreCommitTimeMs",
    "spillstore: time writing journals on commit")
  // Named as Spark's HDFS provider names it, so dashboards work across providers.
  val ForcedSnapshots = StateStoreCustomSumMetric("forceSnapshotCount",
    "spillstore: snapshots written on commit because Spark asked for one (snapshot lag)")
  val SnapshotsRepaired = StateStoreCustomSumMetric("spillstoreSnapshotsRepaired",
    "spillstore: corrupt snapshots set aside and rebuilt around from older files")
  val BudgetBytes = StateStoreCustomSizeMetric("spillstoreBudgetBytes",
    "spillstore: heap budget in force (each store reports its share; they sum to the budget)",
    isSnapshot = true)
  val HeapBytes = StateStoreCustomSizeMetric("spillstoreHeapBytes",
    "spillstore: estimated heap bytes of live state", isSnapshot = true)
  val HeapEntries = StateStoreCustomCountGauge("spillstoreHeapEntries",
    "spillstore: entries held on the heap")

  /** The hit ratio entry for a store's metrics: percent x 10, absent without lookups. */
  def hitRatio(hits: Long, misses: Long): Map[StateStoreCustomMetric, Long] =
    if (hits + misses == 0) Map.empty else Map(CacheHitRatio -> (hits * 1000 / (hits + misses)))

  val all: Seq[StateStoreCustomMetric] =
    Seq(CacheHitRatio, CacheHits, CacheMisses, ColdLoads, Evictions, WriteBacks, JournalBytes, JournalRecords,
      CommitTime, ForcedSnapshots, SnapshotsRepaired, BudgetBytes, HeapBytes, HeapEntries, ColdEntries, ColdBytes)
}
