package spillstore.memory

import java.util.concurrent.ConcurrentHashMap
import java.util.concurrent.atomic.{AtomicBoolean, AtomicLong, AtomicReference}

import scala.collection.mutable.ArrayBuffer
import scala.jdk.CollectionConverters._
import scala.util.control.NonFatal

import org.apache.spark.internal.Logging

import spillstore.metrics.ExecutorStats

/**
 * The heap budget of all [[Spillable]]s of one executor JVM together (docs/design.md, "The
 * memory manager"):
 * a byte budget (times the [[HeapPressureMonitor]]'s factor: the *effective* budget) and an
 * optional cap on entries (FLIP-369's max-entries-num).
 *
 * '''Protocol.''' A provider [[register]]s its heap tier on load and [[unregister]]s it on
 * close. While it holds its store, its task thread calls [[report]] after the tier grew (every
 * few KB is enough) and after it evicted or shrank, evicts the [[MemoryManager.Eviction]] it
 * gets back and reports again, until `report` asks nothing (other owners may have grown in
 * between). Under the limits `report` is a map lookup, a few atomic reads and no allocation.
 * Over them, the reporting thread runs a relief round: it ranks every spillable and, down to
 * the low-water mark ([[MemoryManager.LowWaterRatio]] of each limit, so that the next round
 * waits for 10% of growth instead of firing on every put), takes each one's share in rank
 * order: the caller's share is returned; any other one is asked to `requestShrink` to what it
 * should keep and then `trySpill`ed on the calling thread. Asking first closes the race with an
 * owner letting go: either `trySpill` finds it idle, or the owner, which looks for a request
 * every time it lets go, finds it; likewise with another round's spill of the same spillable,
 * which looks again before it returns. So the spillable's side is:
 *  - `trySpill` returns 0 while a store is open, even on the owner's own thread, and a spill
 *    that succeeds also satisfies (and drops) any pending request, including those made while
 *    it ran;
 *  - the owner honours a pending request at its next put, and right after letting go of its
 *    store: if a request is pending, it honours it as `trySpill` would (the store is idle) and
 *    tells the manager its new size ([[shrank]]), which counts the old one until then.
 *
 * '''Ranking''' (FLIP-50: more heap and fewer requests first). Score = idle / maxIdle +
 * size / maxSize over the candidates, where idle = now - `lastUsedNanos` and size is bytes
 * (entries when only the entry cap is exceeded); highest score first, ties to the larger one.
 * So the coldest and largest go first and the spillable just used goes last unless it dwarfs
 * the rest.
 *
 * '''Locking.'''
 *  - Accounting is lock-free: each spillable's last reported size is an atomic, and every change
 *    of it is added to the totals, so the totals are exactly the sum of the reported sizes.
 *  - `planLock` serializes only the planning of rounds: reading sizes and idle times and
 *    assigning shares. Under it the manager calls no `Spillable` method other than its
 *    getters, so `trySpill` and `requestShrink` (which may lock the spillable or call back
 *    into the manager) always run with no manager lock held: no lock-order cycle can form.
 *  - Each share is recorded as a claim on its spillable before `planLock` is released, and
 *    planning counts a claimed spillable at the size it is to keep; so a second round, planned
 *    while the first one's spills are in flight, sees that excess as already handled and never
 *    evicts it twice (and leaves a spillable being spilled alone). A claim ends when the spill
 *    is done, or, for a busy spillable, when its owner next reports (it has shrunk in between).
 *  - Conf changes and the pressure factor synchronize on the manager (rare; no `Spillable` is
 *    called under it).
 *
 * '''Threads.''' Relief rounds run on the thread of the owner that reports (a task thread in
 * a store call of its own state, which no relief round touches: other states are only
 * tryLocked, and only while idle) or, for the pressure
 * monitor, on `relief` (by default one daemon thread per JVM, "spillstore-memory-relief"), never
 * on the JVM's GC-notification thread, which RocksDB writes would hold up.
 *
 * '''Conf.''' The budget is executor-wide but confs arrive with each provider (per query): the
 * conf in force is the strictest of the registered providers' confs (smallest budget, smallest
 * entry cap, monitor on if any asks for it, lowest thresholds), so no query gets more than it
 * asked for; a provider whose conf differs from the others' gets a WARN naming both.
 *
 * '''Fixed bytes.''' What eviction cannot free (a store's cold-key filter, and its empty tables)
 * counts in the total but is never asked for. Filters grow a layer at a time, each
 * [[reserveFixed]] here first: all stores' filters together get at most
 * [[MemoryManager.FixedShare]] of the budget in force (first come, first served; a store's own
 * filter at most a 16th), so that however many stores an executor holds, eviction can always
 * bring the total back within the budget.
 *
 * '''Slack.''' Once all owners have reported their growth and honoured their requests, the
 * total is within the effective budget (unless the stores' empty tables alone, a few KB each,
 * pass it): no slack at rest. While tasks run, it can exceed it by what owners grew since their
 * last report plus shrinks requested from busy owners and not yet done (until their next put).
 * The one known race only over-evicts: an owner's report can clear a claim planned after its
 * last put, so that excess may be assigned twice.
 *
 * @param maxHeapBytes the heap `budgetFraction` applies to
 * @param clock        `System.nanoTime` in production; the time base of `lastUsedNanos`
 * @param heapStatus   where the pressure monitor gets GC readings (when the conf enables it)
 * @param stats        the executor's figures: relief rounds and pressure interventions count there
 */
