package spillstore

import org.apache.spark.sql.catalyst.expressions.UnsafeRow
import org.apache.spark.sql.execution.streaming.state._
import org.apache.spark.sql.types.StructType
import org.apache.spark.unsafe.Platform

import spillstore.metrics.SpillStoreMetrics
import spillstore.tiered.TierCounters

/**
 * A view of a provider's live state at `version`, for one task. Writable views are the batch:
 * their changes go straight into the heap tier, journaled there, and `commit` makes them
 * version + 1. Only the provider's current owner may write; a view replaced by a newer attempt
 * fails instead of touching state.
 */
final class SpillStateStore private[spillstore] (
    provider: SpillStoreProvider,
    override val version: Long,
    writable: Boolean,
    forceSnapshotOnCommit: Boolean) extends StateStore {
  import SpillStateStore._

  private val live = provider.state
  private val keyFields = provider.keySchema.length
  private val valueFields = provider.valueSchema.length
  @volatile private[spillstore] var state: State = Updating
  private var newVersion = -1L
  private var journal = NoCommit
  /** Corrupt snapshots the provider worked around since the previous store was opened. */
  @volatile private[spillstore] var snapshotsRepaired = 0L

  override def id: StateStoreId = provider.stateStoreId

  override def get(key: UnsafeRow, colFamilyName: String): UnsafeRow = {
    checkReadable(colFamilyName)
    val v = live.get(key)
    if (v == null) null else valueRow(v)
  }

  override def put(key: UnsafeRow, value: UnsafeRow, colFamilyName: String): Unit = {
    require(value != null, "Cannot put a null value")
    val bytes = new Array[Byte](value.getSizeInBytes)
    value.writeToMemory(bytes, Platform.BYTE_ARRAY_OFFSET)
    provider.changeAsOwner(this)(checkWritable(colFamilyName))(live.put(key, bytes))
  }

  override def remove(key: UnsafeRow, colFamilyName: String): Unit =
    provider.changeAsOwner(this)(checkWritable(colFamilyName))(live.remove(key))

  override def iterator(colFamilyName: String): StateStoreIterator[UnsafeRowPair] = {
    checkReadable(colFamilyName)
    pairs(live.iterator())
  }

  override def prefixScan(
      prefixKey: UnsafeRow, colFamilyName: String): StateStoreIterator[UnsafeRowPair] = {
    checkReadable(colFamilyName)
    if (!provider.supportsPrefixScan) throw new UnsupportedOperationException(
      s"prefixScan needs a store created with PrefixKeyScanStateEncoderSpec; $this was not")
    pairs(live.prefixScan(prefixKey).iterator)
  }

  override def multiGet(keys: Array[UnsafeRow], colFamilyName: String): Iterator[UnsafeRow] =
    keys.iterator.map(get(_, colFamilyName))

  override def commit(): Long = provider.commit(this)

  override def abort(): Unit = provider.abort(this)

  /** Read views hold nothing; a write view that is released unfinished is aborted. */
  override def release(): Unit = if (writable) abort() else state = Released

  override def hasCommitted: Boolean = state == Committed

  override def metrics: StateStoreMetrics = {
    val tiers = if (state == Committed) journal.tiers else live.batchCounters
    val custom: Map[StateStoreCustomMetric, Long] = Map[StateStoreCustomMetric, Long](
      SpillStoreMetrics.CacheHits -> tiers.hits,
      SpillStoreMetrics.CacheMisses -> tiers.misses,
      SpillStoreMetrics.ColdLoads -> tiers.coldLoads,
      SpillStoreMetrics.Evictions -> tiers.evictions,
      SpillStoreMetrics.WriteBacks -> tiers.writeBacks,
      SpillStoreMetrics.ColdEntries -> live.coldKeyCount,
      SpillStoreMetrics.ColdBytes -> live.coldBytes,
      SpillStoreMetrics.JournalBytes -> journal.bytes,
      SpillStoreMetrics.JournalRecords -> journal.records,
      SpillStoreMetrics.CommitTime -> journal.millis,
      SpillStoreMetrics.ForcedSnapshots -> (if (journal.forcedSnapshot) 1L else 0L),
      SpillStoreMetrics.SnapshotsRepaired -> snapshotsRepaired,
      SpillStoreMetrics.BudgetBytes -> provider.budgetShare,
      SpillStoreMetrics.HeapBytes -> live.heapBytes,
      SpillStoreMetrics.HeapEntries -> live.heapEntries) ++
      SpillStoreMetrics.hitRatio(tiers.hits, tiers.misses)
    StateStoreMetrics(live.numKeys, live.heapBytes, custom)
  }

  override def getStateStoreCheckpointInfo(): StateStoreCheckpointInfo =
    StateStoreCheckpointInfo(id.partitionId, if (newVersion >= 0) newVersion else version,
      None, None)

  override def allColumnFamilyNames: Set[String] = Set(StateStore.DEFAULT_COL_FAMILY_NAME)

  override def toString: String =
    s"SpillStateStore[operatorId=${id.operatorId}, partitionId=${id.partitionId}, " +
      s"storeName=${id.storeName}, version=$version, dir=${provider.checkpointPath}]"

  // Capabilities spillstore does not have yet (column families, multiple values per key).
  override def removeColFamilyIfExists(colFamilyName: String): Boolean =
    unsupported("column families")
  override def createColFamilyIfAbsent(colFamilyName: String, keySchema: StructType,
      valueSchema: StructType, keyStateEncoderSpec: KeyStateEncoderSpec,
      useMultipleValuesPerKey: Boolean, isInternal: Boolean): Unit = unsupported("column families")
  override def putList(key: UnsafeRow, values: Array[UnsafeRow], colFamilyName: String): Unit =
    unsupported("multiple values per key")
  override def merge(key: UnsafeRow, value: UnsafeRow, colFamilyName: String): Unit =
    unsupported("multiple values per key")
  override def mergeList(key: UnsafeRow, values: Array[UnsafeRow], colFamilyName: String): Unit =
    unsupported("multiple values per key")
  override def valuesIterator(key: UnsafeRow, colFamilyName: String): Iterator[UnsafeRow] =
    unsupported("multiple values per key")
  override def prefixScanWithMultiValues(prefixKey: UnsafeRow,
      colFamilyName: String): StateStoreIterator[UnsafeRowPair] =
    unsupported("multiple values per key")
  override def iteratorWithMultiValues(colFamilyName: String): StateStoreIterator[UnsafeRowPair] =
    unsupported("multiple values per key")

  private[spillstore] def isWritable: Boolean = writable
  private[spillstore] def snapshotOnCommit: Boolean = forceSnapshotOnCommit

  private[spillstore] def committed(version: Long, stats: CommitStats): Unit = {
    newVersion = version
    journal = stats
    state = Committed
  }

  private def valueRow(bytes: Array[Byte]): UnsafeRow = {
    val row = new UnsafeRow(valueFields)
    row.pointTo(bytes, bytes.length)
    row
  }

  private def pairs(entries: Iterator[(Array[Byte], Array[Byte])]): StateStoreIterator[UnsafeRowPair] = {
    val pair = new UnsafeRowPair()
    new StateStoreIterator(entries.map { case (k, v) =>
      val key = new UnsafeRow(keyFields)
      key.pointTo(k, k.length)
      pair.withRows(key, valueRow(v))
    })
  }

  private def checkReadable(colFamilyName: String): Unit = {
    checkColumnFamily(colFamilyName)
    if (state == Invalidated) throw invalidated()
  }

  private def checkWritable(colFamilyName: String): Unit = {
    checkColumnFamily(colFamilyName)
    if (!writable) {
      throw new UnsupportedOperationException(s"$this is read-only; upgrade it to write")
    }
    if (state == Invalidated || (state == Updating && !provider.isOwner(this))) {
      throw invalidated()
    }
    if (state != Updating) {
      throw new IllegalStateException(s"$this is already ${state.name}; cannot change it")
    }
  }

  private def checkColumnFamily(name: String): Unit =
    if (name != StateStore.DEFAULT_COL_FAMILY_NAME) unsupported(s"column family '$name'")

  private def invalidated() = new IllegalStateException(
    s"$this was replaced by a newer store of the same provider (a retried or speculative " +
      "attempt); this attempt's changes are discarded")

  private def unsupported(what: String): Nothing = throw new UnsupportedOperationException(
    s"spillstore does not support $what yet (needed by transformWithState); " +
      "use org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider for it")
}

object SpillStateStore {
  sealed abstract class State(val name: String)
  case object Updating extends State("updating")
  case object Committed extends State("committed")
  case object Aborted extends State("aborted")
  case object Released extends State("released")
  case object Invalidated extends State("invalidated")

  /** What a commit did, including the tier counters of the batch it closed. */
  final case class CommitStats(bytes: Long, records: Long, millis: Long, forcedSnapshot: Boolean,
      tiers: TierCounters)
  val NoCommit: CommitStats = CommitStats(0, 0, 0, forcedSnapshot = false, TierCounters.Zero)
}
