package spillstore

import java.io.File
import java.nio.file.Files
import java.util.concurrent.ConcurrentLinkedQueue

import scala.jdk.CollectionConverters._

import org.apache.commons.io.FileUtils
import org.scalatest.BeforeAndAfterAll
import org.scalatest.funsuite.AnyFunSuite

import org.apache.spark.SparkThrowable
import org.apache.spark.sql.{DataFrame, ForeachWriter, Row, SparkSession}
import org.apache.spark.sql.execution.streaming.sources.LowLatencyMemoryStream
import org.apache.spark.sql.streaming.{StreamingQuery, Trigger}

/**
 * Spark 4.3's real-time mode (`Trigger.RealTime`) on spillstore, through Spark's low-latency
 * memory source (the Kafka connector for 4.3.0 is not published where this project's builds
 * resolve). Spark refuses a query that names any provider but RocksDB's at `start()`
 * (`StreamingQueryManager.throwIfConfsAreRealTimeModeIncompatible`, SPARK-58659), before it
 * reads the checkpoint; a restarted query then takes the provider its offset log records
 * (`OffsetSeqMetadata.setSessionConf`). So a query started on spillstore in micro-batch mode
 * with checkpoint format v2, and restarted in real-time mode with no provider named, runs on
 * spillstore (docs/checkpoint-v2.md, "Real-time mode").
 *
 * Each scenario runs the same query and input on spillstore that way and on RocksDB's
 * provider: a micro-batch first batch, a real-time run stopped mid-stream (its batch running),
 * and a second real-time run. Results are compared with each other and with a model; which
 * provider wrote the state is checked from its files.
 */
class RealTimeModeSuite extends AnyFunSuite with BeforeAndAfterAll {
  import RealTimeModeSuite._

  private var spark: SparkSession = _
  private val root = Files.createTempDirectory("spillstore-rtm").toFile

  override def beforeAll(): Unit = {
    // Real-time mode runs every task of a batch at once: the source's and the shuffle's.
    spark = SparkSession.builder().master("local[4]").appName("spillstore-rtm")
      .config("spark.ui.enabled", "false")
      .config("spark.sql.shuffle.partitions", "2")
      .config("spark.sql.streaming.realTimeMode.minBatchDuration", "1000")
      .getOrCreate()
  }

  override def afterAll(): Unit = {
    try if (spark != null) spark.stop()
    finally FileUtils.deleteQuietly(root)
  }

  test("naming spillstore in real-time mode is refused by Spark at start, naming the conf") {
    implicit val enc = org.apache.spark.sql.Encoders.STRING
    val input = LowLatencyMemoryStream[String](spark, 1)
    withConfs(ProviderKey -> Spill) {
      val e = intercept[Exception](start(input.toDF().groupBy("value").count(),
          new File(root, "refused"), Trigger.RealTime("3 seconds")))
      assert(e.isInstanceOf[SparkThrowable] &&
          e.asInstanceOf[SparkThrowable].getCondition ==
          "STREAMING_REAL_TIME_MODE.SQL_CONFIGURATION_NOT_SUPPORTED", e)
      assert(e.getMessage.contains(ProviderKey), e.getMessage)
    }
  }

  test("an aggregation restarted into real-time mode runs on spillstore, spilling all its " +
    "state, across a restart mid-stream: exact, as on RocksDB's provider, with spillstore's " +
    "metrics in progress") {
    val (spill, progress) = scenario(Spillstore(budget = Some("1")), Aggregation)
    val (rocks, _) = scenario(RocksDB, Aggregation)
    assert(spill === Aggregation.model)
    assert(rocks === Aggregation.model)
    val metrics = progress.flatMap(_.stateOperators.flatMap(_.customMetrics.asScala))
    def total(name: String) = metrics.collect { case (`name`, v) => v.longValue }.sum
    assert(metrics.exists(_._1 == "spillstoreCacheHitPermille"), metrics)
    assert(total("spillstoreEvictions") > 0 && total("spillstoreColdLoads") > 0, metrics)
  }

  test("deduplication restarted into real-time mode runs on spillstore, across a restart " +
    "mid-stream: exact, as on RocksDB's provider") {
    val (spill, _) = scenario(Spillstore(budget = None), Dedup)
    val (rocks, _) = scenario(RocksDB, Dedup)
    assert(spill === Dedup.model)
    assert(rocks === Dedup.model)
  }

