package spillstore

import java.util.concurrent.atomic.AtomicLong
import java.util.concurrent.locks.ReentrantLock

import scala.util.control.NonFatal

import org.apache.hadoop.conf.Configuration
import org.apache.hadoop.fs.Path

import org.apache.spark.TaskContext
import org.apache.spark.internal.Logging
import org.apache.spark.sql.execution.streaming.state._
import org.apache.spark.sql.types.StructType

import spillstore.SpillStateStore.CommitStats
import spillstore.checkpoint.{
  ChangeFeed, CheckpointDir, Cleaner, Lineage, Manifest, Snapshotter, SortedChanges,
  StateFile
}
import spillstore.cold.{ColdMemory, ColdTier}
import spillstore.heap.PrefixIndex
import spillstore.memory.MemoryManager
import spillstore.metrics.{ExecutorStats, SpillStoreMetrics}
import spillstore.recovery.Recovery
import spillstore.tiered.{Lease, TieredState}

/**
 * spillstore's `StateStoreProvider`: one per (operator, partition, store name) on an executor.
 * It wires the tiered live state, the journal writer, recovery and maintenance together, and
 * arbitrates leases and the commit protocol.
 *
 * Threads and ownership (the state table is tiered.Ownership's):
 *  - Task threads open stores. A store call runs only while the store's `Lease` owns the
 *    live state; nothing else touches an owned state. A task's read and write stores share one lease
 *    (a 4.1+ upgrade, or 3.5/4.0's separate read and write stores in one task); a store opened
 *    by another task attempt (a retry, a speculative copy) revokes the older lease, aborting
 *    its batch: the newest attempt wins and the older one's next call throws. The older
 *    attempt's call may be in flight, so it keeps the old live state (and frees it) while the
 *    newer one loads the version into a new one.
 *  - A lease ends at commit, at abort of its write store, or at the end of its task (the
 *    completion listener); ending it twice is a no-op.
 *  - Spark's maintenance pools call `doSnapshotMaintenance` / `doCleanupMaintenance`: they work
 *    on checkpoint files only and serialize with each other (and a forced snapshot) on
 *    `fileMaintenance`, never touching the live state. `close` (Spark's unload, on a
 *    maintenance thread) frees the live state, or, if a task owns it, leaves that to the task,
 *    between its calls; a store still open fails its next call instead of touching freed memory.
 *  - Relief rounds of the executor's memory manager spill the live state only while it is idle.
 *  - On remote storage a pool thread opens a write store's journal file while its batch runs
 *    (`checkpoint.EarlyFile`); it touches that file only, and the commit takes it.
 * Which live state, at which version, with which batch open: `LiveStateHolder`, changed only under
 * the provider's monitor.
 *
 * Checkpoint format v2 (`checkpointIds`, set at init): every write store gets a fresh id
 * for its commit (`SpillStateStore.Attempt`), its journal is `<v+1>_<id>.journal`, and a load
 * asks for a (version, id) pair and gets exactly that lineage. Maintenance trusts only pairs
 * Spark passed in, which its commit log holds:
 *
 * | field | meaning | written | read |
 * |---|---|---|---|
 * | `confirmed` | the lineage of the newest pair Spark passed in (getStore, getReadStore, upgrade; its tip is that version), `Lineage.Empty` before any; with v1, unused | by task threads opening a store, under the provider's monitor; only ever moves to a newer tip (volatile) | snapshot and cleanup maintenance threads, which snapshot and clean only along it |
 */
