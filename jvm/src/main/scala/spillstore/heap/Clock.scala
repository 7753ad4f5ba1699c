package spillstore.heap

import spillstore.heap.EntryRecords.{Live, Referenced, Selected}

/**
 * Chooses the heap tier's eviction victims, CLOCK-style (second chance), not with a linked LRU
 * list: an access only sets the Referenced bit in the record it already read ([[EntryRecords]]),
 * and the hand sweeps the slots, clearing set bits and choosing the first entry whose bit was
 * clear (docs/design.md).
 *
 * A pin per slot marks the entries the hand must skip: changed in the open batch (until commit
 * or abort) or selected already. The hand skips them without reading their records: late in a
 * batch that misses a lot most of the heap is pinned (43 % of a 50 %-hit run was that sweep,
 * with entries). The tier pins and unpins; a pin follows its entry when the entry moves.
 *
 * {{{
 * state        | owner                     | who may change it
 * -------------+---------------------------+--------------------------------------------------
 * all fields   | its HeapTier              | the thread that may use the tier (tiered.Ownership's
 *              |                           | state table); never concurrently
 * }}}
 */
final class Clock(records: EntryRecords, firstSlots: Int) {
  /** 1 where the slot's entry is pinned. */
  private var pins = new Array[Byte](firstSlots)
  /** Position of the hand among the slots. */
  private var hand = 0

  def estimatedBytes: Long = pins.length

  @inline def pin(slot: Int): Unit = pins(slot) = 1
  @inline def unpin(slot: Int): Unit = pins(slot) = 0
  /** The entry at slot `from` moved to slot `to`. */
  def moved(from: Int, to: Int): Unit = pins(to) = pins(from)
  /** Makes room for a pin at `slot`, the slot after the last one in use. */
  def add(slot: Int): Unit =
    if (slot == pins.length) pins = java.util.Arrays.copyOf(pins, pins.length * 2)

  /**
   * The next victim among slots [0, `slots`): the first entry at or after the hand that was
   * not used since the hand last passed (passing clears the bit), is not changed in the open
   * batch and was not selected already. -1 if two sweeps find none. The victim stays selected
   * (and pinned) until the tier drops it or [[unselect]].
   */
  def nextVictim(slots: Int): Int = {
    var budget = 2 * slots
    while (budget > 0) {
      if (hand >= slots) hand = 0
      val s = hand
      hand += 1
      budget -= 1
      if (pins(s) == 0) {
        if (records.has(s, Referenced)) records.clear(s, Referenced)
        else if (records.has(s, Live)) { records.set(s, Selected); pins(s) = 1; return s }
      }
    }
    -1
  }

  /** Returns a selected victim that was not evicted after all. */
  def unselect(slot: Int): Unit = { records.clear(slot, Selected); pins(slot) = 0 }

  /** Gives back pin capacity at a quarter full with `inUse` slots in use. */
  def trim(inUse: Int): Unit = if (inUse * 4 < pins.length && pins.length > firstSlots) {
    pins = java.util.Arrays.copyOf(pins, math.max(firstSlots, inUse * 2))
  }

  def clear(): Unit = {
    pins = new Array[Byte](firstSlots)
    hand = 0
  }
}
