package spillstore.bench

import java.io.File
import java.lang.management.ManagementFactory
import java.nio.charset.StandardCharsets
import java.nio.file.{Files, Paths}
import java.time.Instant
import java.util.concurrent.ConcurrentLinkedQueue
import javax.management.{NotificationEmitter, NotificationListener}
import javax.management.openmbean.CompositeData

import scala.collection.mutable
import scala.jdk.CollectionConverters._

import com.sun.management.GarbageCollectionNotificationInfo
import org.apache.commons.io.FileUtils

import org.apache.spark.sql.{DataFrame, SparkSession}
import org.apache.spark.sql.functions.{count, lit, max}
import org.apache.spark.sql.streaming.{StreamingQuery, StreamingQueryListener, Trigger}

import spillstore.SpillStoreProvider

/**
 * End-to-end latency of Spark 4.3's real-time mode (RTM): a streaming aggregation
 * (`groupBy(key).agg(count, max(et))`, update mode, foreach sink) over `keys` keys, fed at fixed
 * input rates, on spillstore or on Spark's RocksDB provider. Local mode, one JVM.
 *
 * Latency = the time the sink gets a row minus the creation time of the record that updated it
 * (the feeder stamps each record when it publishes it; a record read late still counts from its
 * creation, so a backlog shows as latency). Each rate: `settle` s unmeasured, then a window of
 * `seconds` s whose records are measured; after it the feeder keeps the rate until the window's
 * records are all at the sink (at most `drain` s; any missing then count as infinitely late).
 * The sweep stops after the first rate whose p99 is >= 1 s or which does not keep up.
 *
 * How each provider gets into RTM: Spark 4.3 refuses a named non-RocksDB provider at start(), so
 * both runs first load the state (every key once) in a micro-batch query with the provider named
 * and checkpoint format 2, stop, then restart on that checkpoint with `Trigger.RealTime` and no
 * provider named: the offset log brings back the provider the checkpoint was made with
 * (spillstore), or RTM's default applies (RocksDB). The state files the RTM run writes are
 * checked (`*.journal` for spillstore, `*.changelog` for RocksDB); a wrong provider fails the run.
 *
 *   make bench-latency
 *   bin/sbt 'set spillstore / Test / javaOptions += "-Xmx8g"' "spillstore/Test/runMain \
 *     spillstore.bench.RealTimeLatencyBench provider=spillstore keys=1000000 \
 *     rates=10000,25000,50000 seconds=20 budget=1g out=target/bench-latency/spillstore.json"
 *
 * Arguments (`name=value`): provider (spillstore|rocksdb), keys, rates (records/s, comma
 * separated, ascending), seconds, settle, drain, pre (s at the first rate before measuring),
 * budget (spillstore's memoryBudget, e.g. 1g), batch (RTM batch duration, s), partitions (source
 * partitions), shufflePartitions, out (JSON path), keep (true: keep the checkpoint).
 */
object RealTimeLatencyBench {
  private val ProviderKey = "spark.sql.streaming.stateStore.providerClass"
  private val FormatKey = "spark.sql.streaming.stateStore.checkpointFormatVersion"
  private val Rocks = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
  private val RocksPrefix = "spark.sql.streaming.stateStore.rocksdb."
  private val BudgetKey = "spark.sql.streaming.stateStore.spillstore.memoryBudget"

  final case class Settings(provider: String, keys: Long, rates: Seq[Int], seconds: Int,
      settle: Int, drain: Int, pre: Int, budget: Option[String], batchSec: Int, partitions: Int,
      shufflePartitions: Int, out: String, keep: Boolean) {
    require(Set("spillstore", "rocksdb").contains(provider), s"unknown provider $provider")
    require(rates.nonEmpty && rates.forall(_ > 0), "rates must be positive")
  }

