package spillstore.heap

import java.util.{Arrays => JArrays}

import scala.util.Random

import org.scalatest.funsuite.AnyFunSuite

class ChangeListSuite extends AnyFunSuite {
  private val rnd = new Random(11)
  private def bytes(n: Int): Array[Byte] = { val b = new Array[Byte](n); rnd.nextBytes(b); b }

  /** A tier holding `keys` as committed entries; returns it and their slots. */
  private def tierOf(keys: Seq[Array[Byte]]): (HeapTier, Seq[Int]) = {
    val tier = new HeapTier()
    (tier,
      keys.map(k =>
        tier.insertCommitted(HeapTier.hashOf(k), k, bytes(rnd.nextInt(4)), HeapTier.ColdAbsent)))
  }

  /** Capacity per the class comment: a first chunk of 64 doubling to 1024, then 1024-chunks. */
  private def documentedCapacity(n: Int): Int =
    if (n <= 64) 64
    else if (n <= 1024) Integer.highestOneBit(n - 1) * 2 else (n + 1023) / 1024 * 1024

  /** Key bytes [at, at + 8) zero-padded, as an unsigned big-endian long. */
  private def prefixModel(key: Array[Byte], at: Int): Long =
    (0 until 8).foldLeft(0L)((p, j) => (p << 8) | key.lift(at + j).map(_ & 0xFFL).getOrElse(0L))

  /** The number of leading bytes all `keys` share. */
  private def sharedModel(keys: Seq[Array[Byte]]): Int =
    keys.map(_.toSeq).reduce((a, b) =>
      a.zip(b).takeWhile { case (x, y) => x == y }.map(_._1)).length

  test("entries round-trip through their positions across chunk boundaries, growth, updates " +
    "and clear; heap bytes follow the documented chunks") {
    val (tier, slots) = tierOf(Seq.tabulate(3000)(i => BigInt(i).toByteArray))
    val list = new ChangeList(tier)
    val atRest = list.estimatedBytes
    for (n <- Seq(0, 1, 63, 64, 65, 128, 129, 1023, 1024, 1025, 2048, 2049, 3000, 1)) {
      val entries = Seq.fill(n)((slots(rnd.nextInt(slots.size)),
          if (rnd.nextInt(3) == 0) -1L else rnd.nextLong(), rnd.nextInt(1 << 20)))
      entries.zipWithIndex.foreach { case ((s, a, l), i) =>
        assert(list.add(s, a, l) === i, s"$n entries: position")
        assert(list.size === i + 1)
      }
      assert(list.estimatedBytes === atRest / 64 * documentedCapacity(n), s"$n entries")
      val updated = entries.toArray
      for (_ <- 0 until n / 3) { // as the tier does when an entry or its undo region moves
        val i = rnd.nextInt(n)
        updated(i) = (slots(rnd.nextInt(slots.size)), rnd.nextLong(), updated(i)._3)
        list.setSlot(i, updated(i)._1)
        list.setUndoAddr(i, updated(i)._2)
      }
      updated.zipWithIndex.foreach { case ((s, a, l), i) =>
        assert((list.slot(i), list.undoAddr(i), list.undoValueLength(i)) === ((s, a, l)),
          s"$n entries: entry $i")
      }
      list.clear()
      assert(list.size === 0 && list.estimatedBytes === atRest, s"cleared after $n entries")
    }
  }

  test("prefixes are the 8 bytes after what the previous batch's keys shared, and after " +
    "alignPrefixes after what this batch's keys share, and order keys as their bytes do") {
    // Families of keys sharing 0, 1 and 12 bytes; keys that are prefixes of others, negative bytes.
    val families = Seq(Array.emptyByteArray, Array[Byte](7), Array.fill[Byte](12)(-1)).map {
      shared =>
        Seq.fill(150)(shared ++ bytes(rnd.nextInt(12))).distinctBy(_.toSeq)
    }
    val (tier, slots) = tierOf(families.flatten)
    val keyOf = slots.map(s => s -> tier.keyBytes(s)).toMap
    val familyOf = slots.zip(families.zipWithIndex.flatMap { case (keys, f) =>
      keys.map(_ => f)
    }).toMap
    val list = new ChangeList(tier)
    var offset = 0 // the model's: where the batch's prefixes are taken before alignPrefixes
    for (batch <- 1 to 60) {
      val all = rnd.shuffle(slots)
      val chosen = rnd.nextInt(4) match {
        case 0 => val f = rnd.nextInt(3); all.filter(familyOf(_) == f).take(1 + rnd.nextInt(150))
        case 1 => all.take(1 + rnd.nextInt(all.size))
        case 2 => all.take(1)
        case _ => Nil
      }
      chosen.foreach(s => list.add(s, -1L, 0))
      def prefixesAt(at: Int => Int): Unit = chosen.indices.foreach { i =>
        assert(list.prefix(i) === prefixModel(keyOf(chosen(i)), at(i)), s"batch $batch, key $i")
      }
      prefixesAt(_ => offset)
      val shared = if (chosen.isEmpty) offset else sharedModel(chosen.map(keyOf))
      if (rnd.nextInt(4) != 0) { // a batch aborted or cleared without a commit's sort is not aligned
        list.alignPrefixes()
        prefixesAt(_ => shared)
        for (i <- chosen.indices; j <- chosen.indices) {
          if (java.lang.Long.compareUnsigned(list.prefix(i), list.prefix(j)) < 0) {
            assert(JArrays.compareUnsigned(keyOf(chosen(i)), keyOf(chosen(j))) < 0,
              s"batch $batch: keys $i, $j")
          }
        }
      }
      list.clear()
      offset = shared
    }
  }

  test("sharedLength and prefixAt read the given ranges only") {
    for (_ <- 1 to 2000) {
      val first = bytes(rnd.nextInt(12))
      val key = if (rnd.nextBoolean())
        first.take(rnd.nextInt(first.length + 1)) ++ bytes(rnd.nextInt(4))
      else bytes(rnd.nextInt(12))
      val (firstFrom, from) = (rnd.nextInt(3), rnd.nextInt(3))
      val paddedFirst = bytes(firstFrom) ++ first ++ bytes(3)
      val paddedKey = bytes(from) ++ key ++ bytes(3)
      val shared = rnd.nextInt(first.length + 1)
      assert(ChangeList.sharedLength(paddedFirst, firstFrom, shared, paddedKey, from,
          key.length) ===
          sharedModel(Seq(first.take(shared), key)), s"${first.toSeq} ($shared) and ${key.toSeq}")
      val at = rnd.nextInt(14)
      assert(ChangeList.prefixAt(paddedKey, from, key.length, at) === prefixModel(key, at),
        s"${key.toSeq} at $at")
    }
  }
}
