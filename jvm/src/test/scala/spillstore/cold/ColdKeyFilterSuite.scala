package spillstore.cold

import org.scalatest.funsuite.AnyFunSuite

import org.apache.spark.unsafe.Platform

import spillstore.heap.HeapTier

class ColdKeyFilterSuite extends AnyFunSuite {
  private def key(i: Long): Array[Byte] = java.nio.ByteBuffer.allocate(16).putLong(8, i).array()
  private def mightContain(f: ColdKeyFilter, k: Array[Byte]): Boolean =
    f.mightContain(k, Platform.BYTE_ARRAY_OFFSET, k.length, HeapTier.hashOf(k))

  test(
    "every added key is found across growing layers, absent keys rarely are, and clear forgets all") {
    val f = new ColdKeyFilter(firstCapacity = 1000)
    assert(!mightContain(f, key(1)) && f.bytes == 0)
    val n = 300000 // layers of 1k, 2k, ... 256k keys: nine layers
    (0L until n).foreach { i =>
      val k = key(i); f.add(k, Platform.BYTE_ARRAY_OFFSET, k.length, HeapTier.hashOf(k))
    }
    assert((0L until n).forall(i => mightContain(f, key(i))), "a false negative")
    val absent = 200000
    val falsePositives = (n.toLong until n.toLong + absent).count(i => mightContain(f, key(i)))
    // The documented rate: under 1 % a full layer, so under 1 - 0.99^9 over nine layers.
    val bound = 1 - math.pow(0.99, 9)
    assert(falsePositives < absent * bound, s"$falsePositives false positives of $absent")
    assert(f.bytes < n * 3L, s"${f.bytes} bytes for $n keys") // 12 bits a key, layers doubling
    f.clear()
    assert(!mightContain(f, key(1)) && f.bytes == 0)
  }

  test("layers the budget refuses: the filter packs its keys into what it has, or gives up; " +
    "never a false negative, and what it reserved is released") {
    var reserved = 0L
    var grants = 1 // the first layer only
    def filter() = new ColdKeyFilter(firstCapacity = 1000,
      reserve = bytes => grants > 0 && { grants -= 1; reserved += bytes; true },
      release = bytes => reserved -= bytes)
    def add(f: ColdKeyFilter, i: Long): Boolean = {
      val k = key(i)
      f.add(k, Platform.BYTE_ARRAY_OFFSET, k.length, HeapTier.hashOf(k))
    }
    val packed = filter()
    (0L until 1500L).foreach(i => assert(!add(packed, i)))
    assert(packed.layerCount === 1 && reserved === packed.bytes && reserved > 0)
    assert((0L until 1500L).forall(i => mightContain(packed, key(i))), "a false negative")
    packed.clear()
    assert(reserved === 0)

    grants = 0
    val refused = filter()
    assert(add(refused, 1), "gave up at its first key")
    assert(refused.bytes === 0 && reserved === 0)
    assert(mightContain(refused, key(1)) && mightContain(refused, key(2)),
      "a given-up filter rules nothing out")
  }

  test("one full layer has under 1 % false positives, as documented") {
    val capacity = 100000
    val f = new ColdKeyFilter(firstCapacity = capacity)
    (0L until capacity).foreach { i =>
      val k = key(i); f.add(k, Platform.BYTE_ARRAY_OFFSET, k.length, HeapTier.hashOf(k))
    }
    val absent = 400000
    val falsePositives =
      (capacity.toLong until capacity.toLong + absent).count(i => mightContain(f, key(i)))
    assert(falsePositives < absent / 100, s"$falsePositives false positives of $absent")
  }