class SpillStoreProvider extends JarLine.Checked with ProviderAdapter with Logging {
  // The driver instantiates providers only to ask for supportedCustomMetrics: keep it cheap.
  private var storeId: StateStoreId = _
  private[spillstore] var keySchema: StructType = _
  private[spillstore] var valueSchema: StructType = _
  private var conf: SpillStoreConf = _
  private var hadoopConf: Configuration = _
  private var dir: CheckpointDir = _
  private var liveHolder: LiveStateHolder = _
  private var snapshotter: Snapshotter = _
  private var cleaner: Cleaner = _
  private val fileMaintenance = new ReentrantLock()
  private[spillstore] var memory: MemoryManager = _
  /** The executor's figures ([[ExecutorScope]]), taken at init. */
  private[spillstore] var executorStats: ExecutorStats = _
  /**
   * Checkpoint format v2: files named by checkpoint ids (see the class doc). Set at init from
   * Spark's conf, or by the first read given an id ([[readIdsOf]]); read by maintenance threads.
   */
  @volatile private var checkpointIds = false
  @volatile private var confirmed: Lineage = Lineage.Empty

  /** The live state (see [[LiveStateHolder]]). */
  private[spillstore] def live: TieredState = liveHolder.live

  /** What init rejects: a capability spillstore does not have yet. */
  private[spillstore] def reject(stateStoreId: StateStoreId, what: String): Nothing =
    throw Unsupported(what, s"store $stateStoreId")

  /**
   * Spark's `init`, once the line's adapter ([[ProviderAdapter]]) has turned its arguments
   * into these: `prefixKeyColumns` is the number of key columns prefix scans use, if any;
   * `checkpointIds`, whether Spark runs checkpoint format v2 (4.0+).
   */
  private[spillstore] def initStore(
      stateStoreId: StateStoreId,
      keySchema: StructType,
      valueSchema: StructType,
      prefixKeyColumns: Option[Int],
      storeConfs: StateStoreConf,
      hadoopConf: Configuration,
      checkpointIds: Boolean = false): Unit = {
    this.checkpointIds = checkpointIds
    this.prefixScans = prefixKeyColumns.isDefined
    this.storeId = stateStoreId
    this.keySchema = keySchema
    this.valueSchema = valueSchema
    this.conf = SpillStoreConf(storeConfs)
    this.hadoopConf = hadoopConf
    this.dir = new CheckpointDir(stateStoreId.storeCheckpointLocation(), hadoopConf, conf.codec)
    val scope = ExecutorScope.current
    this.executorStats = scope.stats
    val memory = scope.memory(conf.memory)
    this.memory = memory
    ColdMemory.configure(conf.coldTierMemory.getOrElse(
        ColdMemory.defaultFor(conf.memory.budgetFor(Runtime.getRuntime.maxMemory))))
    // Every live state gets pieces of its own: a doomed one may still be used or freed while
    // its successor loads (the prefix index is mutable, and reuses a row for its projections).
    val newLiveState = () => {
      val s = new TieredState(
        s"op${stateStoreId.operatorId}-p${stateStoreId.partitionId}-" +
          stateStoreId.storeName, prefixKeyColumns.map(new PrefixIndex(keySchema, _)),
        () => conf.localDir, memory, executorStats, coldTiers, onFreed = memory.unregister)
      memory.register(s, conf.memory)
      s
    }
    this.liveHolder = new LiveStateHolder(newLiveState, new Recovery(dir, () => conf.localDir),
      stateStoreId.toString, checkpointIds)
    this.snapshotter = new Snapshotter(dir, () => conf.localDir, executorStats)
    this.cleaner = new Cleaner(dir)
  }

  override def stateStoreId: StateStoreId = storeId

  private var prefixScans = false
  private[spillstore] def supportsPrefixScan: Boolean = prefixScans

  private[spillstore] def checkpointPath: Path = dir.path

  /** The newest version this provider wrote a snapshot of, -1 before its first. */
  private[spillstore] def lastSnapshotWritten: Long = snapshotter.lastWritten

  /** How cold tiers are opened; tests substitute one whose writes fail. */
  private[spillstore] var coldTiers: (java.io.File, String) => ColdTier = ColdTier.create

  /** `upgradeReadStoreToWriteStore` (4.1+): the read store's lease goes on writing. */
  private[spillstore] def upgrade(readStore: ReadStateStore, version: Long,
      forceSnapshotOnCommit: Boolean, ckptId: Option[String]): SpillStateStore = readStore match {
    case r: SpillStateStore if r.provider eq this =>
      open(version, writable = true, forceSnapshotOnCommit, upgrading = r, ckptId = ckptId)
    case other => throw new IllegalArgumentException(
        s"Cannot upgrade $other to a write store of $this: it was not opened by this provider")
  }

