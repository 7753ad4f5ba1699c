package spillstore.tiered

import java.io.File
import java.nio.file.Files
import java.util.UUID

import scala.collection.mutable.ArrayBuffer
import scala.util.Random

import org.apache.commons.io.FileUtils
import org.scalatest.BeforeAndAfterAll
import org.rocksdb.{RocksDBException, WriteBatch}
import org.scalatest.funsuite.AnyFunSuite

import org.apache.spark.sql.catalyst.expressions.{GenericInternalRow, UnsafeProjection, UnsafeRow}
import org.apache.spark.sql.types._
import org.apache.spark.unsafe.types.UTF8String

import spillstore.checkpoint.StateFile
import spillstore.cold.ColdTier
import spillstore.heap.{HeapTier, KeyValue, PrefixIndex}
import spillstore.memory.{Budget, MemoryConf, MemoryManager, Spillable}
import spillstore.memory.MemoryManager.Eviction
import spillstore.metrics.ExecutorStats

class TieredStateSuite extends AnyFunSuite with BeforeAndAfterAll {
  private val schema = StructType(Seq(StructField("k", LongType)))
  private val proj = UnsafeProjection.create(schema)
  private val valueProj = UnsafeProjection.create(schema)
  // The projection reuses its row, as Spark's operators do.
  private def key(i: Long): UnsafeRow = proj(new GenericInternalRow(Array[Any](i)))
  private def bytes(i: Long): UnsafeRow = valueProj(new GenericInternalRow(Array[Any](i))).copy()
  private def long(b: Array[Byte]): Long = {
    val r = new UnsafeRow(1); r.pointTo(b, b.length); r.getLong(0)
  }
  /** The value of what `get` returns: the 16-byte key row, then the value row. */
  private def got(kv: KeyValue): Long = long(kv.value)
  private def row(b: Array[Byte]): UnsafeRow = {
    val r = new UnsafeRow(1); r.pointTo(b, b.length); r
  }

  /**
   * A state whose heap keeps at most `maxEntries` entries, evicting on every growth. The test's
   * thread holds a lease throughout, as a task does while its store is open.
   */
  private class Fixture(var maxEntries: Long, prefix: Option[PrefixIndex] = None,
      openCold: (java.io.File, String) => ColdTier = ColdTier.create) {
    val state: TieredState = new TieredState("test", prefix, () => coldRoot,
      new Budget {
        def report(owner: Spillable): Eviction = Eviction(0, state.heap.numLiveEntries - maxEntries)
        override def reportEveryBytes: Long = 1
      }, new ExecutorStats, openCold = openCold)
    private var lease: Lease = _
    def commit(): Unit = { state.commitBatch(); renew() }
    def abort(): Unit = { state.abortBatch(); renew() }
    /** Ends the lease (the release evicts down to the limit) and takes a new one. */
    def renew(): Unit = {
      state.release(lease, "test"); lease = state.ownership.acquire("test", -1)
    }
    /** Commits `keys` (value = key); the release after the commit evicts down to the limit. */
    def load(keys: Seq[Long]): Unit = { keys.foreach(i => state.put(key(i), bytes(i))); commit() }
    lease = state.ownership.acquire("test", -1)
  }

  private val coldRoot = Files.createTempDirectory("tiered-cold").toFile
  override def afterAll(): Unit =
    try super.afterAll()
    finally FileUtils.deleteQuietly(coldRoot)

  private def contents(s: TieredState): Map[Long, Long] =
    s.iterator().map(kv => long(kv.key) -> long(kv.value)).toMap

  test("everything spills: reads, updates and removes see both tiers, heap winning") {
    val f = new Fixture(maxEntries = 0)
    val s = f.state
    (1L to 100L).foreach(i => s.put(key(i), bytes(i * 10)))
    f.commit()
    s.put(key(0), bytes(0)) // growth after commit evicts the committed entries
    f.commit()
    assert(s.coldKeyCount === 101 - s.heap.numLiveEntries)
    assert(s.heap.numLiveEntries <= 1)
    assert(got(s.get(key(50))) === 500)
    assert(s.get(key(1000)) === null)
    s.put(key(7), bytes(7))
    s.remove(key(8))
    assert(got(s.get(key(7))) === 7)
    assert(s.get(key(8)) === null)
    assert(s.numKeys === 100)
    assert(contents(s) === ((0L to 100L).map(i => i -> i * 10).toMap + (7L -> 7L) - 8L))
    f.commit()
    assert(contents(s) === ((0L to 100L).map(i => i -> i * 10).toMap + (7L -> 7L) - 8L))
    assert(s.numKeys === 100)
  }

