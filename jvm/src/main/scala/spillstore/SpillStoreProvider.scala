package spillstore

import java.util.concurrent.locks.ReentrantLock

import scala.util.control.NonFatal

import org.apache.hadoop.conf.Configuration
import org.apache.hadoop.fs.Path

import org.apache.spark.TaskContext
import org.apache.spark.internal.Logging
import org.apache.spark.sql.execution.streaming.state._
import org.apache.spark.sql.types.StructType

import spillstore.SpillStateStore.CommitStats
import spillstore.checkpoint.{CheckpointDir, Cleaner, Snapshotter, StateFile}
import spillstore.cold.ColdKeyFilter
import spillstore.heap.PrefixIndex
import spillstore.memory.MemoryManager
import spillstore.metrics.SpillStoreMetrics
import spillstore.recovery.Recovery
import spillstore.tiered.TieredState

/**
 * spillstore's `StateStoreProvider`: one per (operator, partition, store name) on an executor.
 * It wires the tiered live state, the journal writer, recovery and maintenance together and
 * owns the version the live state is at.
 *
 * Threads: the task thread opens, changes and commits stores; Spark's maintenance pools call
 * `doSnapshotMaintenance` and `doCleanupMaintenance`, which work on checkpoint files only and
 * serialize with each other on `fileMaintenance`. Version and ownership changes synchronize
 * on the provider.
 */
class SpillStoreProvider extends StateStoreProvider with Logging {
  // The driver instantiates providers only to ask for supportedCustomMetrics: keep it cheap.
  private var storeId: StateStoreId = _
  private[spillstore] var keySchema: StructType = _
  private[spillstore] var valueSchema: StructType = _
  private var conf: SpillStoreConf = _
  private var hadoopConf: Configuration = _
  private var dir: CheckpointDir = _
  private[spillstore] var state: TieredState = _
  private var recovery: Recovery = _
  private var snapshotter: Snapshotter = _
  private var cleaner: Cleaner = _
  private val fileMaintenance = new ReentrantLock()
  private var memory: MemoryManager = _

  /** Committed version the heap holds; -1 when it must be loaded before use. */
  @volatile private var loadedVersion = -1L
  /** The one store allowed to change the live state, if any. */
  @volatile private var owner: SpillStateStore = _
  /**
   * Held by a store while it checks that it owns the live state and changes it, and by a
   * takeover while it aborts and invalidates the previous owner: a zombie that passed the
   * ownership check cannot write into the batch of the attempt that replaced it. Never held
   * while taking the provider's monitor, so it adds no lock cycle.
   */
  private val writeLock = new ReentrantLock()

  override def init(
      stateStoreId: StateStoreId,
      keySchema: StructType,
      valueSchema: StructType,
      keyStateEncoderSpec: KeyStateEncoderSpec,
      useColumnFamilies: Boolean,
      storeConfs: StateStoreConf,
      hadoopConf: Configuration,
      useMultipleValuesPerKey: Boolean,
      stateSchemaProvider: Option[StateSchemaProvider]): Unit = {
    def reject(what: String): Nothing = throw new UnsupportedOperationException(
      s"spillstore does not support $what yet (store $stateStoreId). Use Spark's " +
        "RocksDBStateStoreProvider for this query, or an operator that does not need it.")
    if (useColumnFamilies) reject("column families (transformWithState)")
    if (useMultipleValuesPerKey) reject("multiple values per key")
    if (storeConfs.enableStateStoreCheckpointIds) {
      reject("spark.sql.streaming.stateStore.checkpointFormatVersion=2; set it to 1")
    }
    val index = keyStateEncoderSpec match {
      case _: NoPrefixKeyStateEncoderSpec => None
      case p: PrefixKeyScanStateEncoderSpec => Some(new PrefixIndex(keySchema, p.numColsPrefixKey))
      case other => reject(s"key encoder $other (range scans)")
    }
    this.prefixScans = index.isDefined
    this.storeId = stateStoreId
    this.keySchema = keySchema
    this.valueSchema = valueSchema
    this.conf = SpillStoreConf(storeConfs)
    this.hadoopConf = hadoopConf
    this.dir = new CheckpointDir(stateStoreId.storeCheckpointLocation(), hadoopConf, conf.codec)
    val memory = MemoryManager.get(conf.memory)
    this.memory = memory
    // Report growth often enough that a small budget is not overshot by much.
    val reportEvery = math.max(1L, math.min(TieredState.ReportEveryBytes,
      memory.effectiveBudgetBytes / 64))
    // The cold-key filter is heap eviction cannot free: a small part of the budget per store.
    val filterMax = math.max(64L << 10, math.min(ColdKeyFilter.MaxBytes,
      memory.effectiveBudgetBytes / 16))
    this.state = new TieredState(s"op${stateStoreId.operatorId}-p${stateStoreId.partitionId}-" +
      stateStoreId.storeName, index, () => conf.localDir, enforceBudget, reportEvery, filterMax)
    memory.register(state)
    this.recovery = new Recovery(dir)
    this.snapshotter = new Snapshotter(dir, () => conf.localDir)
    this.cleaner = new Cleaner(dir)
  }

