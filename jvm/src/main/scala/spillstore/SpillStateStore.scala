package spillstore

import org.apache.spark.sql.catalyst.expressions.UnsafeRow
import org.apache.spark.sql.execution.streaming.state._
import org.apache.spark.unsafe.Platform

import spillstore.heap.KeyValue
import spillstore.metrics.{SnapshotLag, SpillStoreMetrics, TierCounters}
import spillstore.tiered.Lease

/**
 * A view of a provider's live state at `version`, for one task. Writable views are the batch:
 * their changes go straight into the heap tier, journaled there, and `commit` makes them
 * version + 1. Every call first checks that `lease` still owns the live state (see
 * tiered.Ownership's state table); a view whose lease ended (commit,
 * abort, task end, a newer attempt, an unload) throws instead of touching the state.
 *
 * With checkpoint format v2 a write view is one commit attempt (`attempt`): the id it commits
 * under, the id its base was loaded with, and the lineage its journal records. What Spark is
 * told after the commit ([[checkpointInfo]]) comes from these and the committed version, all
 * fixed once `state` is committed, so repeated calls agree (SPARK-51573).
 */
final class SpillStateStore private[spillstore] (
    private[spillstore] val provider: SpillStoreProvider,
    private[spillstore] val lease: Lease,
    override val version: Long,
    writable: Boolean,
    forceSnapshotOnCommit: Boolean,
    private[spillstore] val attempt: Option[SpillStateStore.Attempt] = None)
    extends StoreAdapter {
  import SpillStateStore._

  private[spillstore] val live = lease.state
  private val keyFields = provider.keySchema.length
  private val valueFields = provider.valueSchema.length
  @volatile private[spillstore] var state: State = Updating
  private var newVersion = -1L
  private var journal = NoCommit
  /** Corrupt snapshots the provider worked around since the previous store was opened. */
  @volatile private[spillstore] var snapshotsRepaired = 0L
  /** Maintenance runs of the provider that failed since the previous store was opened. */
  @volatile private[spillstore] var maintenanceFailures = 0L

  override def id: StateStoreId = provider.stateStoreId

  // Spark's reads and writes, once the line's adapter ([[StoreAdapter]]) has checked the
  // column family (4.x) and wrapped iterators into its iterator type.
  private[spillstore] def getValue(key: UnsafeRow): UnsafeRow = {
    use()
    val kv = live.get(key)
    if (kv == null) null else valueRow(kv)
  }

  private[spillstore] def putValue(key: UnsafeRow, value: UnsafeRow): Unit = {
    require(value != null, "Cannot put a null value")
    checkWritable()
    use()
    try live.put(key, value)
    catch {
      // A key or value too long to hold: refused before anything changed; say whose.
      case e: IllegalArgumentException =>
        throw new IllegalArgumentException(s"$this: ${e.getMessage}", e)
    }
  }

  private[spillstore] def removeKey(key: UnsafeRow): Unit = {
    checkWritable()
    use()
    live.remove(key)
  }

  /**
   * All pairs, and what closes the iteration (so that eviction can go on before the end).
   * Spark 3.5 and 4.0 iterate a write store after its commit (complete output mode): then the
   * pairs are the committed version's, through a read view of it.
   */
  private[spillstore] def allPairs(): (Iterator[UnsafeRowPair], () => Unit) = {
    if (state == Committed) return provider.openCommitted(this).allPairs()
    use()
    val entries = guarded(live.iterator())
    (pairs(entries), () => entries.close())
  }

  private[spillstore] def prefixPairs(prefixKey: UnsafeRow): Iterator[UnsafeRowPair] = {
    if (!provider.supportsPrefixScan) throw new UnsupportedOperationException(
      s"prefixScan needs a store created with PrefixKeyScanStateEncoderSpec; $this was not")
    use()
    pairs(live.prefixScan(prefixKey).iterator)
  }

  /**
   * Each step of a live-state iterator under the lease, like any other call; closing it (Spark's
   * `StateStoreIterator.close`) lets eviction go on before the batch ends.
   */
  private def guarded[T](it: Iterator[T] with AutoCloseable): Iterator[T] with AutoCloseable =
    new Iterator[T] with AutoCloseable {
      private var exhausted = false
      override def hasNext: Boolean = !exhausted && {
        use()
        exhausted = !it.hasNext
        !exhausted
      }
      override def next(): T = {
        use()
        it.next()
      }
      override def close(): Unit = if (live.ownership.holds(lease)) it.close()
    }

  override def commit(): Long = provider.commit(this)

  override def abort(): Unit = provider.abort(this)

  override def hasCommitted: Boolean = state == Committed

  /** Spark's `metrics`, which the line's adapter calls as it calls reads (serialized where
   *  one task calls its store from two threads). */
  private[spillstore] def storeMetrics: StateStoreMetrics = {
    // A committed view reports the state as its commit left it; an open one reads it live.
    val (tiers, now) =
      if (state == Committed) (journal.tiers, journal.live)
      else if (live.ownership.holds(lease)) (live.batchCounters, provider.liveFigures(live))
      else (NoCommit.tiers, NoCommit.live)
    val custom: Map[StateStoreCustomMetric, Long] = Map[StateStoreCustomMetric, Long](
      SpillStoreMetrics.CacheHits -> tiers.hits,
      SpillStoreMetrics.CacheMisses -> tiers.misses,
      SpillStoreMetrics.ColdLoads -> tiers.coldLoads,
      SpillStoreMetrics.Evictions -> tiers.evictions,
      SpillStoreMetrics.WriteBacks -> tiers.writeBacks,
      SpillStoreMetrics.ColdEntries -> now.coldEntries,
      SpillStoreMetrics.ColdBytes -> now.coldBytes,
      SpillStoreMetrics.JournalBytes -> journal.bytes,
      SpillStoreMetrics.JournalRecords -> journal.records,
      SpillStoreMetrics.CommitTime -> journal.millis,
      SpillStoreMetrics.ForcedSnapshots -> (if (journal.forcedSnapshot) 1L else 0L),
      SpillStoreMetrics.SnapshotsRepaired -> snapshotsRepaired,
      SpillStoreMetrics.MaintenanceFailures -> maintenanceFailures,
      SpillStoreMetrics.HeapBytes -> now.heapBytes,
      SpillStoreMetrics.HeapEntries -> now.heapEntries) ++
      SpillStoreMetrics.hitRatio(tiers.hits, tiers.misses)
    SnapshotLag.withInstanceMetrics(StateStoreMetrics(now.numKeys, now.heapBytes, custom), id,
      provider.lastSnapshotWritten)
  }

  override def toString: String =
    s"SpillStateStore[operatorId=${id.operatorId}, partitionId=${id.partitionId}, " +
      s"storeName=${id.storeName}, version=$version, dir=${provider.checkpointPath}]"

  private[spillstore] def isWritable: Boolean = writable
  private[spillstore] def snapshotOnCommit: Boolean = forceSnapshotOnCommit

  private[spillstore] def committed(version: Long, stats: CommitStats): Unit = {
    newVersion = version
    journal = stats
    state = Committed
  }

  private def valueRow(kv: KeyValue): UnsafeRow = {
    val row = new UnsafeRow(valueFields)
    row.pointTo(kv.base, Platform.BYTE_ARRAY_OFFSET + kv.valueOffset, kv.valueLength)
    row
  }

  private def pairs(entries: Iterator[KeyValue]): Iterator[UnsafeRowPair] = {
    val pair = new UnsafeRowPair()
    entries.map { kv =>
      val key = new UnsafeRow(keyFields)
      key.pointTo(kv.base, Platform.BYTE_ARRAY_OFFSET + kv.offset, kv.keyLength)
      pair.withRows(key, valueRow(kv))
    }
  }

  /** The committed version, or this view's when it has not committed. */
  private[spillstore] def checkpointVersion: Long = if (newVersion >= 0) newVersion else version

  /**
   * Spark's `getStateStoreCheckpointInfo` as (version, checkpoint id, base checkpoint id):
   * with format v1 (no attempt) the version and no ids, as before; with v2 the committed
   * version and ids, only once committed (before, there is no id to report).
   */
  private[spillstore] def checkpointInfo: (Long, Option[String], Option[String]) =
    attempt match {
      case None => (checkpointVersion, None, None)
      case Some(a) =>
        if (state != Committed) {
          throw new IllegalStateException(s"$this has no checkpoint id to report: it is " +
            s"${state.name}, and an id exists only once its commit returned")
        }
        (newVersion, Some(a.id), a.baseId)
    }

  /** At the start of every call: the lease still owns the live state, and this view is open. */
  private def use(): Unit = {
    live.ownership.enter(lease)
    checkOpen()
  }

  private def checkOpen(): Unit = {
    if (state == Invalidated) throw invalidated()
    if (state != Updating) {
      throw new IllegalStateException(s"$this is already ${state.name}; cannot use it")
    }
  }

  private def checkWritable(): Unit = if (!writable) {
    throw new UnsupportedOperationException(s"$this is read-only; upgrade it to write")
  }

  private def invalidated() = new IllegalStateException(
    s"$this was replaced by a newer store of the same provider (a retried or speculative " +
      "attempt); this attempt's changes are discarded")

  private[spillstore] def unsupported(what: String): Nothing = throw Unsupported(what, this)
}

object SpillStateStore {
  /**
   * A format-v2 commit attempt: `id` names its journal, `baseId` is the id its base was loaded
   * with (None: version 0, or v1 names), `lineage` ends with (version + 1, id).
   */
  final case class Attempt(id: String, baseId: Option[String],
      lineage: spillstore.checkpoint.Lineage)

  sealed abstract class State(val name: String)
  case object Updating extends State("updating")
  case object Committed extends State("committed")
  case object Aborted extends State("aborted")
  case object Released extends State("released")
  case object Invalidated extends State("invalidated")

  /** The live state's figures at one moment, for metrics. */
  final case class LiveFigures(numKeys: Long, heapBytes: Long, heapEntries: Long,
      coldEntries: Long, coldBytes: Long)

  /** What a commit did, including the tier counters of the batch it closed. */
  final case class CommitStats(bytes: Long, records: Long, millis: Long, forcedSnapshot: Boolean,
      tiers: TierCounters, live: LiveFigures)
  val NoCommit: CommitStats = CommitStats(0, 0, 0, forcedSnapshot = false, TierCounters.Zero,
    LiveFigures(0, 0, 0, 0, 0))
}