  test(
    "the cold-key filter is sized from the resident set when spilling starts: an absent key probes two layers, not five") {
    val f = new Fixture(maxEntries = 50000)
    val s = f.state
    f.load(0L until 50000L)
    assert(s.coldKeyCount === 0 && s.coldFilterLayers === 0)
    (50000L until 200000L by 50000L).foreach(from => f.load(from until from + 50000L))
    assert(s.coldKeyCount === 150000)
    // Doubling from its 8k-key default, the filter would have 8k + 16k + ... + 131k: five layers.
    assert(s.coldFilterLayers === 2)
    assert(s.get(key(123)) != null && s.get(key(199999)) != null && s.get(key(200000)) == null)
  }

  /** The keys of a write batch's puts, in order (its format: spillstore.cold.WriteBatchBytesSuite). */
  private def putKeys(batch: WriteBatch): Seq[Seq[Byte]] = {
    val data = batch.data()
    var at = 12
    def varint(): Int = {
      var v = 0
      var shift = 0
      while ((data(at) & 0x80) != 0) { v |= (data(at) & 0x7F) << shift; shift += 7; at += 1 }
      v |= data(at) << shift
      at += 1
      v
    }
    val keys = ArrayBuffer.empty[Seq[Byte]]
    while (at < data.length) {
      assert(data(at) === 1, s"not a put at byte $at")
      at += 1
      val k = varint()
      keys += data.slice(at, at + k).toSeq
      at += k
      val valueLength = varint()
      at += valueLength
    }
    keys.toSeq
  }

  test(
    "a large eviction writes RocksDB in chunks of bounded count and bytes, in key order, exactly") {
    val writes = ArrayBuffer.empty[Int] // batch sizes; evictions run on this thread
    val unsorted = ArrayBuffer.empty[Int]
    val f = new Fixture(maxEntries = 40000,
      openCold = (parent, name) =>
        new ColdTier(new File(parent, s"$name-${UUID.randomUUID()}")) {
          override def write(batch: WriteBatch): Unit = {
            writes += batch.count()
            val keys = putKeys(batch)
            if (keys.zip(keys.drop(1)).exists { case (a, b) =>
                java.util.Arrays.compareUnsigned(a.toArray, b.toArray) >= 0
              }) unsorted += batch.count()
            assert(batch.data().length <= Evictor.MaxBytesPerWrite + 12 + 64)
            super.write(batch)
          }
        })
    val s = f.state
    f.load(0L until 40000L)
    assert(writes.isEmpty && s.heap.numLiveEntries === 40000)
    f.maxEntries = 5000
    f.renew() // evicts 35,000 entries: 16-byte keys and values, 7,490 a write
    assert(s.heap.numLiveEntries === 5000 && s.coldKeyCount === 35000)
    assert(writes.sum === 35000 && writes.size === 5 && writes.forall(
        _ <= Evictor.MaxVictimsPerWrite), writes)
    assert(unsorted.isEmpty, s"writes not in key order: $unsorted")
    // By bytes: at least what was asked for, in one more chunked round.
    writes.clear()
    val asked = s.heapBytes / 2
    assert(s.evict(asked, 0) >= asked)
    assert(writes.nonEmpty && writes.forall(_ <= Evictor.MaxVictimsPerWrite), writes)
    assert(unsorted.isEmpty, s"writes not in key order: $unsorted")
    assert(contents(s) === (0L until 40000L).map(i => i -> i).toMap)
  }

  test("write-back: dirty entries are written on eviction, clean ones are dropped") {
    val f = new Fixture(maxEntries = 1000)
    val s = f.state
    (1L to 10L).foreach(i => s.put(key(i), bytes(i)))
    f.commit()
    f.maxEntries = 0
    s.put(key(11), bytes(11))
    assert(s.counters.writeBacks === 10) // first eviction: all dirty
    f.maxEntries = 1000 // key 11 stays on the heap, dirty
    f.commit()
    (1L to 10L).foreach(i => assert(got(s.get(key(i))) === i)) // promoted, clean
    assert(s.counters.coldLoads === 10)
    f.commit()
    f.maxEntries = 0
    val before = s.counters
    s.put(key(12), bytes(12))
    val batch = s.counters - before
    assert(batch.evictions >= 10)
    assert(batch.writeBacks === 1) // only key 11 was dirty; 1..10 were clean
  }

