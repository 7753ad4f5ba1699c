package spillstore

import java.io.File
import java.nio.charset.StandardCharsets
import java.nio.file.Files

import scala.collection.mutable

import org.apache.commons.io.FileUtils
import org.scalatest.funsuite.AnyFunSuite

import org.apache.spark.sql.{DataFrame, SparkSession}
import org.apache.spark.sql.execution.streaming.runtime.MemoryStream
import org.apache.spark.sql.internal.SQLConf

/**
 * Checkpoint format v2 end to end on Spark 4.3: a streaming aggregation on spillstore with
 * `checkpointFormatVersion=2`, stopped and restarted mid-stream (the restarted run's providers
 * are new: they load the pairs Spark's commit log records), ends with the exact counts of its
 * input, and the commit log records, per partition, the id of the journal spillstore wrote.
 */
class CheckpointIdsStreamingSuite extends AnyFunSuite {
  private val Uuid = "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}".r

  test("an aggregation with checkpoint format v2, restarted mid-stream: exact counts, and " +
    "the commit log carries the ids of spillstore's journals") {
    val spark = SparkSession.builder().master("local[2]").appName("checkpoint-ids")
      .config("spark.ui.enabled", "false")
      .config(SQLConf.SHUFFLE_PARTITIONS.key, "2")
      .config(SQLConf.STATE_STORE_PROVIDER_CLASS.key, classOf[SpillStoreProvider].getName)
      .config("spark.sql.streaming.stateStore.checkpointFormatVersion", "2")
      // Snapshots and cleanup while it runs, so that loads after the restart use them.
      .config(SQLConf.STATE_STORE_MIN_DELTAS_FOR_SNAPSHOT.key, "2")
      .config(SQLConf.MIN_BATCHES_TO_RETAIN.key, "3")
      .config("spark.sql.streaming.stateStore.maintenanceInterval", "200ms")
      .getOrCreate()
    val root = Files.createTempDirectory("checkpoint-ids").toFile
    try {
      import spark.implicits._
      implicit val sqlContext = spark.sqlContext
      val input = MemoryStream[Int]
      val checkpoint = new File(root, "checkpoint").getPath
      var latest = Map.empty[Int, Long]
      def start() = input.toDF().groupBy(($"value" % 7).as("k")).count()
        .writeStream.outputMode("complete")
        .foreachBatch { (df: DataFrame, _: Long) =>
          latest = df.collect().map(r => r.getInt(0) -> r.getLong(1)).toMap
        }
        .option("checkpointLocation", checkpoint)
        .start()
      val sent = mutable.ArrayBuffer.empty[Int]
      def batches(q: org.apache.spark.sql.streaming.StreamingQuery, from: Int, to: Int): Unit =
        for (b <- from until to) {
          val data = (0 until 50).map(i => (b * 31 + i * 13) % 101)
          sent ++= data
          input.addData(data: _*)
          q.processAllAvailable()
        }
      val first = start()
      try batches(first, 0, 4)
      finally first.stop()
      val second = start()
      try batches(second, 4, 9)
      finally second.stop()

      assert(latest === sent.groupBy(_ % 7).map { case (k, xs) => k -> xs.size.toLong })
      val commits = new File(checkpoint, "commits").listFiles()
        .filter(_.getName.forall(_.isDigit)).sortBy(_.getName.toLong)
      // Spark keeps the newest minBatchesToRetain (3) entries of its logs, and one more.
      assert(commits.last.getName === "8")
      val last = new String(Files.readAllBytes(commits.last.toPath), StandardCharsets.UTF_8)
      assert(last.contains("stateUniqueIds"), last)
      val ids = Uuid.findAllIn(last.substring(last.indexOf("stateUniqueIds"))).toSeq
      assert(ids.size === 2 && ids.distinct.size === 2, s"one id per partition: $last")
      // Batch 8 committed version 9 of each partition's store under the id recorded.
      ids.zipWithIndex.foreach { case (id, partition) =>
        val journal = new File(checkpoint, s"state/0/$partition/9_$id.journal")
        assert(journal.exists(),
          s"$journal; the store holds " +
            new File(checkpoint, s"state/0/$partition").list().sorted.mkString(", "))
      }
    } finally {
      spark.stop()
      FileUtils.deleteQuietly(root)
    }
  }
}
