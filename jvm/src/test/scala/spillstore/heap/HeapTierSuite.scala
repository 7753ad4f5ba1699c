package spillstore.heap

import scala.util.Random

import org.scalatest.funsuite.AnyFunSuite

import org.apache.spark.unsafe.Platform

import spillstore.checkpoint.StateFile

class HeapTierSuite extends AnyFunSuite {
  private val Off = Platform.BYTE_ARRAY_OFFSET

  /** 8-byte keys, as UnsafeRow bytes always are a multiple of 8. */
  private def k(i: Long): Array[Byte] = java.nio.ByteBuffer.allocate(8).putLong(i).array()
  private def v(s: String): Array[Byte] = s.getBytes("UTF-8")

  // As TieredState drives the tier: look the key up, then update, insert or remove.
  private def lookup(h: HeapTier, i: Long): Int = {
    val key = k(i); h.lookup(key, Off, 8, HeapTier.hashOf(key))
  }
  private def put(h: HeapTier, i: Long, s: String): Unit = {
    val value = v(s)
    lookup(h, i) match {
      case -1 => h.insertChanged(HeapTier.hashOf(k(i)), k(i), Off, 8, value, Off, value.length)
      case e => h.update(e, value, Off, value.length)
    }
  }
  private def remove(h: HeapTier, i: Long): Unit = {
    val e = lookup(h, i)
    if (e >= 0 && h.isLive(e)) h.removeEntry(e)
  }
  private def id(h: HeapTier, slot: Int): Long = java.nio.ByteBuffer.wrap(h.keyBytes(slot)).getLong
  private def valueOf(h: HeapTier, slot: Int): String = new String(h.keyValue(slot).value, "UTF-8")
  private def get(h: HeapTier, i: Long): Option[String] =
    Some(lookup(h, i)).filter(s => s >= 0 && h.isLive(s)).map(valueOf(h, _))
  private def contents(h: HeapTier): Map[Long, String] =
    (0 until h.numSlots).filter(h.isLive).map(s => id(h, s) -> valueOf(h, s)).toMap
  private def victims(h: HeapTier): List[Int] =
    Iterator.continually(h.nextVictim()).takeWhile(_ >= 0).toList

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
    val key = new Array[Byte](EntryRecords.MaxKeyLength + 1)
    val e = intercept[IllegalArgumentException](
      h.insertChanged(0, key, Off, key.length, v("x"), Off, 1))
    assert(e.getMessage.contains(s"keys are limited to ${EntryRecords.MaxKeyLength} bytes"),
      e.getMessage)
    assert(h.numSlots === 1 && h.numChanges === 1 && get(h, 1) === Some("one"))
  }

  test("a value longer than a checkpoint file can hold is refused, as an insert or an update, " +
    "with an error saying so; the tier is unchanged") {
    val h = new HeapTier()
    put(h, 1, "one")
    h.commitBatch()
    val value =
      new Array[Byte](StateFile.MaxRecordBytes + 1) // the only copy: refusals copy nothing
    val refusals = Seq(
      intercept[IllegalArgumentException](
        h.insertChanged(HeapTier.hashOf(k(2)), k(2), Off, 8, value, Off, value.length)),
      intercept[IllegalArgumentException](h.update(lookup(h, 1), value, Off, value.length)))
    refusals.foreach { e =>
      assert(e.getMessage.contains(s"${value.length} bytes: values are limited to " +
          s"${StateFile.MaxRecordBytes} bytes"), e.getMessage)
    }
    assert(h.numSlots === 1 && h.numChanges === 0 && get(h, 1) === Some("one"))
  }

  test("abort restores the committed state, whatever the batch did to a key") {
    val h = new HeapTier()
    put(h, 1, "a"); put(h, 2, "b"); put(h, 3, "c")
    h.commitBatch()
    val before = contents(h)
    val liveBefore = h.liveBytes
    put(h, 1, "a2"); put(h, 1, "a3") // updated twice
    remove(h, 2) // removed
    put(h, 3, "c2"); remove(h, 3) // updated then removed
    put(h, 4, "d"); remove(h, 4) // inserted then removed
    put(h, 5, "e") // inserted
    assert(h.numChanges === 5)
    h.abortBatch()
    assert(contents(h) === before)
    assert(h.numLiveEntries === 3)
    assert(h.numSlots === 3)
    assert(h.liveBytes === liveBefore) // the batch's regions are all garbage again
  }

  test("change list is squashed per key and net changes are identified") {
    val h = new HeapTier()
    put(h, 1, "a"); h.commitBatch()
    (1 to 10).foreach(i => put(h, 1, s"a$i"))
    put(h, 2, "x"); remove(h, 2)
    remove(h, 1)
    val list = h.changeList
    val changes = (0 until list.size).map(list.slot)
    assert(changes.size === 2)
    val byKey = changes.map(s => id(h, s) -> s).toMap
    assert(h.existed(byKey(1)) && !h.isLive(byKey(1))) // removal of a committed key: journaled
    assert(!h.existed(byKey(2)) && !h.isLive(byKey(2))) // born and died in the batch: not journaled
  }

  test("CLOCK eviction order: unused entries go first, used ones get a second chance") {
    val h = new HeapTier()
    (1L to 6L).foreach(i => put(h, i, "x"))
    h.commitBatch()
    // Stands in for the spill tier: take the victim out of the heap.
    def evict(): Long = {
      val key = id(h, h.nextVictim())
      remove(h, key); h.commitBatch(); key
    }
    // New entries start referenced: a first sweep only clears bits, then takes in slot order.
    assert(evict() === 1L)
    get(h, 3); get(h, 5) // used since the hand passed
    assert(Seq.fill(3)(evict()) === Seq(2L, 4L, 6L))
    // 3 and 5 were spared once; the hand cleared their bits, so they are next.
    assert(Seq.fill(2)(evict()).toSet === Set(3L, 5L))
  }

  test("entries changed in the open batch are pinned: never chosen as victims") {
    val h = new HeapTier()
    (1L to 3L).foreach(i => put(h, i, "x"))
    assert(h.nextVictim() === -1) // all three are in the open batch
    h.commitBatch()
    put(h, 2, "y")
    assert(victims(h).map(id(h, _)).sorted === List(1L,
      3L)) // each unpinned entry once, never key 2
  }

  test(
    "a pin and a change move with their entry when a drop fills the hole from the end, and commit, abort or unselect clear them") {
    val h = new HeapTier()
    (1L to 4L).foreach(i => put(h, i, "x"))
    h.commitBatch()
    put(h, 4, "y") // pins key 4, in the last slot
    assert(id(h, 0) === 1L)
    h.dropCommitted(0) // unpinned key 1 goes; key 4 moves into its slot
    assert(id(h, 0) === 4L && h.changeList.slot(0) === 0)
    val more = victims(h)
    assert(more.map(id(h, _)).sorted === List(2L, 3L)) // key 4 stays pinned in its new slot
    more.foreach(h.unselect)
    h.abortBatch() // key 4 back to "x" and unpinned
    assert(get(h, 4) === Some("x"))
    assert(victims(h).map(id(h, _)).sorted === List(2L, 3L, 4L))
  }

  test(
    "pages: regions of departed and replaced values are given back by evacuating pages, moving live values, batch values and undo values exactly") {
    val h = new HeapTier()
    val value = "v" * 100
    (0L until 20000L).foreach(i => put(h, i, s"$value$i"))
    h.commitBatch()
    val committedPages = h.pageCount
    assert(committedPages > 3)
    // Most keys go (as eviction drops them), a batch is opened that changes survivors: their
    // undo values and new values are in different pages, all must survive evacuation.
    (19999 to 0 by -1).filter(_ % 10 != 0).foreach(s => h.dropCommitted(s))
    (0L until 20000L by 20).foreach(i => put(h, i, s"new$i"))
    (10L until 20000L by 40).foreach(i => remove(h, i))
    val garbage = h.garbageBytes
    assert(garbage > h.estimatedBytes / 2)
    val given = h.reclaim(garbage)
    assert(given > garbage / 2, s"gave back $given of $garbage")
    assert(h.pageCount < committedPages)
    val expected = (0L until 20000L by 10).map { i =>
      i -> (if (i % 20 == 0) Some(s"new$i") else if (i % 40 == 10) None else Some(s"$value$i"))
    }
    expected.foreach { case (i, value) => assert(get(h, i) === value, s"key $i in the open batch") }
    h.abortBatch()
    (0L until 20000L by 10).foreach(i =>
      assert(get(h, i) === Some(s"$value$i"), s"key $i after abort"))
  }

  test(
    "random batches of puts, removals, drops (inside batches too), commits, aborts and page evacuations match a model exactly") {
    for (seed <- 1 to 6) {
      val rnd = new Random(seed)
      val h = new HeapTier()
      var committed = Map.empty[Long, String]
      var open = committed
      for (step <- 1 to 40) {
        (1 to rnd.nextInt(400)).foreach { _ =>
          val i = rnd.nextInt(300).toLong
          rnd.nextInt(10) match {
            case 0 | 1 => remove(h, i); open -= i
            case 2 if h.numSlots > 0 =>
              // Eviction drops entries the batch has not changed, several at a time, between
              // batches or inside one (moving changed entries into the freed slots).
              val drops = victims(h).take(1 + rnd.nextInt(5)).sorted(Ordering[Int].reverse)
              drops.foreach { s =>
                val key = id(h, s); h.dropCommitted(s); committed -= key; open -= key
              }
              victims(h).foreach(h.unselect)
            case _ => val s = "x" * rnd.nextInt(40) + s"$step"; put(h, i, s); open += i -> s
          }
          if (rnd.nextInt(50) == 0) h.reclaim(rnd.nextInt(1 << 16))
        }
        assert(contents(h) === open, s"seed $seed step $step: open batch")
        if (rnd.nextInt(3) == 0) { h.abortBatch(); open = committed }
        else { h.commitBatch(); committed = open }
        h.trimToSize()
        assert(contents(h) === committed, s"seed $seed step $step: committed")
        assert(h.numLiveEntries === committed.size && h.numSlots === committed.size)
        committed.keys.foreach(i =>
          assert(get(h, i) === committed.get(i), s"seed $seed step $step: key $i"))
      }
    }
  }

  test("a commit owes the garbage it made and evacuates nothing; the next batch's puts pay " +
    "the debt, values and undo values exact") {
    val h = new HeapTier()
    val keys = 0L until 20000L
    def value(round: Int, i: Long) = s"$round-$i-" + "x" * 40
    keys.foreach(i => put(h, i, value(0, i)))
    h.commitBatch()
    h.trimToSize()
    var owedRounds = 0
    for (round <- 1 to 8) {
      keys.foreach(i => put(h, i, value(round, i)))
      assert(h.compactionOwed === 0, s"round $round: the puts paid what the last commit owed")
      assert(h.garbageBytes * 4 <= h.estimatedBytes + 2 * Pages.MaxPageBytes, s"round $round")
      if (round == 8) {
        h.abortBatch() // the undo values survived the evacuations of this batch
        assert(contents(h) === keys.map(i => i -> value(7, i)).toMap)
      } else {
        h.commitBatch()
        val garbage = h.garbageBytes
        h.trimToSize()
        if (h.compactionOwed > 0) {
          owedRounds += 1
          assert(h.garbageBytes === garbage, s"round $round: the commit evacuated a page")
        }
        assert(contents(h) === keys.map(i => i -> value(round, i)).toMap)
      }
    }
    assert(owedRounds >= 3, "rewriting every key makes a debt at most commits")
  }

  test("estimated bytes follow the pages: removing most keys gives pages back at commit") {
    val h = new HeapTier()
    val empty = h.estimatedBytes
    (0L until 50000L).foreach(i => put(h, i, "abcdefgh"))
    h.commitBatch()
    val full = h.estimatedBytes
    val perEntry = (full - empty).toDouble / 50000
    assert(perEntry > 8 + 8 + HeapTier.PerEntryBytes - 10 && perEntry < 96,
      s"$perEntry bytes per entry")
    (0L until 50000L).filter(_ % 100 != 0).foreach(i => remove(h, i))
    h.commitBatch()
    h.trimToSize()
    // What is left: the 500 entries, a spare chunk of records, at most an eighth of garbage.
    assert(h.estimatedBytes < empty + (full - empty) / 8, s"${h.estimatedBytes} of $full")
    assert(contents(h) === (0L until 50000L by 100).map(_ -> "abcdefgh").toMap)
  }
}