  test("a real-time aggregation on RocksDB's provider (format v2), stopped mid-stream and " +
    "migrated onto spillstore, restarts in real-time mode on spillstore: exact") {
    val (moved, progress) = scenario(RocksDB, Aggregation, switchTo = Some(Spillstore(None)))
    assert(moved === Aggregation.model)
    val metrics = progress.flatMap(_.stateOperators.flatMap(_.customMetrics.asScala.keys))
    assert(metrics.contains("spillstoreCacheHitPermille"), metrics)
  }

  /**
   * `query` over `Rounds` on `provider`: round 0 in micro-batch mode, rounds 1 and 2 in a
   * real-time run stopped while its batch runs, round 3 in another real-time run, on
   * `switchTo` if given (migrated in between by `Migration.migrate`, which `python -m
   * spillstore migrate` runs). Returns what the sink holds last for each key, and the last
   * real-time run's progress.
   */
  private def scenario(provider: Provider, query: Query, switchTo: Option[Provider] = None)
      : (Map[String, Long], Seq[org.apache.spark.sql.streaming.StreamingQueryProgress]) = {
    implicit val enc = org.apache.spark.sql.Encoders.STRING
    val ckpt = new File(root, s"${query.name}-${provider.name}${switchTo.fold("")("-" + _.name)}")
    val input = LowLatencyMemoryStream[String](spark, 1)
    val df = query.build(input.toDF())
    rows.clear()
    var sent = Seq.empty[String]
    def send(round: Int): Unit = {
      sent ++= Rounds(round)
      input.addData(Rounds(round))
    }
    def awaitOutput(q: StreamingQuery): Unit = waitFor(s"${query.name} output", q) {
      emitted() == query.modelOf(sent)
    }
    withConfs(provider.confs: _*) {
      send(0)
      val first = start(df, ckpt, Trigger.ProcessingTime(0))
      try first.processAllAvailable()
      finally first.stop()
    }
    val progress = Seq.newBuilder[org.apache.spark.sql.streaming.StreamingQueryProgress]
    withConfs(provider.realTimeConfs: _*) {
      val second = start(df, ckpt, Trigger.RealTime("3 seconds"))
      try {
        send(1)
        awaitOutput(second)
        waitFor("a real-time commit", second)(new File(ckpt, "commits/1").exists)
        send(2)
        awaitOutput(second)
      } finally second.stop() // mid-stream: its batch was running
    }
    val last = switchTo.getOrElse(provider)
    switchTo.foreach(to =>
      spillstore.migrate.Migration.migrate(spark, ckpt.getPath, to.name,
        batch = -1, idleSeconds = 0, printProgress = false, checkpointFormat = 0))
    withConfs(last.realTimeConfs: _*) {
      val third = start(df, ckpt, Trigger.RealTime("3 seconds"))
      try {
        send(3)
        awaitOutput(third)
        // Progress comes after a batch's commit: wait for it, not for the commit log.
        waitFor("the restarted run's progress", third)(
          third.recentProgress.exists(_.stateOperators.nonEmpty))
        progress ++= third.recentProgress
      } finally third.stop()
    }
    // migrate starts the new lineage on an empty base snapshot, named as in format v1 (it
    // belongs to no commit attempt); the migrated state is the journal above it.
    val files = stateFiles(ckpt).filterNot(f => switchTo.nonEmpty && f.matches("""\d+\.snapshot"""))
    assert(files.nonEmpty && files.forall(last.wrote), s"${last.name} wrote $files")
    (emitted(), progress.result().toSeq)
  }

  private def start(df: DataFrame, ckpt: File, trigger: Trigger): StreamingQuery =
    df.writeStream.outputMode("update")
      .option("checkpointLocation", ckpt.getPath)
      .foreach(writer).trigger(trigger).start()

  private def withConfs[T](confs: (String, String)*)(body: => T): T = {
    confs.foreach { case (k, v) => spark.conf.set(k, v) }
    try body
    finally confs.foreach { case (k, _) => spark.conf.unset(k) }
  }

