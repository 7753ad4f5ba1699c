package spillstore.heap

import java.util.{Arrays => JArrays}

/**
 * Sorts entries by unsigned key bytes, the order of checkpoint files, for the commit path.
 *
 * A comparator sort of entries costs two dependent cache misses per comparison (the entry,
 * then its key array); on a 25M-key run it was 13 % of all task time. Here every key is read
 * twice in sequence instead: once to find the bytes all keys share, once to take the 8 bytes
 * after them as an unsigned long. Those prefixes are radix-sorted with their positions, and
 * whole keys are compared only among entries whose prefixes are equal.
 */
object KeyOrder {
  /** The entries in ascending unsigned key order (a new array). */
  def sorted(entries: collection.IndexedSeq[Entry]): Array[Entry] = {
    val n = entries.size
    val out = new Array[Entry](n)
    if (n == 0) return out
    val shared = sharedPrefixLength(entries)
    var prefixes = new Array[Long](n)
    var positions = new Array[Int](n)
    var i = 0
    while (i < n) {
      val e = entries(i)
      prefixes(i) = prefixAfter(e.kv, e.keyLength, shared)
      positions(i) = i
      i += 1
    }
    // LSD radix sort, one byte a pass; a byte position on which all prefixes agree is skipped.
    var tmpPrefixes = new Array[Long](n)
    var tmpPositions = new Array[Int](n)
    val counts = new Array[Int](257)
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
    i = 0
    while (i < n) { out(i) = entries(positions(i)); i += 1 }
    // Equal prefixes: the keys differ further on, or one is a prefix of the other.
    var start = 0
    while (start < n) {
      var end = start + 1
      while (end < n && prefixes(end) == prefixes(start)) end += 1
      if (end - start > 1) JArrays.sort(out, start, end, Entry.ByKey)
      start = end
    }
    out
  }

  /** How many leading bytes every key has in common. */
  private def sharedPrefixLength(entries: collection.IndexedSeq[Entry]): Int = {
    val first = entries(0).kv
    var shared = entries(0).keyLength
    var i = 1
    while (i < entries.size && shared > 0) {
      val e = entries(i)
      val m = JArrays.mismatch(first, 0, shared, e.kv, 0, math.min(shared, e.keyLength))
      if (m >= 0) shared = m
      i += 1
    }
    shared
  }

  /** Bytes [from, from + 8) of the key (`kv`'s first `keyLength` bytes) as an unsigned
   *  big-endian long, zero-padded. */
  private def prefixAfter(kv: Array[Byte], keyLength: Int, from: Int): Long = {
    var p = 0L
    var j = 0
    while (j < 8) {
      val at = from + j
      p = (p << 8) | (if (at < keyLength) kv(at) & 0xffL else 0L)
      j += 1
    }
    p
  }
}
