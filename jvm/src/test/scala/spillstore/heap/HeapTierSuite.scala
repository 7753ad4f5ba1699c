package spillstore.heap

import org.scalatest.funsuite.AnyFunSuite

import org.apache.spark.unsafe.Platform

class HeapTierSuite extends AnyFunSuite {
  private val Off = Platform.BYTE_ARRAY_OFFSET

  /** 8-byte keys, as UnsafeRow bytes always are a multiple of 8. */
  private def k(i: Long): Array[Byte] = java.nio.ByteBuffer.allocate(8).putLong(i).array()
  private def v(s: String): Array[Byte] = s.getBytes("UTF-8")

  // As TieredState drives the tier: look the key up, then update, insert or remove.
  private def lookup(h: HeapTier, i: Long): Entry = {
    val key = k(i); h.lookup(key, Off, 8, HeapTier.hashOf(key))
  }
  private def put(h: HeapTier, i: Long, s: String): Unit = lookup(h, i) match {
    case null => h.insertChanged(HeapTier.hashOf(k(i)), Entry.pack(k(i), v(s)), 8)
    case e => h.update(e, Entry.pack(k(i), v(s)))
  }
  private def remove(h: HeapTier, i: Long): Unit = {
    val e = lookup(h, i)
    if (e != null && e.isLive) h.removeEntry(e)
  }
  private def get(h: HeapTier, i: Long): Option[String] =
    Option(lookup(h, i)).filter(_.isLive).map(e => new String(e.valueBytes, "UTF-8"))
  private def contents(h: HeapTier): Map[Long, String] =
    (0 until h.numSlots).map(h.entryAt).filter(_.isLive)
      .map(e => java.nio.ByteBuffer.wrap(e.keyBytes).getLong -> new String(e.valueBytes, "UTF-8")).toMap

  test("put, get, remove and iteration over many keys with table growth") {
    val h = new HeapTier()
    (0L until 5000L).foreach(i => put(h, i, s"v$i"))
    (0L until 5000L by 2).foreach(i => remove(h, i))
    assert(h.numLiveEntries === 2500)
    assert(get(h, 3) === Some("v3"))
    assert(get(h, 4) === None)
    h.commitBatch()
    assert(h.numSlots === 2500)
    assert(contents(h) === (1L until 5000L by 2).map(i => i -> s"v$i").toMap)
  }

  test("a key longer than 16 MB is refused with an error saying so; the tier is unchanged") {
    val h = new HeapTier()
    put(h, 1, "one")
    val key = new Array[Byte](Entry.MaxKeyLength + 1)
    val e = intercept[IllegalArgumentException](
      h.insertChanged(HeapTier.hashOf(key), Entry.pack(key, v("x")), key.length))
    assert(e.getMessage.contains(s"keys are limited to ${Entry.MaxKeyLength} bytes"), e.getMessage)
    assert(h.numSlots === 1 && h.numChanges === 1 && get(h, 1) === Some("one"))
  }

  test("abort restores the committed state, whatever the batch did to a key") {
    val h = new HeapTier()
    put(h, 1, "a"); put(h, 2, "b"); put(h, 3, "c")
    h.commitBatch()
    val before = contents(h)
    val bytesBefore = h.estimatedBytes
    put(h, 1, "a2"); put(h, 1, "a3")      // updated twice
    remove(h, 2)                          // removed
    put(h, 3, "c2"); remove(h, 3)         // updated then removed
    put(h, 4, "d"); remove(h, 4)          // inserted then removed
    put(h, 5, "e")                        // inserted
    assert(h.numChanges === 5)
    h.abortBatch()
    assert(contents(h) === before)
    assert(h.numLiveEntries === 3)
    assert(h.numSlots === 3)
    assert(h.estimatedBytes === bytesBefore)
  }

  test("change list is squashed per key and net changes are identified") {
    val h = new HeapTier()
    put(h, 1, "a"); h.commitBatch()
    (1 to 10).foreach(i => put(h, 1, s"a$i"))
    put(h, 2, "x"); remove(h, 2)
    remove(h, 1)
    val list = h.changeList
    val changes = (0 until list.size).map(list.entry)
    assert(changes.size === 2)
    val byKey = changes.map(e => java.nio.ByteBuffer.wrap(e.keyBytes).getLong -> e).toMap
    assert(byKey(1).existed && !byKey(1).isLive)   // removal of a committed key: journaled
    assert(!byKey(2).existed && !byKey(2).isLive)  // born and died in the batch: not journaled
  }

  test("CLOCK eviction order: unused entries go first, used ones get a second chance") {
    val h = new HeapTier()
    (1L to 6L).foreach(i => put(h, i, "x"))
    h.commitBatch()
    // Stands in for the spill tier: take the victim out of the heap.
    def evict(): Long = {
      val id = java.nio.ByteBuffer.wrap(h.nextVictim().keyBytes).getLong
      remove(h, id); h.commitBatch(); id
    }
    // New entries start referenced: a first sweep only clears bits, then takes in slot order.
    assert(evict() === 1L)
    get(h, 3); get(h, 5)                     // used since the hand passed
    assert(Seq.fill(3)(evict()) === Seq(2L, 4L, 6L))
    // 3 and 5 were spared once; the hand cleared their bits, so they are next.
    assert(Seq.fill(2)(evict()).toSet === Set(3L, 5L))
  }

  test("entries changed in the open batch are pinned: never chosen as victims") {
    val h = new HeapTier()
    (1L to 3L).foreach(i => put(h, i, "x"))
    assert(h.nextVictim() === null)          // all three are in the open batch
    h.commitBatch()
    put(h, 2, "y")
    val victims = Iterator.continually(h.nextVictim()).takeWhile(_ != null)
      .map(e => java.nio.ByteBuffer.wrap(e.keyBytes).getLong).toList
    assert(victims.sorted === List(1L, 3L)) // each unpinned entry once, never the changed key 2
  }

  test("a pin moves with its entry when a removal fills the hole from the end, and commit, abort or unselect clear it") {
    val h = new HeapTier()
    (1L to 4L).foreach(i => put(h, i, "x"))
    h.commitBatch()
    def id(e: Entry) = java.nio.ByteBuffer.wrap(e.keyBytes).getLong
    put(h, 4, "y")                            // pins key 4, in the last slot
    assert(id(h.entryAt(0)) === 1L)
    h.dropCommitted(h.entryAt(0))             // unpinned key 1 goes; key 4 moves into its slot
    assert(h.entryAt(0) != null && id(h.entryAt(0)) === 4L)
    val more = Iterator.continually(h.nextVictim()).takeWhile(_ != null).map(id).toList
    assert(more.sorted === List(2L, 3L))      // key 4 stays pinned in its new slot
    (0 until h.numSlots).map(h.entryAt).filter(e => id(e) != 4L).foreach(h.unselect)
    h.abortBatch()                            // key 4 back to "x" and unpinned
    assert(get(h, 4) === Some("x"))
    val after = Iterator.continually(h.nextVictim()).takeWhile(_ != null).map(id).toList
    assert(after.sorted === List(2L, 3L, 4L))
  }

  test("estimated bytes follow inserts, updates and removals") {
    val h = new HeapTier()
    val empty = h.estimatedBytes
    put(h, 1, "abcd")
    assert(h.estimatedBytes === empty + Entry.Overhead + 8 + 4)
    put(h, 1, "ab")
    assert(h.estimatedBytes === empty + Entry.Overhead + 8 + 2)
    remove(h, 1)
    h.commitBatch()
    assert(h.estimatedBytes === empty)
  }
}
