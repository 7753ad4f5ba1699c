package spillstore.heap

/**
 * Gives back the garbage in the heap tier's [[Pages]] by evacuating pages: each live region
 * of a page is copied to the page being filled, whatever named it (the owner's record, or its
 * undo in the change list) is repointed, and the page is dropped.
 *
 * A region is live when its owner's record or the owner's undo still points at it; the owner
 * is the slot in the region's header, which the tier keeps current as entries move.
 *
 * Holds no state of its own: it changes its [[HeapTier]]'s pages, records and change list, on
 * the thread that may use the tier (tiered.Ownership's state table).
 */
final class PageCompactor(pages: Pages, records: EntryRecords, changes: ChangeList) {
  import EntryRecords.Changed

  /**
   * Gives back pages once garbage is a quarter of them, at twice the pace garbage was made
   * since the previous call, so that a commit pays in proportion to what its batch changed,
   * never for the whole state at once. `slots`: the tier's slots in use.
   */
  def atPace(slots: Int): Unit = {
    val freed = pages.takeFreed()
    if (pages.garbageBytes * 4 > pages.estimatedBytes) {
      reclaim(math.min(pages.garbageBytes - pages.estimatedBytes / 8,
          2 * freed + Pages.MaxPageBytes),
        slots)
    }
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