  def parse(args: Array[String]): Settings = {
    val m = args.map(_.split("=", 2)).collect { case Array(k, v) => k -> v }.toMap
    val known = Set("provider", "keys", "rates", "seconds", "settle", "drain", "pre", "budget",
      "batch", "partitions", "shufflePartitions", "out", "keep")
    val unknown = m.keySet -- known
    require(unknown.isEmpty, s"unknown arguments: ${unknown.mkString(", ")}")
    val provider = m.getOrElse("provider", "spillstore")
    Settings(
      provider = provider,
      keys = m.getOrElse("keys", "1000000").toLong,
      rates = m.getOrElse("rates",
        "10000,25000,50000,100000,150000,200000,300000,400000,600000").split(",")
        .map(_.trim.toInt).toSeq,
      seconds = m.getOrElse("seconds", "20").toInt,
      settle = m.getOrElse("settle", "2").toInt,
      drain = m.getOrElse("drain", "5").toInt,
      pre = m.getOrElse("pre", "15").toInt,
      budget = m.get("budget").filter(_ => provider == "spillstore"),
      batchSec = m.getOrElse("batch", "10").toInt,
      partitions = m.getOrElse("partitions", "1").toInt,
      shufflePartitions = m.getOrElse("shufflePartitions", "2").toInt,
      out = m.getOrElse("out", s"target/bench-latency/$provider.json"),
      keep = m.getOrElse("keep", "false").toBoolean)
  }

  private def say(s: String): Unit = println(s"LAT ${Instant.now()}: $s")

  /** GC pauses (not concurrent cycles), each as (end time micros, duration ms, collector). */
  private val gcEvents = new ConcurrentLinkedQueue[(Long, Long, String)]()

  private def watchGc(): Unit = ManagementFactory.getGarbageCollectorMXBeans.asScala.foreach {
    case e: NotificationEmitter =>
      val l: NotificationListener = (n, _) =>
        if (n.getType == GarbageCollectionNotificationInfo.GARBAGE_COLLECTION_NOTIFICATION) {
          val info =
            GarbageCollectionNotificationInfo.from(n.getUserData.asInstanceOf[CompositeData])
          if (!info.getGcName.contains("Concurrent")) {
            gcEvents.add((BenchClock.nowMicros(), info.getGcInfo.getDuration, info.getGcName))
          }
        }
      e.addNotificationListener(l, null, null)
    case _ =>
  }

  private def gcBetween(fromMicros: Long, untilMicros: Long): Map[String, Any] = {
    val ev = gcEvents.asScala.filter { case (t, _, _) => t >= fromMicros && t < untilMicros }
    Map("pauses" -> ev.size, "pause_ms_total" -> ev.map(_._2).sum,
      "pause_ms_max" -> (if (ev.isEmpty) 0L else ev.map(_._2).max))
  }

  private def stateFiles(ckpt: File): Seq[String] = {
    val root = new File(ckpt, "state")
    if (!root.exists) Nil
    else FileUtils.listFiles(root, null, true).asScala.toSeq
      .map(f => root.toPath.relativize(f.toPath).toString)
      .filterNot(p => p.contains("_metadata") || p.contains("_stateSchema") || p.endsWith(".crc"))
      .sorted
  }

  private def forStream(q: StreamingQuery, key: String): Option[String] = scala.util.Try {
    val se = q.getClass.getMethod("streamingQuery").invoke(q)
    val s = se.getClass.getMethod("sparkSessionForStream").invoke(se).asInstanceOf[SparkSession]
    s.conf.getOption(key)
  }.toOption.flatten

  private def waitUntil(what: String, timeoutMs: Long, q: StreamingQuery)(cond: => Boolean)
      : Unit = {
    val end = System.currentTimeMillis + timeoutMs
    while (!cond) {
      q.exception.foreach(e => throw new RuntimeException(s"query failed: $e", e))
      if (System.currentTimeMillis > end) throw new RuntimeException(s"timed out: $what")
      Thread.sleep(20)
    }
  }

  private def sleepUntilMicros(t: Long, q: StreamingQuery): Unit = {
    while (BenchClock.nowMicros() < t) {
      q.exception.foreach(e => throw new RuntimeException(s"query failed: $e", e))
      Thread.sleep(math.max(1L, math.min(100L, (t - BenchClock.nowMicros()) / 1000)))
    }
  }