final class MemoryManager(
    initialConf: MemoryConf,
    maxHeapBytes: Long = Runtime.getRuntime.maxMemory,
    clock: () => Long = () => System.nanoTime(),
    heapStatus: HeapStatusSource = JvmHeapStatus,
    relief: Runnable => Unit = MemoryManager.ReliefThread.execute,
    stats: ExecutorStats = new ExecutorStats)
    extends Budget with AutoCloseable with Logging {
  import MemoryManager._

  private val accounts = new ConcurrentHashMap[Spillable, Account]
  private val bytesTotal = new AtomicLong
  private val entriesTotal = new AtomicLong
  private val planLock = new Object
  /** Bytes of all accounts' [[Account.fixed]]: granted by [[reserveFixed]]. */
  private val fixedReserved = new AtomicLong
  private val reliefPending = new AtomicBoolean
  /** Confs already warned about (see [[register]]); under `this`. */
  private val warnedConfs = new java.util.HashSet[MemoryConf]

  // Written under `this`; volatile so that `report` reads them without a lock.
  @volatile private var conf: MemoryConf = _
  @volatile private var monitor: HeapPressureMonitor = _
  @volatile private var budgetBytes = 0L
  @volatile private var factor = 1.0
  @volatile private var effectiveBytes = 0L
  @volatile private var maxEntries = 0L

  configure(initialConf)

  /**
   * Counts `s` in from now on (its current size included); registering it again is a no-op.
   * Spillables are told apart by `equals`, so a heap tier should keep identity equality.
   * `withConf` (its provider's) joins the confs the one in force is the strictest of.
   */
  def register(s: Spillable, withConf: MemoryConf = null): Unit = {
    val a = new Account(s, withConf)
    if (accounts.putIfAbsent(s, a) == null) {
      sync(a)
      if (withConf != null) confsChanged(arriving = withConf, of = a)
    }
  }

  /** Forgets `s` and its bytes; any claim on it goes with it, and its conf. */
  def unregister(s: Spillable): Unit = {
    val a = accounts.remove(s)
    if (a != null) {
      a.closed = true
      zero(a)
      fixedReserved.addAndGet(-a.fixed.getAndSet(0))
      if (a.conf != null) confsChanged(arriving = null, of = a)
    }
  }

  /**
   * Applies the strictest of the registered confs; warns when an arriving one differs. Computed
   * and put in force under one lock: applied after it, a result computed before a concurrent
   * register could land after that register's stricter one and undo it.
   */
  private def confsChanged(arriving: MemoryConf, of: Account): Unit = {
    val seen = confsChangedSeen
    if (seen != null) seen(true)
    val changed =
      try synchronized {
          val others = accounts.values.asScala.iterator.filter(_ ne of).flatMap(a => Option(a.conf))
            .reduceOption(MemoryConf.strictest(_, _, maxHeapBytes))
          if (arriving != null && others.exists(_ != arriving) && warnedConfs.add(arriving)) {
            logWarning(s"spillstore's memory settings are executor-wide, and a store asks for " +
              s"$arriving while the other loaded stores' come to ${others.get}: the strictest " +
              s"applies. Set ${MemoryConf.Prefix}* once for the application (its Spark conf) to " +
              "give every query the same values.")
          }
          (others ++ Option(arriving)).reduceOption(MemoryConf.strictest(_, _, maxHeapBytes))
            .exists(install)
        }
      finally if (seen != null) seen(false)
    if (changed) relieveIfOver()
  }

  /** Tests: told as a thread enters (true) and leaves (false) [[confsChanged]], to show that
   *  two threads were in it at once. */
  @volatile private[memory] var confsChangedSeen: Boolean => Unit = _

  /**
   * Called by `owner`'s task thread after its heap grew or shrank: takes note of its size and,
   * if the executor is over a limit, runs a relief round. Returns what `owner` must evict now;
   * it evicts that and reports again, until this returns [[MemoryManager.Eviction.Zero]].
   */
  override def report(owner: Spillable): Eviction = {
    val a = heardFrom(owner)
    if (a == null || withinLimits) Eviction.Zero else relieve(a)
  }

  /**
   * Called by `owner`'s former task thread after it honoured, idle, a request it found as it
   * let go: takes note of its size (the claim it stood for is done) and, if the executor is
   * still over a limit, runs a relief round that asks every store, `owner` included.
   */
  override def shrank(owner: Spillable): Unit = if (heardFrom(owner) != null) relieveIfOver()

  /**
   * `owner`'s account, its size brought up to date and any claim on it ended (the owner has
   * shrunk since the claim was planned); null if it is not registered.
   */
  private def heardFrom(owner: Spillable): Account = {
    val a = accounts.get(owner)
    if (a != null) {
      sync(a)
      if (a.claim.get != null) a.claim.set(null)
    }
    a
  }

  /** The byte budget in force: the configured one times the pressure factor. */
  def effectiveBudgetBytes: Long = effectiveBytes

  /** A 64th of the budget in force, at most [[Budget.ReportEveryBytes]]. */
  override def reportEveryBytes: Long =
    math.max(1L, math.min(Budget.ReportEveryBytes, effectiveBytes / 64))

  /** A 16th of the budget in force. */
  override def fixedShareBytes: Long = math.max(1L, effectiveBytes / 16)

  /**
   * Grants `bytes` of fixed heap to a registered `owner` if all grants together stay within
   * [[MemoryManager.FixedShare]] of the budget in force; lock-free. Only the owner's current
   * user calls it and [[releaseFixed]], so never at once with its [[unregister]] (which comes
   * once it is freed).
   */
  override def reserveFixed(owner: Spillable, bytes: Long): Boolean = {
    val a = accounts.get(owner)
    if (a == null) return false
    val limit = (effectiveBytes * FixedShare).toLong
    var reserved = fixedReserved.get
    while (reserved + bytes <= limit) {
      if (fixedReserved.compareAndSet(reserved, reserved + bytes)) {
        a.fixed.addAndGet(bytes)
        return true
      }
      reserved = fixedReserved.get
    }
    false
  }

  override def releaseFixed(owner: Spillable, bytes: Long): Unit = {
    val a = accounts.get(owner)
    if (a != null) {
      a.fixed.addAndGet(-bytes)
      fixedReserved.addAndGet(-bytes)
    }
  }

  /** Fixed bytes granted to the registered spillables; see [[reserveFixed]]. */
  def reservedFixedBytes: Long = fixedReserved.get
  def totalHeapBytes: Long = bytesTotal.get
  def totalEntries: Long = entriesTotal.get
  /** What the executor-wide gauges show of this manager, read at each poll. */
  def figures: ExecutorStats.MemoryFigures = new ExecutorStats.MemoryFigures {
    def effectiveBudgetBytes: Long = status.effectiveBudgetBytes
    def budgetBytes: Long = status.budgetBytes
    def heapBytes: Long = status.totalHeapBytes
    def heapEntries: Long = status.totalEntries
    def openStores: Long = status.spillables.toLong
    def coldBytes: Long = totalSpilledBytes
  }

  /** The registered spillables' [[Spillable.spilledBytes]]: for metrics. */
  def totalSpilledBytes: Long = accounts.keySet.iterator.asScala.map(_.spilledBytes).sum

  def status: Status = {
    val m = monitor
    Status(budgetBytes, factor, effectiveBytes, maxEntries, bytesTotal.get, entriesTotal.get,
      accounts.size, if (m == null) Double.NaN else m.lastOccupancy)
  }

  /**
   * Puts `newConf` in force (from [[register]]: the strictest of the registered providers'); a
   * change is logged at INFO, and a lower budget takes effect at once, on the calling thread.
   */
  def configure(newConf: MemoryConf): Unit = if (install(newConf)) relieveIfOver()

  /** Puts `newConf` in force under the lock; false if it already was. */
  private def install(newConf: MemoryConf): Boolean = synchronized {
    val old = conf
    if (newConf == old) false
    else {
      if (old != null) {
        logInfo(s"spillstore memory conf in force: $old -> $newConf")
      }
      conf = newConf
      budgetBytes = newConf.budgetFor(maxHeapBytes)
      maxEntries = newConf.maxEntries
      if (!newConf.pressureMonitor) stopMonitor()
      else if (monitor != null) monitor.configure(newConf)
      else monitor = new HeapPressureMonitor(heapStatus, newConf, () => pressureChanged(),
        stats.pressureInterventions)
      updateBudgetInForce()
      true
    }
  }

  /** Stops the pressure monitor (removing its GC listeners). */
  def close(): Unit = synchronized {
    stopMonitor()
    updateBudgetInForce()
  }

  private def stopMonitor(): Unit = if (monitor != null) {
    monitor.close()
    monitor = null
  }

  private def updateBudgetInForce(): Unit = {
    val m = monitor
    factor = if (m == null) 1.0 else m.factor
    effectiveBytes = math.max(1L, (budgetBytes * factor).toLong)
  }

  /**
   * From the monitor's thread (the JVM's GC notifications): the factor moved, or the heap is
   * full after a GC. The relief round itself goes to `relief`; rounds asked for while one is
   * pending are one round.
   */
  private def pressureChanged(): Unit = {
    synchronized(updateBudgetInForce())
    if (reliefPending.compareAndSet(false, true)) relief(() => {
      reliefPending.set(false)
      relieveIfOver()
    })
  }

  private def relieveIfOver(): Unit = if (!withinLimits) relieve(null)

  private def withinLimits: Boolean = bytesTotal.get <= effectiveBytes && {
    val cap = maxEntries
    cap <= 0 || entriesTotal.get <= cap
  }

  /**
   * Brings `a`'s reported size and the totals up to date with the spillable's own figures.
   * Several threads may sync one account (its owner, a planner, a spiller), and a plain "read,
   * then set" would let a value read before a change overwrite the one read after it. So each
   * write is a compare-and-set from the value seen before reading the spillable, and a sync
   * ends only when a read finds the account equal to the spillable: whoever wrote a stale
   * value rereads and corrects it.
   */
  private def sync(a: Account): Unit = {
    var stable = false
    while (!stable) {
      val oldBytes = a.bytes.get
      val oldEntries = a.entries.get
      val b = a.spillable.heapBytes
      val e = a.spillable.heapEntries
      stable = b == oldBytes && e == oldEntries
      if (b != oldBytes && a.bytes.compareAndSet(oldBytes, b)) bytesTotal.addAndGet(b - oldBytes)
      if (e != oldEntries && a.entries.compareAndSet(oldEntries, e))
        entriesTotal.addAndGet(e - oldEntries)
    }
    // A sync racing with unregister must not leave a closed account's size in the totals.
    if (a.closed) zero(a)
  }

  private def zero(a: Account): Unit = {
    bytesTotal.addAndGet(-a.bytes.getAndSet(0))
    entriesTotal.addAndGet(-a.entries.getAndSet(0))
  }

  /**
   * A relief round; `caller` (null for the monitor or a conf change) gets its own share back.
   * A round can fall short: other rounds' spills in flight count at what they will leave but
   * cannot be chosen, and a spill may free less than asked. So a round whose spills freed
   * anything checks the limits again once they are done and, if still over, plans again; each
   * pass frees bytes or ends the loop.
   */
  private def relieve(caller: Account): Eviction = {
    var ownBytes, ownEntries = 0L
    var again = true
    while (again) {
      val claims = planLock.synchronized(plan(caller))
      if (claims.nonEmpty) stats.reliefRounds.inc()
      var freed = 0L
      claims.foreach { c =>
        if (c.account ne caller) freed += math.max(0L, spill(c))
        else {
          ownBytes += c.shareBytes
          ownEntries += c.shareEntries
        }
      }
      again = freed > 0 && !withinLimits
    }
    if (ownBytes == 0 && ownEntries == 0) Eviction.Zero else Eviction(ownBytes, ownEntries)
  }

  /** Under `planLock`: the shares that bring the projected totals down to the low-water marks. */
  private def plan(caller: Account): Seq[Claim] = {
    val now = clock()
    val candidates = new ArrayBuffer[Candidate](accounts.size)
    var projectedBytes, projectedEntries = 0L
    accounts.values.forEach { a =>
      sync(a)
      // A claim on a spillable that can no longer shrink would never end (nobody reports for
      // it), and would hide its heap from every later round.
      if (!a.spillable.canShrink) a.claim.set(null)
      val claim = a.claim.get
      val bytes = if (claim == null) a.bytes.get else math.min(a.bytes.get, claim.keepBytes)
      val entries = if (claim == null) a.entries.get else math.min(a.entries.get, claim.keepEntries)
      projectedBytes += bytes
      projectedEntries += entries
      // Shares come out of what eviction can free; the fixed part still counts in the total.
      val evictable = math.max(0L, bytes - a.spillable.fixedBytes)
      if (!a.spilling && a.spillable.canShrink && (evictable > 0 || entries > 0)) {
        candidates += new Candidate(a, bytes, evictable, entries,
          idleNanos = math.max(0L, now - a.spillable.lastUsedNanos))
      }
    }
    val budget = effectiveBytes
    val cap = maxEntries
    var needBytes = excess(projectedBytes, budget)
    var needEntries = if (cap > 0) excess(projectedEntries, cap) else 0L
    if (needBytes == 0 && needEntries == 0) return Nil

    val size: Candidate => Long = if (needBytes > 0) _.evictable else _.entries
    val maxIdle =
      math.max(1L, candidates.iterator.map(_.idleNanos).reduceOption(_ max _).getOrElse(1L))
    val maxSize = math.max(1L, candidates.iterator.map(size).reduceOption(_ max _).getOrElse(1L))
    candidates.foreach(c => c.score = c.idleNanos.toDouble / maxIdle + size(c).toDouble / maxSize)
    val ranked = candidates.sortWith((x, y) =>
      if (x.score != y.score) x.score > y.score else size(x) > size(y))

    val claims = new ArrayBuffer[Claim]
    val it = ranked.iterator
    while ((needBytes > 0 || needEntries > 0) && it.hasNext) {
      val c = it.next()
      val shareBytes = math.min(needBytes, c.evictable)
      val shareEntries = math.min(needEntries, c.entries)
      if (shareBytes > 0 || shareEntries > 0) {
        val claim = new Claim(c.account, shareBytes, shareEntries, c.bytes - shareBytes,
          c.entries - shareEntries)
        c.account.claim.set(claim)
        if (c.account ne caller) c.account.spilling = true
        claims += claim
        needBytes -= shareBytes
        needEntries -= shareEntries
      }
    }
    claims.toSeq
  }

  /**
   * Outside any manager lock: asks a spillable other than the caller for its share. Returns
   * the bytes `trySpill` freed: 0 if busy, -1 if it failed.
   */
  private def spill(c: Claim): Long = {
    val a = c.account
    val s = a.spillable
    try {
      val freed =
        try {
          s.requestShrink(c.keepBytes, c.keepEntries)
          s.trySpill(c.shareBytes, c.shareEntries)
        } catch {
          case NonFatal(e) =>
            // Rounds come often while over budget: one WARN with the trace per spillable and
            // minute, the rest at DEBUG.
            val now = clock()
            if (now - a.lastFailureLogged >= FailureLogEveryNanos || a.lastFailureLogged == 0L) {
              a.lastFailureLogged = now
              logWarning(s"Spilling ${c.shareBytes} bytes from $s failed; the next round " +
                  "retries (further failures of it within a minute are logged at DEBUG)", e)
            } else {
              logDebug(s"Spilling ${c.shareBytes} bytes from $s failed again: $e")
            }
            -1L
        }
      sync(a)
      // Busy (0): the claim stands for the shrink its owner will do; else nothing is pending.
      if (freed != 0) a.claim.compareAndSet(c, null)
      freed
    } finally a.spilling = false
  }
}

