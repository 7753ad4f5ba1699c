package spillstore.heap

import java.util.{Arrays => JArrays}

/**
 * Sorts keys by unsigned bytes, the order of checkpoint files and of RocksDB: a batch's
 * changed entries for the commit path, and an eviction's keys for its RocksDB write.
 *
 * A comparator sort of entries costs two dependent cache misses per comparison (the entry's
 * record, then its key); on a 25M-key run it was 13 % of all task time. Here the 8-byte key
 * prefixes the change list took when each key was changed (past the bytes all keys share) are
 * radix-sorted with their positions, and whole keys are compared only among entries whose
 * prefixes are equal, so the sort itself does not touch the keys.
 *
 * Runs of at most 32k entries are sorted on their own and then merged, so that no array of the
 * sort is humongous in G1's sense (512 KB or more in a heap up to 2 GB: see [[ChangeList]]).
 */
object KeyOrder {
  private val RunLength = 1 << 15
  /** Fewer keys than this are sorted by comparing them whole: see [[order]]. */
  private val MinRadixKeys = 64

  /** Slots of a [[HeapTier]], one at a time (an `Iterator[Int]` would box each one). */
  trait Slots {
    def hasNext: Boolean
    def next(): Int
  }

  /** The list's entries (slots of `tier`) in ascending unsigned key order. */
  def sorted(changes: ChangeList, tier: HeapTier): Slots = {
    changes.alignPrefixes()
    val n = changes.size
    val scratch = new Scratch(math.max(1, math.min(n, RunLength)))
    val runs = (0 until n by RunLength)
      .map(from => sortRun(changes, tier, from, math.min(n, from + RunLength), scratch)).toArray
    new Merge(runs, tier)
  }

  /** One sorted run: its slots and their prefixes, in order. */
  private final class Run(val slots: Array[Int], val prefixes: Array[Long])

  /** Arrays one run's radix sort works in, shared by the runs of one sort. */
  private final class Scratch(length: Int) {
    val positions = new Array[Int](length)
    val tmpPrefixes = new Array[Long](length)
    val tmpPositions = new Array[Int](length)
    val counts = new Array[Int](257)
  }

  /** Sorts entries [from, until) of `changes`. */
  private def sortRun(changes: ChangeList, tier: HeapTier, from: Int, until: Int,
      s: Scratch): Run = {
    val n = until - from
    val prefixes = new Array[Long](n)
    var i = 0
    while (i < n) { prefixes(i) = changes.prefix(from + i); s.positions(i) = from + i; i += 1 }
    radixSort(prefixes, s.positions, n, s)
    val out = new Array[Int](n)
    i = 0
    while (i < n) { out(i) = changes.slot(s.positions(i)); i += 1 }
    forEachTie(prefixes, n)((start, end) => sortRange(out, start, end)(tier.compareKeys))
    new Run(out, prefixes)
  }

  /**
   * The order of `n` keys by unsigned bytes (key `i`: bytes [offsets(i), offsets(i) +
   * lengths(i)) of `keys(i)`): positions into `keys`, smallest key first. Sorts on the 8 bytes
   * after those all keys share, as the commit's sort does; for at most a few tens of thousands
   * of keys (one eviction's RocksDB write).
   */
  def order(keys: Array[Array[Byte]], offsets: Array[Int], lengths: Array[Int], n: Int)
      : Array[Int] = {
    if (n < MinRadixKeys) {
      // A radix pass costs a 257-slot histogram whatever n is: a write of a few keys (the tail
      // of a chunked eviction, a small relief) would pay more for the histograms than the sort.
      val positions = Array.tabulate(n)(identity)
      sortTies(keys, offsets, lengths, positions, 0, n)
      return positions
    }
    var shared = lengths(0)
    var i = 1
    while (i < n && shared > 0) {
      shared = ChangeList.sharedLength(keys(0), offsets(0), shared, keys(i), offsets(i), lengths(i))
      i += 1
    }
    val s = new Scratch(n)
    val prefixes = new Array[Long](n)
    i = 0
    while (i < n) {
      prefixes(i) = ChangeList.prefixAt(keys(i), offsets(i), lengths(i), shared)
      s.positions(i) = i
      i += 1
    }
    radixSort(prefixes, s.positions, n, s)
    forEachTie(prefixes, n)((start, end) =>
      sortTies(keys, offsets, lengths, s.positions, start, end))
    s.positions
  }

