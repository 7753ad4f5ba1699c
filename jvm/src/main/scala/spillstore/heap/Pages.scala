package spillstore.heap

/**
 * The heap tier's key and value bytes, in large byte arrays ("pages") filled front to back.
 * Millions of small arrays are millions of objects for G1 to mark and copy; pages are a few
 * hundred.
 *
 * A region holds one entry's key then value, after an 8-byte header: the slot of the entry that
 * wrote it (kept current by the heap tier when entries move) and the region's length. Its
 * address is the page's index in the high 32 bits and the offset of the key in the low 32.
 * Bytes are never overwritten once written: rows handed to Spark point into pages and stay
 * valid, so an update writes a new region and the old one becomes garbage. Garbage goes back
 * when a page is evacuated (its live regions copied to the page being filled, see
 * [[PageCompactor]]) and dropped; a dropped page is never reused, so a row still pointing into
 * it keeps its bytes until Spark lets go of it.
 *
 * {{{
 * state        | owner                     | who may change it
 * -------------+---------------------------+--------------------------------------------------
 * all fields   | its HeapTier              | the thread that may use the tier (tiered.Ownership's
 *              |                           | state table); never concurrently
 * }}}
 */
final class Pages {
  import Pages._

  private var pages = new Array[Array[Byte]](8)
  /** Live bytes (headers included) per page. */
  private var live = new Array[Int](8)
  /** Bytes written so far per page. */
  private var used = new Array[Int](8)
  /** Page indices [0, slots) are in use or free (null); freed indices are reused. */
  private var slots = 0
  private var current = -1
  /** Size of the next page, when an evacuation knows what it will move (else 0). */
  private var nextPageSize = 0
  /** Bytes of the pages in use, array headers excluded. */
  private var capacity = 0L
  private var count = 0
  private var liveTotal = 0L
  /** Bytes freed since [[takeFreed]] was last called: the pace at which garbage is made. */
  private var freedSinceTaken = 0L

  /** Heap bytes of the pages (array headers included) and their directory. */
  def estimatedBytes: Long = capacity + count.toLong * ArrayHeader + pages.length * 12L
  /** Bytes of regions still referenced, headers included. */
  def liveBytes: Long = liveTotal
  /** Bytes of pages in use that hold no live region (freed regions, tails left unfilled),
   *  less the room left in the page being filled. */
  def garbageBytes: Long =
    capacity - liveTotal - (if (current < 0) 0 else pages(current).length - used(current))
  def pageCount: Int = count

  def page(addr: Long): Array[Byte] = pages((addr >>> 32).toInt)

  /**
   * A new region of `length` bytes for entry `owner`; the caller fills bytes
   * [offset(addr), offset(addr) + length) of `page(addr)`.
   */
  def allocate(length: Int, owner: Int): Long = {
    val need = length + HeaderBytes
    if (current < 0 || used(current) + need > pages(current).length) newPage(need)
    val p = pages(current)
    val at = used(current)
    putInt(p, at, owner)
    putInt(p, at + 4, length)
    used(current) = at + need
    live(current) += need
    liveTotal += need
    address(current, at + HeaderBytes)
  }

  /** The region at `addr` (of `length` bytes) is garbage from now on. */
  def free(addr: Long, length: Int): Unit = {
    val p = pageIndex(addr)
    live(p) -= length + HeaderBytes
    liveTotal -= length + HeaderBytes
    freedSinceTaken += length + HeaderBytes
  }

  /** [[free]] of a region an evacuation copied: it makes no garbage that is not given back. */
  def freeMoved(addr: Long, length: Int): Unit = {
    free(addr, length)
    freedSinceTaken -= length + HeaderBytes
  }

  /** Bytes freed since the previous call. */
  def takeFreed(): Long = {
    val f = freedSinceTaken
    freedSinceTaken = 0
    f
  }

  /** Records that entry `owner` now owns the region at `addr` (it moved to another slot). */
  def setOwner(addr: Long, owner: Int): Unit = putInt(page(addr), offset(addr) - HeaderBytes, owner)

