package spillstore.bench

import java.io.File
import java.nio.file.Files

import scala.util.Random

import org.apache.commons.io.FileUtils
import org.rocksdb._

import spillstore.cold.{ColdMemory, ColdTier, WriteBatchBytes}
import spillstore.heap.KeyOrder

/**
 * What a read of an old key costs once a cold tier is large, against a RocksDB opened with the
 * options Spark's RocksDB provider uses by default (leveled compaction, 4 KB blocks, LZ4, a
 * 10-bit Bloom filter, its own 8 MB block cache): the batch of a state's oldest keys, which
 * every provider must read from RocksDB. Each way gets `keys` random keys (16-byte
 * UnsafeRow-like, 24-byte values) in key-ordered writes of `perWrite`, as evictions write
 * them; then `reads` random keys of the first quarter written are read back, 3 rounds.
 *
 *   bin/sbt "spillstore/Test/runMain spillstore.bench.ColdReadBench keys=6000000 reads=300000 memoryMb=77"
 */
object ColdReadBench {
  private trait Way extends AutoCloseable {
    def write(batch: WriteBatch): Unit
    def get(key: Array[Byte]): Array[Byte]
    def runs: String
  }

  def main(args: Array[String]): Unit = {
    val opts = BenchArgs.ints(args)
    val keys = opts.getOrElse("keys", 6000000)
    val reads = opts.getOrElse("reads", 300000)
    val perWrite = opts.getOrElse("perWrite", 7490)
    ColdMemory.configure(opts.getOrElse("memoryMb", 77).toLong << 20)
    println(s"ColdReadBench: $keys keys, reads of $reads old keys, 3 rounds")
    val root = Files.createTempDirectory("cold-read-bench").toFile
    try {
      Seq[(String, File => Way)]("spillstore cold tier" -> coldTier,
        "RocksDB, Spark's provider's options" -> sparkLike)
        .foreach { case (name, open) =>
          val way = open(new File(root, name.replace(' ', '-')))
          try {
            val written = fill(way, keys, perWrite)
            val ns = (1 to 3).map(_ => readBack(way, written, reads))
            println(f"| $name | ${ns.map(n => f"$n%.0f").mkString(", ")} | ${way.runs} |")
          } finally way.close()
        }
    } finally FileUtils.deleteQuietly(root)
  }

  private def coldTier(dir: File): Way = new Way {
    private val tier = new ColdTier(dir)
    def write(batch: WriteBatch): Unit = tier.write(batch)
    def get(key: Array[Byte]): Array[Byte] = tier.get(key)
    def runs: String = levels(tier.propertyString("rocksdb.levelstats"))
    def close(): Unit = tier.close()
  }

  private def sparkLike(dir: File): Way = new Way {
    private val cache = new LRUCache(8L << 20)
    private val filter = new BloomFilter(10.0, false)
    private val options = new Options().setCreateIfMissing(true)
      .setCompressionType(CompressionType.LZ4_COMPRESSION)
      .setTableFormatConfig(new BlockBasedTableConfig()
          .setBlockSize(4 << 10).setBlockCache(cache).setFilterPolicy(filter))
    private val writeOptions = new WriteOptions().setDisableWAL(true)
    private val natives = Seq(writeOptions, options, filter, cache)
    private val db =
      try RocksDB.open(options, dir.getPath)
      catch {
        case e: Throwable => natives.foreach(_.close()); throw e
      }
    def write(batch: WriteBatch): Unit = db.write(writeOptions, batch)
    def get(key: Array[Byte]): Array[Byte] = db.get(key)
    def runs: String = levels(db.getProperty("rocksdb.levelstats"))
    def close(): Unit = (db +: natives).foreach(_.close())
  }

  /** "files per level" of RocksDB's `levelstats` table, non-empty levels only. */
  private def levels(stats: String): String =
    stats.linesIterator.map(_.trim.split("\\s+")).collect {
      case Array(level, files, _) if level.forall(_.isDigit) && files != "0" => s"L$level: $files"
    }.mkString(", ")

  /** Writes `keys` random entries; returns their longs in the order written. */
  private def fill(way: Way, keys: Int, perWrite: Int): Array[Long] = {
    val rnd = new Random(42)
    val written = new Array[Long](keys)
    var done = 0
    while (done < keys) {
      val n = math.min(perWrite, keys - done)
      val kv = Array.tabulate(n) { i =>
        written(done + i) = rnd.nextLong(); entry(written(done + i), 40)
      }
      val w = new WriteBatchBytes(n * WriteBatchBytes.putBytes(16, 24))
      KeyOrder.order(kv, new Array[Int](n), Array.fill(n)(16), n)
        .foreach(k => w.put(kv(k), 0, 16, kv(k), 16, 24))
      val batch = w.toWriteBatch
      try way.write(batch)
      finally batch.close()
      done += n
    }
    written
  }

  /** Nanoseconds a read of `reads` random keys of the first quarter written. */
  private def readBack(way: Way, written: Array[Long], reads: Int): Double = {
    val rnd = new Random(7)
    val start = System.nanoTime()
    var i = 0
    while (i < reads) {
      val key = entry(written(rnd.nextInt(written.length / 4)), 16)
      if (way.get(key) == null) throw new IllegalStateException("ColdReadBench lost a key")
      i += 1
    }
    (System.nanoTime() - start).toDouble / reads
  }

  /**
   * The first `length` bytes of `v`'s entry: key bytes [0, 16) (8 zero bytes, then the long,
   * big-endian), value bytes [16, 40) (ones). 16 is the key alone.
   */
  private def entry(v: Long, length: Int): Array[Byte] = {
    val a = new Array[Byte](length)
    var j = 0
    while (j < 8) { a(8 + j) = (v >>> (8 * (7 - j))).toByte; j += 1 }
    java.util.Arrays.fill(a, 16, length, 1.toByte)
    a
  }
}
