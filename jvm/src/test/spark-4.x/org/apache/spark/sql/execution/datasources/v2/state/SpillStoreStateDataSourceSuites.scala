package org.apache.spark.sql.execution.datasources.v2.state

import java.io.File

import org.apache.hadoop.conf.Configuration

import org.apache.spark.sql.{DataFrame, Row}
import org.apache.spark.sql.execution.streaming.state.{
  NoPrefixKeyStateEncoderSpec, SpillStoreExcludedTests, StateStoreConf, StateStoreId
}
import org.apache.spark.sql.functions.col
import org.apache.spark.sql.internal.SQLConf
import org.apache.spark.sql.streaming.OutputMode
import org.apache.spark.sql.types.{IntegerType, StructField, StructType}

import spillstore.SpillStoreProvider

/**
 * Spark's own state data source suites (each line's test jar) against spillstore: the change
 * feed (`readChangeFeed`) and the reads, `snapshotStartBatchId` included, as on the HDFS
 * provider. They live in Spark's package for the base suites' package-private helpers.
 */
class SpillStoreStateDataSourceChangeDataReaderSuite
    extends StateDataSourceChangeDataReaderSuite with SpillStoreExcludedTests {
  import SpillStoreStateDataSourceLine.memoryStream
  import testImplicits._

  // The HDFS provider logs every put of a batch; spillstore's journal keeps each key's last
  // change of the batch (a join row put unmatched, then matched, is one record).
  override def spillstoreExclusions: Seq[(String, String)] = Seq(
    "read stream-stream join state change feed" ->
      ("expects each put of a batch, spillstore journals each key's last change: the squashed " +
        "variant below checks it"))

  override protected def newStateStoreProvider(): SpillStoreProvider = new SpillStoreProvider

  override def beforeAll(): Unit = {
    super.beforeAll()
    spark.conf.set(SQLConf.STATE_STORE_PROVIDER_CLASS.key, classOf[SpillStoreProvider].getName)
  }

  test("spillstore: stream-stream join state change feed, one record per key and batch") {
    withTempDir { tempDir =>
      val input = memoryStream[(Int, Long)]
      val left = input.toDF().select(col("_1").as("leftKey"), col("_2").as("leftValue"))
      val right = input.toDF().select((col("_1") * 2).as("rightKey"), col("_2").as("rightValue"))
      testStream(left.join(right).where("leftKey == rightKey"))(
        StartStream(checkpointLocation = tempDir.getAbsolutePath),
        AddData(input, (1, 1L), (2, 2L)),
        ProcessAllAvailable(),
        AddData(input, (3, 3L), (4, 4L)),
        ProcessAllAvailable())

      def changes(store: String): DataFrame = spark.read.format("statestore")
        .option(StateSourceOptions.STORE_NAME, store)
        .option(StateSourceOptions.READ_CHANGE_FEED, value = true)
        .option(StateSourceOptions.CHANGE_START_BATCH_ID, 0)
        .option(StateSourceOptions.CHANGE_END_BATCH_ID, 1)
        .load(tempDir.getAbsolutePath)

      // As Spark's HDFS expectation, but for left key 2 of batch 0 (stored unmatched, then
      // matched by right key 2 in the same batch) only its final value.
      checkAnswer(changes("left-keyWithIndexToValue"),
        Seq(
          Row(0L, "update", Row(1, 0L), Row(1, 1L, false), 3),
          Row(0L, "update", Row(2, 0L), Row(2, 2L, true), 4),
          Row(1L, "update", Row(3, 0L), Row(3, 3L, false), 1),
          Row(1L, "update", Row(4, 0L), Row(4, 4L, true), 2)))
      checkAnswer(changes("left-keyToNumValues"),
        Seq(
          Row(0L, "update", Row(1), Row(1L), 3),
          Row(0L, "update", Row(2), Row(1L), 4),
          Row(1L, "update", Row(3), Row(1L), 1),
          Row(1L, "update", Row(4), Row(1L), 2)))
    }
  }

}