  override def stateStoreId: StateStoreId = storeId

  /**
   * The growth hook: honour a pending shrink request, then evict what the memory manager asks
   * of this state until it asks nothing more (or nothing more can go: pinned entries, open
   * iterators).
   */
  private def enforceBudget(s: TieredState): Unit = {
    s.shrinkIfRequested()
    var e = memory.report(s)
    while (!e.isEmpty && s.evict(e.bytes, e.entries) > 0) e = memory.report(s)
  }

  /** This store's share of the executor's budget, so that the metric sums to the budget. */
  private[spillstore] def budgetShare: Long = {
    val status = memory.status
    status.effectiveBudgetBytes / math.max(1, status.spillables)
  }

  private var prefixScans = false
  private[spillstore] def supportsPrefixScan: Boolean = prefixScans

  private[spillstore] def checkpointPath: Path = dir.path

  override def getStore(
      version: Long,
      stateStoreCkptId: Option[String],
      forceSnapshotOnCommit: Boolean,
      loadEmpty: Boolean): StateStore = {
    if (loadEmpty) {
      throw new UnsupportedOperationException(
        s"spillstore does not support loading an empty store (loadEmpty) for $storeId yet")
    }
    open(version, writable = true, forceSnapshotOnCommit, newBatch = true)
  }

  override def getReadStore(version: Long, uniqueId: Option[String]): ReadStateStore =
    open(version, writable = false, forceSnapshotOnCommit = false, newBatch = true)

  override def upgradeReadStoreToWriteStore(
      readStore: ReadStateStore,
      version: Long,
      uniqueId: Option[String],
      forceSnapshotOnCommit: Boolean): StateStore =
    open(version, writable = true, forceSnapshotOnCommit, newBatch = false)

  private def open(version: Long, writable: Boolean, forceSnapshotOnCommit: Boolean,
      newBatch: Boolean): SpillStateStore = synchronized {
    if (version < 0) throw SpillStoreSparkBridge.unexpectedVersion(version)
    val previous = owner
    if (previous != null) {
      // A batch left open: an attempt that failed without aborting, or one still running
      // (zombie, speculation). Its changes are not committed, so they must not survive.
      logWarning(s"$previous was still open when version $version was requested; aborting it")
      writeLock.lock()
      try {
        state.abortBatch()
        previous.state = SpillStateStore.Invalidated
        owner = null
      } finally writeLock.unlock()
    }
    // A new batch starts its statistics; an upgrade continues those of its read store.
    // Acquired before loading: a load mutates both tiers, and another store's relief round
    // spills any state that is not busy (trySpill), which raced with recovery.
    if (newBatch) state.acquire()
    try ensureLoaded(version) catch {
      case e: Throwable =>
        if (newBatch) state.release()
        throw e
    }
    val store = new SpillStateStore(this, version, writable, forceSnapshotOnCommit)
    // Reported once, by the store opened after the repair (loads and maintenance both repair).
    store.snapshotsRepaired = dir.takeRepairedSnapshots()
    if (writable) owner = store
    // Spark never releases read stores (4.1+), so the task's end is when the state is idle.
    Option(TaskContext.get()).foreach { ctx =>
      ctx.addTaskCompletionListener[Unit](_ => finish(store))
    }
    store
  }

  /** Brings the heap to exactly `version`: as is, forward by journals, or by reloading. */
  private def ensureLoaded(version: Long): Unit = {
    if (loadedVersion == version) return
    try {
      val rolledForward = loadedVersion >= 0 && version > loadedVersion && {
        try { recovery.rollForward(loadedVersion, version, state); true } catch {
          case NonFatal(e) =>
            logInfo(s"Cannot roll $storeId forward from $loadedVersion to $version ($e); " +
              "reloading from the checkpoint")
            false
        }
      }
      if (!rolledForward) recovery.load(version, state)
      loadedVersion = version
    } catch {
      case e: Throwable =>
        loadedVersion = -1
        state.clear()
        throw e
    }
  }

