package spillstore.memory

import java.util.concurrent.{ConcurrentLinkedQueue, CountDownLatch, CyclicBarrier, TimeUnit}
import java.util.concurrent.atomic.AtomicBoolean

import scala.jdk.CollectionConverters._

import org.scalatest.funsuite.AnyFunSuite

import spillstore.memory.MemoryManager.Eviction

class MemoryManagerSuite extends AnyFunSuite {
  private val Sec = 1000000000L

  /**
   * A manager with a fixed byte budget, no pressure monitor and the clock at 100 s, and
   * registered fakes that share one log.
   */
  private class Fixture(budget: Long, maxEntries: Long = 0L) {
    val mm = new MemoryManager(
      MemoryConf(budgetBytes = Some(budget), maxEntries = maxEntries, pressureMonitor = false),
      clock = () => 100 * Sec)
    private val log = new ConcurrentLinkedQueue[String]

    def fake(name: String, entries: Long, lastUsedSec: Long = 100, bytesPerEntry: Long = 1L,
        spillCap: Long = Long.MaxValue, fixed: Long = 0L): FakeSpillable = {
      val f =
        new FakeSpillable(name, entries, lastUsedSec * Sec, bytesPerEntry, log, spillCap, fixed)
      mm.register(f)
      f
    }

    /** Every spillable call so far, in order. */
    def calls: List[String] = log.asScala.toList
  }

  test("under the budget a report asks nothing and spills nothing") {
    val fx = new Fixture(1000)
    val a = fx.fake("a", 0)
    fx.fake("b", 300)
    assert(a.put(fx.mm, 700) === Eviction.Zero)
    assert(fx.mm.totalHeapBytes === 1000)
    assert(fx.mm.totalEntries === 1000)
    assert(fx.calls.isEmpty)
  }

  test("a doomed spillable, which never frees and never reports, is counted whole and asked " +
    "nothing: the others' rounds bring the total within the budget") {
    val fx = new Fixture(1000)
    val zombie = fx.fake("zombie", 600, lastUsedSec = 0) // the coldest and largest
    zombie.open(0) // its zombie attempt holds it: every trySpill finds it busy
    zombie.shrinkable = false
    val idle = fx.fake("idle", 300, lastUsedSec = 50)
    val owner = fx.fake("owner", 0)
    owner.open(100 * Sec)
    (1 to 5).foreach(_ => owner.put(fx.mm, 60))
    assert(fx.mm.totalHeapBytes <= 1000,
      s"${fx.mm.totalHeapBytes} bytes: rounds kept " +
        s"counting the doomed state at a share it will never give: ${fx.calls}")
    assert(fx.mm.totalHeapBytes === zombie.heapBytes + idle.heapBytes + owner.heapBytes)
    assert(zombie.heapBytes === 600 && zombie.calls.isEmpty, "the doomed state was asked to spill")
    owner.close(fx.mm, 100 * Sec)
  }

  test("one spillable over the budget evicts itself down to the low-water mark") {
    val fx = new Fixture(1000)
    val a = fx.fake("a", 900)
    assert(a.put(fx.mm, 200) === Eviction(1100 - 900, 0))
    assert(fx.mm.totalHeapBytes === 900)
    assert(fx.calls.isEmpty, "the caller evicts its share itself; it is never trySpill-ed")
  }

  test("low-water mark: growth back up to the budget is free, the byte after it starts a round") {
    val fx = new Fixture(1000)
    val a = fx.fake("a", 950)
    assert(a.put(fx.mm, 100) === Eviction(150, 0))
    assert(a.put(fx.mm, 100) === Eviction.Zero)
    assert(fx.mm.totalHeapBytes === 1000)
    assert(a.put(fx.mm, 1) === Eviction(101, 0))
    assert(fx.mm.totalHeapBytes === 900)
  }

