package spillstore.memory

import java.util.concurrent.{ConcurrentLinkedQueue, Semaphore}
import java.util.concurrent.atomic.{AtomicLong, AtomicReference}

import scala.jdk.CollectionConverters._

import spillstore.memory.MemoryManager.Eviction

/**
 * A heap tier as the manager sees it, following the provider side of the protocol:
 *  - the owner holds `inUse` while a batch is open (busy); `trySpill` only ever tries it, and
 *    the permit is not reentrant, so a spill never runs under an open batch, not even on the
 *    owner's own thread;
 *  - a shrink request is honoured at the owner's next put, right after it lets go (unless a
 *    spill holds the permit, which honours it instead), and by any successful `trySpill`.
 *
 * `spillCap` bounds what one `trySpill` frees, as for a cold tier that takes only so much;
 * `fixed` bytes count in its size but no eviction frees them, as for a cold-key filter.
 *
 * Every spillable call is appended to `log` ("name spill bytes/entries=freed", "name keep
 * bytes/entries"), so tests can assert who was asked for what, in which order.
 */
final class FakeSpillable(
    val name: String,
    initialEntries: Long = 0L,
    @volatile var lastUsedNanos: Long = 0L,
    bytesPerEntry: Long = 1L,
    log: ConcurrentLinkedQueue[String] = new ConcurrentLinkedQueue[String],
    spillCap: Long = Long.MaxValue,
    fixed: Long = 0L)
    extends Spillable {
  private val entries = new AtomicLong(initialEntries)
  private val inUse = new Semaphore(1)
  private val request = new AtomicReference[(Long, Long)]
  /** Threads `trySpill` ran on, successful or not. */
  val spillThreads = new ConcurrentLinkedQueue[Thread]
  /** Runs inside a successful `trySpill` before it evicts: lets a test hold a spill in flight. */
  @volatile var duringSpill: () => Unit = () => ()
  /** False for a doomed state: only its zombie owner, which never reports, frees it whole. */
  @volatile var shrinkable = true
  override def canShrink: Boolean = shrinkable

  def heapBytes: Long = entries.get * bytesPerEntry + fixed
  override def fixedBytes: Long = fixed
  def heapEntries: Long = entries.get

  def trySpill(bytes: Long, entries: Long): Long = {
    spillThreads.add(Thread.currentThread())
    val freed = if (!inUse.tryAcquire()) 0L
    else {
      try {
        duringSpill()
        val before = heapBytes
        evict(bytes, entries)
        honour()
        val floor = math.max(0L, before - spillCap) / bytesPerEntry
        this.entries.updateAndGet(e => math.max(e, floor))
        before - heapBytes
      } finally inUse.release()
    }
    log.add(s"$name spill $bytes/$entries=$freed")
    freed
  }

  def requestShrink(targetBytes: Long, targetEntries: Long): Unit = {
    log.add(s"$name keep $targetBytes/$targetEntries")
    request.set((targetBytes, targetEntries))
  }

  /** This spillable's lines of the shared log. */
  def calls: List[String] = log.asScala.filter(_.startsWith(name + " ")).toList

  // The owner's side.

  def open(now: Long): Unit = {
    inUse.acquire()
    lastUsedNanos = now
  }

  /** One put of `n` entries as a provider does it; returns the first share the manager asks. */
  def put(mm: MemoryManager, n: Long): Eviction = {
    honour()
    entries.addAndGet(n)
    settle(mm)
  }

  def close(mm: MemoryManager, now: Long): Unit = {
    lastUsedNanos = now
    inUse.release()
    // Each release is followed by a look for a request that came while the permit was held.
    while (request.get != null && inUse.tryAcquire()) {
      try {
        honour()
        settle(mm)
      } finally inUse.release()
    }
  }

  /** Reports, evicts what the manager asks for and reports again, until it asks nothing. */
  private def settle(mm: MemoryManager): Eviction = {
    val first = mm.report(this)
    var share = first
    while (!share.isEmpty) {
      evict(share.bytes, share.entries)
      share = mm.report(this)
    }
    first
  }

  def clear(): Unit = entries.set(0)

  private def evict(bytes: Long, atLeastEntries: Long): Unit = {
    val n = math.max((bytes + bytesPerEntry - 1) / bytesPerEntry, atLeastEntries)
    entries.updateAndGet(e => math.max(0L, e - n))
  }

  private def honour(): Unit = {
    val r = request.getAndSet(null)
    if (r != null) {
      val keep = math.min(r._1 / bytesPerEntry, r._2)
      entries.updateAndGet(e => math.min(e, keep))
    }
  }
}