/**
 * StateDataSourceReadSuite: every normal read of the base suite, and the tests Spark's HDFS
 * subclass adds for `snapshotStartBatchId`; the latter's golden checkpoints were written by
 * Spark's providers (and are read by those, as a checkpoint keeps its provider), so here the
 * same queries write spillstore checkpoints first.
 */
class SpillStoreStateDataSourceReadSuite
    extends StateDataSourceReadSuite with SpillStoreExcludedTests {
  import SpillStoreStateDataSourceLine.memoryStream
  import SpillStoreStateDataSourceReadSuite.ColumnFamilies
  import testImplicits._

  override protected def newStateStoreProvider(): SpillStoreProvider = new SpillStoreProvider

  override def spillstoreExclusions: Seq[(String, String)] = Seq(
    "stream-stream join, state ver 3" -> ColumnFamilies, // 4.1+
    "stream-stream join, state ver 4" -> ColumnFamilies) // 4.2+

  override def beforeAll(): Unit = {
    super.beforeAll()
    spark.conf.set(SQLConf.STATE_STORE_PROVIDER_CLASS.key, classOf[SpillStoreProvider].getName)
    // Snapshots at versions 2, 4, ... when maintenance follows every commit, as the HDFS suite
    // has them (spillstore snapshots once this many journals follow the newest snapshot).
    spark.conf.set(SQLConf.STATE_STORE_MIN_DELTAS_FOR_SNAPSHOT.key, 2)
  }

  test("ERROR: snapshot of version not found") {
    testSnapshotNotFound()
  }

  test("provider.replayReadStoreFromSnapshot(snapshotVersion, endVersion)") {
    testGetReadStoreWithStartVersion()
  }

  test("option snapshotPartitionId") {
    testSnapshotPartitionId()
  }

  /**
   * Runs four batches of a query on a spillstore checkpoint; right after batch 1, maintenance
   * of a provider on each of `stores` (partition, store name), which loads version 2 first,
   * snapshots it from the files. Then `check` compares reads from
   * that snapshot with normal reads. (Waiting for the query's own maintenance instead is timing:
   * the executor's maintenance task keeps the interval of the first query that started it.)
   */
  private def withSnapshotAtBatch1(run: (String, () => Unit) => Unit,
      stores: Seq[(Int, String)])(check: String => Unit): Unit = {
    // Without no-data batches (a join's watermark makes them), batch N commits version N + 1.
    withTempDir { dir =>
      withSQLConf(SQLConf.STREAMING_NO_DATA_MICRO_BATCHES_ENABLED.key -> "false") {
        val checkpoint = dir.getCanonicalPath
        run(checkpoint,
          () =>
            stores.foreach { case (partition, storeName) =>
              val storeId =
                StateStoreId(new File(checkpoint, "state").getPath, 0, partition, storeName)
              val conf = new SQLConf
              conf.setConf(SQLConf.STATE_STORE_MIN_DELTAS_FOR_SNAPSHOT, 1)
              val schema = StructType(Seq(StructField("unused", IntegerType)))
              val provider = new SpillStoreProvider
              provider.init(storeId, schema, schema, NoPrefixKeyStateEncoderSpec(schema),
                useColumnFamilies = false, new StateStoreConf(conf), new Configuration)
              // As on an executor, the provider has loaded the version (only a version a provider
              // committed or loaded is ever snapshotted), then maintenance runs.
              try {
                provider.getReadStore(2).abort()
                provider.doMaintenance()
              } finally provider.close()
              val snapshot = new File(storeId.storeCheckpointLocation().toUri.getPath, "2.snapshot")
              assert(snapshot.exists(), s"$snapshot was not written")
            })
        check(checkpoint)
      }
    }
  }

  /** Per partition: the state read from snapshot 2 (batch 1) and journals = the state read. */
  private def snapshotReadEqualsRead(checkpoint: String, partitions: Seq[Int],
      options: Map[String, String] = Map.empty): Unit = {
    val read = spark.read.format("statestore").options(options).load(checkpoint)
    assert(read.count() > 0, "the query has state to compare")
    partitions.foreach { partition =>
      val fromSnapshot = spark.read.format("statestore").options(options)
        .option(StateSourceOptions.SNAPSHOT_PARTITION_ID, partition)
        .option(StateSourceOptions.SNAPSHOT_START_BATCH_ID, 1)
        .load(checkpoint)
      checkAnswer(fromSnapshot, read.filter(col("partition_id") === partition))
    }
  }

  private def partitions: Seq[Int] = 0 until spark.sessionState.conf.numShufflePartitions
  private def defaultStores: Seq[(Int, String)] =
    partitions.map(_ -> StateStoreId.DEFAULT_STORE_NAME)

  private def fourBatches(query: DataFrame, input: Seq[Seq[(Int, Long)]],
      addData: Seq[(Int, Long)] => Unit, mode: OutputMode)(
      checkpoint: String, snapshotVersion2: () => Unit): Unit = {
    val actions: Seq[StreamAction] = input.zipWithIndex.flatMap { case (rows, batch) =>
      Seq(Execute(s"add batch $batch")(_ => addData(rows)), ProcessAllAvailable()) ++
      (if (batch == 1) Seq(Execute("snapshot version 2")(_ => snapshotVersion2()))
       else Nil)
    }
    testStream(query, mode)(
      StartStream(checkpointLocation = checkpoint) +: actions :+ StopStream: _*)
  }

  private def batchesOfThree(from: Int, batches: Int): Seq[Seq[(Int, Long)]] =
    (0 until batches).map(b => (from + b to from + b + 2).map(i => (i, i.toLong)))

  test("snapshotStartBatchId on limit state") {
    val input = memoryStream[(Int, Long)]
    withSnapshotAtBatch1(fourBatches(input.toDF().limit(10),
        (0 until 4).map(b => (3 * b + 1 to 3 * b + 3).map(i => (i, i.toLong))),
        rows => input.addData(rows), OutputMode.Append),
      Seq(0 -> StateStoreId.DEFAULT_STORE_NAME)) { checkpoint =>
      snapshotReadEqualsRead(checkpoint, Seq(0)) // a global limit keeps its state in partition 0
    }
  }

  test("snapshotStartBatchId on aggregation state") {
    val input = memoryStream[(Int, Long)]
    withSnapshotAtBatch1(fourBatches(input.toDF().groupBy("_1").count(), batchesOfThree(1, 4),
        rows => input.addData(rows), OutputMode.Update), defaultStores) { checkpoint =>
      snapshotReadEqualsRead(checkpoint, partitions)
    }
  }

  test("snapshotStartBatchId on deduplication state") {
    val input = memoryStream[(Int, Long)]
    withSnapshotAtBatch1(fourBatches(input.toDF().dropDuplicates("_1"), batchesOfThree(1, 4),
        rows => input.addData(rows), OutputMode.Append), defaultStores) { checkpoint =>
      snapshotReadEqualsRead(checkpoint, partitions)
    }
  }

  test("snapshotStartBatchId on join state") {
    for (stateVersion <- Seq(1, 2)) {
      withSQLConf(SQLConf.STREAMING_JOIN_STATE_FORMAT_VERSION.key -> stateVersion.toString) {
        val input = memoryStream[(Int, Long)]
        val left =
          for (p <- partitions; s <- Seq("left-keyToNumValues", "left-keyWithIndexToValue"))
            yield p -> s
        withSnapshotAtBatch1(fourBatches(getStreamStreamJoinQuery(input),
            (0 until 4).map(b => (5 * b + 1 to 5 * b + 5).map(i => (i, i.toLong))),
            rows => input.addData(rows), OutputMode.Append), left) { checkpoint =>
          snapshotReadEqualsRead(checkpoint, partitions,
            Map(StateSourceOptions.JOIN_SIDE -> "left"))
        }
      }
    }
  }
}

object SpillStoreStateDataSourceReadSuite {
  private val ColumnFamilies = "join state format 3 and later keep the join's state in column " +
    "families, which spillstore refuses at init"
}
