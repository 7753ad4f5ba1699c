package spillstore.memory

import java.lang.management.{ManagementFactory, MemoryUsage}
import java.util.concurrent.{LinkedBlockingQueue, TimeUnit}

import scala.jdk.CollectionConverters._

import com.codahale.metrics.Counter
import org.scalatest.funsuite.AnyFunSuite

import spillstore.memory.HeapPressureMonitor._
import spillstore.memory.MemoryManager.Eviction

class HeapPressureMonitorSuite extends AnyFunSuite {
  private val Eps = 1e-9
  private val Defaults = MemoryConf() // high 0.85, low 0.6

  private val interventions = new Counter

  private def monitor(): (HeapPressureMonitor, FakeHeapStatus, () => Int) = {
    val source = new FakeHeapStatus
    var pressureCalls = 0
    val m = new HeapPressureMonitor(source, Defaults, () => pressureCalls += 1, interventions)
    (m, source, () => pressureCalls)
  }

  test(
    "each high reading shrinks the factor by ShrinkStep and reports pressure, down to the floor") {
    val (m, source, calls) = monitor()
    val interventionsBefore = interventions.getCount
    assert(source.subscribed)
    assert(m.factor === 1.0)
    assert(m.lastOccupancy.isNaN)
    source.emit(0.85)
    assert(math.abs(m.factor - ShrinkStep) < Eps)
    assert(calls() === 1)
    var lowered = 1
    (1 to 20).foreach { _ =>
      val before = m.factor
      source.emit(0.95)
      if (m.factor < before) lowered += 1
    }
    assert(m.factor === MinFactor)
    assert(calls() === 21, "at the floor, a full heap still asks the manager to evict")
    assert(lowered < 21 && interventions.getCount - interventionsBefore === lowered,
      "each lowering counts as an intervention, a reading at the floor does not")
    assert(math.abs(m.lastOccupancy - 0.95) < Eps)
    m.close()
    assert(!source.subscribed)
  }

  test("calm readings restore the factor step by step; readings in between hold it") {
    val (m, source, calls) = monitor()
    source.emit(0.9) // 0.75
    source.emit(0.5)
    source.emit(0.5)
    source.emit(0.7) // between the thresholds: the count of calm readings starts over
    source.emit(0.5)
    source.emit(0.5)
    assert(math.abs(m.factor - 0.75) < Eps)
    assert(calls() === 1)
    source.emit(0.5) // the third calm one in a row
    assert(math.abs(m.factor - 0.85) < Eps)
    source.emit(0.59)
    assert(math.abs(m.factor - 0.95) < Eps)
    source.emit(0.1)
    assert(m.factor === 1.0)
    source.emit(0.1)
    assert(m.factor === 1.0)
    assert(calls() === 4, "pressure is reported on each change and not once the factor is back")
    m.close()
  }

  test("new thresholds apply to the next reading and the factor carries over") {
    val (m, source, _) = monitor()
    source.emit(0.8)
    assert(m.factor === 1.0)
    m.configure(Defaults.copy(pressureHighThreshold = 0.7, pressureLowThreshold = 0.5))
    source.emit(0.8)
    assert(math.abs(m.factor - 0.75) < Eps)
    m.close()
  }

