package spillstore.heap

/**
 * Gives back the garbage in the heap tier's [[Pages]] by evacuating pages: each live region
 * of a page is copied to the page being filled, whatever named it (the owner's record, or its
 * undo in the change list) is repointed, and the page is dropped.
 *
 * A region is live when its owner's record or the owner's undo still points at it; the owner
 * is the slot in the region's header, which the tier keeps current as entries move.
 *
 * What is owed (bytes of garbage to give back) is its [[HeapTier]]'s, changed on the thread
 * that may use the tier (tiered.Ownership's state table), as are the pages, records and change
 * list it changes.
 */
final class PageCompactor(pages: Pages, records: EntryRecords, changes: ChangeList) {
  import EntryRecords.Changed
  import PageCompactor._

  /** Garbage bytes still to give back, paid as the next batch allocates. */
  private var owed = 0L
  /** Bytes of payment earned by allocations since the last payment. */
  private var earned = 0L

  /**
   * After entries departed or were replaced (a commit, an abort, an eviction): owes back the
   * pages' garbage once it is a quarter of them, at twice the pace garbage was made since the
   * previous call, so that a batch pays in proportion to what it changed, never for the whole
   * state at once. The debt is paid as the tier next allocates ([[allocated]]): evacuating on
   * commit lengthened the boundary between batches, where every record waits (real-time mode's
   * p99), by up to 30 ms a store. A tier whose pages are mostly garbage (a batch removed most
   * keys) pays now: it may not allocate again soon, and the memory is the budget's.
   * `slots`: the tier's slots in use.
   */
  def settle(slots: Int): Unit = {
    val freed = pages.takeFreed()
    owed =
      if (pages.garbageBytes * 4 > pages.estimatedBytes) {
        math.min(pages.garbageBytes - pages.estimatedBytes / 8,
          owed + 2 * freed + Pages.MaxPageBytes)
      } else 0L
    if (owed > 0 && pages.garbageBytes * 2 > pages.estimatedBytes) pay(owed, slots)
  }

  /**
   * After the tier allocated `length` bytes and every address is current again: pays two bytes
   * of the debt for each byte allocated, at least [[PaymentBytes]] at a time (an evacuation
   * sorts the pages).
   */
  def allocated(length: Int, slots: Int): Unit = if (owed > 0) {
    earned += 2L * length
    if (earned >= PaymentBytes) {
      val bytes = math.min(earned, owed)
      earned = 0L
      pay(bytes, slots)
    }
  }

  /** What is still owed (tests). */
  private[heap] def owedBytes: Long = owed

  /** Forgets the debt (the tier was emptied). */
  def clear(): Unit = { owed = 0L; earned = 0L }

  // A payment that gives nothing back ends the debt: the pages left are too full to evacuate.
  private def pay(bytes: Long, slots: Int): Unit = {
    val given = reclaim(bytes, slots)
    owed = if (given > 0) math.max(0L, owed - given) else 0L
  }

  /**
   * Evacuates the emptiest pages to give back about `bytes`; returns the bytes given back.
   * Costs the live bytes copied, at most three for each byte given back.
   */
  def reclaim(bytes: Long, slots: Int): Long = {
    val before = pages.estimatedBytes
    pages.evacuationCandidates(bytes).foreach(evacuate(_, slots))
    before - pages.estimatedBytes
  }

  private def evacuate(index: Int, slots: Int): Unit = {
    pages.foreachRegion(index) { (a, owner, length) =>
      if (owner >= 0 && owner < slots) {
        val current = records.addr(owner) == a
        val k = if (records.has(owner, Changed)) records.changeAt(owner) else -1
        val undo = k >= 0 && changes.undoAddr(k) == a
        if (current || undo) {
          val to = pages.allocate(length, owner)
          System.arraycopy(pages.page(a), Pages.offset(a), pages.page(to), Pages.offset(to), length)
          pages.freeMoved(a, length)
          if (current) records.setAddr(owner, to)
          if (undo) changes.setUndoAddr(k, to)
        }
      }
    }
    pages.drop(index)
  }
}

private object PageCompactor {
  /** The smallest payment: about one small page evacuated for every 32 KB allocated. */
  val PaymentBytes: Long = 64 * 1024
}