  /**
   * A read view of the version `store` committed, under its checkpoint id with format v2 (3.5
   * and 4.0 iterate a write store after its commit). Spark did not pass this pair in, and the
   * attempt may yet lose, so it confirms nothing.
   */
  private[spillstore] def openCommitted(store: SpillStateStore): SpillStateStore =
    open(store.checkpointVersion, writable = false, forceSnapshotOnCommit = false,
      upgrading = null, ckptId = store.attempt.map(_.id), fromSpark = false)

  /**
   * Opens a store on the live state at `version` (with checkpoint format v2, the pair
   * (`version`, `ckptId`)) under a lease (see the class doc): the lease of `upgrading`, the
   * current lease when it is this task's, or a new one. `fromSpark`: Spark passed the pair in,
   * from its commit log, so maintenance may trust its lineage (`confirmed`).
   */
  private[spillstore] def open(version: Long, writable: Boolean, forceSnapshotOnCommit: Boolean,
      upgrading: SpillStateStore, replayFrom: Long = -1L, replayFromId: Option[String] = None,
      ckptId: Option[String] = None, fromSpark: Boolean = true): SpillStateStore = {
    if (version < 0) throw SpillStoreSparkBridge.unexpectedVersion(version)
    if (ckptId.isDefined && !checkpointIds) readIdsOf(version, ckptId.get, writable)
    if (ckptId.isDefined && version == 0) {
      throw new IllegalArgumentException(s"$this: version 0 is the empty state and has no " +
        s"checkpoint id, but ${ckptId.get} was passed")
    }
    val task = Option(TaskContext.get())
    val taskAttemptId = task.map(_.taskAttemptId()).getOrElse(-1L)
    val holder = task.map(t => s"task attempt $taskAttemptId (partition ${t.partitionId()})")
      .getOrElse("a store opened outside a task") + s" of $this"
    synchronized {
      liveHolder.reclaimDoomed()
      val current = live.ownership.current
      val (lease, fresh) =
        if (upgrading != null) {
          if (!live.ownership.holds(upgrading.lease)) {
            throw new IllegalStateException(s"Cannot upgrade $upgrading to a write store: " +
              s"its lease ended (${upgrading.lease.endedBy})")
          }
          (upgrading.lease, false)
        } else if (current != null && taskAttemptId >= 0 && current.taskAttemptId == taskAttemptId) {
          (current, false)
        } else {
          if (current != null && live.ownership.revoke(
              s"replaced by $holder (a retried or speculative " +
                "attempt)")) {
            // An attempt still running (zombie, speculation), or one that never ended its store:
            // its batch must not survive, and its call may be in flight, so the state is left to
            // it to free and this attempt loads a new one.
            logWarning(s"$holder takes over from ${current.holder}, whose store was still open; " +
              "its batch is discarded and the version reloaded from the checkpoint")
            liveHolder.takeOver()
          }
          (live.ownership.acquire(holder, taskAttemptId, holderIdle(task)), true)
        }
      liveHolder.opening(writable, version)
      try liveHolder.load(version, ckptId, replayFrom, replayFromId)
      catch {
        case e: Throwable =>
          if (fresh) live.release(lease, s"loading version $version failed: $e")
          throw e
      }
      // Spark asks only for versions its commit log has (a retried batch for the one before).
      knownCommitted(version)
      if (checkpointIds && fromSpark && replayFrom < 0 && version > confirmed.tip) {
        confirmed = liveHolder.loadedLineage
      }
      val attempt =
        if (writable && checkpointIds) {
          val id = java.util.UUID.randomUUID().toString
          Some(SpillStateStore.Attempt(id, ckptId,
              liveHolder.loadedLineage.plus(version + 1, id)))
        } else None
      val store =
        new SpillStateStore(this, lease, version, writable, forceSnapshotOnCommit, attempt)
      // Reported once, by the write store opened after the repair (loads and maintenance both
      // repair) or the failure: the store whose metrics an operator reports (3.5 and 4.0 open a
      // read store first in the same task, 4.1+ upgrade one).
      if (writable) {
        store.snapshotsRepaired = dir.takeRepairedSnapshots()
        store.maintenanceFailures = maintenanceFailures.getAndSet(0)
      }
      liveHolder.opened(store)
      // Its journal is written at commit: on remote storage, opened while the batch runs.
      if (writable) journalDir(store).openEarly(StateFile.Journal, version + 1)
      // Spark never releases read stores (4.1+), so the task's end is when the state is idle.
      if (fresh) task.foreach(_.addTaskCompletionListener[Unit](_ => finish(lease)))
      store
    }
  }

