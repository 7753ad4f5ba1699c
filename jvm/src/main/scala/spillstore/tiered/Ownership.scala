package spillstore.tiered

import java.util.concurrent.locks.ReentrantLock

/**
 * Who may use one [[TieredState]], and when. One call at a time uses the state, and nothing on
 * the way of a get or a put is synchronized: whose call that is follows this state table. Moves
 * between phases happen under `lock` (taking it publishes everything the previous user wrote to
 * the next); store calls only check, with one volatile read, that their [[Lease]] is current.
 *
 * {{{
 * phase   | lease | who may use the state (thread)         | moved on by (under `lock`)
 * --------+-------+----------------------------------------+-----------------------------------
 * idle    | none  | a relief round holding `lock` (any     | a task's open: `acquire` -> owned
 *         |       | thread, only ever `tryLock`)           | an unload: `close` -> closed
 * owned   | L     | L's stores, one call at a time: the    | L's commit, abort or task end:
 *         |       | task thread (loading a version is one  |   `end(L)` -> idle
 *         |       | call); where a task calls its store    | a newer attempt: `revoke` -> doomed
 *         |       | from two threads (3.5's Python writer; | an unload: `close` -> doomed
 *         |       | 4.3 with pipelined Python runners) the |
 *         |       | line's adapter serializes them. Relief |
 *         |       | rounds only ask L to shrink            |
 * doomed  | Gone  | still L's call in flight, if any;      | L's holder, on its next call or at
 *         |       | nobody else (the provider moved on to  |   its end: `freeIfDoomedBy(L)`;
 *         |       | a new state, or was unloaded)          | anyone once L's holder is gone:
 *         |       |                                        |   `freeIfAbandoned` -> closed
 * closed  | none  | nobody: every call throws              | -
 * }}}
 *
 * A doomed state is never freed under a call in flight: its former owner frees it between
 * calls, or the provider's maintenance, open or unload once that owner can be in no call (its
 * task ended, or, outside a task, the thread that opened the store died). Until then it stays
 * in the memory budget. Any misuse (a call without the lease, a transition from the wrong phase)
 * throws `IllegalStateException` naming the state and its phase.
 *
 * `freeState` gives the state's memory back; `onFreed` runs once it has.
 */
final class Ownership private[tiered] (state: TieredState, freeState: () => Unit,
    onFreed: () => Unit) {
  private val lock = new ReentrantLock()
  /** The owner's lease; null while idle or closed, `Lease.Gone` while doomed. */
  @volatile private var lease: Lease = _
  /** While doomed: the lease whose holder frees the state. Under `lock`. */
  private var doomedBy: Lease = _
  @volatile private var closed = false
  @volatile private var freed = false
  @volatile private var lastUsed = System.nanoTime()

  /** Runs `body` holding the lock: phase changes, and a relief round's eviction. */
  private[tiered] def locked[T](body: => T): T = {
    lock.lock()
    try body
    finally lock.unlock()
  }

  /** Checks, at the start of a store call, that `l` still owns the state. */
  def enter(l: Lease): Unit = if (lease ne l) lost(l)

  private def lost(l: Lease): Nothing = {
    freeIfDoomedBy(l) // we are between calls: if ours to free, free it now
    throw new IllegalStateException(s"${l.holder} cannot use $state: its lease ended (" +
      s"${Option(l.endedBy).getOrElse("unknown")}); the state is $phase")
  }

  /** Whether `l` is the current lease. */
  def holds(l: Lease): Boolean = l != null && (lease eq l)

  /** The current lease; null when idle or closed, `Lease.Gone` when doomed. */
  def current: Lease = lease

  /** In use now counts as used now: an owned state must not look cold. */
  def lastUsedNanos: Long = if (lease != null) System.nanoTime() else lastUsed

  /**
   * Gives the idle state to a new lease for `holder` (a task attempt, or -1 outside a task);
   * `holderIdle` tells when the holder can be in no call (see [[freeIfAbandoned]]).
   */
  def acquire(holder: String, taskAttemptId: Long,
      holderIdle: () => Boolean = () => false): Lease = locked {
    if (closed || lease != null) {
      throw new IllegalStateException(s"$holder cannot acquire $state: it is $phase")
    }
    val l = new Lease(holder, taskAttemptId, state, holderIdle)
    lease = l
    lastUsed = System.nanoTime()
    l
  }

  /**
   * A newer attempt takes over from the owner, whose call may be in flight: the state is doomed
   * (left to the owner to free) and the caller must use a new state. Returns false if the state
   * was not owned (nothing to revoke).
   */
  def revoke(reason: String): Boolean = locked {
    if (lease == null || (lease eq Lease.Gone)) false
    else { doom(reason); true }
  }

  private def doom(reason: String): Unit = {
    lease.endedBy = reason
    doomedBy = lease
    lease = Lease.Gone
  }

  /**
   * Ends `l` if it is still current (not revoked or unloaded meanwhile: then it is doomed and
   * freed by [[freeIfDoomedBy]]), running `last` first, under the lock, while `l` owns the state.
   */
  private[tiered] def end(l: Lease, reason: String)(last: => Unit): Unit = locked {
    if (lease eq l) {
      last
      l.endedBy = reason
      lease = null
      lastUsed = System.nanoTime()
    }
  }

  /** Frees the state if it is doomed and `l` was its owner; on `l`'s holder's thread. */
  def freeIfDoomedBy(l: Lease): Unit = if (l != null) locked {
    if (doomedBy eq l) freeDoomed()
  }

  /**
   * Frees a doomed state whose former owner can be in no call (see the table) and has not
   * freed it; on any thread. Returns whether it did.
   */
  def freeIfAbandoned(): Boolean = locked {
    doomedBy != null && doomedBy.holderIdle() && { freeDoomed(); true }
  }

  private def freeDoomed(): Unit = {
    doomedBy = null
    lease = null
    free()
  }

  /**
   * Unloads: frees the state now if no task owns it; else dooms it, and its owner frees it
   * between calls (its next call throws). Either way the state is closed for new leases.
   */
  def close(): Unit = locked {
    if (!closed) {
      closed = true
      if (lease == null) free()
      else if (lease ne Lease.Gone) doom("its provider was unloaded (closed)")
    }
  }

  def isClosed: Boolean = closed

  /** Whether eviction can still free it: not doomed (its last owner frees it whole) nor closed. */
  def canShrink: Boolean = !closed && (lease ne Lease.Gone)

  def isFreed: Boolean = freed

  /**
   * Even if giving the memory back fails part-way (the cold tier's close), the state is freed
   * for the budget: it can never be used again, and left registered it would count forever.
   */
  private def free(): Unit = {
    closed = true
    try freeState()
    finally {
      freed = true
      onFreed()
    }
  }

  /**
   * Runs `body` (a relief round's eviction) if the state is idle and its lock is free at once:
   * a relief round never waits. `zero` otherwise.
   */
  private[tiered] def ifIdle(zero: Long)(body: => Long): Long = {
    if (lease != null || !lock.tryLock()) return zero
    try { if (closed || lease != null) zero else body }
    finally lock.unlock()
  }

  def phase: String =
    if (lease eq Lease.Gone) "doomed (unloaded or taken over; its last owner frees it)"
    else if (closed) "closed (unloaded)"
    else if (lease != null) s"owned by ${lease.holder}"
    else "idle"
}