  /** End of the task that opened `store`: abort it if it is still open, and go idle. */
  private def finish(store: SpillStateStore): Unit = synchronized {
    if (store.state == SpillStateStore.Updating && store.isWritable) abort(store)
    else if (owner == null) state.release()
  }

  private[spillstore] def isOwner(store: SpillStateStore): Boolean = owner eq store

  /** Runs a change of the live state by `store` only while it owns it (see `writeLock`). */
  private[spillstore] def changeAsOwner[T](store: SpillStateStore)(check: => Unit)(body: => T): T = {
    writeLock.lock()
    try { check; body } finally writeLock.unlock()
  }

  private[spillstore] def commit(store: SpillStateStore): Long = synchronized {
    if (store.state == SpillStateStore.Invalidated ||
      (store.state == SpillStateStore.Updating && store.isWritable && !isOwner(store))) {
      throw new IllegalStateException(
        s"Cannot commit $store: a newer attempt replaced it; its changes were discarded")
    }
    if (store.state != SpillStateStore.Updating || !store.isWritable) {
      throw new IllegalStateException(s"Cannot commit $store: it is ${store.state.name}" +
        (if (store.isWritable) "" else " and read-only"))
    }
    val newVersion = store.version + 1
    val start = System.nanoTime()
    val written = try dir.write(StateFile.Journal, newVersion)(state.writeJournal) catch {
      case NonFatal(e) =>
        abort(store)
        throw SpillStoreSparkBridge.cannotCommit(store.toString, e)
    }
    state.commitBatch()
    val millis = (System.nanoTime() - start) / 1000000
    loadedVersion = newVersion
    owner = null
    state.release()
    logDebug(s"Committed $store as version $newVersion (${written.records} changes, " +
      s"${written.bytes} bytes, $millis ms)")
    if (conf.reportCommits) SpillStoreSparkBridge.reportCommit(storeId, hadoopConf, newVersion)
    // Spark asks for this when the coordinator sees this store's snapshots lagging. The version
    // is durable already, so a failed snapshot must not fail the commit.
    if (store.snapshotOnCommit) {
      try snapshot(Some(newVersion)) catch {
        case NonFatal(e) => logWarning(s"Snapshot of version $newVersion of $storeId failed", e)
      }
    }
    // After release, so evictions the commit made room for count in this batch.
    store.committed(newVersion, CommitStats(written.bytes, written.records, millis,
      store.snapshotOnCommit, state.takeBatchCounters()))
    newVersion
  }

  private[spillstore] def abort(store: SpillStateStore): Unit = synchronized {
    if (store.state == SpillStateStore.Updating) {
      if (isOwner(store)) {
        state.abortBatch()
        owner = null
        state.release()
      }
      store.state = SpillStateStore.Aborted
    }
  }

  override def doMaintenance(): Unit = {
    doSnapshotMaintenance()
    doCleanupMaintenance()
  }

  override def doSnapshotMaintenance(): Unit = snapshot(None)

  override def doCleanupMaintenance(): Unit = withFileMaintenance {
    cleaner.cleanup(conf.minVersionsToRetain)
  }

  /** Snapshots `version`, or (None) the newest version if enough journals piled up. */
  private def snapshot(version: Option[Long]): Unit = withFileMaintenance {
    val done = version match {
      case Some(v) => snapshotter.snapshot(v, dir.list())
      case None => snapshotter.snapshotIfDue(conf.minDeltasForSnapshot)
    }
    if (conf.reportSnapshotUploads) {
      done.foreach(SpillStoreSparkBridge.reportSnapshotUploaded(storeId, hadoopConf, _))
    }
  }

  private def withFileMaintenance[T](body: => T): Unit = if (dir != null) {
    fileMaintenance.lock()
    try body finally fileMaintenance.unlock()
  }

  override def close(): Unit = synchronized {
    if (owner != null) owner.state = SpillStateStore.Invalidated
    owner = null
    if (state != null) {
      memory.unregister(state)
      state.close()
    }
    loadedVersion = -1
  }

  override def supportedCustomMetrics: Seq[StateStoreCustomMetric] = SpillStoreMetrics.all

  override def toString: String = s"SpillStoreProvider[$storeId]"
}
