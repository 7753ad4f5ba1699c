package spillstore.heap

import scala.collection.mutable
import scala.collection.mutable.ArrayBuffer
import scala.util.Random

import org.scalatest.funsuite.AnyFunSuite

import spillstore.heap.PagesSuite.Region

class PagesSuite extends AnyFunSuite {
  private val Header = Pages.HeaderBytes
  /** The smallest page, per the class comment. */
  private val MinPage = 4 << 10
  private val MaxPage = Pages.MaxPageBytes

  private def clamp(bytes: Long): Long = math.min(MaxPage.toLong, math.max(MinPage.toLong, bytes))

  /**
   * Pages driven as [[HeapTier]] and [[PageCompactor]] drive them (allocate and fill, free,
   * re-own, evacuate the candidates and drop them), next to a model of every region written
   * and which are live; each operation checks what the class comment promises of it.
   */
  private final class Driven(rnd: Random) {
    val pages = new Pages
    /** Regions written to each page not dropped, in the order written, live or not. */
    val written = mutable.Map.empty[Int, ArrayBuffer[Region]]
    val live = ArrayBuffer.empty[Region]
    private val liveAt = mutable.Map.empty[Long, Int] // address -> position in `live`
    /** The page being filled, if any. */
    private var current: Option[Int] = None
    /** The size the next page must have: that of the regions an evacuation moves. */
    private var movedSize: Option[Long] = None
    private var freed = 0L

    def pageLength(index: Int): Int = pages.page(written(index).head.addr).length
    def used(index: Int): Int = written(index).last.end
    def liveIn(index: Int): Long =
      written(index).filter(r => liveAt.contains(r.addr)).map(_.length + Header).sum

    def allocate(length: Int, owner: Int, content: Array[Byte]): Region = {
      val liveBefore = pages.liveBytes
      val a = pages.allocate(length, owner)
      val r = Region(a, owner, length, content)
      System.arraycopy(content, 0, pages.page(a), Pages.offset(a), length)
      val need = length + Header
      if (written.contains(r.index)) {
        assert(current.contains(r.index), s"region $r in a page other than the one being filled")
        assert(Pages.offset(a) === used(r.index) + Header, "pages are filled front to back")
      } else {
        current.foreach { c =>
          assert(pageLength(c) - used(c) < need,
            s"a new page while page $c had room for $need bytes")
        }
        assert(Pages.offset(a) === Header)
        val size = pages.page(a).length
        movedSize match {
          case Some(moved) =>
            assert(size === math.max(need, moved), "the page evacuated regions go to")
          case None => assert(
              size === need ||
                (size > need && size >= clamp(liveBefore / 16) && size <= clamp(liveBefore / 8)),
              s"a page of $size bytes for a region of $need with $liveBefore live bytes")
        }
        movedSize = None
        written(r.index) = ArrayBuffer.empty
      }
      current = Some(r.index)
      written(r.index) += r
      liveAt(a) = live.size
      live += r
      r
    }

    def allocate(length: Int): Region = {
      val content = new Array[Byte](length)
      rnd.nextBytes(content)
      allocate(length, rnd.nextInt(Int.MaxValue), content)
    }

    private def forget(r: Region): Unit = {
      val at = liveAt.remove(r.addr).get
      val last = live.remove(live.size - 1)
      if (last ne r) { live(at) = last; liveAt(last.addr) = at }
    }

    def free(r: Region): Unit = {
      pages.free(r.addr, r.length)
      forget(r)
      freed += r.length + Header
    }

    def setOwner(r: Region, owner: Int): Unit = {
      pages.setOwner(r.addr, owner)
      val updated = r.copy(owner = owner)
      val w = written(r.index)
      w(w.indexOf(r)) = updated
      live(liveAt(r.addr)) = updated
    }

    def takeFreed(): Unit = {
      assert(pages.takeFreed() === freed, "bytes freed since the last call (moved ones excluded)")
      freed = 0
    }