  /**
   * When a lease's holder can be in no call of its stores any more: its task has ended (its
   * completion listener runs after every thread of the task stopped calling), or, outside a
   * task, the thread that opened them has died. (A live opener may have handed its store to
   * another thread, which may be in a call: only its death tells.)
   */
  private def holderIdle(task: Option[TaskContext]): () => Boolean = task match {
    case Some(t) => () => t.isCompleted()
    case None =>
      val opener = Thread.currentThread()
      () => !opener.isAlive
  }

  /**
   * Spark's `SupportsFineGrainedReplay` (4.0+, through the line's adapter): `endVersion` built
   * from the snapshot of `snapshotVersion` and the journals after it; with checkpoint format
   * v2 (4.1+ passes the ids), along the lineage of (`endVersion`, `endId`), whose snapshot of
   * `snapshotVersion` must be `snapshotId`'s.
   */
  private[spillstore] def replay(snapshotVersion: Long, endVersion: Long, writable: Boolean,
      snapshotId: Option[String] = None, endId: Option[String] = None): SpillStateStore =
    open(endVersion, writable, forceSnapshotOnCommit = false, upgrading = null,
      replayFrom = snapshotVersion, replayFromId = snapshotId, ckptId = endId)

  /**
   * The changes of versions `start` to `end` (Spark's change feed), with format v2 along the
   * lineage of (`end`, `endId`); the caller closes it.
   */
  private[spillstore] def changeFeed(start: Long, end: Long,
      endId: Option[String] = None): ChangeFeed = {
    // Ids passed in are followed even when the conf says v1 (see `readIdsOf`).
    val names = dir.lineageOf(end, endId, checkpointIds || endId.isDefined, deep = true)
    new ChangeFeed(dir.along(names), start, end)
  }

  /**
   * An id passed in while Spark's conf says format v1. A reader that has loaded nothing yet
   * follows the ids: Spark's state data source takes them from the commit log whatever its
   * session's format conf (4.3 records the format in the commit log only, not in the offset log
   * its reader's conf comes from). A write would commit v1 names onto an id's lineage, which no
   * later load could follow: refused (Spark 4.2 goes on passing a v2 checkpoint's ids after a
   * switch back to v1).
   */
  private def readIdsOf(version: Long, id: String, writable: Boolean): Unit = synchronized {
    if (writable || liveHolder.loadedVersion >= 0) {
      throw Unsupported(
        s"checkpoint id $id for version $version with " +
          "spark.sql.streaming.stateStore.checkpointFormatVersion=1", s"store $stateStoreId",
        "This checkpoint was written with checkpointFormatVersion=2: run it with 2")
    }
    if (!checkpointIds) {
      logInfo(s"$this reads checkpoint ids: the checkpoint was written with format v2")
      checkpointIds = true
      liveHolder.readIds()
    }
  }

  /** Where `store`'s commit writes: along its attempt's lineage with format v2. */
  private def journalDir(store: SpillStateStore): CheckpointDir =
    store.attempt.fold(dir)(a => dir.along(a.lineage))

