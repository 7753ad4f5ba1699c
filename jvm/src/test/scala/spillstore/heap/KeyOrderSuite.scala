package spillstore.heap

import scala.util.Random

import org.scalatest.funsuite.AnyFunSuite

import org.apache.spark.unsafe.Platform

class KeyOrderSuite extends AnyFunSuite {
  private val Off = Platform.BYTE_ARRAY_OFFSET

  /** A fresh batch of `tier` that inserts `keys` (the tier's change list keeps its offset). */
  private def batchOf(keys: Seq[Array[Byte]], tier: HeapTier): HeapTier = {
    tier.clear()
    keys.foreach(k => tier.insertChanged(0, k, Off, k.length, Array.emptyByteArray, Off, 0))
    tier
  }

  private def drain(tier: HeapTier, slots: KeyOrder.Slots): Seq[Seq[Byte]] = {
    val out = Seq.newBuilder[Seq[Byte]]
    while (slots.hasNext) out += tier.keyBytes(slots.next()).toSeq
    out.result()
  }

  /** Sorts `keys` as one batch of `tier` (which may have held earlier batches). */
  private def sortedKeys(keys: Seq[Array[Byte]], tier: HeapTier): Seq[Seq[Byte]] = {
    batchOf(keys, tier)
    drain(tier, KeyOrder.sorted(tier.changeList, tier))
  }

  private def assertSortedLikeComparator(keys: Seq[Array[Byte]], clue: String,
      tier: HeapTier = new HeapTier()): Unit = {
    val expected = keys.sortWith((a, b) => java.util.Arrays.compareUnsigned(a, b) < 0).map(_.toSeq)
    assert(sortedKeys(keys, tier) === expected, clue)
  }

  private val rnd = new Random(7)
  private def bytes(n: Int): Array[Byte] = { val b = new Array[Byte](n); rnd.nextBytes(b); b }

  test(
    "keys come out in unsigned byte order: shared prefixes, prefixes of each other, negative bytes, ties past 8 bytes") {
    val shapes: Seq[(String, () => Array[Byte])] = Seq(
      "random lengths 0-12" -> (() => bytes(rnd.nextInt(13))),
      "UnsafeRow-like: 8 zero bytes then a long" -> (() => new Array[Byte](8) ++ bytes(8)),
      "one shared 20-byte prefix, then 0-3 bytes" -> {
        val p = bytes(20); () => p ++ bytes(rnd.nextInt(4))
      },
      "equal first 8 bytes after the shared part, differing later" ->
        {
          val p = bytes(3);
          () => p ++ Array[Byte](1, 2, 3, 4, 5, 6, 7, rnd.nextInt(3).toByte) ++ bytes(2)
        },
      "only the byte values 0, 1 and -1" -> (() =>
        Array.fill(1 + rnd.nextInt(10))(Seq[Byte](0, 1, -1)(rnd.nextInt(3)))))
    for ((shape, key) <- shapes; n <- Seq(1, 2, 3, 50, 5000)) {
      val keys = Seq.fill(n)(key()).distinctBy(_.toSeq)
      assertSortedLikeComparator(keys, s"$shape, $n keys")
    }
    val empty = new HeapTier()
    assert(!KeyOrder.sorted(empty.changeList, empty).hasNext)
  }

  test(
    "order: positions of keys packed with values, by their key bytes only, ties and duplicates included") {
    for (n <- Seq(0, 1, 2, 40, 63, 64, 65, 3000)) {
      val shared = bytes(rnd.nextInt(12))
      val keys = Seq.fill(n)(
        shared ++ (if (rnd.nextInt(4) == 0) Array[Byte](9, 9, 9, 9, 9, 9, 9, 9)
                   else Array.emptyByteArray) ++
          bytes(rnd.nextInt(12)))
      val withDuplicates = (keys ++ keys.take(n / 10)).toArray
      // Each key is followed by value bytes, which must not take part in the order.
      val packed = withDuplicates.map(k => k ++ bytes(1 + rnd.nextInt(5)))
      // ... and keys start at an offset in their arrays, as in heap pages.
      val at = withDuplicates.map(_ => rnd.nextInt(3))
      val paged = packed.zip(at).map { case (kv, a) => bytes(a) ++ kv }
      val order = KeyOrder.order(paged, at, withDuplicates.map(_.length), withDuplicates.length)
      assert(order.sorted.toSeq === withDuplicates.indices, s"$n keys: not a permutation")
      val expected = withDuplicates.map(_.toSeq).sortWith((a, b) =>
        java.util.Arrays.compareUnsigned(a.toArray, b.toArray) < 0)
      assert(order.map(i => withDuplicates(i).toSeq).toSeq === expected.toSeq, s"$n keys")
    }
  }

  test(
    "a key that is a prefix of another sorts first, also when padding makes their prefixes equal") {
    assertSortedLikeComparator(Seq(Array[Byte](1, 0), Array[Byte](1), Array[Byte](),
        Array[Byte](1, 0, 0)), "padding")
  }

  test("batches larger than a sorted run are merged in order, ties between runs included") {
    // 100k keys: four runs; a fifth of them share their first 8 bytes past the shared part,
    // so runs meet on equal prefixes.
    val keys = Seq.tabulate(100000) { i =>
      if (i % 5 == 0) new Array[Byte](8) ++ Array.fill[Byte](8)(3) ++ bytes(4)
      else new Array[Byte](8) ++ bytes(8)
    }.distinctBy(_.toSeq)
    assertSortedLikeComparator(keys, "100k keys")
    assertSortedLikeComparator(keys.reverse, "100k keys, reversed")
  }

  test(
    "prefixes taken where the previous batch's keys differed are retaken when this batch's keys share more or fewer bytes") {
    val tier = new HeapTier()
    val shared12 = { val p = bytes(12); Seq.fill(3000)(p ++ bytes(6)).distinctBy(_.toSeq) }
    val shared2 = { val p = bytes(2); Seq.fill(3000)(p ++ bytes(10)).distinctBy(_.toSeq) }
    val none = Seq.fill(3000)(bytes(1 + rnd.nextInt(9))).distinctBy(_.toSeq)
    for ((keys, clue) <- Seq(shared12 -> "12 shared", shared2 -> "fewer", shared12 -> "more",
        shared12 -> "the same again", none -> "none shared", Seq(bytes(5)) -> "one key")) {
      assertSortedLikeComparator(keys, clue, tier)
    }
  }

  test("a change list keeps a 64-slot first chunk between batches, however large the last was") {
    val tier = new HeapTier()
    val list = tier.changeList
    val atRest = list.estimatedBytes
    assert(atRest === 64 * 24)
    batchOf(Seq.tabulate(5000)(i => BigInt(i).toByteArray), tier)
    assert(list.size === 5000 && list.estimatedBytes === 5 * 1024 * 24)
    assert(list.undoAddr(4999) === -1L && tier.keyBytes(list.slot(4999)).toSeq === BigInt(
      4999).toByteArray.toSeq)
    tier.commitBatch()
    assert(list.size === 0 && list.estimatedBytes === atRest)
  }
}
