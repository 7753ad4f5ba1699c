package spillstore

import scala.util.control.NonFatal

import org.apache.spark.internal.Logging

import spillstore.checkpoint.Lineage
import spillstore.recovery.Recovery
import spillstore.tiered.TieredState

/**
 * What a provider's live state is doing, in one place: which [[TieredState]] is live, which
 * committed version it holds, which write store has its batch open on it, and which earlier
 * states (taken over or unloaded while a holder had them) are still to be freed.
 *
 * | field | meaning | who may touch it |
 * |---|---|---|
 * | `current` | the live state; a new one when a newer attempt takes over | changed under the provider's monitor; read by store calls (volatile) |
 * | `version` | the committed version `current` holds; -1 when it must be loaded before use | the provider's monitor |
 * | `lineage` | which attempts' files `version` is made of ([[Lineage]]): always [[Lineage.V1]] with checkpoint format v1; with v2, the lineage loaded (from the snapshot it was loaded from, or the newest snapshot written on it since) and each commit appended. Meaningless while `version` is -1 | the provider's monitor |
 * | `checkpointIds` | checkpoint format v2: set at construction, or once by [[readIds]] before any load (a reader of a v2 checkpoint) | the provider's monitor |
 * | `writer` | the write store of the current lease whose batch is open, if any | the provider's monitor |
 * | `doomed` | earlier states not freed yet: each counts in the memory budget until its holder, or [[reclaimDoomed]] once that holder is gone, frees it (it unregisters itself then) | the provider's monitor |
 *
 * Every method but [[live]] runs under the provider's monitor, which opens, commits, aborts,
 * task ends and unloads take; store calls never take it.
 */