  /** End of the task that took `lease`: abort its open batch, if any, and go idle. */
  private def finish(lease: Lease): Unit = synchronized {
    if (!live.ownership.holds(lease)) lease.state.ownership.freeIfDoomedBy(lease)
    else {
      liveHolder.abortOpenBatch()
      dir.dropEarly()
      live.release(lease, "its task ended")
    }
  }

  /**
   * Commits `store`'s batch as version + 1. The journal is written first; once it is durable the
   * version is committed whatever follows, so a failure to apply it to the live state (the cold
   * tier's write) drops the live state, to be reloaded from the checkpoint by the next open.
   */
  private[spillstore] def commit(store: SpillStateStore): Long = {
    val newVersion = store.version + 1
    val stats = synchronized {
      if (!live.ownership.holds(store.lease)) {
        store.live.ownership.freeIfDoomedBy(store.lease)
        throw new IllegalStateException(s"Cannot commit $store: its lease on the live state " +
          s"ended (${store.lease.endedBy}); its changes were discarded")
      }
      if (store.state != SpillStateStore.Updating || !store.isWritable || !liveHolder.isWriter(
          store)) {
        throw new IllegalStateException(s"Cannot commit $store: it is ${store.state.name}" +
          (if (store.isWritable) "" else " and read-only"))
      }
      val start = System.nanoTime()
      val written =
        try journalDir(store).write(StateFile.Journal, newVersion)(live.writeJournal)
        catch {
          case NonFatal(e) =>
            endBatch(store, SpillStateStore.Aborted, "its commit failed")(live.abortBatch())
            throw SpillStoreSparkBridge.cannotCommit(store.toString, e)
        }
      snapshotter.committed(Manifest.JournalFile(newVersion, store.attempt.map(_.id)), written)
      val applying = System.nanoTime()
      try live.commitBatch()
      catch {
        case NonFatal(e) =>
          logWarning(s"$storeId: version $newVersion is durable but the live state could not " +
            s"apply it ($e); dropping the live state, to be reloaded from the checkpoint")
          endBatch(store, SpillStateStore.Aborted, "its commit failed")(liveHolder.drop())
          throw SpillStoreSparkBridge.cannotCommit(store.toString, e)
      }
      val end = System.nanoTime()
      val nanos = end - start
      val millis = nanos / 1000000
      executorStats.addCommit(written.bytes, written.records, nanos)
      liveHolder.committed(newVersion, store.attempt.map(_.id))
      knownCommitted(newVersion)
      repairPastDamagedJournal(newVersion)
      var stats: CommitStats = null
      // As the lease ends, after the evictions the commit made room for (they count in this
      // batch), while it still owns the state (RocksDB is read only by its user).
      endBatch(store, SpillStateStore.Committed, "committed",
        lastLook = () =>
          stats = CommitStats(written.bytes, written.records, millis, store.snapshotOnCommit,
            live.takeBatchCounters(), liveFigures(live)))(())
      // Where a commit's time went (journal written, then published; then applied to the
      // live state), for the storage at hand.
      logDebug(s"Committed $store as version $newVersion (${written.records} changes, " +
        s"${written.bytes} bytes, $millis ms: journal ${(applying - start) / 1000000} ms, of " +
        s"which publishing ${written.publishNanos / 1000000} ms; applying " +
        s"${(end - applying) / 1000000} ms)")
      stats
    }
    store.committed(newVersion, stats)
    if (conf.reportCommits) SpillStoreSparkShim.reportCommit(storeId, hadoopConf, newVersion)
    // Spark asks for this when the coordinator sees this store's snapshots lagging. The version
    // is durable already, so a failed snapshot must not fail the commit. It works on files
    // only, outside the live state's lock.
    if (store.snapshotOnCommit) {
      try snapshot(Some(newVersion -> store.attempt.fold(Lineage.V1)(_.lineage)))
      catch {
        case NonFatal(e) => logWarning(s"Snapshot of version $newVersion of $storeId failed", e)
      }
    }
    newVersion
  }

