package spillstore.metrics

import org.apache.spark.SparkContext
import org.apache.spark.sql.execution.metric.{
  HitRatioMetric, HitRatioPacking, SQLMetric, SQLMetrics
}
import org.apache.spark.sql.execution.streaming.state.{
  StateStoreCustomMetric, StateStoreCustomSumMetric, StateStoreCustomTimingMetric
}

/**
 * The heap tier's hit ratio: in query progress, hits / lookups of the whole operator in per
 * mille; in the SQL tab, each task's in percent as avg (min, med, max). Stores report
 * [[SpillStoreMetrics.hitRatio]]; see `SpillStoreHitRatioMetric` for how it adds up.
 */
final case class StateStoreCustomHitRatioMetric(name: String, desc: String)
    extends StateStoreCustomMetric {
  override def withNewDesc(desc: String): StateStoreCustomHitRatioMetric = copy(desc = desc)
  override def createSQLMetric(sparkContext: SparkContext): SQLMetric =
    HitRatioMetric.create(sparkContext, desc)
}

/** A count measured at commit (not added up over batches), shown as a plain number. */
final case class StateStoreCustomCountGauge(name: String, desc: String) extends SnapshotMetric {
  override def withNewDesc(desc: String): StateStoreCustomCountGauge = copy(desc = desc)
  override def createSQLMetric(sparkContext: SparkContext): SQLMetric =
    SQLMetrics.createMetric(sparkContext, desc)
}

/**
 * The custom metrics every spillstore store reports. Spark adds each up over the operator's
 * stores for query progress and the SQL tab, so each is a count, a size or a time of the whole
 * operator, or (the hit ratio) a metric that adds up as a ratio. Executor-wide figures (the
 * budget) are not here: they are the `spillstore` source of Spark's metrics system.
 */
object SpillStoreMetrics {
  val CacheHitRatio = StateStoreCustomHitRatioMetric("spillstoreCacheHitPermille",
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
  val ColdBytes = SnapshotMetric.size("spillstoreColdBytes",
    "spillstore: bytes of the cold tier's RocksDB (files and memtables)")
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
  val MaintenanceFailures = StateStoreCustomSumMetric("spillstoreMaintenanceFailures",
    "spillstore: snapshot or cleanup runs of maintenance that failed (logged; the next run retries)")
  val HeapBytes = SnapshotMetric.size("spillstoreHeapBytes",
    "spillstore: estimated heap bytes of live state")
  val HeapEntries = StateStoreCustomCountGauge("spillstoreHeapEntries",
    "spillstore: entries held on the heap")

  /** A store's hit ratio entry: its hits and lookups packed; absent without lookups. */
  def hitRatio(hits: Long, misses: Long): Map[StateStoreCustomMetric, Long] =
    if (hits + misses == 0) Map.empty
    else Map(CacheHitRatio -> HitRatioPacking.pack(hits, hits + misses))

  /** A row of the README's metric table: metrics documented together, what they mean. */
  final case class Documented(metrics: Seq[StateStoreCustomMetric], meaning: String)

  /** Every metric with its meaning in the docs (markdown); [[all]] is read from it. */
  val documented: Seq[Documented] = Seq(
    Documented(Seq(CacheHitRatio),
      "hits / lookups of the operator in this batch, in per mille " +
        "(`873` = 87.3 %); absent when no store of the operator looked a key up"),
    Documented(Seq(CacheHits, CacheMisses),
      "lookups answered from the heap (found there, or " +
        "known absent because the cold tier is empty) / that had to read the cold tier"),
    Documented(Seq(ColdLoads), "entries loaded back from RocksDB into the heap"),
    Documented(Seq(Evictions, WriteBacks),
      "entries evicted from the heap / of those, the ones " +
        "RocksDB did not already hold (written)"),
    Documented(Seq(ColdEntries, ColdBytes),
      "entries in the cold tier / its RocksDB size (files and memtables)"),
    Documented(Seq(JournalBytes, JournalRecords),
      "bytes and changed keys written by this batch's commits"),
    Documented(Seq(CommitTime),
      "time writing journals, summed over the stores (part of Spark's `commitTimeMs`)"),
    Documented(Seq(HeapBytes, HeapEntries),
      "estimated heap used by state (= `memoryUsedBytes`), and entries on the heap"),
    Documented(Seq(SnapshotsRepaired),
      "corrupt snapshots set aside and rebuilt around, and " +
        "snapshots written from the live state past a damaged journal (a WARN names the journal)"),
    Documented(Seq(MaintenanceFailures),
      "snapshot or cleanup runs of maintenance that failed: " +
        "each is a WARN naming the cause (a damaged file, a storage error); the store keeps " +
        "running and the next run retries"),
    Documented(Seq(ForcedSnapshots),
      "snapshots Spark forced on commit because snapshots lagged"))

  /** What every store reports, so a metric cannot be published without its meaning. */
  val all: Seq[StateStoreCustomMetric] = documented.flatMap(_.metrics)
}
