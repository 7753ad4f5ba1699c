package spillstore.metrics

import java.io.File

import org.apache.logging.log4j.Level
import org.scalatest.funsuite.AnyFunSuite

import org.apache.spark.sql.execution.metric.HitRatioPacking.{hitsOf, lookupsOf}
import org.apache.spark.sql.execution.streaming.state.{
  StateStoreCustomMetric, StateStoreCustomSizeMetric
}

import spillstore.LogCapture
import spillstore.SpillStoreProviderSuite._
import spillstore.metrics.SpillStoreMetricsSource.ExecutorReport

class SpillStoreMetricsSuite extends AnyFunSuite {

  test("gauges carry isSnapshot; counters and entry counts are not shown as bytes") {
    import SpillStoreMetrics._
    val gauges = Set[StateStoreCustomMetric](HeapBytes, HeapEntries, ColdEntries, ColdBytes)
    all.foreach(m => assert(m.isSnapshot === gauges.contains(m), m.name))
    assert(!Seq(HeapEntries, ColdEntries).exists(_.isInstanceOf[StateStoreCustomSizeMetric]))
  }

  test("a store reports its hits and lookups packed for the hit ratio, nothing without lookups") {
    withProvider() { (p, _) =>
      val s0 = p.getStore(0)
      s0.put(key(1), value(1))
      s0.commit()
      assert(!s0.metrics.customMetrics.keys.exists(_ == SpillStoreMetrics.CacheHitRatio))
      val s1 = p.getStore(1)
      s1.get(key(1)); s1.get(key(2)); s1.get(key(1)); s1.get(key(3))
      s1.commit()
      val packed = customMetric(s1, SpillStoreMetrics.CacheHitRatio.name)
      // The cold tier is empty: every lookup, found or not, is a heap hit.
      assert((hitsOf(packed), lookupsOf(packed)) === ((4L, 4L)))
      assert(customMetric(s1, "spillstoreCacheHits") === 4)
    }
  }

  test("executor figures: commits, journal bytes and the tier counters of ended leases") {
    withProvider() { (p, dir) =>
      def now = p.executorStats.snapshot()
      val before = now
      val s0 = p.getStore(0)
      (1L to 100L).foreach(i => s0.put(key(i), value(i)))
      s0.commit()
      val s1 = p.getStore(1)
      (1L to 30L).foreach(i => s1.get(key(i)))
      s1.put(key(1), value(0))
      s1.commit()
      val after = now
      def delta(name: String) = after(name) - before(name)
      assert(delta("commits") === 2)
      assert(delta("journalBytes") === Seq(1, 2).map(v => new File(dir, s"$v.journal").length).sum)
      assert(delta("journalRecords") === 101)
      assert(delta("cacheHits") === customMetric(s0, "spillstoreCacheHits") +
        customMetric(s1, "spillstoreCacheHits"))
      assert(delta("cacheHits") >= 30)
      assert(ExecutorStats.names.toSet === after.keySet)
      assert(after("openStores") >= 1 && after("heapEntries") >= 100)
    }
  }

  test("the driver sums the executors' latest reports and drops reports gone stale") {
    var clock = 0L
    val executors = new SpillStoreMetricsSource.Executors(staleAfterMillis = 30, () => clock)
    val registry = executors.registry()
    def gauge(name: String) = registry.getGauges.get(name).getValue
    executors.receive(ExecutorReport("1", Map("cacheHits" -> 5L, "heapBytes" -> 100L)))
    executors.receive(ExecutorReport("2", Map("cacheHits" -> 7L, "heapBytes" -> 50L)))
    executors.receive(ExecutorReport("1", Map("cacheHits" -> 9L, "heapBytes" -> 80L)))
    assert(gauge("cacheHits") === 16L && gauge("heapBytes") === 130L)
    assert(gauge("reportingExecutors") === 2L)
    clock = 20
    executors.receive(ExecutorReport("2", Map("cacheHits" -> 8L, "heapBytes" -> 40L)))
    clock = 40 // executor 1's report is 40 ms old
    assert(gauge("cacheHits") === 8L && gauge("reportingExecutors") === 1L)
    assert(ExecutorStats.names.forall(registry.getGauges.containsKey))
  }

  test("the report interval must be a positive duration; errors name the key") {
    import spillstore.SpillStorePlugin._
    assert(reportIntervalMillis("2s") === 2000)
    Seq("0s", "soon").foreach { bad =>
      val e = intercept[IllegalArgumentException](reportIntervalMillis(bad))
      assert(e.getMessage.contains(ReportIntervalKey))
    }
  }
}

class SpillStoreLoggingSuite extends AnyFunSuite {
  test("one INFO line per store lifecycle event (load, spill start and stop, unload), none per " +
    "record") {
    LogCapture("spillstore") { logged =>
      withProvider(sqlConf = budgetConf("64k")) { (p, dir) =>
        val s0 = p.getStore(0)
        (1L to 5000L).foreach(i => s0.put(key(i), value(i)))
        s0.commit() // over the budget: the store spills
        val s1 = p.getStore(1)
        (1L to 5000L).foreach(i => s1.get(key(i)))
        s1.abort()
        p.close()
        val again = openProvider(rootOf(dir), budgetConf("64k"))
        try again.getStore(1).abort()
        finally again.close()
      }
      val info = logged().filter(_.level == Level.INFO).map(_.message)
      def count(fragment: String) = info.count(_.contains(fragment))
      // each provider spills (the second while loading) and stops when it is unloaded
      assert(count("starts spilling") === 2, info)
      assert(count("stops spilling") === 2, info)
      assert(count("Unloading") === 2, info)
      assert(count("Loaded version 1") === 1, info)
      assert(info.size <= 10, s"${info.size} INFO lines for 10,000 records: ${info.mkString("\n")}")
    }
  }
}