  test("abort after evictions restores N-1, wherever its entries live") {
    val f = new Fixture(maxEntries = 5)
    val s = f.state
    f.load(1L to 51L)
    assert(s.coldKeyCount > 0)
    val before = contents(s)
    (1L to 50L by 3).foreach(i => s.put(key(i), bytes(-i)))
    (2L to 50L by 3).foreach(i => s.remove(key(i)))
    (100L to 120L).foreach(i => s.put(key(i), bytes(i)))
    s.abortBatch()
    assert(contents(s) === before)
    assert(s.numKeys === before.size)
  }

  test("a shrink request made while the owner is letting go is honoured once the state is idle") {
    // The relief round runs on another thread at the worst moment: after the owner's last
    // report (inside the growth hook of its release), before the lease is cleared, so its
    // trySpill finds the state owned and gets 0.
    var racing = false
    var spilledDuringRelease = -1L
    val s = new TieredState("race", None, () => coldRoot,
      new Budget {
        def report(st: Spillable): Eviction = {
          if (racing) {
            val relief =
              new Thread(() => { st.requestShrink(0, 0); spilledDuringRelease = st.trySpill(0, 0) })
            relief.start()
            relief.join()
          }
          Eviction.Zero
        }
      }, new ExecutorStats)
    try {
      val lease = s.ownership.acquire("owner", -1)
      (1L to 50L).foreach(i => s.put(key(i), bytes(i)))
      s.commitBatch()
      racing = true
      s.release(lease, "test")
      assert(spilledDuringRelease === 0, "the relief round must have found the state owned")
      assert(s.heap.numLiveEntries === 0, "the request made during the release was lost")
      val again = s.ownership.acquire("owner", -1)
      assert(got(s.get(key(7))) === 7)
      s.release(again, "test")
    } finally s.ownership.close()
  }

  /**
   * The real manager's budget, which, once `armed`, answers the owner's next report and then
   * halves the budget in force from another thread, as a relief round would: the request
   * reaches the owner at the worst moment, after its last report (inside its release), before
   * its lease ends.
   */
  private class RacingBudget(manager: MemoryManager) extends Budget {
    @volatile var armed = false
    def report(owner: Spillable): Eviction = {
      val e = manager.report(owner)
      if (armed) {
        armed = false
        val relief = new Thread(() =>
          manager.configure(MemoryConf(
              budgetBytes = Some(owner.heapBytes / 2), pressureMonitor = false)))
        relief.start()
        relief.join()
      }
      e
    }
    override def shrank(owner: Spillable): Unit = manager.shrank(owner)
  }

  /**
   * 5000 committed entries under the real manager, then the owner's release with a relief round
   * racing it ([[RacingBudget]]); `check` gets the state, the manager, what the release returned
   * and the state's heap bytes before it.
   */
  private def releasedWhileRacing(name: String, localDir: File)(
      check: (TieredState, MemoryManager, Boolean, Long) => Unit): Unit = {
    val manager = new MemoryManager(MemoryConf(budgetBytes = Some(64L << 20),
        pressureMonitor = false), relief = r => r.run())
    val racing = new RacingBudget(manager)
    val s = new TieredState(name, None, () => localDir, racing, new ExecutorStats)
    manager.register(s)
    try {
      val lease = s.ownership.acquire("owner", -1)
      (1L to 5000L).foreach(i => s.put(key(i), bytes(i)))
      s.commitBatch()
      val before = s.heapBytes
      racing.armed = true
      val released = s.release(lease, "committed")
      assert(!racing.armed, "no relief round raced the release")
      check(s, manager, released, before)
    } finally {
      s.ownership.close()
      manager.close()
    }
  }

  test("a store that honours a shrink request as it lets go tells the memory manager, whose " +
    "total at rest is then what the stores hold") {
    releasedWhileRacing("tells", coldRoot) { (s, manager, _, before) =>
      assert(s.heapBytes <= before / 2, "the request made during the release was not honoured")
      assert(manager.totalHeapBytes === s.heapBytes,
        "the manager still counts the size the store had before it honoured the request")
    }
  }

