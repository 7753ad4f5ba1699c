package spillstore.bench

import java.util.concurrent.atomic.{AtomicLong, AtomicLongArray, AtomicReferenceArray}
import java.util.concurrent.atomic.LongAdder

import org.apache.spark.sql.{ForeachWriter, Row}

/** Latencies in 0.1 ms buckets up to 60 s (beyond: one overflow bucket), lock-free. */
final class LatencyHistogram {
  private val BucketMicros = 100L
  private val Buckets = 600000
  private val counts = new AtomicLongArray(Buckets + 1)
  private val total = new LongAdder
  private val sum = new LongAdder
  private val maxMicros = new AtomicLong(Long.MinValue)
  private val lastAt = new AtomicLong(Long.MinValue)

  /** When the newest recorded row reached the sink (micros). */
  def lastAtMicros: Long = lastAt.get

  def add(micros: Long, nowMicros: Long): Unit = {
    lastAt.accumulateAndGet(nowMicros, math.max)
    val b = math.min(math.max(micros, 0L) / BucketMicros, Buckets.toLong).toInt
    counts.incrementAndGet(b)
    total.increment()
    sum.add(micros)
    maxMicros.accumulateAndGet(micros, math.max)
  }

  def count: Long = total.sum()
  def meanMs: Double = if (count == 0) Double.NaN else sum.sum().toDouble / count / 1000
  def maxMs: Double = if (count == 0) Double.NaN else maxMicros.get / 1000.0

  /**
   * The q-quantile in ms over `population` records, of which those not recorded here (not
   * delivered) count as infinitely late: the upper edge of the quantile's bucket, or +inf.
   */
  def quantileMs(q: Double, population: Long): Double = {
    val n = math.max(population, count)
    if (n == 0) return Double.NaN
    val rank = math.max(1L, math.ceil(q * n).toLong)
    var seen = 0L
    var b = 0
    while (b <= Buckets) {
      seen += counts.get(b)
      if (seen >= rank) {
        return if (b == Buckets) maxMs else (b + 1) * BucketMicros / 1000.0
      }
      b += 1
    }
    Double.PositiveInfinity
  }
}

/**
 * The foreach sink: for each output row, now minus the row's newest event time (the record
 * that caused the update), into the histogram of the measuring window that record was created
 * in, if any. Windows are set by the driver (local mode: the tasks run in its JVM).
 */
object LatencySink {
  val MaxPhases = 64
  private val windows = new AtomicReferenceArray[(Long, Long)](MaxPhases)
  private val hists = new AtomicReferenceArray[LatencyHistogram](MaxPhases)
  @volatile private var phases = 0
  /** Rows the sink got, over all windows and none. */
  val delivered = new LongAdder

  /** Opens window `i` for records created in [fromMicros, untilMicros). */
  def open(i: Int, fromMicros: Long, untilMicros: Long): LatencyHistogram = {
    require(i == phases && i < MaxPhases)
    val h = new LatencyHistogram
    hists.set(i, h)
    windows.set(i, (fromMicros, untilMicros))
    phases = i + 1
    h
  }

  def record(eventMicros: Long, nowMicros: Long): Unit = {
    delivered.increment()
    val n = phases
    var i = n - 1
    // Only the last two windows can still get records (phases only move forward).
    while (i >= 0 && i >= n - 2) {
      val (from, until) = windows.get(i)
      if (eventMicros >= from && eventMicros < until) {
        hists.get(i).add(nowMicros - eventMicros, nowMicros)
        return
      }
      i -= 1
    }
  }

  /** Output rows are (key, cnt, maxEt). */
  val writer: ForeachWriter[Row] = new ForeachWriter[Row] {
    override def open(partitionId: Long, epochId: Long): Boolean = true
    override def process(r: Row): Unit = record(r.getLong(2), BenchClock.nowMicros())
    override def close(errorOrNull: Throwable): Unit = ()
  }
}
