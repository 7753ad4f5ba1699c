package spillstore.heap

import java.util.{Arrays => JArrays}

/**
 * Sorts a batch's changed entries by unsigned key bytes, the order of checkpoint files, for the
 * commit path.
 *
 * A comparator sort of entries costs two dependent cache misses per comparison (the entry,
 * then its key array); on a 25M-key run it was 13 % of all task time. Here the 8-byte key
 * prefixes the change list took when each key was changed (past the bytes all keys share) are
 * radix-sorted with their positions, and whole keys are compared only among entries whose
 * prefixes are equal, so the sort itself does not touch the keys.
 *
 * Runs of at most 32k entries are sorted on their own and then merged, so that no array of the
 * sort is humongous in G1's sense (512 KB or more in a heap up to 2 GB: see [[ChangeList]]).
 */
object KeyOrder {
  private val RunLength = 1 << 15

  /** The list's entries in ascending unsigned key order. */
  def sorted(changes: ChangeList): Iterator[Entry] = {
    changes.alignPrefixes()
    val n = changes.size
    if (n == 0) return Iterator.empty
    val scratch = new Scratch(math.min(n, RunLength))
    val runs = (0 until n by RunLength).map(from => sortRun(changes, from, math.min(n, from + RunLength), scratch))
    if (runs.size == 1) runs.head.entries.iterator else new Merge(runs.toArray)
  }

  /** One sorted run: its entries and their prefixes, in order. */
  private final class Run(val entries: Array[Entry], val prefixes: Array[Long])

  /** Arrays one run's radix sort works in, shared by the runs of one sort. */
  private final class Scratch(length: Int) {
    val positions = new Array[Int](length)
    val tmpPrefixes = new Array[Long](length)
    val tmpPositions = new Array[Int](length)
    val counts = new Array[Int](257)
  }

  /** Sorts entries [from, until) of `changes`. */
  private def sortRun(changes: ChangeList, from: Int, until: Int, s: Scratch): Run = {
    val n = until - from
    var prefixes = new Array[Long](n)
    var positions = s.positions
    var tmpPrefixes = s.tmpPrefixes
    var tmpPositions = s.tmpPositions
    val counts = s.counts
    var i = 0
    while (i < n) { prefixes(i) = changes.prefix(from + i); positions(i) = from + i; i += 1 }
    // LSD radix sort, one byte a pass; a byte position on which all prefixes agree is skipped.
    var shift = 0
    while (shift < 64) {
      JArrays.fill(counts, 0)
      i = 0
      while (i < n) { counts(((prefixes(i) >>> shift) & 0xff).toInt + 1) += 1; i += 1 }
      if (!counts.exists(_ == n)) {
        var b = 0
        while (b < 256) { counts(b + 1) += counts(b); b += 1 }
        i = 0
        while (i < n) {
          val bucket = ((prefixes(i) >>> shift) & 0xff).toInt
          val to = counts(bucket)
          counts(bucket) = to + 1
          tmpPrefixes(to) = prefixes(i)
          tmpPositions(to) = positions(i)
          i += 1
        }
        val p = prefixes; prefixes = tmpPrefixes; tmpPrefixes = p
        val q = positions; positions = tmpPositions; tmpPositions = q
      }
      shift += 8
    }
    val out = new Array[Entry](n)
    i = 0
    while (i < n) { out(i) = changes.entry(positions(i)); i += 1 }
    // Equal prefixes: the keys differ further on, or one is a prefix of the other.
    var start = 0
    while (start < n) {
      var end = start + 1
      while (end < n && prefixes(end) == prefixes(start)) end += 1
      if (end - start > 1) JArrays.sort(out, start, end, Entry.ByKey)
      start = end
    }
    // An odd number of passes leaves the sorted prefixes in a scratch array: keep a copy.
    new Run(out, if (prefixes eq s.tmpPrefixes) JArrays.copyOf(prefixes, n) else prefixes)
  }

  private def compare(a: Run, ai: Int, b: Run, bi: Int): Int = {
    val c = java.lang.Long.compareUnsigned(a.prefixes(ai), b.prefixes(bi))
    if (c != 0) c else Entry.ByKey.compare(a.entries(ai), b.entries(bi))
  }

  /** A k-way merge of sorted runs through a binary min-heap of run indices. */
  private final class Merge(runs: Array[Run]) extends Iterator[Entry] {
    private val pos = new Array[Int](runs.length) // next position in each run
    private val heap = Array.tabulate(runs.length)(identity)
    private var heapSize = runs.length
    (heapSize / 2 - 1 to 0 by -1).foreach(siftDown)

    private def less(r: Int, q: Int): Boolean = compare(runs(r), pos(r), runs(q), pos(q)) < 0

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

    override def next(): Entry = {
      if (heapSize == 0) throw new NoSuchElementException("KeyOrder merge is exhausted")
      val r = heap(0)
      val e = runs(r).entries(pos(r))
      pos(r) += 1
      if (pos(r) == runs(r).entries.length) { heapSize -= 1; heap(0) = heap(heapSize) }
      siftDown(0)
      e
    }
  }
}