  test("a shrink request that arrives as the owner lets go, with the local dir unusable, fails " +
    "no release: the owner's batch has ended, the round retries, and every entry is still there") {
    // The owner honours the request after the unlock, where the eviction meets the local dir.
    val notADir = Files.createTempFile("not-a-dir", ".file").toFile
    try releasedWhileRacing("unusable", notADir) { (s, manager, released, _) =>
        assert(released, "the release did not end the lease")
        assert(s.coldKeyCount === 0, "the eviction cannot have reached a cold tier")
        assert(manager.totalHeapBytes === s.heapBytes)
        val reader = s.ownership.acquire("reader", -1)
        assert(contents(s) === (1L to 5000L).map(i => i -> i).toMap)
        s.release(reader, "read")
      }
    finally notADir.delete()
  }

  test("a doomed state whose freeing fails part-way is freed for the budget all the same") {
    val mm = new MemoryManager(MemoryConf(budgetBytes = Some(64L << 10), pressureMonitor = false))
    val s = new TieredState("doomed", None, () => coldRoot, mm, new ExecutorStats,
      onFreed = mm.unregister,
      openCold = (parent, name) =>
        new ColdTier(new File(parent, s"$name-${UUID.randomUUID()}")) {
          override def close(): Unit = {
            super.close(); throw new RocksDBException("injected close failure")
          }
        })
    mm.register(s)
    val writer = s.ownership.acquire("writer", -1)
    (1L to 5000L).foreach(i => s.put(key(i), bytes(i)))
    s.commitBatch()
    s.release(writer, "committed") // evicts down to the budget: a cold tier
    val zombie = s.ownership.acquire("zombie", -1)
    assert(s.coldKeyCount > 0 && mm.totalHeapBytes > 0)
    assert(s.ownership.revoke("a newer attempt took over"))
    intercept[RocksDBException](s.ownership.freeIfDoomedBy(zombie))
    assert(s.ownership.isFreed)
    assert(mm.totalHeapBytes === 0 && mm.status.spillables === 0, "still counted in the budget")
  }

  test("a shrink request that finds another relief round spilling the idle state is honoured " +
    "by that round, not left pending") {
    // Two relief rounds ask the same idle state. The first one's spill holds the state's lock
    // while it writes to RocksDB; the second one's trySpill then finds the lock taken and
    // returns 0, counting on the lock's holder to honour its request once it lets go.
    val inWrite = new java.util.concurrent.CountDownLatch(1)
    val finishWrite = new java.util.concurrent.CountDownLatch(1)
    @volatile var holdWrites = true
    val s = new TieredState("two-rounds", None, () => coldRoot,
      new Budget { def report(owner: Spillable): Eviction = Eviction.Zero }, new ExecutorStats,
      openCold = (parent, name) =>
        new ColdTier(new File(parent, s"$name-${UUID.randomUUID()}")) {
          override def write(batch: WriteBatch): Unit = {
            if (holdWrites) {
              holdWrites = false
              inWrite.countDown()
              finishWrite.await()
            }
            super.write(batch)
          }
        })
    try {
      val lease = s.ownership.acquire("owner", -1)
      (1L to 1000L).foreach(i => s.put(key(i), bytes(i)))
      s.commitBatch()
      s.release(lease, "loaded")
      val full = s.heapBytes
      val first = new Thread(() => { s.requestShrink(full - 1, Long.MaxValue); s.trySpill(0, 0) })
      first.start()
      try {
        assert(inWrite.await(1, java.util.concurrent.TimeUnit.MINUTES))
        s.requestShrink(0, 0)
        assert(s.trySpill(0, 0) === 0, "the second round must have found the state locked")
      } finally {
        finishWrite.countDown()
        first.join()
      }
      assert(s.heapEntries === 0, "the second round's request was left pending on an idle state")
      val check = s.ownership.acquire("owner", -1)
      assert((1L to 1000L).forall(i => got(s.get(key(i))) == i))
      s.release(check, "checked")
    } finally s.ownership.close()
  }

  test("removal during iteration over both tiers, and each key seen once") {
    val f = new Fixture(maxEntries = 20)
    val s = f.state
    f.load(0L to 200L)
    assert(s.coldKeyCount > 0)
    val seen = scala.collection.mutable.ArrayBuffer.empty[Long]
    val it = s.iterator()
    while (it.hasNext) {
      val k = it.next().key
      seen += long(k)
      if (long(k) % 2 == 0) s.remove(key(long(k)))
      else s.get(key(long(k) + 1)) // promotions during iteration
    }
    assert(seen.sorted === (0L to 200L))
    f.commit()
    assert(contents(s).keySet === (1L to 200L by 2).toSet)
  }