private[spillstore] final class LiveStateHolder(newLiveState: () => TieredState, recovery: Recovery,
    name: String, private var checkpointIds: Boolean)
    extends Logging {
  @volatile private var current: TieredState = newLiveState()
  private var version = -1L
  private var lineage = if (checkpointIds) Lineage.Empty else Lineage.V1
  private var writer: SpillStateStore = _
  private var doomed = List.empty[TieredState]

  def live: TieredState = current
  def loadedVersion: Long = version
  def loadedLineage: Lineage = lineage

  /** Whether `store` is the write store with the open batch. */
  def isWriter(store: SpillStateStore): Boolean = writer eq store

  /** Whether a write store of `store`'s lease has a batch open. */
  def batchOpenUnder(store: SpillStateStore): Boolean =
    writer != null && (writer.lease eq store.lease)

  /**
   * A newer attempt takes over: the current state is left to its holder, whose call may be in
   * flight, to free (doomed meanwhile), and a new one is to be loaded.
   */
  def takeOver(): Unit = {
    doomed ::= current
    invalidateWriter()
    version = -1
    current = newLiveState()
  }

  /**
   * One batch at a time: opening a write store, or a store at another version, ends the batch
   * left open by a store of the same lease.
   */
  def opening(writable: Boolean, at: Long): Unit =
    if (writer != null && (writable || at != version)) {
      current.abortBatch()
      invalidateWriter()
    }

  def opened(store: SpillStateStore): Unit = if (store.isWritable) writer = store

  /** The task ended with a batch open: it is aborted. */
  def abortOpenBatch(): Unit = if (writer != null) {
    current.abortBatch()
    writer.state = SpillStateStore.Aborted
    writer = null
  }

  /** `store`'s batch ended (committed or aborted). */
  def ended(store: SpillStateStore): Unit = if (writer eq store) writer = null

  /** Loads by checkpoint ids from now on (a reader of a v2 checkpoint); only before any load. */
  def readIds(): Unit = {
    if (version >= 0 || writer != null) {
      throw new IllegalStateException(s"$name cannot switch to checkpoint ids: it holds " +
        s"version $version${if (writer != null) " with a batch open" else ""}")
    }
    checkpointIds = true
    lineage = Lineage.Empty
  }

  /** `newVersion` committed, under checkpoint id `id` (format v2). */
  def committed(newVersion: Long, id: Option[String]): Unit = {
    version = newVersion
    id.foreach(i => lineage = lineage.plus(newVersion, i))
  }

  /**
   * A snapshot of (`snapshotVersion`, `id`) exists now: if it is on the live lineage, journals
   * from now on record the lineage from it only (a load needs nothing older).
   */
  def snapshotted(snapshotVersion: Long, id: String): Unit =
    if (version >= 0 && lineage.has(snapshotVersion, Some(id))) {
      lineage = lineage.from(snapshotVersion)
    }

  /** The live state cannot be trusted (a committed version it failed to apply): reload it. */
  def drop(): Unit = {
    version = -1
    current.clear()
  }

  /**
   * Brings the live state to exactly `at` (with checkpoint format v2: exactly the pair (`at`,
   * `id`), id None being the empty state at 0 or v1 names above it): as is, forward by
   * journals of the same lineage, or by reloading that lineage; with `replayFrom` >= 0, always
   * reloaded from the snapshot of (`replayFrom`, `replayFromId`) and the journals after it,
   * along the lineage of (`at`, `id`).
   */
  def load(at: Long, id: Option[String], replayFrom: Long,
      replayFromId: Option[String] = None): Unit = {
    if (replayFrom >= 0) {
      version = -1
      try {
        val names = recovery.lineageOf(at, id, checkpointIds, deep = true)
        if (replayFrom > 0 && replayFromId.isDefined && !names.has(replayFrom, replayFromId)) {
          throw new IllegalArgumentException(s"$name: the snapshot of version $replayFrom " +
            s"with checkpoint id ${replayFromId.get} is not on the lineage of version $at " +
            s"with checkpoint id ${id.getOrElse("(none)")} ($names): the state data source " +
            "was given ids of two different runs of this checkpoint")
        }
        recovery.along(names).loadFromSnapshot(replayFrom, at, current)
        lineage = names
      } catch {
        case e: Throwable => current.clear(); throw e
      }
      version = at
    } else if (version != at || !lineage.has(at, id)) {
      try {
        var target = recovery.lineageOf(at, id, checkpointIds, deep = false)
        // Only along the same lineage: the live version must be on the one asked for.
        val rolledForward = version >= 0 && at > version && target.knows(version) &&
          target.idOf(version) == lineage.idOf(version) && {
            try { recovery.along(target).rollForward(version, at, current); true }
            catch {
              case NonFatal(e) =>
                logInfo(s"Cannot roll $name forward from $version to $at ($e); reloading " +
                  "from the checkpoint")
                false
            }
          }
        if (!rolledForward) {
          val base =
            try recovery.along(target).load(at, current)
            catch {
              // Past a damaged or missing snapshot, older bases of the lineage may do: they
              // are known only from older journals' headers.
              case NonFatal(e) if checkpointIds && !target.complete && id.isDefined =>
                logInfo(s"Loading $name at ($at, ${id.get}) from the newest snapshot on its " +
                  s"lineage failed ($e); trying older ones")
                target = recovery.lineageOf(at, id, checkpointIds, deep = true)
                recovery.along(target).load(at, current)
            }
          target = target.from(base)
        }
        version = at
        lineage = target
      } catch {
        case e: Throwable =>
          drop()
          throw e
      }
    }
  }

  /**
   * Frees the doomed states whose holder is gone without having freed them. A state whose
   * freeing failed is freed for the budget all the same (`Ownership`): logged, never thrown
   * into the open or the maintenance run that happened to reclaim it.
   */
  def reclaimDoomed(): Unit =
    if (doomed.nonEmpty) doomed = doomed.filterNot { s =>
      s.ownership.isFreed || (try s.ownership.freeIfAbandoned()
      catch {
        case NonFatal(e) =>
          logWarning(s"Freeing $s of $name failed; it is no longer counted in the budget", e)
          s.ownership.isFreed
      })
    }

  /**
   * Spark's unload: frees the live state now, or, if a holder still has it, dooms it (its
   * holder frees it between its calls, or maintenance once the holder is gone).
   */
  def unload(): Unit = {
    invalidateWriter()
    version = -1
    current.ownership.close()
    if (!current.ownership.isFreed && !doomed.contains(current)) doomed ::= current
    reclaimDoomed()
  }

  private def invalidateWriter(): Unit = if (writer != null) {
    writer.state = SpillStateStore.Invalidated
    writer = null
  }
}
