package spillstore.metrics

import java.util.concurrent.TimeUnit
import java.util.concurrent.atomic.LongAdder

import com.codahale.metrics.{Counter, Timer}

import org.apache.spark.sql.execution.streaming.state.StateStoreCustomMetric

/**
 * Executor-wide figures of every spillstore store of one executor (one
 * [[spillstore.ExecutorScope]]: in a JVM, one per SparkEnv), for Spark's metrics system (see
 * [[SpillStoreMetricsSource]]): counters since the executor started, and gauges read when a
 * sink polls.
 *
 * {{{
 * what              | written by                                   | read by
 * ------------------+----------------------------------------------+--------------------------
 * tier counters     | a live state, under its lock, when a lease    | sinks, the executor plugin's
 *                   | ends, a relief round spilled it, or it is     | reports (any thread)
 *                   | freed (TierCounting.publishToExecutor)      |
 * commit figures    | the committing task thread (the provider)     | same
 * snapshot bytes    | maintenance threads (Snapshotter)            | same
 * maintenance fails | maintenance threads (the provider)           | same
 * relief, pressure  | the memory manager and its pressure monitor  | same
 * gauge readers     | registered once, by the executor's scope:    | same (each gauge
 *                   | its memory manager's figures when created,   | computes its value
 *                   | the cold tiers' local directories (LocalDirs) | at each read)
 * }}}
 * Counters are Dropwizard's (thread-safe `LongAdder`s); nothing here takes a lock. The hot
 * path (get/put) touches none of it: a state adds its lookups in one step per batch. Metrics
 * reads no other package: what the gauges show is registered by the packages that have it,
 * and reads 0 until then (no store has loaded in this executor).
 */
final class ExecutorStats {
  import ExecutorStats._

  private val meaningsByName = Seq.newBuilder[(String, String)]
  /** Records what the metric `name` means (markdown), for docs/monitoring.md's table. */
  private def described(name: String, meaning: String): String = {
    meaningsByName += name -> meaning
    name
  }
  private def asInProgress(m: StateStoreCustomMetric): String =
    s"as `${m.name}` in query progress, over all stores"

  private val countersByName = Seq.newBuilder[(String, Counter)]
  private def counter(name: String, meaning: String): Counter = {
    val c = new Counter
    countersByName += described(name, meaning) -> c
    c
  }

  val cacheHits: Counter = counter("cacheHits", asInProgress(SpillStoreMetrics.CacheHits))
  val cacheMisses: Counter = counter("cacheMisses", asInProgress(SpillStoreMetrics.CacheMisses))
  val coldLoads: Counter = counter("coldLoads", asInProgress(SpillStoreMetrics.ColdLoads))
  val evictions: Counter = counter("evictions", asInProgress(SpillStoreMetrics.Evictions))
  val writeBacks: Counter = counter("writeBacks", asInProgress(SpillStoreMetrics.WriteBacks))
  val commits: Counter = counter("commits", "commits of all stores")
  val journalBytes: Counter = counter("journalBytes", asInProgress(SpillStoreMetrics.JournalBytes))
  val journalRecords: Counter =
    counter("journalRecords", asInProgress(SpillStoreMetrics.JournalRecords))
  val snapshotBytes: Counter = counter("snapshotBytes",
    "bytes of snapshots written (each a new run of what changed, and its manifest)")
  val maintenanceFailures: Counter = counter("maintenanceFailures",
    "snapshot or cleanup maintenance runs that failed (each a WARN; the store keeps running)")
  val reliefRounds: Counter =
    counter("reliefRounds", "memory-manager rounds that evicted to get under the budget")
  val pressureInterventions: Counter =
    counter("pressureInterventions", "times the heap-pressure monitor lowered the budget")
  /** Counters by metric name (Spark's convention: camelCase under the `spillstore` source). */
  val counters: Seq[(String, Counter)] = countersByName.result()