  /** Keys (g: string, t: long) of a store with prefix scans over g. */
  private object GroupKeys {
    private val schema = StructType(Seq(StructField("g", StringType), StructField("t", LongType)))
    private val keys = UnsafeProjection.create(schema)
    private val prefixes = UnsafeProjection.create(StructType(schema.take(1)))
    def index: PrefixIndex = new PrefixIndex(schema, 1)
    /** The projection's row, reused by the next call. */
    def key(g: String, t: Long): UnsafeRow =
      keys(new GenericInternalRow(Array[Any](UTF8String.fromString(g), t)))
    def prefix(g: String): UnsafeRow =
      prefixes(new GenericInternalRow(Array[Any](UTF8String.fromString(g)))).copy()
    def t(kv: KeyValue): Long = {
      val r = new UnsafeRow(2); r.pointTo(kv.key, kv.keyLength); r.getLong(1)
    }
  }

  test("prefix scan covers both tiers") {
    import GroupKeys.{key => k, prefix => p}
    val f = new Fixture(maxEntries = 3, Some(GroupKeys.index))
    val s = f.state
    for (g <- Seq("a", "b", "c"); t <- 1L to 5L) s.put(k(g, t), bytes(t))
    f.commit()
    s.put(k("z", 0), bytes(0))
    f.commit()
    assert(s.coldKeyCount >= 12)
    def scan(g: String) = s.prefixScan(p(g)).map(GroupKeys.t).toSet
    assert(scan("b") === (1L to 5L).toSet)
    s.remove(k("b", 3))
    assert(scan("b") === Set(1L, 2L, 4L, 5L))
    assert(scan("nope") === Set.empty)
  }

  /** Records in unsigned key order, the order of checkpoint files. */
  private def inKeyOrder(
      records: Seq[(Array[Byte], Array[Byte])]): Seq[(Array[Byte], Array[Byte])] =
    records.sortWith((a, b) => java.util.Arrays.compareUnsigned(a._1, b._1) < 0)

  /**
   * A snapshot's records: unique keys in unsigned byte order, as `StateFile` writes them. Rows
   * are copied as they come: the projections reuse theirs.
   */
  private def snapshotOf(
      entries: Iterator[(UnsafeRow, UnsafeRow)]): Seq[(Array[Byte], Array[Byte])] =
    inKeyOrder(entries.map { case (k, v) => k.copy().getBytes -> v.copy().getBytes }.toSeq)

  private def load(s: TieredState, snapshot: Seq[(Array[Byte], Array[Byte])]): Unit = {
    s.clear()
    s.loadVersion(visit => snapshot.foreach { case (k, v) => visit(k, v) })
  }

  /** A fixture whose cold tiers are kept in `opened` as they open. */
  private def watchedFixture(maxEntries: Long, prefix: Option[PrefixIndex] = None)
      : (Fixture, ArrayBuffer[ColdTier]) = {
    val opened = ArrayBuffer.empty[ColdTier]
    val f = new Fixture(maxEntries, prefix,
      (dir, name) => { val t = ColdTier.create(dir, name); opened += t; t })
    (f, opened)
  }

  /** Entries RocksDB's memtables hold: what came through writes, not ingested files. */
  private def memtableEntries(t: ColdTier): Long =
    t.property("rocksdb.num-entries-active-mem-table") + t.property(
      "rocksdb.num-entries-imm-mem-tables")