  test("the manager: high readings lower its budget and spill idle spillables on the relief " +
    "thread, busy ones are asked to shrink; calm readings restore the budget") {
    val source = new FakeHeapStatus
    val reliefThread = new Thread("relief")
    // Relief rounds run where `relief` puts them: here, synchronously, as if on that thread.
    val mm = new MemoryManager(MemoryConf(budgetBytes = Some(1000)), clock = () => 100L,
      heapStatus = source, relief = r => { reliefThread.synchronized(r.run()) })
    val idle = new FakeSpillable("idle", 100, lastUsedNanos = 0)
    val busy = new FakeSpillable("busy", 700, lastUsedNanos = 100)
    mm.register(idle)
    mm.register(busy)
    busy.open(now = 100)
    source.emit(0.9)
    // 800 over 750 in force: down to 675; idle (score 1 + 100/700) gives its 100 first.
    assert(mm.effectiveBudgetBytes === 750)
    assert(mm.status.pressureFactor === ShrinkStep)
    assert(math.abs(mm.status.heapOccupancy - 0.9) < Eps)
    assert(idle.calls === List("idle keep 0/100", "idle spill 100/0=100"))

    assert(busy.calls === List("busy keep 675/700", "busy spill 25/0=0"))
    assert(busy.put(mm, 0) === Eviction.Zero)
    assert(mm.totalHeapBytes === 675)

    (1 to CalmReadings + 2).foreach(_ => source.emit(0.3))
    assert(mm.effectiveBudgetBytes === 1000)
    assert(mm.status.pressureFactor === 1.0)
    busy.close(mm, now = 100)

    mm.configure(MemoryConf(budgetBytes = Some(1000), pressureMonitor = false))
    assert(!source.subscribed, "turning the monitor off removes its listener")
    assert(mm.status.heapOccupancy.isNaN)
    mm.close()
  }

  test("by default a reading's relief round runs on spillstore's relief thread, not the GC " +
    "notification thread that delivered the reading") {
    val source = new FakeHeapStatus
    val mm = new MemoryManager(MemoryConf(budgetBytes = Some(1000)), clock = () => 100L,
      heapStatus = source)
    val idle = new FakeSpillable("idle", 900, lastUsedNanos = 0)
    mm.register(idle)
    try {
      source.emit(0.9) // 900 over 750 in force
      val deadline = System.nanoTime() + 10L * 1000 * 1000 * 1000
      while (idle.spillThreads.isEmpty && System.nanoTime() < deadline) Thread.sleep(5)
      assert(idle.spillThreads.asScala.toList.map(_.getName) === List("spillstore-memory-relief"))
    } finally mm.close()
  }

  test("the manager's close removes the monitor's listener and restores the full budget") {
    val source = new FakeHeapStatus
    val mm = new MemoryManager(MemoryConf(budgetBytes = Some(1000)), heapStatus = source)
    source.emit(0.99)
    assert(mm.effectiveBudgetBytes === 750)
    mm.close()
    assert(!source.subscribed)
    assert(mm.effectiveBudgetBytes === 1000)
  }

  test("a GC that did not collect the tenured pool gives no reading") {
    def u(used: Long, max: Long = 1000L) = new MemoryUsage(0L, used, used, max)
    val tenured = Set("Old")
    def reading(action: String, before: Long, after: Long, max: Long = 1000L) =
      JvmHeapStatus.readingAfterGc(action, Map("Old" -> u(before), "Eden" -> u(500)),
        Map("Old" -> u(after, max), "Eden" -> u(0)), tenured)
    assert(reading("end of minor GC", before = 600, after = 650) === None) // promotion only
    assert(reading("end of minor GC", before = 900, after = 700) === Some(HeapReading(700, 1000)))
    assert(reading("end of major GC", before = 700, after = 700) === Some(HeapReading(700, 1000)))
    assert(reading("end of major GC", 700, 700, max = -1) ===
      Some(HeapReading(700, Runtime.getRuntime.maxMemory)))
    assert(JvmHeapStatus.readingAfterGc("end of major GC", Map.empty, Map.empty, tenured) === None)
  }

  test("the real MXBeans: listeners attach, a forced GC gives a reading, close detaches them") {
    val tenured = JvmHeapStatus.tenuredPools(ManagementFactory.getMemoryPoolMXBeans.asScala.toSeq)
    assert(tenured.nonEmpty, "this JVM has a tenured pool")
    val readings = new LinkedBlockingQueue[HeapReading]
    val subscription = JvmHeapStatus.subscribe(r => readings.add(r))
    try {
      System.gc() // a full, major collection
      val r = readings.poll(60, TimeUnit.SECONDS) // only a guard: the reading comes right after
      assert(r != null, "no GC notification after System.gc()")
      assert(r.maxBytes > 0 && r.usedBytes >= 0 && r.occupancy <= 1.0, r)
    } finally {
      subscription.close() // removing a listener that was never added would throw
    }
    subscription.close()
  }
}