  /** Sorts `positions`[start, end) by the whole keys they point to. */
  private def sortTies(keys: Array[Array[Byte]], offsets: Array[Int], lengths: Array[Int],
      positions: Array[Int], start: Int, end: Int): Unit =
    sortRange(positions, start, end)((a, b) =>
      JArrays.compareUnsigned(
        keys(a), offsets(a), offsets(a) + lengths(a), keys(b), offsets(b), offsets(b) + lengths(b)))

  /** Sorts `a`[start, end) by `compare` (ties are few and short: boxing them is cheap). */
  private def sortRange(a: Array[Int], start: Int, end: Int)(compare: (Int, Int) => Int): Unit = {
    val tied = JArrays.copyOfRange(a, start, end).map(Int.box)
    JArrays.sort(tied, (x: Integer, y: Integer) => compare(x, y))
    var j = 0
    while (j < tied.length) { a(start + j) = tied(j); j += 1 }
  }

  /**
   * LSD radix sort of `prefixes`[0, n) as unsigned longs, one byte a pass, carrying
   * `positions` along; a byte on which all prefixes agree is skipped. Leaves the result in the
   * arrays passed in.
   */
  private def radixSort(prefixes: Array[Long], positions: Array[Int], n: Int, s: Scratch): Unit = {
    var from = prefixes
    var fromPositions = positions
    var to = s.tmpPrefixes
    var toPositions = s.tmpPositions
    val counts = s.counts
    var shift = 0
    while (shift < 64) {
      JArrays.fill(counts, 0)
      var i = 0
      while (i < n) { counts(((from(i) >>> shift) & 0xFF).toInt + 1) += 1; i += 1 }
      if (!counts.exists(_ == n)) {
        var b = 0
        while (b < 256) { counts(b + 1) += counts(b); b += 1 }
        i = 0
        while (i < n) {
          val bucket = ((from(i) >>> shift) & 0xFF).toInt
          val at = counts(bucket)
          counts(bucket) = at + 1
          to(at) = from(i)
          toPositions(at) = fromPositions(i)
          i += 1
        }
        val p = from; from = to; to = p
        val q = fromPositions; fromPositions = toPositions; toPositions = q
      }
      shift += 8
    }
    if (from ne prefixes) {
      System.arraycopy(from, 0, prefixes, 0, n)
      System.arraycopy(fromPositions, 0, positions, 0, n)
    }
  }

  /** Calls `sort(start, end)` for each run of two or more equal prefixes in sorted `prefixes`:
   *  those keys differ further on, or one is a prefix of the other. */
  private def forEachTie(prefixes: Array[Long], n: Int)(sort: (Int, Int) => Unit): Unit = {
    var start = 0
    while (start < n) {
      var end = start + 1
      while (end < n && prefixes(end) == prefixes(start)) end += 1
      if (end - start > 1) sort(start, end)
      start = end
    }
  }

  /** A k-way merge of sorted runs through a binary min-heap of run indices. */
  private final class Merge(runs: Array[Run], tier: HeapTier) extends Slots {
    private val pos = new Array[Int](runs.length) // next position in each run
    private val heap = Array.tabulate(runs.length)(identity)
    private var heapSize = runs.length
    (heapSize / 2 - 1 to 0 by -1).foreach(siftDown)

    private def less(r: Int, q: Int): Boolean = {
      val a = runs(r)
      val b = runs(q)
      val c = java.lang.Long.compareUnsigned(a.prefixes(pos(r)), b.prefixes(pos(q)))
      (if (c != 0) c else tier.compareKeys(a.slots(pos(r)), b.slots(pos(q)))) < 0
    }

    private def siftDown(from: Int): Unit = {
      var at = from
      var done = false
      while (!done) {
        val l = 2 * at + 1
        if (l >= heapSize) done = true
        else {
          val c = if (l + 1 < heapSize && less(heap(l + 1), heap(l))) l + 1 else l
          if (less(heap(c), heap(at))) {
            val t = heap(c); heap(c) = heap(at); heap(at) = t
            at = c
          } else done = true
        }
      }
    }

    override def hasNext: Boolean = heapSize > 0

    override def next(): Int = {
      if (heapSize == 0) throw new NoSuchElementException("KeyOrder merge is exhausted")
      val r = heap(0)
      val s = runs(r).slots(pos(r))
      pos(r) += 1
      if (pos(r) == runs(r).slots.length) { heapSize -= 1; heap(0) = heap(heapSize) }
      siftDown(0)
      s
    }
  }
}