  def main(args: Array[String]): Unit = {
    val s = parse(args)
    val result = mutable.LinkedHashMap[String, Any]()
    val started = Instant.now()
    result("bench") = "RealTimeLatencyBench"
    result("started") = started.toString
    result("settings") = Map[String, Any]("provider" -> s.provider, "keys" -> s.keys,
      "rates" -> s.rates,
      "seconds" -> s.seconds, "settle" -> s.settle, "drain" -> s.drain, "pre" -> s.pre,
      "budget" -> s.budget.getOrElse(null), "rtm_batch_s" -> s.batchSec,
      "source_partitions" -> s.partitions, "shuffle_partitions" -> s.shufflePartitions)
    result("jvm") = Map[String, Any]("java" -> System.getProperty("java.version"),
      "pid" -> ProcessHandle.current().pid(),
      "max_heap_mb" -> Runtime.getRuntime.maxMemory / (1 << 20),
      "processors" -> Runtime.getRuntime.availableProcessors,
      "args" -> ManagementFactory.getRuntimeMXBean.getInputArguments.asScala
        .filter(a => a.startsWith("-Xm") || a.startsWith("-Xlog") || a.startsWith("-XX")))
    val out = new File(s.out)
    Option(out.getAbsoluteFile.getParentFile).foreach(_.mkdirs())
    var failure: Option[Throwable] = None
    watchGc()

    val threads = s.partitions + s.shufflePartitions + 1
    val b = SparkSession.builder().master(s"local[$threads]").appName("rtm-latency")
      .config("spark.ui.enabled", "false")
      .config("spark.sql.shuffle.partitions", s.shufflePartitions.toString)
      .config("spark.sql.streaming.realTimeMode.minBatchDuration", "1000")
      // As docs/benchmarks.md runs Spark's RocksDB provider: no extra get per put for a count.
      .config(RocksPrefix + "trackTotalNumberOfRows", "false")
    s.budget.foreach(v => b.config(BudgetKey, v))
    val spark = b.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    result("spark") = spark.version
    val ckpt = Files.createTempDirectory("rtm-latency-").toFile
    val gen = RateKeyGenerator.init(s.partitions, s.keys)
    val feeder = new Feeder(gen)
    feeder.start()
    val progress = new ConcurrentLinkedQueue[Map[String, Any]]()
    val listener = new StreamingQueryListener {
      override def onQueryStarted(e: StreamingQueryListener.QueryStartedEvent): Unit = ()
      override def onQueryTerminated(e: StreamingQueryListener.QueryTerminatedEvent): Unit = ()
      override def onQueryProgress(e: StreamingQueryListener.QueryProgressEvent): Unit = {
        val p = e.progress
        val ops = p.stateOperators.map { o =>
          Map[String, Any]("numRowsTotal" -> o.numRowsTotal, "numRowsUpdated" -> o.numRowsUpdated,
            "commitTimeMs" -> o.commitTimeMs, "memoryUsedBytes" -> o.memoryUsedBytes,
            "customMetrics" -> o.customMetrics.asScala.map { case (k, v) => k -> v.longValue }
              .toMap)
        }.toSeq
        progress.add(Map("name" -> p.name, "batchId" -> p.batchId, "timestamp" -> p.timestamp,
            "batchDuration" -> p.batchDuration, "numInputRows" -> p.numInputRows,
            "durationMs" -> p.durationMs.asScala.map { case (k, v) => k -> v.longValue }.toMap,
            "stateOperators" -> ops))
      }
    }
    spark.streams.addListener(listener)

    try {
      val df = spark.readStream.format(classOf[RateKeySource].getName)
        .option("partitions", s.partitions.toString).load()
        .groupBy("key").agg(count(lit(1)).as("cnt"), max("et").as("maxEt"))
      def start(d: DataFrame, name: String, trigger: Trigger): StreamingQuery =
        d.writeStream.queryName(name).outputMode("update")
          .option("checkpointLocation", ckpt.getPath)
          .foreach(LatencySink.writer).trigger(trigger).start()

      // 1. Load every key once, in a micro-batch query with the provider named.
      spark.conf.set(ProviderKey,
        if (s.provider == "spillstore") classOf[SpillStoreProvider].getName else Rocks)
      spark.conf.set(FormatKey, "2")
      if (s.provider == "rocksdb") spark.conf.set(RocksPrefix + "changelogCheckpointing.enabled",
        "true")
      feeder.addBulk(gen.warmupPerPartition)
      val t0 = System.nanoTime()
      val q1 = start(df, "load", Trigger.ProcessingTime(0))
      q1.processAllAvailable()
      val loadS = (System.nanoTime() - t0) / 1e9
      val loadProgress = Option(q1.lastProgress).flatMap(_.stateOperators.headOption)
      q1.stop()
      result("load") = Map[String, Any]("records" -> gen.producedTotal, "seconds" -> loadS,
        "numRowsTotal" -> loadProgress.map(_.numRowsTotal).getOrElse(-1L),
        "memoryUsedBytes" -> loadProgress.map(_.memoryUsedBytes).getOrElse(-1L),
        "customMetrics" -> loadProgress.map(_.customMetrics.asScala.map { case (k, v) =>
          k -> v.longValue
        }.toMap).getOrElse(Map.empty))
      say(f"loaded ${gen.producedTotal} records in $loadS%.1f s: ${result("load")}")
      val filesBefore = stateFiles(ckpt).toSet

      // 2. Restart in real-time mode, no provider named.
      spark.conf.unset(ProviderKey)
      spark.conf.unset(FormatKey)
      spark.conf.unset(RocksPrefix + "changelogCheckpointing.enabled")
      val deliveredBefore = LatencySink.delivered.sum()
      val t1 = System.nanoTime()
      val q2 = start(df, "rtm", Trigger.RealTime(s"${s.batchSec} seconds"))
      feeder.setRate(s.rates.head)
      waitUntil("the first real-time output", 300000, q2) {
        LatencySink.delivered.sum() > deliveredBefore
      }
      val firstOutS = (System.nanoTime() - t1) / 1e9
      val inForce = forStream(q2, ProviderKey)
      say(f"real-time output after $firstOutS%.1f s; providerClass in force: $inForce")
      result("rtm_start") = Map[String, Any]("first_output_s" -> firstOutS,
        "providerClass_in_force" -> inForce.orNull)
      sleepUntilMicros(BenchClock.nowMicros() + s.pre * 1000000L, q2)

      // 3. The rates.
      val phases = mutable.ArrayBuffer[Map[String, Any]]()
      var stop = false
      var i = 0
      while (!stop && i < s.rates.size) {
        val rate = s.rates(i)
        feeder.setRate(rate)
        val from = BenchClock.nowMicros() + s.settle * 1000000L
        val until = from + s.seconds * 1000000L
        val hist = LatencySink.open(i, from, until)
        sleepUntilMicros(from, q2)
        val deliveredFrom = LatencySink.delivered.sum()
        sleepUntilMicros(until + 2000, q2) // past the feeder's last chunk of the window
        val producedInWindow = gen.producedBetween(from, until)
        val sinkRate = (LatencySink.delivered.sum() - deliveredFrom) / s.seconds.toDouble
        val backlog = gen.producedTotal - gen.consumedTotal
        val drainEnd = BenchClock.nowMicros() + s.drain * 1000000L
        while (hist.count < producedInWindow && BenchClock.nowMicros() < drainEnd) {
          q2.exception.foreach(e => throw new RuntimeException(s"query failed: $e", e))
          Thread.sleep(20)
        }
        val delivered = hist.count
        // Throughput of the window's records: all of them over the time from the window's start
        // to the sink's last row of them. Kept up: all delivered (within `drain` s of the
        // window's end) and that throughput at least 90 % of the rate.
        val throughput = if (delivered == 0) 0.0
        else delivered / ((hist.lastAtMicros - from) / 1e6)
        val keptUp = delivered >= producedInWindow && throughput >= 0.9 * rate
        val p99 = hist.quantileMs(0.99, producedInWindow)
        val phase = mutable.LinkedHashMap[String, Any]("rate" -> rate,
          "window_from" -> Instant.ofEpochMilli(from / 1000).toString,
          "window_until" -> Instant.ofEpochMilli(until / 1000).toString,
          "produced" -> producedInWindow, "delivered" -> delivered,
          "source_backlog_at_end" -> backlog, "sink_rows_per_s" -> sinkRate,
          "window_throughput_per_s" -> throughput,
          "p50_ms" -> hist.quantileMs(0.5, producedInWindow),
          "p90_ms" -> hist.quantileMs(0.9, producedInWindow), "p99_ms" -> p99,
          "p999_ms" -> hist.quantileMs(0.999, producedInWindow), "max_ms" -> hist.maxMs,
          "mean_ms" -> hist.meanMs, "kept_up" -> keptUp, "gc" -> gcBetween(from, until))
        say(f"rate $rate: p50 ${phase("p50_ms")} p99 $p99 max ${hist.maxMs}%.1f ms, " +
          f"delivered $delivered/$producedInWindow, throughput $throughput%.0f/s, " +
          s"backlog $backlog, kept up $keptUp, gc ${phase("gc")}")
        phases += phase.toMap
        result("phases") = phases.toSeq
        stop = !(p99 < 1000.0) || !keptUp
        i += 1
      }
      feeder.setRate(0)
      // Stopping mid-batch makes Spark log the cancelled pipelined tasks' errors: expected noise.
      spark.sparkContext.setLogLevel("OFF")
      q2.stop()
      spark.sparkContext.setLogLevel("WARN")

      // 4. Which provider wrote the real-time run's state files.
      val added = stateFiles(ckpt).filterNot(filesBefore)
      val journals = added.count(_.endsWith(".journal"))
      val rocksFiles = added.count(f => f.endsWith(".changelog") || f.endsWith(".zip"))
      result("rtm_state_files") =
        Map[String, Any]("journal" -> journals, "changelog_or_zip" -> rocksFiles,
          "sample" -> added.take(6))
      val ok = if (s.provider == "spillstore") journals > 0 && rocksFiles == 0
      else rocksFiles > 0 && journals == 0
      if (!ok) throw new IllegalStateException(
        s"the real-time run did not run ${s.provider}: new state files ${added.take(20)}")
      say(s"state files of the real-time run: $journals journals, $rocksFiles changelog/zip " +
        s"(${added.take(3).mkString(", ")})")
    } catch {
      case t: Throwable =>
        failure = Some(t)
        result("error") = t.toString
        t.printStackTrace()
    } finally {
      result("progress") = progress.asScala.toSeq.filter(_("name") == "rtm")
      result("gc_run") = gcBetween(0L, Long.MaxValue)
      result("finished") = Instant.now().toString
      feeder.shutdown()
      spark.streams.active.foreach(_.stop())
      spark.stop()
      if (!s.keep) FileUtils.deleteQuietly(ckpt) else say(s"checkpoint kept at $ckpt")
      Files.write(out.toPath, (Json.write(result.toMap) + "\n").getBytes(StandardCharsets.UTF_8))
      say(s"wrote $out")
    }
    failure.foreach(t => throw t)
  }
}

/** Just enough JSON for the results: maps, sequences, strings, numbers, booleans, null. */
object Json {
  def write(v: Any): String = v match {
    case null => "null"
    case None => "null"
    case Some(x) => write(x)
    case s: String => quote(s)
    case d: Double => if (d.isNaN) "null" else if (d.isInfinite) "\"inf\"" else f"$d%.3f"
    case f: Float => write(f.toDouble)
    case n: Number => n.toString
    case b: Boolean => b.toString
    case m: scala.collection.Map[_, _] =>
      m.map { case (k, x) => quote(k.toString) + ":" + write(x) }.mkString("{", ",", "}")
    case s: Iterable[_] => s.map(write).mkString("[", ",", "]")
    case other => quote(other.toString)
  }

  private def quote(s: String): String = {
    val sb = new StringBuilder("\"")
    s.foreach {
      case '"' => sb.append("\\\"")
      case '\\' => sb.append("\\\\")
      case '\n' => sb.append("\\n")
      case c if c < ' ' => sb.append(f"\\u${c.toInt}%04x")
      case c => sb.append(c)
    }
    sb.append('"').toString
  }
}