  test(
    "past its byte limit the layers take twice their keys, with more false positives, then the filter gives up") {
    def add(f: ColdKeyFilter, i: Long): Boolean = {
      val k = key(i); f.add(k, Platform.BYTE_ARRAY_OFFSET, k.length, HeapTier.hashOf(k))
    }
    def falsePositives(f: ColdKeyFilter): Double =
      (1L << 40 until (1L << 40) + 100000).count(i => mightContain(f, key(i))) / 100000.0
    val f = new ColdKeyFilter(firstCapacity = 1000,
      maxBytes = 10000) // layers of 1k and 2k keys fit, not 4k
    assert((0L until 3000L).forall(i => !add(f, i)))
    val (bytes, atTwelveBits) = (f.bytes, falsePositives(f))
    assert(bytes > 0 && bytes <= 10000 && f.layerCount == 2)
    // Past the limit: no new layer, no more bytes, until both layers are at 6 bits a key.
    var n = 3000L
    while (!add(f, n)) {
      n += 1
      assert(n < 10000, "the filter took more keys than 6 bits a key allow")
    }
    assert(n > 5500 && n < 6000,
      s"gave up at $n keys, where 6 bits a key in $bytes bytes hold about 5,900")
    assert(!add(f, n), "gives up once")
    assert(f.bytes === 0)
    assert((0L to n).forall(i => mightContain(f, key(i))) && mightContain(f, key(1L << 40)))
    f.clear()
    assert(!mightContain(f, key(1)))

    // Just before giving up: every key is still found, and false positives are the documented
    // rate of two layers at 6 bits a key (about 10 % each), not all keys.
    val g = new ColdKeyFilter(firstCapacity = 1000, maxBytes = 10000)
    assert((0L until n).forall(i => !add(g, i)))
    assert(g.bytes === bytes && g.layerCount === 2)
    assert((0L until n).forall(i => mightContain(g, key(i))), "a false negative")
    val overfilled = falsePositives(g)
    assert(atTwelveBits < 0.02 && overfilled > atTwelveBits && overfilled < 0.25,
      s"false positives: $atTwelveBits at 12 bits a key, $overfilled overfilled")
  }

  test(
    "a filter told how many keys to expect holds them in one layer, with fewer false positives than doubling") {
    def add(f: ColdKeyFilter, i: Long): Unit = {
      val k = key(i); f.add(k, Platform.BYTE_ARRAY_OFFSET, k.length, HeapTier.hashOf(k))
    }
    val n = 200000
    val sized = new ColdKeyFilter(firstCapacity = 1000)
    sized.expect(n)
    val doubled = new ColdKeyFilter(firstCapacity = 1000)
    (0L until n).foreach { i => add(sized, i); add(doubled, i) }
    assert(sized.layerCount === 1 && doubled.layerCount === 8)
    assert((0L until n).forall(i => mightContain(sized, key(i))), "a false negative")
    val absent = 400000
    def falsePositives(f: ColdKeyFilter) =
      (n.toLong until n.toLong + absent).count(i => mightContain(f, key(i)))
    val (one, eight) = (falsePositives(sized), falsePositives(doubled))
    assert(one < absent / 100 && one * 3 < eight,
      s"$one (one layer) against $eight (eight layers) of $absent")
    sized.expect(10L * n)
    add(sized, n)
    assert(sized.layerCount === 2 && sized.bytes < 5L * n,
      "expect sizes the first layer only: the second doubles it")
    sized.clear()
    assert(sized.bytes === 0)
  }

  test("the expected size is bounded: at least firstCapacity, at most a quarter of maxBytes") {
    def add(f: ColdKeyFilter, i: Long): Unit = {
      val k = key(i); f.add(k, Platform.BYTE_ARRAY_OFFSET, k.length, HeapTier.hashOf(k))
    }
    val small = new ColdKeyFilter(firstCapacity = 1000)
    small.expect(10)
    add(small, 0)
    val plain = new ColdKeyFilter(firstCapacity = 1000)
    add(plain, 0)
    assert(small.bytes === plain.bytes)
    val capped = new ColdKeyFilter(firstCapacity = 1000, maxBytes = 100000)
    capped.expect(1L << 40)
    add(capped, 0)
    assert(capped.bytes <= 25000 && capped.bytes > 12500, s"${capped.bytes} bytes")
  }
}
