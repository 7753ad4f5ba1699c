package org.apache.spark.sql.execution.streaming.state

import java.util.UUID

import scala.util.Random

import org.apache.hadoop.conf.Configuration

import org.apache.spark.sql.internal.SQLConf
import org.apache.spark.sql.types.StructType

import spillstore.{FreshExecutorScope, SpillStoreProvider}

/**
 * Spark's own state store contract (StateStoreSuiteBase from Spark's test jar) run against
 * spillstore. It lives in Spark's package because the base suite's helpers are package-private.
 *
 * Every 4.x line runs it from its own test jar (4.3 from 4.2's: 4.3.0's is not published where
 * this build can reach) against its own build; what differs per line (4.1+'s extra factory
 * methods, the tests that cannot apply and why: `spillstoreExclusions`) is that line's
 * [[SpillStoreConformanceLine]] (jvm/src/test/spark-<line>).
 */
class SpillStoreConformanceSuite
    extends StateStoreSuiteBase[SpillStoreProvider] with SpillStoreConformanceLine
    with SpillStoreExcludedTests with FreshExecutorScope {

  // As Spark's own StateStoreSuite and RocksDBStateStoreSuite do (before/after): the base
  // suite's tests that call StateStore.get under a SparkContext (4.1+: "... with release()",
  // "getWriteStore ...") start Spark's maintenance task, which outlives their SparkContext and
  // keeps the interval it started with (60 s); SPARK-48997's test, which needs 100 ms, would
  // then find it running and not start its own.
  override def beforeEach(): Unit = {
    super.beforeEach()
    StateStore.stop()
  }

  override def afterEach(): Unit =
    try StateStore.stop()
    finally super.afterEach()

  override def newStoreProvider(): SpillStoreProvider =
    provider(StateStoreId(StateStoreTestsHelper.newDir(), Random.nextInt(), 0))

  override def newStoreProvider(storeId: StateStoreId): SpillStoreProvider = provider(storeId)

  // spillstore has no column families yet; like Spark's HDFS suite, the flag is ignored and the
  // tests use the default column family only.
  override def newStoreProvider(storeId: StateStoreId, useColumnFamilies: Boolean)
      : SpillStoreProvider =
    provider(storeId)

  override def newStoreProvider(storeId: StateStoreId, conf: Configuration): SpillStoreProvider =
    provider(storeId, hadoopConf = conf)

  override def newStoreProvider(minDeltasForSnapshot: Int, numOfVersToRetainInMemory: Int)
      : SpillStoreProvider =
    provider(StateStoreId(StateStoreTestsHelper.newDir(), Random.nextInt(), 0),
      sqlConf = getDefaultSQLConf(minDeltasForSnapshot, numOfVersToRetainInMemory))

  override def newStoreProvider(keySchema: StructType, keyStateEncoderSpec: KeyStateEncoderSpec,
      useColumnFamilies: Boolean): SpillStoreProvider =
    provider(StateStoreId(StateStoreTestsHelper.newDir(), Random.nextInt(), 0), keySchema,
      keyStateEncoderSpec)

  override def newStoreProvider(useColumnFamilies: Boolean): SpillStoreProvider = newStoreProvider()

  override def getLatestData(p: SpillStoreProvider, useColumnFamilies: Boolean)
      : Set[((String, Int), Int)] = {
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

  override def getDefaultSQLConf(minDeltasForSnapshot: Int, numOfVersToRetainInMemory: Int)
      : SQLConf = {
    val sqlConf = new SQLConf()
    sqlConf.setConf(SQLConf.STATE_STORE_MIN_DELTAS_FOR_SNAPSHOT, minDeltasForSnapshot)
    sqlConf.setConf(SQLConf.MAX_BATCHES_TO_RETAIN_IN_MEMORY, numOfVersToRetainInMemory)
    sqlConf.setConf(SQLConf.MIN_BATCHES_TO_RETAIN, 2)
    sqlConf.setConf(SQLConf.STATE_STORE_COMPRESSION_CODEC, SQLConf.get.stateStoreCompressionCodec)
    sqlConf
  }

  private[state] def provider(
      storeId: StateStoreId,
      keySchema: StructType = keySchema,
      encoderSpec: KeyStateEncoderSpec = null,
      sqlConf: SQLConf = getDefaultSQLConf(
        SQLConf.STATE_STORE_MIN_DELTAS_FOR_SNAPSHOT.defaultValue.get,
        SQLConf.MAX_BATCHES_TO_RETAIN_IN_MEMORY.defaultValue.get),
      hadoopConf: Configuration = new Configuration): SpillStoreProvider = {
    hadoopConf.set("sql.streaming.runId", UUID.randomUUID().toString) // StreamExecution.RUN_ID_KEY
    val p = new SpillStoreProvider
    p.init(storeId, keySchema, valueSchema,
      Option(encoderSpec).getOrElse(NoPrefixKeyStateEncoderSpec(keySchema)),
      useColumnFamilies = false, new StateStoreConf(sqlConf), hadoopConf,
      useMultipleValuesPerKey = false, stateSchemaProvider = None)
    p
  }
}

/**
 * The same contract with a one-byte memory budget: every committed entry leaves the heap at
 * the next growth, so reads, iteration, prefix scans and reloads all go through the cold tier.
 */
class SpillStoreEverythingSpillsConformanceSuite extends SpillStoreConformanceSuite {
  override def spillstoreExclusions: Seq[(String, String)] =
    super.spillstoreExclusions :+ SpillStoreConformanceExclusions.memoryWithEverythingSpilled

  override def getDefaultSQLConf(minDeltasForSnapshot: Int, numOfVersToRetainInMemory: Int)
      : SQLConf = {
    val sqlConf = super.getDefaultSQLConf(minDeltasForSnapshot, numOfVersToRetainInMemory)
    sqlConf.setConfString("spark.sql.streaming.stateStore.spillstore.memoryBudget", "1")
    sqlConf
  }
}
