package spillstore.tiered

import org.apache.spark.unsafe.Platform

import spillstore.heap.HeapTier

/**
 * The rest of a snapshot being loaded once the heap has taken its share of the memory budget:
 * those entries go straight to the cold tier, in writes of bounded size, and never through the
 * heap (loading them there first would make the memory manager evict them again one write at a
 * time, as if they were the state's coldest). A key joins the cold tier's count and filter once
 * its write is done, so a failed write leaves the count exact (the load fails, and the next
 * try starts from a cleared state).
 *
 * Snapshot keys are unique and the load starts from a cleared state, so the tier holds none of
 * them: nothing is read first. Used by the state's owner only, for the one load it belongs to.
 *
 * @param expectedKeys what the cold-key filter is sized for if this load opens its first layer
 */
private[tiered] final class ColdLoad(cold: ColdSide, expectedKeys: () => Long) {
  private val puts = new ColdPuts(Evictor.MaxVictimsPerWrite)
  /** The heap form of each pending put's key (its cold form differs for prefix stores). */
  private val heapKeys = new Array[Array[Byte]](Evictor.MaxVictimsPerWrite)

  def add(key: Array[Byte], value: Array[Byte]): Unit = {
    val coldKey = cold.keys.encode(key)
    heapKeys(puts.size) = key
    puts.add(coldKey, 0, coldKey.length, value, 0, value.length)
    if (puts.isFull) write()
  }

  /** Writes what is pending: the load read its snapshot to the end. */
  def finish(): Unit = if (puts.size > 0) write()

  private def write(): Unit = {
    val batch = puts.toWriteBatch
    try cold.writeEvicted(batch) finally batch.close()
    cold.expect(expectedKeys())
    var i = 0
    while (i < puts.size) {
      val k = heapKeys(i)
      cold.added(k, Platform.BYTE_ARRAY_OFFSET, k.length, HeapTier.hashOf(k))
      heapKeys(i) = null
      i += 1
    }
    puts.clear()
  }
}
