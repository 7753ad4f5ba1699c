package spillstore

import scala.util.control.NonFatal

import org.apache.spark.internal.Logging

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
 * | `writer` | the write store of the current lease whose batch is open, if any | the provider's monitor |
 * | `doomed` | earlier states not freed yet: each counts in the memory budget until its holder, or [[reclaimDoomed]] once that holder is gone, frees it (it unregisters itself then) | the provider's monitor |
 *
 * Every method but [[live]] runs under the provider's monitor, which opens, commits, aborts,
 * task ends and unloads take; store calls never take it.
 */
private[spillstore] final class LiveStateHolder(newLiveState: () => TieredState, recovery: Recovery,
    name: String)
    extends Logging {
  @volatile private var current: TieredState = newLiveState()
  private var version = -1L
  private var writer: SpillStateStore = _
  private var doomed = List.empty[TieredState]

  def live: TieredState = current
  def loadedVersion: Long = version

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

  def committed(newVersion: Long): Unit = version = newVersion

  /** The live state cannot be trusted (a committed version it failed to apply): reload it. */
  def drop(): Unit = {
    version = -1
    current.clear()
  }

  /**
   * Brings the live state to exactly `at`: as is, forward by journals, or by reloading; with
   * `replayFrom` >= 0, always reloaded from that snapshot and the journals after it.
   */
  def load(at: Long, replayFrom: Long): Unit = {
    if (replayFrom >= 0) {
      version = -1
      try recovery.loadFromSnapshot(replayFrom, at, current)
      catch {
        case e: Throwable => current.clear(); throw e
      }
      version = at
    } else if (version != at) {
      try {
        val rolledForward = version >= 0 && at > version && {
          try { recovery.rollForward(version, at, current); true }
          catch {
            case NonFatal(e) =>
              logInfo(s"Cannot roll $name forward from $version to $at ($e); reloading from " +
                "the checkpoint")
              false
          }
        }
        if (!rolledForward) recovery.load(at, current)
        version = at
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