  private def waitFor(what: String, q: StreamingQuery)(cond: => Boolean): Unit = {
    val end = System.currentTimeMillis + 120000
    while (!cond) {
      q.exception.foreach(e => fail(s"query failed waiting for $what: $e", e))
      if (System.currentTimeMillis > end) fail(s"timed out waiting for $what: ${emitted()}")
      Thread.sleep(50)
    }
  }
}

object RealTimeModeSuite {
  private val ProviderKey = "spark.sql.streaming.stateStore.providerClass"
  private val FormatKey = "spark.sql.streaming.stateStore.checkpointFormatVersion"
  private val Spill = classOf[SpillStoreProvider].getName
  private val Rocks = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"

  /** Four rounds of input; keys repeat within and across rounds. */
  private val Rounds: IndexedSeq[Seq[String]] = IndexedSeq(
    Seq("a", "b", "a", "c"), Seq("a", "d", "b", "e", "d"), Seq("f", "a", "g"), Seq("b", "h", "a"))

  sealed abstract class Provider(val name: String) {
    /** The first, micro-batch run's confs: the provider named, checkpoint format v2. */
    def confs: Seq[(String, String)]
    /** The real-time runs' confs: Spark refuses spillstore named, so the offset log names it. */
    def realTimeConfs: Seq[(String, String)]
    def wrote(stateFile: String): Boolean
  }
  final case class Spillstore(budget: Option[String]) extends Provider("spillstore") {
    private val options =
      budget.map("spark.sql.streaming.stateStore.spillstore.memoryBudget" -> _).toSeq
    def confs: Seq[(String, String)] = Seq(ProviderKey -> Spill, FormatKey -> "2") ++ options
    def realTimeConfs: Seq[(String, String)] = options
    def wrote(f: String): Boolean = f.matches("""\d+_[0-9a-f-]{36}\.(journal|snapshot)""") ||
      f.endsWith(".run")
  }
  case object RocksDB extends Provider("rocksdb") {
    def confs: Seq[(String, String)] = Seq(ProviderKey -> Rocks, FormatKey -> "2")
    def realTimeConfs: Seq[(String, String)] = Nil
    def wrote(f: String): Boolean = f.matches("""\d+_[0-9a-f-]{36}\.(changelog|zip)""") ||
      f.endsWith(".sst") || f.endsWith(".log")
  }

  sealed abstract class Query(val name: String) {
    def build(in: DataFrame): DataFrame
    /** What the sink holds last for each key once `sent` is processed. */
    def modelOf(sent: Seq[String]): Map[String, Long]
    def model: Map[String, Long] = modelOf(Rounds.flatten)
  }
  case object Aggregation extends Query("aggregation") {
    def build(in: DataFrame): DataFrame = in.groupBy("value").count()
    def modelOf(sent: Seq[String]): Map[String, Long] =
      sent.groupBy(identity).map { case (k, vs) => k -> vs.size.toLong }
  }
  case object Dedup extends Query("dedup") {
    def build(in: DataFrame): DataFrame =
      in.dropDuplicates("value").selectExpr("value", "CAST(1 AS BIGINT) AS n")
    def modelOf(sent: Seq[String]): Map[String, Long] = sent.distinct.map(_ -> 1L).toMap
  }

  private val rows = new ConcurrentLinkedQueue[(String, Long)]()

  /** The last row the sink got for each key. */
  private def emitted(): Map[String, Long] =
    rows.asScala.toSeq.groupBy(_._1).map { case (k, vs) => k -> vs.last._2 }

  private val writer: ForeachWriter[Row] = new ForeachWriter[Row] {
    override def open(partitionId: Long, epochId: Long): Boolean = true
    override def process(r: Row): Unit = rows.add(r.getString(0) -> r.getLong(1))
    override def close(errorOrNull: Throwable): Unit = ()
  }

  /** The data files of every store under the checkpoint's state dir (Spark's metadata aside). */
  private def stateFiles(ckpt: File): Seq[String] =
    FileUtils.listFiles(new File(ckpt, "state"), null, true).asScala.toSeq
      .filterNot(f =>
        f.getPath.contains("_metadata") || f.getPath.contains("_stateSchema") ||
          f.getName.endsWith(".crc") || f.getName.startsWith("."))
      .map(_.getName)
}