  test("idle spillables are spilled coldest and largest first, each only as much as needed") {
    // now = 100 s. Score = idle / 100 s + bytes / 800 (the largest):
    //   d (idle 100 s, 300) 1.375 > a (100 s, 100) 1.125 > c (10 s, 800) 1.1
    //   > b (50 s, 400) 1.0 > e (the caller, 0 s, 400) 0.5.
    // Total 2000 over a budget of 1500: 650 must go to get to 1350.
    val fx = new Fixture(1500)
    fx.fake("a", 100, lastUsedSec = 0)
    fx.fake("b", 400, lastUsedSec = 50)
    fx.fake("c", 800, lastUsedSec = 90)
    fx.fake("d", 300, lastUsedSec = 0)
    val e = fx.fake("e", 200)
    assert(e.put(fx.mm, 200) === Eviction.Zero)
    assert(fx.calls === List(
      "d keep 0/300", "d spill 300/0=300",
      "a keep 0/100", "a spill 100/0=100",
      "c keep 550/800", "c spill 250/0=250"))
    assert(fx.mm.totalHeapBytes === 1350)
  }

  test("bytes eviction cannot free count in the total but are never asked for") {
    // f is the coldest, but only 50 of its 550 bytes can go (500 are a cold-key filter):
    // it is asked for those 50 and g, next coldest, for the rest of the 150 over 900.
    val fx = new Fixture(1000)
    fx.fake("f", 50, lastUsedSec = 0, fixed = 500)
    fx.fake("g", 300, lastUsedSec = 90)
    val e = fx.fake("e", 0)
    assert(e.put(fx.mm, 200) === Eviction.Zero)
    assert(fx.calls === List("f keep 500/50", "f spill 50/0=50", "g keep 200/300",
      "g spill 100/0=100"))
    assert(fx.mm.totalHeapBytes === 900)
  }

  test("fixed bytes: all spillables' grants together stay within an 8th of the budget; " +
    "release and unregister give them back; an unregistered spillable gets none") {
    val fx = new Fixture(8000) // fixed share: 1000
    val a = fx.fake("a", 0)
    val b = fx.fake("b", 0)
    assert(fx.mm.reserveFixed(a, 600))
    assert(!fx.mm.reserveFixed(b, 401), "past the share")
    assert(fx.mm.reserveFixed(b, 400))
    assert(!fx.mm.reserveFixed(a, 1))
    fx.mm.releaseFixed(a, 600)
    assert(fx.mm.reservedFixedBytes === 400)
    assert(fx.mm.reserveFixed(b, 600))
    fx.mm.unregister(b)
    assert(fx.mm.reservedFixedBytes === 0)
    assert(!fx.mm.reserveFixed(b, 1), "b is no longer registered")
    assert(fx.mm.reserveFixed(a, 1000))
    assert(fx.calls.isEmpty)
  }

  test("8 threads reserving and releasing fixed bytes at once never pass the share together") {
    val fx = new Fixture(8 * 4096) // fixed share: 4096
    val owners = (0 until 8).map(i => fx.fake(s"f$i", 0))
    val start = new CyclicBarrier(8)
    val failures = new ConcurrentLinkedQueue[Throwable]
    val held = new Array[Long](8)
    val threads = owners.zipWithIndex.map { case (f, t) =>
      new Thread(
        () =>
          try {
            val rnd = new scala.util.Random(t)
            start.await(60, TimeUnit.SECONDS)
            for (_ <- 0 until 20000) {
              val bytes = 1L + rnd.nextInt(512)
              if (rnd.nextBoolean() && fx.mm.reserveFixed(f, bytes)) held(t) += bytes
              else if (held(t) > 0) { fx.mm.releaseFixed(f, held(t)); held(t) = 0 }
              val reserved = fx.mm.reservedFixedBytes
              assert(reserved <= 4096 && reserved >= held(t),
                s"reserved $reserved, held ${held(t)}")
            }
          } catch { case e: Throwable => failures.add(e) }, s"fixed-$t")
    }
    threads.foreach(_.start())
    threads.foreach(_.join(60000))
    assert(failures.isEmpty, failures.asScala.headOption.map(_.toString).getOrElse(""))
    assert(fx.mm.reservedFixedBytes === held.sum)
  }