  test("a snapshot past the heap's share loads the rest straight into the cold tier, exactly: " +
    "no entry goes through the heap first, and journals replay over both tiers") {
    val (f, opened) = watchedFixture(maxEntries = 1000)
    val s = f.state
    val n = 20000L
    load(s, snapshotOf((0L until n).iterator.map(i => key(i) -> bytes(i * 3))))
    // The budget asked once the heap held its share: what it evicted at the load's end (one
    // entry, and more to pay for the cold-key filter's first layer) is all that went through the
    // heap, and nothing went through RocksDB's memtable: every entry, the heap's share too, came
    // in a sorted file, and the share's entries are clean there (evicting them writes nothing).
    val evicted = s.counters.evictions
    assert(evicted > 0 && evicted < 1000, "entries past the share went through the heap")
    assert(opened.size == 1 && memtableEntries(opened.head) == 0,
      "entries were written through RocksDB's memtable")
    assert(s.counters.writeBacks === 0)
    assert(s.heap.numLiveEntries === 1001 - evicted)
    assert((0 until s.heap.numSlots).forall(slot => s.heap.cold(slot) == HeapTier.ColdClean))
    assert(s.coldKeyCount === n)
    assert(s.numKeys === n)
    var model = (0L until n).map(i => i -> i * 3).toMap
    assert(contents(s) == model, "the loaded state differs from the snapshot")
    assert(got(s.get(key(n - 1))) === (n - 1) * 3 && s.get(key(n)) === null)
    // Journals after the snapshot update, remove and add keys of both tiers.
    def inHeap(r: UnsafeRow) =
      s.heap.lookup(r.getBaseObject, r.getBaseOffset, r.getSizeInBytes, r.hashCode) >= 0
    val coldOnes = (0L until n).filter(i => !inHeap(key(i))).take(2)
    s.applyCommitted(key(coldOnes(0)).copy().getBytes, bytes(-1).getBytes)
    s.applyCommitted(key(coldOnes(1)).copy().getBytes, null)
    s.applyCommitted(key(n).copy().getBytes, bytes(7).getBytes)
    model = model + (coldOnes(0) -> -1L) - coldOnes(1) + (n -> 7L)
    assert(contents(s) == model, "the state after the journals differs from the model")
    assert(s.numKeys === model.size)
    // Loading again starts from empty: nothing of the first load stays in either tier.
    load(s, snapshotOf((0L until 10L).iterator.map(i => key(i) -> bytes(i))))
    assert(contents(s) === (0L until 10L).map(i => i -> i).toMap && s.coldKeyCount === 0)
    s.ownership.close()
  }

  test("recovery merges the journals into the load: their keys past the heap's share go " +
    "straight to the cold tier too, exactly") {
    import spillstore.checkpoint.{CheckpointDirs, StateFile}
    import spillstore.recovery.Recovery
    CheckpointDirs.withDirs("tiered-recovery") { (dir, local) =>
      val n = 20000L
      var model = (0L until n).map(i => i -> i).toMap
      // The snapshot in format 2, which holds entries (format 3's lists runs).
      def write(kind: StateFile.Kind, v: Long, records: Seq[(Long, Option[Long])]): Unit =
        dir.write(kind, v,
          if (kind == StateFile.Snapshot) StateFile.FullSnapshotFormat
          else StateFile.FormatVersion) { w =>
          inKeyOrder(records.map { case (i, x) =>
            key(i).copy().getBytes -> x.map(bytes(_).getBytes).orNull
          })
            .foreach { case (k, x) => w.record(k, x) }
        }
      write(StateFile.Snapshot, 1, model.toSeq.map { case (i, x) => i -> Some(x) })
      // Journal 2 updates every tenth key, removes others, adds new ones; journal 3 removes
      // one of the new keys and puts back one that journal 2 removed.
      val two = (0L until n).collect {
        case i if i % 10 == 0 => i -> Some(-i)
        case i if i % 10 == 5 => i -> None
      } ++ (n until n + 500).map(i => i -> Some(i))
      write(StateFile.Journal, 2, two)
      write(StateFile.Journal, 3, Seq(n -> None, 5L -> Some(55L)))
      two.foreach { case (i, x) => model = x.fold(model - i)(v => model + (i -> v)) }
      model = model - n + (5L -> 55L)

      val (f, opened) = watchedFixture(maxEntries = 1000)
      val s = f.state
      new Recovery(dir, () => local).load(3, s)
      assert(contents(s) == model, "the loaded version differs from the model")
      assert(s.numKeys === model.size && s.coldKeyCount === model.size)
      assert(s.counters.evictions < 1000, "journal keys went through the heap")
      assert(memtableEntries(opened.last) == 0,
        "journal keys were written through RocksDB's memtable")
      s.ownership.close()
    }
  }

  test("a prefix store's snapshot past the heap's share: its cold entries are found by prefix") {
    import GroupKeys.{key => k, prefix => p}
    val f = new Fixture(maxEntries = 1000, Some(GroupKeys.index))
    val s = f.state
    val groups = (0 until 50).map(g => s"group-$g")
    load(s,
      snapshotOf(for (g <- groups.iterator; t <- (0L until 400L).iterator) yield k(g, t) -> bytes(
          t)))
    assert(s.counters.evictions < 1000, "entries past the share went through the heap")
    assert(s.coldKeyCount === 20000 - s.heap.numLiveEntries && s.numKeys === 20000)
    groups.foreach { g =>
      val found = s.prefixScan(p(g)).map(kv => GroupKeys.t(kv) -> got(kv))
      assert(found.toMap == (0L until 400L).map(t => t -> t).toMap, s"$g: ${found.length} found")
    }
    s.ownership.close()
  }

