package org.apache.spark.sql.execution.metric

import org.scalatest.funsuite.AnyFunSuite

import org.apache.spark.sql.execution.metric.HitRatioPacking.{hitsOf, lookupsOf, pack}

class SpillStoreHitRatioMetricSuite extends AnyFunSuite {
  private def metric(packed: Long*): SpillStoreHitRatioMetric = {
    val m = new SpillStoreHitRatioMetric
    packed.foreach(m += _)
    m
  }

  test("packed values add up field by field, as Spark sums a join's four stores") {
    val stores = Seq(90L -> 100L, 0L -> 7L, 5L -> 5L, 1000000L -> 3000000L)
    val sum = stores.map { case (h, l) => pack(h, l) }.sum
    assert(hitsOf(sum) === stores.map(_._1).sum)
    assert(lookupsOf(sum) === stores.map(_._2).sum)
  }

  test("a task's value is its stores' hits / lookups in per mille; the driver's merges tasks") {
    val task1 = metric(pack(90, 100), pack(10, 100)) // two stores: 100 of 200
    val task2 = metric(pack(600, 600))
    assert(task1.value === 500)
    assert(task2.value === 1000)
    val driver = task1.copy()
    driver.reset()
    assert(driver.isZero && driver.value === 0)
    driver.merge(task1)
    driver.merge(task2)
    assert(driver.value === 700 * 1000 / 800) // the operator's ratio, not 500 + 1000
    assert(task1.value === 500, "merging must not change the merged-in task")
  }

  test("without lookups the metric is unset: zero, and left out of Spark's task updates") {
    val m = metric()
    assert(m.isZero)
    assert(m.value === 0)
    m += pack(0, 3)
    assert(!m.isZero && m.value === 0)
  }

  test("lookups beyond 2^29 per store are scaled down with their hits, keeping the ratio") {
    val lookups = 1L << 40
    val hits = lookups / 4 * 3
    val p = pack(hits, lookups)
    assert(lookupsOf(p) < (1L << 29))
    assert(metric(p, p, p, p).value === 750)
  }

  test("pack rejects hits outside 0..lookups") {
    intercept[IllegalArgumentException](pack(5, 4))
    intercept[IllegalArgumentException](pack(-1, 4))
  }
}