  test("a busy spillable is asked to shrink, and the caller gets its share") {
    // Score: b (busy, idle 100 s, 300) 1.3 > a (idle 100 s, 100) 1.1 > c (caller, 1000) 1.0.
    // 1400 over 1000: b is asked for 300, a gives 100, the caller the last 100.
    val fx = new Fixture(1000)
    fx.fake("a", 100, lastUsedSec = 0)
    val b = fx.fake("b", 300, lastUsedSec = 0)
    val c = fx.fake("c", 600)
    b.open(now = 0)
    assert(c.put(fx.mm, 400) === Eviction(100, 0))
    assert(fx.calls === List(
      "b keep 0/300", "b spill 300/0=0",
      "a keep 0/100", "a spill 100/0=100"))
    // b's shrink is pending: the caller's report after its eviction (1200 in total, 900 once
    // b shrinks) must not hand b's 300 to anyone else.
    assert(fx.mm.totalHeapBytes === 1200)
    assert(c.put(fx.mm, 0) === Eviction.Zero)
    assert(fx.calls.size === 4)
    assert(b.put(fx.mm, 0) === Eviction.Zero) // b's next put honours the request
    assert(fx.mm.totalHeapBytes === 900)
    b.close(fx.mm, now = 100 * Sec)
  }

  test("an owner letting go honours a request that came while it held its store") {
    val fx = new Fixture(1000)
    val b = fx.fake("b", 500, lastUsedSec = 0)
    val c = fx.fake("c", 450)
    b.open(now = 0)
    assert(c.put(fx.mm, 100) === Eviction.Zero) // 1050: b (score 1 + 500/550) is asked for 150
    assert(fx.calls === List("b keep 350/500", "b spill 150/0=0"))
    assert(fx.mm.totalHeapBytes === 1050)
    b.close(fx.mm, now = 100 * Sec)
    assert(b.heapEntries === 350)
    assert(fx.mm.totalHeapBytes === 900)
  }

  test("a spill that frees less than asked: the round plans again until within the limits") {
    // a (score 1 + 300/800) is asked for 200 but frees 60 a call; 1040 is still over 1000,
    // so the round asks again for what is left down to 900, and stops at 980.
    val fx = new Fixture(1000)
    fx.fake("a", 300, lastUsedSec = 0, spillCap = 60)
    val c = fx.fake("c", 700)
    assert(c.put(fx.mm, 100) === Eviction.Zero)
    assert(fx.calls === List(
      "a keep 100/300", "a spill 200/0=60",
      "a keep 100/240", "a spill 140/0=60"))
    assert(fx.mm.totalHeapBytes === 980)
  }

  test("a request that finds its spillable idle is honoured by trySpill, not left pending") {
    val fx = new Fixture(1000)
    val a = fx.fake("a", 600, lastUsedSec = 0)
    val c = fx.fake("c", 450)
    assert(c.put(fx.mm, 0) === Eviction.Zero)
    assert(fx.calls === List("a keep 450/600", "a spill 150/0=150"))
    a.open(now = 100 * Sec)
    assert(a.put(fx.mm, 50) === Eviction.Zero)
    assert(a.put(fx.mm, 0) === Eviction.Zero)
    assert(a.heapEntries === 500, "no stale request shrinks a back to 450 at its next put")
  }

