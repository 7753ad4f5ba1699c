package spillstore.faults

import java.io.File
import java.nio.file.Files

import org.apache.commons.io.FileUtils
import org.scalatest.funsuite.AnyFunSuite

import org.apache.spark.SparkException
import org.apache.spark.sql.internal.SQLConf

import spillstore.SpillStoreProviderSuite._

/**
 * Resources failing under a running store: the checkpoint directory stops accepting files, or
 * the local directory for the cold tier cannot be used. (Tests run as root here, so "cannot
 * write" is made with a regular file where a directory must be, which no permission bypasses.)
 */
class ResourceFaultSuite extends AnyFunSuite {

  test("an unwritable checkpoint dir fails the commit naming the store; N-1 stays intact") {
    withProvider() { (p, dir) =>
      val expected = commitVersions(p, versions = 2, seed = 21)
      val d = new File(dir)
      val moved = new File(d.getParentFile, "moved-away")
      assert(d.renameTo(moved))
      Files.write(d.toPath, Array[Byte](1)) // the store's directory is now a file
      val s = p.getStore(2)
      s.put(key(1000), value(1))
      s.remove(key(expected(2).keys.head))
      val e = intercept[SparkException](s.commit())
      assert(e.getCondition === "CANNOT_WRITE_STATE_STORE.CANNOT_COMMIT", e.getMessage)
      assert(e.getMessage.contains("partitionId=0") && e.getMessage.contains("version=2"),
        e.getMessage)
      // The live state is back at version 2, in place.
      val again = p.getStore(2)
      assert(contents(again) === expected(2))
      again.abort()
      assert(d.delete() && moved.renameTo(d))
      assert(!new File(dir, "3.journal").exists())
      assert(readAll(dir, 2) === expected(2))
      // And the provider commits normally once the directory is back.
      val retry = p.getStore(2)
      retry.put(key(1000), value(1))
      assert(retry.commit() === 3)
      assert(readAll(dir, 3) === expected(2) + (1000L -> 1L))
    }
  }

  /** Each value of `key` fails provider init with a message naming it and saying `valid`. */
  private def rejectedAtInit(key: String, values: Seq[String], valid: String): Unit =
    for (value <- values) {
      val conf = new SQLConf
      conf.setConfString(s"spark.sql.streaming.stateStore.spillstore.$key", value)
      val e = intercept[IllegalArgumentException](withProvider(sqlConf = conf)((_, _) => ()))
      assert(e.getMessage.contains(s"spark.sql.streaming.stateStore.spillstore.$key=$value"),
        e.getMessage)
      assert(e.getMessage.contains(valid), e.getMessage)
    }

  test("a localDir that can never work is rejected at init, naming the key and what is valid") {
    val file = Files.createTempFile("not-a-dir", "").toFile
    try {
      rejectedAtInit("localDir", Seq("", "  ", new File(file, "cold").getPath, file.getPath),
        "Valid: a path to a directory")
    } finally file.delete()
  }

  test("a coldTierMemory that is not a size of at least 16m is rejected at init, naming the key") {
    rejectedAtInit("coldTierMemory", Seq("", "lots", "1m", "-5g"), "expected a size >= 16m")
  }

  test("an unusable local dir fails eviction naming the dir and the conf key; checkpoint intact") {
    // Valid at init; by the first eviction a regular file sits where the directory must go.
    val local = Files.createTempDirectory("local").toFile
    val bad = new File(local, "cold")
    val conf = new SQLConf
    conf.setConfString("spark.sql.streaming.stateStore.spillstore.localDir", bad.getPath)
    conf.setConfString("spark.sql.streaming.stateStore.spillstore.memoryBudget", "256k")
    withProvider(sqlConf = conf) { (p, dir) =>
      var expected = Map.empty[Long, Long]
      var failure: Throwable = null
      var v = 0L
      while (failure == null && v < 20) {
        if (v == 1) Files.write(bad.toPath, Array[Byte](1))
        val s = p.getStore(v)
        try {
          (v * 1000 until (v + 1) * 1000).foreach(i => s.put(key(i), value(i)))
          v = s.commit()
          expected = (0L until v * 1000).map(i => i -> i).toMap
        } catch { case e: Exception => failure = e; s.abort() }
      }
      assert(failure != null, "eviction never needed the local dir")
      val msg = failure.getMessage
      assert(msg.contains(bad.getPath), msg)
      assert(msg.contains("spark.sql.streaming.stateStore.spillstore.localDir"), msg)
      // Nothing committed is lost: every committed version reloads from the checkpoint.
      val good = new SQLConf
      withProvider(rootOf(dir), good) { (fresh, _) =>
        assert(contents(fresh.getReadStore(v)) === expected)
      }
      info(s"failed at version ${v + 1} with: $msg")
    }
    FileUtils.deleteQuietly(bad.getParentFile)
  }
}
