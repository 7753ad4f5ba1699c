package org.apache.spark.sql.execution.streaming.state

import java.util.UUID

import scala.util.Random

import org.apache.hadoop.conf.Configuration
import org.scalactic.source.Position
import org.scalatest.Tag

import org.apache.spark.sql.execution.streaming.runtime.StreamExecution
import org.apache.spark.sql.internal.SQLConf
import org.apache.spark.sql.types.StructType

import spillstore.SpillStoreProvider

/**
 * Spark's own state store contract (StateStoreSuiteBase from Spark's test jar) run against
 * spillstore. It lives in Spark's package because the base suite's helpers are package-private.
 *
 * The test jar is Spark 4.2.0's (4.3.0's is not published where this build can reach), running
 * against Spark 4.3.0's classes; tests that cannot apply are listed in [[Excluded]] with why.
 */
class SpillStoreConformanceSuite extends StateStoreSuiteBase[SpillStoreProvider] {
  import SpillStoreConformanceSuite._

  override protected def test(testName: String, testTags: Tag*)(testFun: => Any)(
      implicit pos: Position): Unit = {
    Excluded.find { case (prefix, _) => testName.startsWith(prefix) } match {
      case Some((_, reason)) => super.ignore(s"$testName [excluded: $reason]", testTags: _*)(testFun)
      case None => super.test(testName, testTags: _*)(testFun)
    }
  }

  override def newStoreProvider(): SpillStoreProvider = provider(StateStoreId(StateStoreTestsHelper.newDir(), Random.nextInt(), 0))

  override def newStoreProvider(storeId: StateStoreId): SpillStoreProvider = provider(storeId)

  // spillstore has no column families yet; like Spark's HDFS suite, the flag is ignored and the
  // tests use the default column family only.
  override def newStoreProvider(storeId: StateStoreId, useColumnFamilies: Boolean): SpillStoreProvider =
    provider(storeId)

  override def newStoreProvider(storeId: StateStoreId, conf: Configuration): SpillStoreProvider =
    provider(storeId, hadoopConf = conf)

  override def newStoreProvider(minDeltasForSnapshot: Int, numOfVersToRetainInMemory: Int): SpillStoreProvider =
    provider(StateStoreId(StateStoreTestsHelper.newDir(), Random.nextInt(), 0),
      sqlConf = getDefaultSQLConf(minDeltasForSnapshot, numOfVersToRetainInMemory))

  override def newStoreProvider(keySchema: StructType, keyStateEncoderSpec: KeyStateEncoderSpec,
      useColumnFamilies: Boolean): SpillStoreProvider =
    provider(StateStoreId(StateStoreTestsHelper.newDir(), Random.nextInt(), 0), keySchema, keyStateEncoderSpec)

  override def newStoreProvider(useColumnFamilies: Boolean): SpillStoreProvider = newStoreProvider()

  override def newStoreProviderWithClonedConf(storeId: StateStoreId): SpillStoreProvider =
    provider(storeId, sqlConf = cloneSQLConf())

  override def newStoreProviderNoInit(): SpillStoreProvider = new SpillStoreProvider

  override def getLatestData(p: SpillStoreProvider, useColumnFamilies: Boolean): Set[((String, Int), Int)] = {
    val files = new java.io.File(p.stateStoreId.storeCheckpointLocation().toUri.getPath).list()
    val latest = Option(files).toSeq.flatten.filter(_.endsWith(".journal"))
      .flatMap(_.stripSuffix(".journal").toLongOption).maxOption.getOrElse(0L)
    getData(p, latest.toInt, useColumnFamilies)
  }

  override def getData(p: SpillStoreProvider, version: Int,
      useColumnFamilies: Boolean): Set[((String, Int), Int)] = {
    tryWithProviderResource(newStoreProvider(p.stateStoreId)) { reloaded =>
      val store = reloaded.getStore(version)
      try store.iterator().map(StateStoreTestsHelper.rowPairToDataPair).toSet
      finally if (!store.hasCommitted) store.abort()
    }
  }