  test("maxEntries: entries over the cap are evicted to 90% of it, whatever the bytes") {
    val fx = new Fixture(1L << 40, maxEntries = 1000)
    fx.fake("a", 600, lastUsedSec = 0, bytesPerEntry = 10)
    val c = fx.fake("c", 300, bytesPerEntry = 10)
    assert(c.put(fx.mm, 200) === Eviction.Zero)
    assert(fx.calls === List("a keep 6000/400", "a spill 0/200=2000"))
    assert(fx.mm.totalEntries === 900)
    assert(fx.mm.totalHeapBytes === 9000)
    assert(fx.mm.status.maxEntries === 1000)
  }

  test(
    "a round planned while another round's spill is in flight does not evict that excess again") {
    val fx = new Fixture(1000)
    val a = fx.fake("a", 600, lastUsedSec = 0)
    val c1 = fx.fake("c1", 300)
    val c2 = fx.fake("c2", 0)
    val spilling = new CountDownLatch(1)
    val proceed = new CountDownLatch(1)
    a.duringSpill = () => { spilling.countDown(); proceed.await(60, TimeUnit.SECONDS) }
    @volatile var firstShare: Eviction = null
    val first = new Thread(() => firstShare = c1.put(fx.mm, 200)) // 1100: a is to give 200
    first.start()
    try {
      assert(spilling.await(60, TimeUnit.SECONDS))
      // 1150 on the heap, but 950 once a's spill is done: nothing more to evict.
      assert(c2.put(fx.mm, 50) === Eviction.Zero)
    } finally proceed.countDown()
    first.join(60000)
    assert(!first.isAlive)
    assert(firstShare === Eviction.Zero)
    assert(fx.calls === List("a keep 400/600", "a spill 200/0=200"))
    assert(fx.mm.totalHeapBytes === 950)
  }

  test("unregister takes a spillable's bytes out of the totals and out of later rounds") {
    val fx = new Fixture(1000)
    val a = fx.fake("a", 800, lastUsedSec = 0)
    val c = fx.fake("c", 100)
    fx.mm.register(a) // twice is once
    assert(fx.mm.status.spillables === 2)
    assert(fx.mm.totalHeapBytes === 900)
    fx.mm.unregister(a)
    fx.mm.unregister(a)
    assert(fx.mm.totalHeapBytes === 100)
    assert(fx.mm.report(a) === Eviction.Zero)
    assert(c.put(fx.mm, 1000) === Eviction(200, 0))
    assert(fx.calls.isEmpty)
  }

  test("a provider's conf with a lower budget wins and takes effect at once") {
    val fx = new Fixture(1000)
    fx.fake("a", 800, lastUsedSec = 0)
    fx.mm.configure(MemoryConf(budgetBytes = Some(500), pressureMonitor = false))
    assert(fx.mm.effectiveBudgetBytes === 500)
    assert(fx.calls === List("a keep 450/800", "a spill 350/0=350"))
    fx.mm.configure(MemoryConf(budgetFraction = 0.5, pressureMonitor = false))
    assert(fx.mm.status.budgetBytes === Runtime.getRuntime.maxMemory / 2)
  }

  test("a store leaving while another arrives never leaves a laxer conf in force than theirs") {
    val lax = MemoryConf(budgetBytes = Some(4000), pressureMonitor = false)
    val strict = MemoryConf(budgetBytes = Some(1000), pressureMonitor = false)
    val mm = new MemoryManager(lax, clock = () => 100 * Sec)
    mm.register(new FakeSpillable("lax"), lax)
    var leaving = new FakeSpillable("strict-0")
    mm.register(leaving, strict)
    val barrier = new CyclicBarrier(2)
    val deadline = System.nanoTime() + 4 * Sec
    var round = 0
    val inside = new java.util.concurrent.atomic.AtomicInteger
    val overlaps = new java.util.concurrent.atomic.AtomicInteger
    mm.confsChangedSeen = entering =>
      if (!entering) inside.decrementAndGet()
      else if (inside.incrementAndGet() == 2) overlaps.incrementAndGet()
    // The race is narrow: many rounds, each a real unregister racing a real register, until
    // enough rounds had both threads in the conf change at once.
    while (overlaps.get < 50 && round < 200000 && System.nanoTime() < deadline) {
      round += 1
      val arriving = new FakeSpillable(s"strict-$round")
      val gone = leaving
      val other = new Thread(() => { barrier.await(); mm.unregister(gone) }, "unregister")
      other.start()
      barrier.await()
      mm.register(arriving, strict)
      other.join()
      assert(mm.effectiveBudgetBytes === 1000,
        s"round $round: a laxer budget is in force than the strictest registered store asks for")
      leaving = arriving
    }
    assert(overlaps.get > 0, s"in $round rounds the two threads never changed confs at once")
    mm.close()
  }

