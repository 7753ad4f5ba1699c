package spillstore.cold

import java.io.File
import java.nio.file.Files

import scala.io.Source

import org.rocksdb.RocksDBException

/**
 * The child JVM of ColdTierSuite's leak test: fails to open a cold tier (its directory is a
 * file) `n` times after a warm-up, and prints `grew <bytes>`: how much its resident memory
 * grew over those failures. The heap is pre-touched at a fixed size, so what grows is native.
 *
 * Usage: ColdTierOpenFailures <scratch file> <n>
 */
object ColdTierOpenFailures {
  private def residentBytes: Long = {
    val status = Source.fromFile("/proc/self/status")
    try status.getLines().find(_.startsWith("VmRSS:")).get.split("\\s+")(1).toLong * 1024
    finally status.close()
  }

  private def failToOpen(notADir: File, n: Int): Unit = (0 until n).foreach { _ =>
    try {
      new ColdTier(notADir).close()
      sys.error(s"a cold tier opened in $notADir, a file")
    } catch { case _: RocksDBException => }
  }

  def main(args: Array[String]): Unit = {
    val notADir = new File(args(0))
    Files.write(notADir.toPath, Array[Byte](1))
    RocksDBLibrary.load()
    failToOpen(notADir, 2000)
    System.gc()
    val before = residentBytes
    failToOpen(notADir, args(1).toInt)
    System.gc()
    println(s"grew ${residentBytes - before}")
    System.out.flush()
  }
}
