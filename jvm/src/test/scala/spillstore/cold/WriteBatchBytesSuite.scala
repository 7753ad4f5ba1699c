package spillstore.cold

import java.io.File

import scala.util.Random

import org.rocksdb.WriteBatch
import org.scalatest.funsuite.AnyFunSuite

import spillstore.TempDirs.withTempDir

class WriteBatchBytesSuite extends AnyFunSuite {
  private val rnd = new Random(11)
  private def bytes(n: Int): Array[Byte] = { val b = new Array[Byte](n); rnd.nextBytes(b); b }

  /** Puts of keys and values around each varint width (1, 2 and 3 bytes) and empty values. */
  private val puts: Seq[(Array[Byte], Array[Byte])] =
    Seq(0, 1, 16, 127, 128, 300, 16383, 16384, 70000).flatMap { n =>
      Seq(bytes(1 + rnd.nextInt(20)) -> bytes(n), bytes(math.max(1, n)) -> bytes(rnd.nextInt(40)))
    }

  /** The puts as a WriteBatchBytes, each key and value at an offset inside a larger array. */
  private def coldWrite(ps: Seq[(Array[Byte], Array[Byte])]): WriteBatchBytes = {
    val w = new WriteBatchBytes(ps.map { case (k, v) =>
      WriteBatchBytes.putBytes(k.length, v.length)
    }.sum)
    ps.foreach { case (k, v) =>
      val key = bytes(3) ++ k ++ bytes(2)
      val value = bytes(5) ++ v
      w.put(key, 3, k.length, value, 5, v.length)
    }
    w
  }

  test("a WriteBatchBytes is byte for byte the write batch RocksDB builds from the same puts") {
    val ours = coldWrite(puts).toWriteBatch
    val theirs = new WriteBatch()
    try {
      puts.foreach { case (k, v) => theirs.put(k, v) }
      assert(ours.count() === puts.size)
      assert(ours.data().toSeq === theirs.data().toSeq)
    } finally { ours.close(); theirs.close() }
  }

  test("a WriteBatchBytes's puts reach RocksDB: every key reads back its value") {
    withTempDir("cold-write") { root =>
      val tier = new ColdTier(new File(root, "tier"))
      try {
        val batch = coldWrite(puts).toWriteBatch
        try tier.write(batch)
        finally batch.close()
        puts.foreach { case (k, v) =>
          assert(tier.get(k).toSeq === v.toSeq, s"${k.length}-byte key")
        }
      } finally tier.close()
    }
  }

  test("a WriteBatchBytes sized for other puts is refused with a message, not handed to RocksDB") {
    val tooSmall = new WriteBatchBytes(WriteBatchBytes.putBytes(4, 4))
    val e = intercept[IllegalStateException](tooSmall.put(bytes(4), 0, 4, bytes(5), 0, 5))
    assert(e.getMessage.contains("does not fit"), e.getMessage)
    val tooLarge = new WriteBatchBytes(WriteBatchBytes.putBytes(4, 4) + 1)
    tooLarge.put(bytes(4), 0, 4, bytes(4), 0, 4)
    val e2 = intercept[IllegalStateException](tooLarge.toWriteBatch)
    assert(e2.getMessage.contains("sized wrongly"), e2.getMessage)
  }
}