object MemoryManager {
  /** A relief round evicts down to this fraction of each limit it found exceeded. */
  val LowWaterRatio = 0.9

  /** How often a spillable's failing spills are logged at WARN. */
  private val FailureLogEveryNanos = 60L * 1000 * 1000 * 1000

  /** The part of the budget all spillables' fixed bytes (cold-key filters) may take together. */
  val FixedShare = 0.125

  /** What an owner must evict from itself now: about `bytes`, and at least `entries` entries. */
  final case class Eviction(bytes: Long, entries: Long) {
    def isEmpty: Boolean = bytes <= 0 && entries <= 0
  }

  object Eviction {
    val Zero: Eviction = Eviction(0L, 0L)
  }

  /** For metrics: the limits in force and what they are compared with. */
  final case class Status(
      budgetBytes: Long,
      pressureFactor: Double,
      effectiveBudgetBytes: Long,
      maxEntries: Long,
      totalHeapBytes: Long,
      totalEntries: Long,
      spillables: Int,
      heapOccupancy: Double)

  /** Runs relief rounds asked for by the pressure monitor: one daemon thread per JVM. */
  private[memory] object ReliefThread {
    private lazy val executor = java.util.concurrent.Executors.newSingleThreadExecutor { r =>
      val t = new Thread(r, "spillstore-memory-relief")
      t.setDaemon(true)
      t
    }
    def execute(r: Runnable): Unit = executor.execute(r)
  }

  /** How much to evict to get from `total` to the low-water mark of `limit`; 0 within it. */
  private def excess(total: Long, limit: Long): Long =
    if (total <= limit) 0L else total - (limit * LowWaterRatio).toLong

  private final class Account(val spillable: Spillable, val conf: MemoryConf) {
    /** heapBytes / heapEntries as last added to the totals. */
    val bytes = new AtomicLong
    val entries = new AtomicLong
    /** The share a round assigned to it and not yet seen done. */
    val claim = new AtomicReference[Claim]
    /** Fixed bytes [[MemoryManager.reserveFixed]] granted it and it has not released. */
    val fixed = new AtomicLong
    /** A round's trySpill on it is running: other rounds leave it alone. */
    @volatile var spilling = false
    /** `clock` when a failed spill of it was last logged at WARN; 0 before the first. */
    @volatile var lastFailureLogged = 0L
    @volatile var closed = false
  }

  private final class Claim(
      val account: Account,
      val shareBytes: Long,
      val shareEntries: Long,
      val keepBytes: Long,
      val keepEntries: Long)

  private final class Candidate(val account: Account, val bytes: Long, val evictable: Long,
      val entries: Long, val idleNanos: Long) {
    var score = 0.0
  }
}
