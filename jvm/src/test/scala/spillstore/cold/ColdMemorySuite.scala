package spillstore.cold

import java.nio.file.Files

import scala.collection.mutable.ArrayBuffer

import org.apache.commons.io.FileUtils
import org.scalatest.funsuite.AnyFunSuite

/** The cold tiers of a JVM share one native memory bound (ColdMemory). */
class ColdMemorySuite extends AnyFunSuite {

  test("memtables of many cold tiers, each idle after its writes, stay within the shared share") {
    val root = Files.createTempDirectory("spillstore-coldmemory").toFile
    val tiers = ArrayBuffer.empty[ColdTier]
    try {
      val memory = ColdMemory.shared
      val share = memory.bytes / 2
      // Each tier gets less than one memtable's worth, so no tier flushes on its own account,
      // and RocksDB's write-buffer manager only flushes the instance being written: what
      // keeps the total near the share is that a tier flushes when it goes idle, as a store
      // does when its batch ends.
      val perTier = memory.memtableBytes * 3 / 4
      val count = (4 * share / perTier).toInt + 1
      val value = new Array[Byte](1000)
      for (t <- 0 until count) {
        val tier = ColdTier.create(root, s"t$t")
        tiers += tier
        var written = 0L
        var k = 0
        while (written < perTier) {
          val batch = ColdTier.newBatch()
          try {
            (0 until 256).foreach { _ =>
              batch.put(java.nio.ByteBuffer.allocate(8).putLong(k).array(), value); k += 1
            }
            tier.write(batch)
          } finally batch.close()
          written += 256 * 1008
        }
        tier.idle()
      }
      assert(count * perTier > 3 * share, "the tiers together write several times the share")
      // Flushes run in the background: give them time, then the sum must be near the share.
      val deadline = System.nanoTime() + 30L * 1000 * 1000 * 1000
      def total = tiers.map(_.memtableBytes).sum
      while (total > memory.memtableBytes && System.nanoTime() < deadline) Thread.sleep(50)
      assert(total <= memory.memtableBytes,
        s"memtables of $count idle tiers hold $total bytes; the shared share is $share")
      assert(memory.cache.getUsage <= memory.bytes * 5 / 4,
        s"block cache usage ${memory.cache.getUsage} over its bound ${memory.bytes}")
    } finally {
      tiers.foreach(_.close())
      FileUtils.deleteQuietly(root)
    }
  }
}
