package spillstore.migrate

import java.io.{DataOutputStream, File, FileOutputStream}
import java.nio.charset.StandardCharsets
import java.nio.file.Files

import org.apache.hadoop.conf.Configuration
import org.apache.hadoop.fs.{FileSystem, Path}
import org.scalatest.funsuite.AnyFunSuite

import org.apache.spark.sql.types._

import spillstore.TempDirs.withTempDir
import spillstore.checkpoint.QueryCheckpoint.OffsetLogEntry
import spillstore.conf.SparkConfs

/**
 * What migrate reads from a checkpoint besides the state: the end-to-end tests cover the
 * files Spark 3.5 .. 4.3 write; these cover the older and odder ones (schema format v1, an
 * offset-log entry without a recorded provider, Spark 3.5's unrecorded prefix keys).
 */
class CheckpointLayoutSuite extends AnyFunSuite {
  private val conf = new Configuration
  private val key = new StructType().add("k", StringType)
  private val session = new StructType().add("k", StringType).add("sessionStartTime", TimestampType)
  private val value = new StructType().add("count", LongType)

  private def write(file: File, body: DataOutputStream => Unit): Unit = {
    file.getParentFile.mkdirs()
    val out = new DataOutputStream(new FileOutputStream(file))
    try body(out)
    finally out.close()
  }

  private def checkpoint(root: String, offsetMetadata: String, keySchema: StructType,
      schemaFormat: String = "v1"): CheckpointLayout = {
    new File(root, "offsets").mkdirs()
    Files.write(new File(root, "offsets/7").toPath,
      s"v1\n$offsetMetadata\n{\"logOffset\":3}\n-".getBytes(StandardCharsets.UTF_8))
    new File(root, "commits").mkdirs()
    new File(root, "state/0/1").mkdirs()
    write(new File(root, "state/0/0/_metadata/schema"),
      { out =>
        out.writeUTF(schemaFormat)
        if (schemaFormat == "v1") { out.writeUTF(keySchema.json); out.writeUTF(value.json) }
      })
    new CheckpointLayout(new Path(root), conf)
  }

  test("Spark 3.5 checkpoints: schema format v1, prefix keys inferred for session windows") {
    withTempDir("layout") { root =>
      val plain = checkpoint(root, """{"batchWatermarkMs":0,"conf":{}}""", key)
      val Seq(op) = plain.operators
      assert((op.id, op.partitions) == ((0L, Seq(0, 1))))
      assert(op.stores == Seq(CheckpointLayout.Store("default", key, value, 0)))
      assert(plain.recordedProvider.isEmpty)
    }
    withTempDir("layout") { root =>
      val Seq(op) = checkpoint(root, """{"conf":{}}""", session).operators
      assert(op.stores.head.prefixKeyColumns == 1)
    }
  }

  test("an unknown schema format is refused, naming the file") {
    withTempDir("layout") { root =>
      val e = intercept[MigrationRefusedException] {
        checkpoint(root, """{"conf":{}}""", key, schemaFormat = "v9").operators
      }
      assert(e.getMessage.contains("state/0/0/_metadata/schema: state schema format v9"))
    }
  }

  test("rewriting an offset-log entry changes only the confs given, adding them if missing") {
    withTempDir("layout") { root =>
      val fs = FileSystem.getLocal(conf)
      val layout = checkpoint(root,
        """{"batchWatermarkMs":5,"batchTimestampMs":6,"conf":{"a":"1"}}""", key)
      val entry = OffsetLogEntry.read(fs, layout.offsetFile(7))
      val rewritten = entry.withConf(Map(SparkConfs.ProviderClass -> "x.Provider"))
      assert(rewritten == "v1\n{\"batchWatermarkMs\":5,\"batchTimestampMs\":6,\"conf\":" +
        "{\"a\":\"1\",\"spark.sql.streaming.stateStore.providerClass\":\"x.Provider\"}}\n" +
        "{\"logOffset\":3}\n-")
      val noConf = OffsetLogEntry(entry.lines,
        CheckpointLayout.Json.readTree("""{"batchWatermarkMs":5}"""))
      assert(noConf.withConf(Map(SparkConfs.ProviderClass -> "y")).contains(
          "{\"batchWatermarkMs\":5,\"conf\":{\"spark.sql.streaming.stateStore.providerClass\":\"y\"}}"))
    }
  }