  test("random workload with a tiny heap matches a model, through commits, aborts and reloads") {
    val rnd = new Random(11)
    val f = new Fixture(maxEntries = 7)
    val s = f.state
    var model = Map.empty[Long, Long]
    val journals = scala.collection.mutable.ArrayBuffer.empty[Seq[(Array[Byte], Array[Byte])]]
    for (batch <- 0 until 60) {
      var next = model
      for (_ <- 0 until 30) {
        val k = rnd.nextInt(60).toLong
        rnd.nextInt(3) match {
          case 0 => s.remove(key(k)); next -= k
          case 1 => val v = rnd.nextLong(); s.put(key(k), bytes(v)); next += k -> v
          case _ => assert(Option(s.get(key(k))).map(got) === next.get(k))
        }
      }
      assert(s.numKeys === next.size)
      if (rnd.nextInt(5) == 0) f.abort()
      else {
        val records = scala.collection.mutable.ArrayBuffer.empty[(Array[Byte], Array[Byte])]
        s.writeJournal(new RecordingWriter(records))
        journals += records.toSeq
        f.commit()
        model = next
      }
      assert(contents(s) === model, s"batch $batch")
    }
    // Recovery path: replay the journals into a cleared state with the same tiny heap.
    s.clear()
    journals.foreach(_.foreach { case (k, v) => s.applyCommitted(k, v) })
    assert(contents(s) === model)
    assert(s.numKeys === model.size)
    s.ownership.close()
  }

  test("a journal of thousands of changes (many prefetched chunks) holds each key's net " +
    "change once, in unsigned key order") {
    val f = new Fixture(maxEntries = Long.MaxValue)
    val s = f.state
    f.load(0L until 3000L)
    val net = scala.collection.mutable.Map.empty[Long, Option[Long]]
    def put(k: Long, v: Long): Unit = { s.put(key(k), bytes(v)); net(k) = Some(v) }
    def remove(k: Long, existed: Boolean): Unit = {
      s.remove(key(k)); if (existed) net(k) = None else net -= k
    }
    (0L until 1500L).foreach(k => put(k, k + 1))
    (0L until 1500L by 3).foreach(k => put(k, k + 2))
    (1500L until 2200L).foreach(remove(_, existed = true))
    (2200L until 2400L).foreach { k => remove(k, existed = true); put(k, 2 * k) }
    (3000L until 5000L).foreach(k => put(k, k))
    (5000L until 5300L).foreach { k => put(k, k); remove(k, existed = false) }
    val records = ArrayBuffer.empty[(Array[Byte], Array[Byte])]
    s.writeJournal(new RecordingWriter(records))
    val keys = records.map(_._1)
    keys.zip(keys.drop(1)).foreach { case (a, b) =>
      assert(java.util.Arrays.compareUnsigned(a, b) < 0, "keys out of order or repeated")
    }
    assert(records.map { case (k, v) => long(k) -> Option(v).map(long) }.toMap === net.toMap)
    assert(records.length === net.size)
    f.commit()
    s.ownership.close()
  }

  test("a cold-tier write that fails at commit changes nothing: after the retry's abort a " +
    "removed key never comes back from RocksDB") {
    @volatile var failWrites = false
    val f = new Fixture(maxEntries = 0,
      openCold = (parent, name) =>
        new ColdTier(new File(parent, s"$name-${UUID.randomUUID()}")) {
          override def write(batch: WriteBatch): Unit =
            if (failWrites) throw new RocksDBException("injected cold-tier write failure")
            else super.write(batch)
        })
    val s = f.state
    (1L to 10L).foreach(i => s.put(key(i), bytes(i)))
    f.commit()
    s.put(key(100), bytes(100)) // evicts 1..10 to RocksDB
    f.commit()
    assert(s.coldKeyCount >= 10)
    f.maxEntries = 1000
    s.remove(key(3)) // promotes 3 from RocksDB, then removes it in the batch
    failWrites = true
    intercept[RocksDBException](s.commitBatch())
    failWrites = false
    f.abort() // what a retried attempt's takeover does
    assert(got(s.get(key(3))) === 3)
    s.remove(key(3))
    f.commit()
    assert(s.get(key(3)) === null)
    f.maxEntries = 0
    s.put(key(200), bytes(200)) // everything to RocksDB again
    f.commit()
    assert(s.get(key(3)) === null, "a removed key came back from the cold tier")
    val expected = ((1L to 10L).filter(_ != 3) ++ Seq(100L, 200L)).map(i => i -> i).toMap
    assert(contents(s) === expected)
    assert(s.numKeys === expected.size)
  }

