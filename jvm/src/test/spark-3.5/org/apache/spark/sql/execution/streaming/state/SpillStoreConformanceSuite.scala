package org.apache.spark.sql.execution.streaming.state

import java.util.UUID

import scala.util.Random

import org.apache.hadoop.conf.Configuration
import org.scalactic.source.Position
import org.scalatest.Tag

import org.apache.spark.sql.internal.SQLConf
import org.apache.spark.sql.types.StructType

import spillstore.{FreshExecutorScope, SpillStoreProvider}

/**
 * Spark 3.5's StateStoreSuiteBase (from the 3.5.9 test jar) against the 3.5 build. 3.5's
 * provider API has no column families and gives the number of prefix-key columns to `init`.
 */
class SpillStoreConformanceSuite
    extends StateStoreSuiteBase[SpillStoreProvider] with FreshExecutorScope {
  import SpillStoreConformanceSuite._

  /** Test-name prefix -> why the test does not apply to this suite's spillstore. */
  protected def spillstoreExclusions: Seq[(String, String)] = Excluded

  override protected def test(testName: String, testTags: Tag*)(testFun: => Any)(
      implicit pos: Position): Unit = {
    spillstoreExclusions.find { case (prefix, _) => testName.startsWith(prefix) } match {
      case Some((_, reason)) =>
        super.ignore(s"$testName [excluded: $reason]", testTags: _*)(testFun)
      case None => super.test(testName, testTags: _*)(testFun)
    }
  }

  // 3.5's per-codec tests register through super.test, past the override above.
  override def testWithAllCodec(name: String)(func: => Any): Unit =
    spillstoreExclusions.find { case (prefix, _) => name.startsWith(prefix) } match {
      case Some((_, reason)) => super.ignore(s"$name [excluded: $reason]")(func)
      case None => super.testWithAllCodec(name)(func)
    }

  override def newStoreProvider(): SpillStoreProvider =
    provider(StateStoreId(StateStoreTestsHelper.newDir(), Random.nextInt(), 0))

  override def newStoreProvider(storeId: StateStoreId): SpillStoreProvider = provider(storeId)

  override def newStoreProvider(minDeltasForSnapshot: Int, numOfVersToRetainInMemory: Int)
      : SpillStoreProvider =
    provider(StateStoreId(StateStoreTestsHelper.newDir(), Random.nextInt(), 0),
      sqlConf = getDefaultSQLConf(minDeltasForSnapshot, numOfVersToRetainInMemory))

  override def newStoreProvider(numPrefixCols: Int): SpillStoreProvider =
    provider(StateStoreId(StateStoreTestsHelper.newDir(), Random.nextInt(), 0),
      numPrefixCols = numPrefixCols)

  override def getLatestData(p: SpillStoreProvider): Set[((String, Int), Int)] = {
    val files = new java.io.File(p.stateStoreId.storeCheckpointLocation().toUri.getPath).list()
    val latest = Option(files).toSeq.flatten.filter(_.endsWith(".journal"))
      .map(_.stripSuffix(".journal").toLong).reduceOption(_ max _).getOrElse(0L)
    getData(p, latest.toInt)
  }

  override def getData(p: SpillStoreProvider, version: Int): Set[((String, Int), Int)] = {
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

  private def provider(
      storeId: StateStoreId,
      keySchema: StructType = keySchema,
      numPrefixCols: Int = 0,
      sqlConf: SQLConf = getDefaultSQLConf(
        SQLConf.STATE_STORE_MIN_DELTAS_FOR_SNAPSHOT.defaultValue.get,
        SQLConf.MAX_BATCHES_TO_RETAIN_IN_MEMORY.defaultValue.get),
      hadoopConf: Configuration = new Configuration): SpillStoreProvider = {
    hadoopConf.set("sql.streaming.runId", UUID.randomUUID().toString)
    val p = new SpillStoreProvider
    p.init(storeId, keySchema, valueSchema, numPrefixCols, new StateStoreConf(sqlConf), hadoopConf)
    p
  }
}

object SpillStoreConformanceSuite {
  /** Test-name prefix -> why the test does not apply to spillstore on Spark 3.5. */
  val Excluded: Seq[(String, String)] = Seq(
    "SPARK-18342: commit fails when rename fails" ->
      "asserts the built-in providers' class names (HDFSStateStore / RocksDBStateStore) in the message",
    "StateStore.get" ->
      "asserts HDFSBackedStateStoreProvider's file name (1.delta) and its error message",
    "two concurrent StateStores - one for read-only and one for read-write" ->
      ("opens a read store and a write store of one provider outside any task; spillstore " +
        "shares the live state between them only within one task attempt, and outside a task the " +
        "newer store takes over. What the test checks, in one task as 3.5's aggregation opens " +
        "them: OwnershipSuite's 'a read store then a write store opened by one task...', and " +
        "every aggregation of this line's end-to-end tests")
  )

  /** Why Spark's memory test cannot apply when every entry spills. */
  val MemoryWithEverythingSpilled: (String, String) = "reports memory usage" ->
    ("asserts that memoryUsedBytes grows with one committed entry; spillstore reports its heap " +
      "there, and with a one-byte budget the entry leaves the heap at the commit (its cold-key " +
      "filter, whose first layer made the heap grow before, gets no share of such a budget)")
}

/** The same contract with a one-byte memory budget: everything goes through the cold tier. */
class SpillStoreEverythingSpillsConformanceSuite extends SpillStoreConformanceSuite {
  override protected def spillstoreExclusions: Seq[(String, String)] =
    super.spillstoreExclusions :+ SpillStoreConformanceSuite.MemoryWithEverythingSpilled

  override def getDefaultSQLConf(minDeltasForSnapshot: Int, numOfVersToRetainInMemory: Int)
      : SQLConf = {
    val sqlConf = super.getDefaultSQLConf(minDeltasForSnapshot, numOfVersToRetainInMemory)
    sqlConf.setConfString("spark.sql.streaming.stateStore.spillstore.memoryBudget", "1")
    sqlConf
  }
}
