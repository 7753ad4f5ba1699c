package spillstore.memory

import com.codahale.metrics.Counter

import org.apache.spark.internal.Logging

/**
 * Turns GC readings into the factor, in [MinFactor, 1], by which the
 * [[MemoryManager]] multiplies its configured budget: the guard that keeps a wrong per-entry
 * size estimate (or a heap crowded by something other than state) from ending in OOM, in the
 * role of FLIP-50's HeapStatusMonitor.
 *
 * The factor moves like TCP's congestion window (multiplicative decrease, additive increase),
 * so the budget drops fast when the heap is in danger and comes back cautiously:
 *  - a reading at or above the high threshold multiplies it by [[HeapPressureMonitor.ShrinkStep]]
 *    (floor [[HeapPressureMonitor.MinFactor]]) and calls `onPressure` at once, so the manager
 *    can evict before the next GC;
 *  - after [[HeapPressureMonitor.CalmReadings]] consecutive readings below the low threshold,
 *    each such reading adds [[HeapPressureMonitor.RestoreStep]] (cap 1) and calls `onPressure`;
 *  - a reading in between holds the factor and restarts the count of calm readings.
 *
 * Subscribes to `source` when created, unsubscribes on [[close]]. `onPressure` runs on the
 * source's thread (for the JVM: its notification thread), outside this monitor's lock.
 * `interventions` counts each lowering of the factor (the executor's figures).
 */
final class HeapPressureMonitor(source: HeapStatusSource, conf: MemoryConf, onPressure: () => Unit,
    interventions: Counter)
    extends AutoCloseable with Logging {
  import HeapPressureMonitor._

  @volatile private var currentConf = conf
  @volatile private var _factor = 1.0
  @volatile private var _lastOccupancy = Double.NaN
  private var calmReadings = 0 // guarded by this

  /** The budget multiplier in force. */
  def factor: Double = _factor

  /** Tenured occupancy at the last reading; NaN before the first. */
  def lastOccupancy: Double = _lastOccupancy

  /** Takes new thresholds from a changed conf; the factor carries over. */
  def configure(conf: MemoryConf): Unit = currentConf = conf

  private[memory] def onReading(r: HeapReading): Unit = {
    val occupancy = r.occupancy
    val t = currentConf
    val changed = synchronized {
      _lastOccupancy = occupancy
      val before = _factor
      if (occupancy >= t.pressureHighThreshold) {
        calmReadings = 0
        _factor = math.max(MinFactor, before * ShrinkStep)
      } else if (occupancy < t.pressureLowThreshold) {
        calmReadings += 1
        if (calmReadings >= CalmReadings) _factor = math.min(1.0, before + RestoreStep)
      } else {
        calmReadings = 0
      }
      if (_factor != before) {
        if (_factor < before) interventions.inc()
        logInfo(f"Heap pressure: ${r.usedBytes >> 20} MB of ${r.maxBytes >> 20} MB tenured " +
          f"heap used after GC (${occupancy * 100}%.0f%%, thresholds: lower the budget at " +
          f"${t.pressureHighThreshold * 100}%.0f%%, restore below ${t.pressureLowThreshold * 100}%.0f%%); " +
          f"budget factor $before%.2f -> ${_factor}%.2f")
      }
      _factor != before || occupancy >= t.pressureHighThreshold
    }
    if (changed) onPressure()
  }

  // Last, so that a reading can only arrive once every field above is initialized.
  private val subscription = source.subscribe(onReading)

  def close(): Unit = subscription.close()
}

object HeapPressureMonitor {
  /** The budget never drops below this fraction: state must still make progress. */
  val MinFactor = 0.1
  /** Multiplier per high reading. */
  val ShrinkStep = 0.75
  /** Added per calm reading once the heap has been calm for [[CalmReadings]] readings. */
  val RestoreStep = 0.1
  /** Consecutive low readings before the factor starts to recover. */
  val CalmReadings = 3
}