  test("8 threads x 50 spillables growing at once: no deadlock, and within the budget at rest") {
    hammer(budget = 20000, seed = 1, pressure = false)
  }

  test("the same with a budget below what the open batches hold: busy owners must give too") {
    hammer(budget = 2000, seed = 2, pressure = false)
  }

  test("the same while heap readings keep lowering and restoring the budget from another thread") {
    hammer(budget = 20000, seed = 3, pressure = true)
  }

  /**
   * 8 task threads, each owning 50 spillables that it opens in turn for a batch of 5 puts, and
   * now and then unregisters and registers again (a partition unloaded and loaded back); with
   * `pressure`, a ninth thread feeds high and low heap readings until they are done.
   * At rest (every owner has reported its last growth and honoured its requests) the total is
   * within the budget in force exactly: that is the documented slack, none. While running it
   * may exceed the budget by growth not yet reported plus shrinks busy owners have not done
   * yet, which has no bound worth asserting in a test this small.
   */
  private def hammer(budget: Long, seed: Int, pressure: Boolean): Unit = {
    val source = new FakeHeapStatus
    val mm = new MemoryManager(MemoryConf(budgetBytes = Some(budget), pressureMonitor = pressure),
      heapStatus = source)
    val threads = 8
    val perThread = 50
    val batches = 300
    val owned = Vector.tabulate(threads, perThread)((t, i) => new FakeSpillable(s"t$t-$i"))
    owned.flatten.foreach(mm.register(_))
    val start = new CyclicBarrier(threads + 1)
    val done = new AtomicBoolean
    val failures = new ConcurrentLinkedQueue[Throwable]
    def thread(name: String)(body: => Unit) = new Thread(() => {
        try {
          start.await(60, TimeUnit.SECONDS)
          body
        } catch { case e: Throwable => failures.add(e) }
      }, name)
    val workers = owned.zipWithIndex.map { case (mine, t) =>
      thread(s"memory-test-$t") {
        val rnd = new scala.util.Random(seed * 100 + t)
        for (batch <- 0 until batches) {
          val f = mine(batch % perThread)
          if (batch % 97 == 96) {
            mm.unregister(f)
            f.clear()
            mm.register(f)
          }
          f.open(System.nanoTime())
          (0 until 5).foreach(_ => f.put(mm, 1 + rnd.nextInt(200)))
          f.close(mm, System.nanoTime())
        }
      }
    }
    val gc = thread("memory-test-gc") {
      val rnd = new scala.util.Random(seed)
      while (!done.get) {
        if (pressure) source.emit(if (rnd.nextBoolean()) 0.95 else 0.3)
        Thread.`yield`()
      }
    }
    (gc +: workers).foreach(_.start())
    workers.foreach(_.join(120000))
    done.set(true)
    gc.join(60000)
    assert((gc +: workers).forall(!_.isAlive), "threads still running: deadlock?")
    assert(failures.isEmpty, failures.asScala.map(_.toString).mkString("\n"))
    val onHeap = owned.flatten.map(_.heapBytes).sum
    assert(mm.totalHeapBytes === onHeap, "the totals are the sum of the reported sizes")
    assert(onHeap <= mm.effectiveBudgetBytes)
    mm.close()
  }
}
