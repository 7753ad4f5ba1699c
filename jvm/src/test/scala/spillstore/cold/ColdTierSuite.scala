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

  test("a cold tier's directory holds state, not RocksDB's info log: only warnings are " +
    "logged and no stats are dumped, so an idle tier writes nothing") {
    val root = Files.createTempDirectory("spillstore-cold-tier").toFile
    val tier = ColdTier.create(root, "log-level")
    try {
      // The OPTIONS file is the options RocksDB opened the tier with, written at open.
      val options = tier.dir.listFiles().filter(_.getName.startsWith("OPTIONS-"))
      assert(options.length == 1, tier.dir.list().mkString(", "))
      val lines = Files.readAllLines(options.head.toPath).asScala.map(_.trim).toSet
      assert(lines("info_log_level=WARN_LEVEL") && lines("stats_dump_period_sec=0"),
        lines.filter(l => l.startsWith("info_log") || l.startsWith("stats_dump")))
    } finally {
      tier.close()
      FileUtils.deleteQuietly(root)
    }
  }

  test("a cold tier compacts size-tiered: evicted keys come in no order, and leveled " +
    "compaction rewrote the whole tier each time") {
    val root = Files.createTempDirectory("spillstore-cold-tier").toFile
    val tier = ColdTier.create(root, "compaction")
    try {
      val options = tier.dir.listFiles().filter(_.getName.startsWith("OPTIONS-"))
      val lines = Files.readAllLines(options.head.toPath).asScala.map(_.trim).toSet
      assert(lines("compaction_style=kCompactionStyleUniversal") &&
        lines("level0_file_num_compaction_trigger=8"),
        lines.filter(l => l.startsWith("compaction_style") || l.startsWith("level0_file_num")))
    } finally {
      tier.close()
      FileUtils.deleteQuietly(root)
    }
  }
}