  /**
   * The newest journal snapshot maintenance found damaged, -1 if none: every version from it
   * on could no longer be loaded, though this provider holds a newer one exactly.
   */
  private val damagedJournal = new AtomicLong(-1L)

  /**
   * Under the lock, by the lease that just committed `version`, if a journal at or below it is
   * damaged: writes `version`'s snapshot from the live state, so that loads of it and later
   * versions (a restart, another executor) do without that journal. A failure loses nothing
   * more and is retried by the next commit. It waits for a maintenance run at most a second:
   * a long snapshot in flight would otherwise hold up the batch.
   */
  private def repairPastDamagedJournal(version: Long): Unit = {
    val damaged = damagedJournal.get
    if (damaged < 0 || !fileMaintenance.tryLock(1, java.util.concurrent.TimeUnit.SECONDS)) return
    try {
      val entries = live.iterator()
      try snapshotter.along(liveHolder.loadedLineage).snapshotFrom(version,
          entries.map(kv => kv.key -> kv.value))
      finally entries.close()
      damagedJournal.compareAndSet(damaged, -1L)
      dir.countRepair()
      logWarning(s"$storeId: journal $damaged is damaged; wrote the snapshot of version " +
        s"$version from the live state, so that loading it or a later version needs no " +
        "damaged journal")
      if (conf.reportSnapshotUploads) {
        SpillStoreSparkShim.reportSnapshotUploaded(storeId, hadoopConf, version)
      }
    } catch {
      case NonFatal(e) => logWarning(s"$storeId: the repair snapshot of version $version past " +
            s"damaged journal $damaged failed; the next commit retries it", e)
    } finally fileMaintenance.unlock()
  }

  /**
   * Under the lock: ends `store`'s batch with `change`, its state and its lease (`lastLook`
   * runs as the lease ends: see [[TieredState.release]]).
   */
  private def endBatch(store: SpillStateStore, to: SpillStateStore.State, why: String,
      lastLook: () => Unit = () => ())(change: => Unit): Unit = {
    try change
    finally {
      liveHolder.ended(store)
      store.state = to
      live.release(store.lease, why, lastLook)
    }
  }

  private[spillstore] def abort(store: SpillStateStore): Unit = synchronized {
    if (!live.ownership.holds(store.lease)) {
      store.live.ownership.freeIfDoomedBy(store.lease)
      if (store.state == SpillStateStore.Updating) store.state = SpillStateStore.Aborted
    } else if (store.state == SpillStateStore.Updating) {
      if (store.isWritable) {
        if (liveHolder.isWriter(store)) {
          dir.dropEarly()
          endBatch(store, SpillStateStore.Aborted, "aborted")(live.abortBatch())
        } else store.state = SpillStateStore.Aborted
      } else {
        // A read store ends its lease only when no write store of the lease has a batch open.
        store.state = SpillStateStore.Released
        if (!liveHolder.batchOpenUnder(store)) live.release(store.lease, "released")
      }
    }
  }

  /** Live figures for metrics, by the owner of `live`. */
  private[spillstore] def liveFigures(live: TieredState): SpillStateStore.LiveFigures =
    SpillStateStore.LiveFigures(live.numKeys, live.heapBytes, live.heapEntries,
      live.coldKeyCount, live.coldBytes)

  override def doMaintenance(): Unit = {
    snapshotMaintenance()
    cleanupMaintenance()
  }

  /** Spark 4.3 calls this and the next from two pools; older lines through doMaintenance. */
  private[spillstore] def snapshotMaintenance(): Unit = maintaining("snapshot")(snapshot(None))

  private[spillstore] def cleanupMaintenance(): Unit = maintaining("cleanup") {
    if (liveHolder != null) synchronized(liveHolder.reclaimDoomed())
    withFileMaintenance {
      if (!checkpointIds) cleaner.cleanup(conf.minVersionsToRetain)
      else {
        val c = confirmed
        if (c.tip > 0) cleaner.cleanupConfirmed(conf.minVersionsToRetain, c)
      }
    }
  }

  /** Maintenance runs that failed since the last store was opened (see [[maintaining]]). */
  private val maintenanceFailures = new AtomicLong