  /**
   * Pages worth evacuating to give back at least `bytes`, emptiest first: pages whose written
   * bytes are at most `MaxEvacuatedOccupancy` live (so freeing a byte copies at most three).
   * Maybe fewer. If the page being filled is one, the next region goes to a new page.
   */
  def evacuationCandidates(bytes: Long): Array[Int] = {
    val candidates = (0 until slots).filter { i =>
      pages(i) != null && live(i) <= used(i) * MaxEvacuatedOccupancy
    }.sortBy(i => live(i).toDouble / pages(i).length)
    var freed = 0L
    val chosen = candidates.takeWhile { i =>
      val go = freed < bytes
      freed += pages(i).length - live(i)
      go
    }.toArray
    if (chosen.contains(current)) {
      // The moved regions go to a new page of their size: one of the usual size would leave
      // room unused that the evacuation was meant to give back.
      current = -1
      val moving = chosen.map(live(_).toLong).sum
      if (moving > 0) nextPageSize = math.max(MinPageBytes.toLong, moving).min(MaxPageBytes).toInt
    }
    chosen
  }

  /**
   * Calls `visit(addr, owner, length)` for each region written to page `index`, live or not;
   * the visitor tells live from garbage by whether the owner still points at it.
   */
  def foreachRegion(index: Int)(visit: (Long, Int, Int) => Unit): Unit = {
    val p = pages(index)
    val end = used(index)
    var at = 0
    while (at < end) {
      val owner = getInt(p, at)
      val length = getInt(p, at + 4)
      visit(address(index, at + HeaderBytes), owner, length)
      at += HeaderBytes + length
    }
  }

  /** Drops an evacuated page; it must hold no live region any more. */
  def drop(index: Int): Unit = {
    if (live(index) != 0) throw new IllegalStateException(s"spillstore heap page $index " +
      s"still holds ${live(index)} live bytes after its evacuation: an entry was not moved")
    capacity -= pages(index).length
    count -= 1
    pages(index) = null
    used(index) = 0
  }

  def clear(): Unit = {
    pages = new Array[Array[Byte]](8)
    live = new Array[Int](8)
    used = new Array[Int](8)
    slots = 0
    current = -1
    nextPageSize = 0
    freedSinceTaken = 0
    capacity = 0
    count = 0
    liveTotal = 0
  }

  private def newPage(need: Int): Unit = {
    var index = pages.indexOf(null)
    if (index < 0 || index >= slots) {
      if (slots == pages.length) {
        pages = java.util.Arrays.copyOf(pages, slots * 2)
        live = java.util.Arrays.copyOf(live, slots * 2)
        used = java.util.Arrays.copyOf(used, slots * 2)
      }
      index = slots
      slots += 1
    }
    // An eighth of what the pages hold, so that a small state keeps little room unused.
    val usual = math.min(MaxPageBytes.toLong,
      math.max(MinPageBytes.toLong, java.lang.Long.highestOneBit(liveTotal / 8))).toInt
    val size = math.max(need, if (nextPageSize > 0) nextPageSize else usual)
    nextPageSize = 0
    pages(index) = new Array[Byte](size)
    live(index) = 0
    used(index) = 0
    capacity += size
    count += 1
    current = index
  }
}

object Pages {
  /** Owner slot and length before each region. */
  val HeaderBytes = 8
  private val ArrayHeader = 16
  private val MinPageBytes = 4 << 10
  /**
   * Pages are an eighth of the live bytes, from 4 KB up to 1 MB less their array header: in a
   * heap of 1 to 2 GB (1 MB G1 regions) a page of 512 KB or more is a humongous object of one
   * region, allocated in place and never copied by a collection.
   */
  private[heap] val MaxPageBytes = (1 << 20) - ArrayHeader
  private val MaxEvacuatedOccupancy = 0.75

  def offset(addr: Long): Int = addr.toInt
  def pageIndex(addr: Long): Int = (addr >>> 32).toInt
  private def address(page: Int, offset: Int): Long = (page.toLong << 32) | (offset & 0xFFFFFFFFL)

  private def putInt(a: Array[Byte], at: Int, v: Int): Unit = {
    a(at) = (v >>> 24).toByte; a(at + 1) = (v >>> 16).toByte
    a(at + 2) = (v >>> 8).toByte; a(at + 3) = v.toByte
  }

  private def getInt(a: Array[Byte], at: Int): Int =
    ((a(at) & 0xFF) << 24) | ((a(at + 1) & 0xFF) << 16) | ((a(at + 2) & 0xFF) << 8) | (a(
      at + 3) & 0xFF)
}
