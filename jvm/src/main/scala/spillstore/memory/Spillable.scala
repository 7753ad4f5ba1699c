package spillstore.memory

/**
 * What the executor-wide [[MemoryManager]] sees of one loaded provider's heap tier.
 *
 * A spillable is owned by at most one task thread at a time (while a store of its provider is
 * open: "busy"). Only that thread may evict from a busy spillable; any thread may evict from
 * an idle one, under the spillable's own lock, which `trySpill` takes.
 */
trait Spillable {
  /** Estimated heap bytes of the entries it holds; readable from any thread. */
  def heapBytes: Long

  /** The part of `heapBytes` eviction cannot free (the cold tier's key filter). */
  def fixedBytes: Long = 0L

  /** Entries it holds on the heap; readable from any thread. */
  def heapEntries: Long

  /** What it has spilled (bytes, off the heap), as of its last change of phase: for metrics. */
  def spilledBytes: Long = 0L

  /** `System.nanoTime` of its last use by a task: the coldness FLIP-50 ranks by. */
  def lastUsedNanos: Long

  /**
   * False once nothing but its last owner can give its heap back (a state doomed by a newer
   * attempt or an unload: it is freed whole when that owner ends, and never evicts meanwhile).
   * The manager then counts it at its full size and asks it for nothing. Readable from any
   * thread.
   */
  def canShrink: Boolean = true

  /**
   * From a thread that does not own it: if it is idle, evict about `bytes` (and at least
   * `entries` entries) to its cold tier now and return the bytes freed; if it is busy, return 0
   * without waiting. Busy means a store is open, even when the calling thread is the owner's
   * (a task may hold several stores); a reentrant lock's `tryLock` is not enough. A spill that
   * succeeds also satisfies and drops any pending [[requestShrink]], and honours those made
   * while it ran (whose own `trySpill` found it in the way and returned 0) before it returns.
   */
  def trySpill(bytes: Long, entries: Long): Long

  /**
   * Ask its owner to shrink to at most `targetBytes` / `targetEntries` at its next chance
   * (the owner checks on its next put or promotion, and right after letting go of its store).
   * Never blocks. The manager sends it just before `trySpill`, so a request that races with the
   * owner letting go, or with another round's spill, is seen by one of the two. A request made
   * while another is pending joins it: the stricter of each target.
   */
  def requestShrink(targetBytes: Long, targetEntries: Long): Unit
}

/**
 * What a [[Spillable]] tells the memory manager as it grows, and hears back: the one call its
 * owner makes into the [[MemoryManager]] (which implements it), so the state depends on this
 * narrow interface only.
 */
trait Budget {
  /**
   * `owner` grew or shrank: what it must evict now. The owner evicts that and reports again,
   * until this returns [[MemoryManager.Eviction.Zero]] (or nothing more can go).
   */
  def report(owner: Spillable): MemoryManager.Eviction

  /**
   * `owner` honoured a shrink request just after letting go of its store (it is idle now):
   * take note of its new size. Unlike [[report]] it is asked nothing back.
   */
  def shrank(owner: Spillable): Unit = ()

  /** How much an owner may grow between reports: often enough that a small budget is not
   *  overshot by much. Owners reread it as they report. */
  def reportEveryBytes: Long = Budget.ReportEveryBytes

  /** What one owner may keep beside its entries that eviction cannot free (the cold tier's key
   *  filter): a small part of the budget. Read as the owner is made. */
  def fixedShareBytes: Long = Long.MaxValue

  /**
   * `owner` asks for `bytes` more of heap that eviction cannot free (a layer of its cold-key
   * filter); true if it may take them. All owners together get a small part of the budget, so
   * that what eviction cannot free never passes it, however many owners there are.
   */
  def reserveFixed(owner: Spillable, bytes: Long): Boolean = true

  /** `owner` gave back `bytes` it had reserved (its filter was cleared or dropped). */
  def releaseFixed(owner: Spillable, bytes: Long): Unit = ()
}

object Budget {
  /** Growth between reports, at most. */
  val ReportEveryBytes: Long = 64L << 10
}
