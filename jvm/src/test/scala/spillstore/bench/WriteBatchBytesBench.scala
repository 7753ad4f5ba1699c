package spillstore.bench

import java.io.File
import java.nio.file.Files

import scala.util.Random

import org.apache.commons.io.FileUtils
import org.rocksdb.WriteBatch

import spillstore.cold.{ColdTier, WriteBatchBytes}
import spillstore.heap.KeyOrder

/**
 * What an eviction's RocksDB write costs per key, three ways: `WriteBatch.put` per entry in
 * eviction order (RocksDB's Java API as is), one [[WriteBatchBytes]] in eviction order, and one
 * WriteBatchBytes in key order (what eviction does). Each way writes the same random keys (16-byte
 * UnsafeRow-like: 8 zero bytes, then a long) with 16-byte values, in writes of `perWrite`, into a
 * fresh cold tier; the ways alternate, `rounds` times.
 *
 *   bin/sbt "spillstore/Test/runMain spillstore.bench.WriteBatchBytesBench keys=3000000 perWrite=7490 rounds=3"
 */
object WriteBatchBytesBench {
  private val Ways = Seq("put per entry, eviction order", "WriteBatchBytes, eviction order",
    "WriteBatchBytes, key order")

  def main(args: Array[String]): Unit = {
    val opts = BenchArgs.ints(args)
    val keys = opts.getOrElse("keys", 3000000)
    val perWrite = opts.getOrElse("perWrite", 7490)
    val rounds = opts.getOrElse("rounds", 3)
    println(s"WriteBatchBytesBench: $keys keys, $perWrite a write, $rounds rounds")
    val root = Files.createTempDirectory("cold-write-bench").toFile
    try {
      val results = Ways.map(_ -> Seq.newBuilder[Double]).toMap
      for (round <- 1 to rounds; way <- Ways) {
        val nsPerKey = run(way, new File(root, s"$round-${Ways.indexOf(way)}"), keys, perWrite)
        results(way) += nsPerKey
        println(f"  round $round, $way: $nsPerKey%.0f ns a key")
      }
      println("| way | ns a key, median of rounds (all rounds) |")
      println("|---|---|")
      Ways.foreach { way =>
        val r = results(way).result().sorted
        println(f"| $way | ${r(r.size / 2)}%.0f (${r.map(x => f"$x%.0f").mkString(", ")}) |")
      }
    } finally FileUtils.deleteQuietly(root)
  }

  /** Nanoseconds a key to write `keys` keys `way`, in writes of `perWrite`, key preparation included. */
  private def run(way: String, dir: File, keys: Int, perWrite: Int): Double = {
    val tier = new ColdTier(dir)
    val rnd = new Random(42)
    val kv = new Array[Array[Byte]](perWrite)
    val keyLengths = Array.fill(perWrite)(16)
    try {
      var elapsed = 0L
      var done = 0
      while (done < keys) {
        val n = math.min(perWrite, keys - done)
        var i = 0
        while (i < n) { // an entry's packed key and value, as the heap holds it
          val a = new Array[Byte](32)
          val v = rnd.nextLong()
          var j = 0
          while (j < 8) { a(8 + j) = (v >>> (8 * j)).toByte; j += 1 }
          kv(i) = a
          i += 1
        }
        val start = System.nanoTime()
        val batch = if (way == Ways.head) {
          val b = new WriteBatch()
          i = 0
          while (i < n) {
            b.put(java.util.Arrays.copyOf(kv(i), 16), java.util.Arrays.copyOfRange(kv(i), 16, 32))
            i += 1
          }
          b
        } else {
          val order = if (way == Ways(2)) KeyOrder.order(kv, new Array[Int](n), keyLengths, n)
          else Array.tabulate(n)(identity)
          val w = new WriteBatchBytes(n * WriteBatchBytes.putBytes(16, 16))
          order.foreach(k => w.put(kv(k), 0, 16, kv(k), 16, 16))
          w.toWriteBatch
        }
        try tier.write(batch)
        finally batch.close()
        elapsed += System.nanoTime() - start
        done += n
      }
      elapsed.toDouble / keys
    } finally tier.close()
  }
}