  test("the heap estimate counts the open batch's undo values") {
    val f = new Fixture(maxEntries = Long.MaxValue)
    val s = f.state
    val value = new Array[Byte](256)
    (1L to 1000L).foreach(i => s.put(key(i), row(value.clone())))
    f.commit()
    val committed = s.heap.estimatedBytes
    // Every update keeps the committed value until commit, for abort: 1000 x (256 + header).
    (1L to 1000L).foreach(i => s.put(key(i), row(value.clone())))
    val open = s.heap.estimatedBytes
    assert(open - committed >= 1000L * (256 + 16), s"open batch $open vs committed $committed")
    f.commit()
    // Their pages are owed back, paid by the next batch's puts or, as here, before any entry
    // is evicted when the budget asks for memory.
    assert(s.evict(1000L * 256, 0) >= 1000L * 256)
    assert(s.heap.estimatedBytes - committed < 1000L * 256,
      "undo values still counted after the budget asked for memory")
    assert(s.heap.numLiveEntries === 1000 && s.coldKeyCount === 0, "no entry was evicted")
  }

  test("the heap estimate counts the prefix index") {
    val keySchema = StructType(Seq(StructField("g", StringType), StructField("t", LongType)))
    val kp = UnsafeProjection.create(keySchema)
    def k(g: Long, t: Long) =
      kp(new GenericInternalRow(Array[Any](UTF8String.fromString(s"group-$g"), t)))
    def fill(f: Fixture): Long = {
      for (g <- 0L until 100L; t <- 0L until 10L) f.state.put(k(g, t), bytes(t))
      f.commit()
      f.state.heap.estimatedBytes
    }
    val plain = fill(new Fixture(maxEntries = Long.MaxValue))
    val indexed = fill(new Fixture(maxEntries = Long.MaxValue, Some(new PrefixIndex(keySchema, 1))))
    // 1000 members and 100 groups, each at least a hash-set entry and a map node.
    assert(indexed - plain >= 1000L * 40 + 100L * 100, s"indexed $indexed vs plain $plain")
  }

  test("twenty spilling states under one memory manager: their cold-key filters share an 8th " +
    "of the budget, so at rest the total is within it, and every entry is still there") {
    val budget = 256L << 10
    val mm = new MemoryManager(MemoryConf(budgetBytes = Some(budget), pressureMonitor = false))
    val states = (0 until 20).map { i =>
      val s = new TieredState(s"store$i", None, () => coldRoot, mm, new ExecutorStats,
        onFreed = mm.unregister)
      mm.register(s)
      s
    }
    try {
      // Two rounds: later states' relief rounds spill the idle earlier ones too.
      for (round <- 0 until 2; (s, i) <- states.zipWithIndex) {
        val l = s.ownership.acquire(s"task $i", -1)
        (round * 2500L until (round + 1) * 2500L).foreach(k => s.put(key(k), bytes(k + i)))
        s.commitBatch()
        s.release(l, "test")
      }
      assert(states.forall(_.coldKeyCount > 0), "every state spilled")
      assert(states.map(_.fixedBytes).sum > HeapTier.EmptyBytes * 20, "no filter was granted")
      assert(mm.totalHeapBytes === states.map(_.heapBytes).sum)
      assert(mm.totalHeapBytes <= budget, s"${mm.totalHeapBytes} at rest")
      assert(mm.reservedFixedBytes <= budget / 8)
      states.zipWithIndex.foreach { case (s, i) =>
        val l = s.ownership.acquire(s"reader $i", -1)
        assert(contents(s) === (0L until 5000L).map(k => k -> (k + i)).toMap, s"state $i")
        assert(s.get(key(5000)) === null)
        s.release(l, "test")
      }
    } finally states.foreach(_.ownership.close())
    assert(mm.totalHeapBytes === 0 && mm.reservedFixedBytes === 0, "freed states gave it back")
  }

  /** Captures the journal records a commit would write. */
  private class RecordingWriter(
      out: scala.collection.mutable.ArrayBuffer[(Array[Byte], Array[Byte])])
      extends StateFile.RecordSink {
    def put(key: Array[Byte], value: Array[Byte]): Unit = out += ((key, value))
    def remove(key: Array[Byte]): Unit = out += ((key, null))
  }
}