  test("a file that is not an offset-log entry is refused, naming it") {
    withTempDir("layout") { root =>
      val f = new File(root, "offsets/0")
      f.getParentFile.mkdirs()
      Files.write(f.toPath, "garbage".getBytes(StandardCharsets.UTF_8))
      val e = intercept[MigrationRefusedException] {
        CheckpointLayout.readEntry(FileSystem.getLocal(conf), new Path(f.getPath))
      }
      assert(e.getMessage.contains(s"${f.getPath} is not an offset-log entry"))
    }
  }

  private def commitEntry(root: String, text: String): CommitLogEntry = {
    val f = new File(root, "commits/3")
    f.getParentFile.mkdirs()
    Files.write(f.toPath, text.getBytes(StandardCharsets.UTF_8))
    CommitLogEntry.read(FileSystem.getLocal(conf), new Path(f.getPath))
  }

  test("commit-log entries: the ids per partition and store are read, and rewritten in either " +
    "checkpoint format keeping every other field; v3's sink metadata is refused in format 1") {
    withTempDir("layout") { root =>
      val v2 = commitEntry(root,
        "v2\n" +
          """{"nextBatchWatermarkMs":9,"stateUniqueIds":{"0":[["a","b"],["c","d"]]}}""")
      assert(v2.checkpointFormat == 2)
      assert(v2.stateIds(0) == Some(IndexedSeq(IndexedSeq("a", "b"), IndexedSeq("c", "d"))))
      assert(v2.stateIds(1).isEmpty)
      assert(v2.rewritten(1, Map.empty) == "v1\n{\"nextBatchWatermarkMs\":9}")
      val ids = Map(2L -> IndexedSeq(IndexedSeq("x"), IndexedSeq("y")))
      assert(v2.rewritten(2, ids) ==
        "v2\n{\"nextBatchWatermarkMs\":9,\"stateUniqueIds\":{\"2\":[[\"x\"],[\"y\"]]}}")
      val v1 = commitEntry(root, "v1\n{\"nextBatchWatermarkMs\":0}")
      assert(v1.checkpointFormat == 1 && v1.rewritten(2,
        Map.empty) == "v2\n{\"nextBatchWatermarkMs\":0}")
      val v3 = commitEntry(root, "v3\n{\"nextBatchWatermarkMs\":0,\"sinkMetadataMap\":{}}")
      assert(v3.rewritten(2, ids).startsWith("v3\n"))
      val e = intercept[MigrationRefusedException](v3.rewritten(1, Map.empty))
      assert(e.getMessage.contains("commits/3 is a commit-log entry of version v3"))
      val bad = intercept[MigrationRefusedException](commitEntry(root, "{}"))
      assert(bad.getMessage.contains("commits/3 is not a commit-log entry"))
    }
  }

  test("checkpoint ids follow Spark's store order: one store, or a join's four left before " +
    "right; other store sets are refused") {
    assert(CommitLogEntry.storeOrder(0, Seq("default")) == Seq("default"))
    val join = Seq("right-keyWithIndexToValue", "left-keyToNumValues", "right-keyToNumValues",
      "left-keyWithIndexToValue")
    assert(CommitLogEntry.storeOrder(0, join) == Seq("left-keyToNumValues",
      "left-keyWithIndexToValue", "right-keyToNumValues", "right-keyWithIndexToValue"))
    val e = intercept[MigrationRefusedException](CommitLogEntry.storeOrder(4, Seq("a", "b")))
    assert(e.getMessage.contains("operator 4 has the stores a, b"))
  }
}
