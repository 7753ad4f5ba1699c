package spillstore.bench

import java.util.SplittableRandom

/** Which key each record of a benchmark batch touches. */
sealed trait KeyPattern {
  def name: String
  /** The key of record `i` of batch `batch` (records numbered from 0 within a batch). */
  def key(batch: Int, i: Int): Long
}

object KeyPattern {
  /** 0 until n in a seeded random order. */
  def shuffled(n: Int, seed: Long): Array[Int] = {
    val a = Array.tabulate(n)(identity)
    val rnd = new SplittableRandom(seed)
    var i = n - 1
    while (i > 0) { val j = rnd.nextInt(i + 1); val t = a(i); a(i) = a(j); a(j) = t; i -= 1 }
    a
  }

  /** Uniform over [0, keys). */
  final class Uniform(keys: Int, seed: Long) extends KeyPattern {
    private val rnd = new SplittableRandom(seed)
    val name = "uniform"
    def key(batch: Int, i: Int): Long = rnd.nextInt(keys).toLong
  }

  /**
   * Zipf(s) over [0, keys): key k has probability proportional to 1/(k+1)^s, so key 0 is the
   * hottest. Sampled by binary search in a precomputed CDF (8 bytes per key), which costs a
   * few dozen nanoseconds: noise next to a state store access.
   */
  final class Zipf(keys: Int, s: Double, seed: Long) extends KeyPattern {
    private val rnd = new SplittableRandom(seed)
    private val cdf: Array[Double] = {
      val c = new Array[Double](keys)
      var sum = 0.0
      var k = 0
      while (k < keys) { sum += 1.0 / math.pow(k + 1.0, s); c(k) = sum; k += 1 }
      k = 0
      while (k < keys) { c(k) /= sum; k += 1 }
      c
    }
    val name = f"zipf($s%.2f)"
    def key(batch: Int, i: Int): Long = {
      val u = rnd.nextDouble()
      var lo = 0
      var hi = cdf.length - 1
      while (lo < hi) {
        val mid = (lo + hi) >>> 1
        if (cdf(mid) < u) lo = mid + 1 else hi = mid
      }
      lo.toLong
    }
  }

  /**
   * FLIP-369's hit-ratio pattern, `key = (x % h) + h * ((x / 2h) % 2)` for the x-th record of
   * the run, with h = 2 * `opsPerBatch` (FLIP-369: h = 500). Each half of [0, 2h) is read and
   * updated twice in a row, spread over two batches each time, then the other half. As in the
   * FLIP, a heap of h/2 entries hits 0 %, h entries 50 % and 2h entries 100 %. (The FLIP's
   * period fits in one Flink checkpoint; here it spans four micro-batches, because an entry
   * changed in the open batch stays on the heap until commit, so a second access within one
   * batch always hits.)
   */
  final class Flip369(opsPerBatch: Int) extends KeyPattern {
    val half: Int = 2 * opsPerBatch
    val name = "FLIP-369 pattern"
    def key(batch: Int, i: Int): Long = {
      val x = batch.toLong * opsPerBatch + i
      (x % half) + half * ((x / (2L * half)) % 2)
    }
  }

  /** Keys that were never written: [offset, offset + range), uniform. */
  final class Absent(offset: Long, range: Int, seed: Long) extends KeyPattern {
    private val rnd = new SplittableRandom(seed)
    val name = "absent"
    def key(batch: Int, i: Int): Long = offset + rnd.nextInt(range)
  }
}