  override def getDefaultSQLConf(minDeltasForSnapshot: Int, numOfVersToRetainInMemory: Int): SQLConf = {
    val sqlConf = new SQLConf()
    sqlConf.setConf(SQLConf.STATE_STORE_MIN_DELTAS_FOR_SNAPSHOT, minDeltasForSnapshot)
    sqlConf.setConf(SQLConf.MAX_BATCHES_TO_RETAIN_IN_MEMORY, numOfVersToRetainInMemory)
    sqlConf.setConf(SQLConf.MIN_BATCHES_TO_RETAIN, 2)
    sqlConf.setConf(SQLConf.STATE_STORE_COMPRESSION_CODEC, SQLConf.get.stateStoreCompressionCodec)
    sqlConf
  }

  private def provider(
      storeId: StateStoreId,
      keySchema: StructType = keySchema,
      encoderSpec: KeyStateEncoderSpec = null,
      sqlConf: SQLConf = getDefaultSQLConf(
        SQLConf.STATE_STORE_MIN_DELTAS_FOR_SNAPSHOT.defaultValue.get,
        SQLConf.MAX_BATCHES_TO_RETAIN_IN_MEMORY.defaultValue.get),
      hadoopConf: Configuration = new Configuration): SpillStoreProvider = {
    hadoopConf.set(StreamExecution.RUN_ID_KEY, UUID.randomUUID().toString)
    val p = new SpillStoreProvider
    p.init(storeId, keySchema, valueSchema,
      Option(encoderSpec).getOrElse(NoPrefixKeyStateEncoderSpec(keySchema)),
      useColumnFamilies = false, new StateStoreConf(sqlConf), hadoopConf,
      useMultipleValuesPerKey = false, stateSchemaProvider = None)
    p
  }
}

object SpillStoreConformanceSuite {
  /** Test-name prefix -> why the test does not apply to spillstore. */
  val Excluded: Seq[(String, String)] = Seq(
    "SPARK-18342: commit fails when rename fails" ->
      "asserts the built-in providers' class names (HDFSStateStore / RocksDBStateStore) in the message",
    "StateStore.get" ->
      ("asserts HDFSBackedStateStoreProvider's file name (1.delta) and error condition; also calls " +
        "StateStore.removeFromLoadedProvidersAndClose with its 4.2 signature (NoSuchMethodError on 4.3)"),
    "SPARK-34270: StateStoreMetrics.combine" -> SizeMetricBreak,
    "SPARK-35763: StateStoreCustomMetric withNewDesc" -> SizeMetricBreak,
    "SPARK-48997: maintenance threads with exceptions" ->
      ("exercises Spark's maintenance pool with the test jar's HDFS-based provider that fails in " +
        "doMaintenance, which 4.3's pool no longer calls; it never touches the provider under test")
  )

  private def SizeMetricBreak = "written against 4.2's StateStoreCustomSizeMetric(name, desc), " +
    "which 4.3 replaced by (name, desc, isSnapshot): NoSuchMethodError; spillstore's own metric " +
    "tests cover the 4.3 constructor"
}

/**
 * The same contract with a one-byte memory budget: every committed entry leaves the heap at
 * the next growth, so reads, iteration, prefix scans and reloads all go through the cold tier.
 */
class SpillStoreEverythingSpillsConformanceSuite extends SpillStoreConformanceSuite {
  override def getDefaultSQLConf(minDeltasForSnapshot: Int, numOfVersToRetainInMemory: Int): SQLConf = {
    val sqlConf = super.getDefaultSQLConf(minDeltasForSnapshot, numOfVersToRetainInMemory)
    sqlConf.setConfString("spark.sql.streaming.stateStore.spillstore.memoryBudget", "1")
    sqlConf
  }
}
