package spillstore.heap

import scala.util.Random

import org.scalatest.funsuite.AnyFunSuite

class KeyOrderSuite extends AnyFunSuite {
  private def entries(keys: Seq[Array[Byte]]): IndexedSeq[Entry] =
    keys.map(k => new Entry(0, k, k.length)).toIndexedSeq

  private def assertSortedLikeComparator(keys: Seq[Array[Byte]], clue: String): Unit = {
    val in = entries(keys)
    val expected = in.sortWith((a, b) => Entry.ByKey.compare(a, b) < 0).map(_.keyBytes.toSeq)
    assert(KeyOrder.sorted(in).map(_.keyBytes.toSeq).toSeq === expected, clue)
  }

  test("keys come out in unsigned byte order: shared prefixes, prefixes of each other, negative bytes, ties past 8 bytes") {
    val rnd = new Random(7)
    def bytes(n: Int): Array[Byte] = { val b = new Array[Byte](n); rnd.nextBytes(b); b }
    val shapes: Seq[(String, () => Array[Byte])] = Seq(
      "random lengths 0-12" -> (() => bytes(rnd.nextInt(13))),
      "UnsafeRow-like: 8 zero bytes then a long" -> (() => new Array[Byte](8) ++ bytes(8)),
      "one shared 20-byte prefix, then 0-3 bytes" -> { val p = bytes(20); () => p ++ bytes(rnd.nextInt(4)) },
      "equal first 8 bytes after the shared part, differing later" ->
        { val p = bytes(3); () => p ++ Array[Byte](1, 2, 3, 4, 5, 6, 7, rnd.nextInt(3).toByte) ++ bytes(2) },
      "only the byte values 0, 1 and -1" -> (() => Array.fill(1 + rnd.nextInt(10))(Seq[Byte](0, 1, -1)(rnd.nextInt(3)))))
    for ((shape, key) <- shapes; n <- Seq(1, 2, 3, 50, 5000)) {
      val keys = Seq.fill(n)(key()).distinctBy(_.toSeq)
      assertSortedLikeComparator(keys, s"$shape, $n keys")
    }
    assert(KeyOrder.sorted(IndexedSeq.empty).isEmpty)
  }

  test("a key that is a prefix of another sorts first, also when padding makes their prefixes equal") {
    assertSortedLikeComparator(Seq(Array[Byte](1, 0), Array[Byte](1), Array[Byte](), Array[Byte](1, 0, 0)), "padding")
  }
}