  /** Commit durations (journal write and cold-tier apply); Dropwizard keeps percentiles. */
  val commitTime = new Timer
  described(CommitTimeName, "commit durations in ns, with percentiles")
  private val commitTimeNanos = new LongAdder
  described(CommitTimeMsName, "total commit time in ms (divide its rate by that of `commits`)")

  @volatile private var memory: Option[MemoryFigures] = None
  @volatile private var coldDisk: () => Long = () => 0L

  /** Registers the executor's memory manager's figures for the gauges. */
  def registerMemory(figures: MemoryFigures): Unit = memory = Some(figures)

  /**
   * Registers how to read the bytes of the files under the cold tiers' local directories
   * (memtables not yet flushed are not in them).
   */
  def registerColdDisk(read: () => Long): Unit = coldDisk = read

  private def ofMemory(read: MemoryFigures => Long): Long = memory.map(read).getOrElse(0L)

  /** Gauges by metric name: read at each poll. */
  val gauges: Seq[(String, () => Long)] = Seq(
    described("budgetBytes", "heap budget in force (configured x the heap-pressure factor)") ->
      (() => ofMemory(_.effectiveBudgetBytes)),
    described("budgetConfiguredBytes", "heap budget configured") -> (() => ofMemory(_.budgetBytes)),
    described("heapBytes", "heap used by all stores' state") -> (() => ofMemory(_.heapBytes)),
    described("heapEntries", "entries on the heap") -> (() => ofMemory(_.heapEntries)),
    described("openStores", "stores loaded in the executor") -> (() => ofMemory(_.openStores)),
    described("coldBytes",
      "RocksDB size of all cold tiers (files and memtables, as of each " +
        "store's last batch)") -> (() => ofMemory(_.coldBytes)),
    described("coldDiskBytes", "bytes of the files under the cold tiers' local dirs") ->
      (() => coldDisk()))

  /** What each metric above means, by name, in the order defined. */
  private val meaningsInOrder: Seq[(String, String)] = meaningsByName.result()

  /** Adds what a live state counted since it last reported. */
  def addTier(c: TierCounters): Unit = {
    cacheHits.inc(c.hits)
    cacheMisses.inc(c.misses)
    coldLoads.inc(c.coldLoads)
    evictions.inc(c.evictions)
    writeBacks.inc(c.writeBacks)
  }

  def addCommit(journalBytesWritten: Long, records: Long, nanos: Long): Unit = {
    commits.inc()
    journalBytes.inc(journalBytesWritten)
    journalRecords.inc(records)
    commitTime.update(nanos, TimeUnit.NANOSECONDS)
    commitTimeNanos.add(nanos)
  }

  /**
   * Every counter and gauge by name, plus the total commit time in ms (a timer does not add up
   * over executors; this does): what an executor reports to the driver.
   */
  def snapshot(): Map[String, Long] =
    counters.map { case (n, c) => n -> c.getCount }.toMap ++
      gauges.map { case (n, g) => n -> g() } +
      (CommitTimeMsName -> TimeUnit.NANOSECONDS.toMillis(commitTimeNanos.sum()))
}

object ExecutorStats {
  val CommitTimeName = "commitTime"
  private val CommitTimeMsName = "commitTimeMs"

  /** What the memory gauges read at each poll: the executor's memory manager's figures. */
  trait MemoryFigures {
    def effectiveBudgetBytes: Long
    def budgetBytes: Long
    def heapBytes: Long
    def heapEntries: Long
    def openStores: Long
    /** RocksDB's own size (files and memtables) as the stores last saw it. */
    def coldBytes: Long
  }

  private lazy val any = new ExecutorStats

  /** The names in [[ExecutorStats.snapshot]], the same for every instance. */
  lazy val names: Seq[String] = any.counters.map(_._1) ++ any.gauges.map(_._1) :+ CommitTimeMsName

  /** What each metric means, by name, in the order defined (docs/monitoring.md's table). */
  lazy val meanings: Seq[(String, String)] = any.meaningsInOrder
}
