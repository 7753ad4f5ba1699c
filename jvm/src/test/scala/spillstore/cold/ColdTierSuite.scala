package spillstore.cold

import java.io.File
import java.nio.file.Files

import scala.jdk.CollectionConverters._

import org.apache.commons.io.FileUtils
import org.scalatest.funsuite.AnyFunSuite

/** A cold tier's own resources. */
class ColdTierSuite extends AnyFunSuite {
  test("a cold tier that fails to open frees its native objects: failing again and again " +
    "(as eviction retries on an unusable disk) does not grow native memory") {
    val root = Files.createTempDirectory("spillstore-cold-tier").toFile
    var child: Process = null
    try {
      val failures = 20000
      // A fixed, pre-touched heap: the child's resident memory grows only natively.
      val (c, grew) = ChildJvm.start("spillstore.cold.ColdTierOpenFailures",
        Seq(new File(root, "not-a-dir").getPath, failures.toString), "grew ",
        jvmOptions = Seq("-Xms128m", "-Xmx128m", "-XX:+AlwaysPreTouch"))
      child = c
      assert(grew.toLong < 8L * 1024 * 1024,
        s"resident memory grew by $grew bytes over $failures failed opens")
    } finally {
      ChildJvm.stop(child)
      FileUtils.deleteQuietly(root)
    }
  }

  /**
   * The options a new cold tier was opened with: the lines of the OPTIONS file RocksDB writes
   * at open, starting with one of `prefixes`.
   */
  private def openedWith(prefixes: String*): Set[String] = {
    val root = Files.createTempDirectory("spillstore-cold-tier").toFile
    val tier = ColdTier.create(root, "options")
    try {
      val options = tier.dir.listFiles().filter(_.getName.startsWith("OPTIONS-"))
      assert(options.length == 1, tier.dir.list().mkString(", "))
      Files.readAllLines(options.head.toPath).asScala.map(_.trim)
        .filter(l => prefixes.exists(l.startsWith)).toSet
    } finally {
      tier.close()
      FileUtils.deleteQuietly(root)
    }
  }

  test("a cold tier's directory holds state, not RocksDB's info log: only warnings are " +
    "logged and no stats are dumped, so an idle tier writes nothing") {
    assert(openedWith("info_log_level=", "stats_dump_period_sec=") ===
      Set("info_log_level=WARN_LEVEL", "stats_dump_period_sec=0"))
  }

  test("a cold tier compacts size-tiered: evicted keys come in no order, and leveled " +
    "compaction rewrote the whole tier each time") {
    assert(openedWith("compaction_style=", "level0_file_num_compaction_trigger=") ===
      Set("compaction_style=kCompactionStyleUniversal", "level0_file_num_compaction_trigger=8"))
  }
}