    /** What [[HeapTier.reclaim]] does with the candidates for `bytes`. */
    def evacuate(bytes: Long): Seq[Int] = {
      val ratio = written.keys.map(i => i -> liveIn(i).toDouble / pageLength(i)).toMap
      val eligible = written.keys.filter(i => liveIn(i) <= used(i) * 0.75).toSet
      val chosen = pages.evacuationCandidates(bytes).toSeq
      val clue = s"candidates $chosen for $bytes bytes among ${written.keys.map(i =>
          i -> (liveIn(i), used(i), pageLength(i)))}"
      assert(chosen.toSet.subsetOf(eligible) && chosen.distinct === chosen, clue)
      assert(chosen.map(ratio) === chosen.map(ratio).sorted, s"emptiest first: $clue")
      if (chosen.nonEmpty) {
        assert((eligible -- chosen).forall(ratio(_) >= ratio(chosen.last)),
          s"emptiest first: $clue")
        assert(
          chosen.init.map(i => pageLength(i) - liveIn(i)).sum < bytes, s"more than needed: $clue")
      }
      if (chosen.size < eligible.size) {
        assert(chosen.map(i => pageLength(i) - liveIn(i)).sum >= bytes, s"fewer than needed: $clue")
      }
      if (current.exists(chosen.contains)) {
        current = None
        val moved = chosen.map(liveIn).sum
        if (moved > 0) movedSize = Some(clamp(moved))
      }
      chosen.foreach { index =>
        val visited = ArrayBuffer.empty[(Long, Int, Int)]
        pages.foreachRegion(index)((a, owner, length) => visited += ((a, owner, length)))
        assert(visited === written(index).map(r => (r.addr, r.owner, r.length)),
          s"regions of page $index")
        written(index).filter(r => liveAt.contains(r.addr)).foreach { r =>
          val p = pages.page(r.addr)
          val content = java.util.Arrays.copyOfRange(p, Pages.offset(r.addr), r.end)
          forget(r)
          pages.freeMoved(r.addr, r.length)
          allocate(r.length, r.owner, content)
        }
        pages.drop(index)
        written -= index
      }
      chosen
    }

    def check(clue: String): Unit = {
      assert(pages.liveBytes === live.map(_.length + Header).sum, clue)
      assert(pages.pageCount === written.size, clue)
      val capacity = written.keys.toSeq.map(pageLength(_).toLong).sum
      val room = current.fold(0L)(c => pageLength(c) - used(c))
      assert(pages.garbageBytes === capacity - pages.liveBytes - room, clue)
      val directory = pages.estimatedBytes - capacity - 16L * written.size // array headers
      assert(directory > 0 && directory % 12 == 0, s"$clue: ${pages.estimatedBytes} estimated")
      written.foreach { case (index, regions) =>
        val p = pages.page(regions.head.addr)
        regions.foldLeft(0) { (end, r) =>
          assert(r.index === index && (pages.page(r.addr) eq p), s"$clue: $r")
          assert(Pages.offset(r.addr) === end + Header, s"$clue: $r after $end")
          r.end
        }
        assert(used(index) <= p.length, clue)
      }
      live.foreach { r =>
        assert(java.util.Arrays.equals(pages.page(r.addr), Pages.offset(r.addr), r.end, r.bytes, 0,
            r.length),
          s"$clue: bytes of $r were overwritten")
      }
    }
  }

  test("random allocations, frees, re-owned regions and evacuations match a model of the " +
    "regions: bytes never overwritten, page sizes, live and garbage bytes, candidates") {
    for (seed <- 1 to 6) {
      val rnd = new Random(seed)
      val d = new Driven(rnd)
      var evacuated = 0
      for (step <- 1 to 4000) {
        val clue = s"seed $seed step $step"
        rnd.nextInt(100) match {
          case n if n < 50 =>
            val length = rnd.nextInt(20) match {
              case 0 => 100 + rnd.nextInt(20000)
              case 1 if rnd.nextInt(40) == 0 => MaxPage + rnd.nextInt(3) - 1 // a page of its own
              case _ => rnd.nextInt(100)
            }
            d.allocate(length)
          case n if n < 85 && d.live.nonEmpty => d.free(d.live(rnd.nextInt(d.live.size)))
          case n if n < 90 && d.live.nonEmpty =>
            d.setOwner(d.live(rnd.nextInt(d.live.size)), rnd.nextInt())
          case n if n < 95 => d.takeFreed()
          case n if n < 99 =>
            evacuated += d.evacuate(rnd.nextInt(2) match {
              case 0 => rnd.nextInt(1 << 16).toLong
              case _ => (d.pages.garbageBytes * rnd.nextDouble() * 1.2).toLong
            }).size
          case _ =>
            d.written.keys.find(d.liveIn(_) > 0).foreach { index =>
              val e = intercept[IllegalStateException](d.pages.drop(index))
              assert(e.getMessage.contains(
                  s"heap page $index still holds ${d.liveIn(index)} live bytes"), e.getMessage)
            }
        }
        if (step % 50 == 0) d.check(clue)
      }
      d.check(s"seed $seed end")
      assert(evacuated > 10, s"seed $seed: only $evacuated pages evacuated")
    }
  }

  test(
    "boundaries: a region that exactly fills a page, one a byte too long, one larger than a page") {
    val d = new Driven(new Random(1))
    d.check("empty")
    assert(d.pages.evacuationCandidates(Long.MaxValue).isEmpty && d.pages.takeFreed() === 0)
    val first = d.allocate(1)
    assert(first.index === 0 && d.pageLength(0) === MinPage)
    val room = MinPage - first.end
    val tooLong = d.allocate(room - Header + 1)
    assert(tooLong.index === 1, "a region a byte longer than the room left goes to a new page")
    val exact = d.allocate(d.pageLength(1) - tooLong.end - Header)
    assert(exact.index === 1 && exact.end === d.pageLength(1), "a region that fits exactly")
    assert(d.allocate(0).index === 2)
    d.check("small pages")
    assert(d.pages.garbageBytes === room, "the first page's unfilled tail is garbage")
    val huge = d.allocate(MaxPage)
    assert(d.pageLength(huge.index) === MaxPage + Header && Pages.offset(huge.addr) === Header)
    d.check("a page larger than the largest")
  }

  test("a dropped page's index is reused for a new array; the dropped array keeps its bytes") {
    val d = new Driven(new Random(2))
    val regions = Seq.fill(3)(d.allocate(3000)) // pages 0, 1, 2
    val old = d.pages.page(regions(1).addr)
    val bytesBefore = old.clone()
    intercept[IllegalStateException](d.pages.drop(1))
    d.check("a refused drop changes nothing")
    d.free(regions(1))
    d.pages.drop(1)
    d.written -= 1
    d.check("dropped")
    assert(d.allocate(3000).index === 1)
    assert(d.pages.page(Pages.pageIndex(regions(1).addr).toLong << 32) ne old)
    assert(old.sameElements(bytesBefore))
    d.check("reused")
    val estimatedEmpty = new Pages().estimatedBytes
    d.pages.clear()
    assert((d.pages.pageCount, d.pages.liveBytes, d.pages.garbageBytes, d.pages.estimatedBytes,
      d.pages.takeFreed()) ===
      ((0, 0L, 0L, estimatedEmpty, 0L)))
  }
}

object PagesSuite {
  private final case class Region(addr: Long, owner: Int, length: Int, bytes: Array[Byte]) {
    def index: Int = Pages.pageIndex(addr)
    def end: Int = Pages.offset(addr) + length
  }
}