  /**
   * Runs one maintenance task, keeping its failure here: Spark answers an error that reaches
   * its maintenance thread by unloading providers (3.5: every provider of the executor, other
   * queries' too; 4.3: this one), which fails the tasks holding their stores and reloads them
   * all. A failed snapshot or cleanup loses nothing (every committed version stays loadable
   * from the files there are), so it is logged with its cause, which names the file, counted,
   * and retried by the next run.
   */
  private def maintaining(what: String)(body: => Unit): Unit =
    try body
    catch {
      case NonFatal(e) =>
        maintenanceFailures.incrementAndGet()
        executorStats.maintenanceFailures.inc()
        logWarning(
          s"$what maintenance of $storeId failed; the store keeps running, every " +
            s"committed version stays loadable, and the next maintenance run retries: $e", e)
    }

  /**
   * The newest version this provider committed or was asked to load: the newest a snapshot may
   * be of. A journal above it may be one whose commit failed after it was published (the
   * storage took it, its answer was lost, the batch was aborted) and that its retry will
   * replace; snapshotted, it would outlive the retry's journal, since loads prefer snapshots.
   */
  private val newestCommitted = new AtomicLong(0L)

  private def knownCommitted(version: Long): Unit =
    newestCommitted.accumulateAndGet(version, (a: Long, b: Long) => math.max(a, b))

  /**
   * Snapshots `forced`, a version just committed along its lineage, or (None) the newest
   * committed version if enough journals piled up: with format v2, the newest confirmed pair's,
   * along its lineage (a commit Spark has not recorded may be a losing attempt's).
   */
  private def snapshot(forced: Option[(Long, Lineage)]): Unit = {
    val done = withFileMaintenance {
      forced match {
        case Some((v, l)) =>
          snapshotter.along(l).snapshot(v, dir.along(l).list(), forced = true).map(_ -> l)
        case None =>
          val l = if (checkpointIds) confirmed else Lineage.V1
          val committed = if (checkpointIds) l.tip else newestCommitted.get
          if (checkpointIds && committed <= 0) None // no pair confirmed yet
          else
            try snapshotter.along(l).snapshotIfDue(conf.minDeltasForSnapshot, committed)
                .map(_ -> l)
            catch {
              case e: SortedChanges.UnreadableJournal if StateFile.isDamage(e) =>
                damagedJournal.accumulateAndGet(e.version, (a: Long, b: Long) => math.max(a, b))
                throw e
            }
      }
    }.flatten
    done.foreach { case (v, l) =>
      if (conf.reportSnapshotUploads) {
        SpillStoreSparkShim.reportSnapshotUploaded(storeId, hadoopConf, v)
      }
      // Outside the file lock: a commit holds the monitor and then may wait for that lock.
      l.idOf(v).foreach(id => synchronized(liveHolder.snapshotted(v, id)))
    }
  }

  /** `body` under the file maintenance lock; None if this provider was never initialized. */
  private def withFileMaintenance[T](body: => T): Option[T] = if (dir == null) None
  else {
    fileMaintenance.lock()
    try Some(body)
    finally fileMaintenance.unlock()
  }

  /**
   * Spark's unload: frees the live state now, or, if a holder still has it, leaves it to that
   * holder to free between its calls (its next call throws) or at its end; a doomed state
   * whose holder is already gone is freed here.
   */
  override def close(): Unit = if (liveHolder != null) synchronized {
    // Spark may unload a provider more than once; figures as last published (a task may own it)
    if (!live.ownership.isClosed)
      logInfo(s"Unloading $this (version ${liveHolder.loadedVersion}, " +
        s"${live.heapEntries} entries on the heap, ${live.spilledBytes} bytes in the cold tier)")
    liveHolder.unload()
    dir.dropEarly()
  }

  override def supportedCustomMetrics: Seq[StateStoreCustomMetric] = SpillStoreMetrics.all

  override def toString: String = s"SpillStoreProvider[$storeId]"
}
