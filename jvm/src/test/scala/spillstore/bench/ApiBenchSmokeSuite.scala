package spillstore.bench

import org.scalatest.funsuite.AnyFunSuite

/**
 * Runs every ApiBench scenario at toy sizes, so the benchmark cannot rot between full runs
 * (`make bench-api`). The figures mean nothing at this size; what is checked is that every
 * provider ran every scenario with sane results, and that the FLIP-369 capacities give the
 * hit ratios they are meant to.
 */
class ApiBenchSmokeSuite extends AnyFunSuite {
  test(
    "every scenario runs for every provider; FLIP-369 capacities give 100 %, 50 % and 0 % hits") {
    val lines = Seq.newBuilder[String]
    val results = ApiBench.run(
      ApiBench.Settings(keys = 20000, ops = 5000, batches = 4, bigKeys = 30000), lines += _)
    val printed = lines.result().mkString("\n")

    val scenarios = results.map(_.scenario).distinct
    assert(scenarios.size === 9,
      scenarios) // uniform, zipf, absent, iterate, remove, recovery, FLIP-369, heap, scale
    scenarios.foreach { sc =>
      val providers = results.filter(_.scenario == sc).map(_.provider.takeWhile(_ != ' ')).toSet
      assert(providers === BenchProviders.All.toSet, sc)
      assert(printed.contains(s"### $sc"), sc)
    }
    results.filter(_.samples.nonEmpty).foreach { r =>
      assert(r.samples.forall(s => s.workMs > 0 && s.loadMs >= 0 && s.commitMs >= 0), r)
      assert(r.opsPerSec > 0, r)
    }
    results.filter(_.samples.isEmpty).foreach(r =>
      assert(r.value("live object bytes/entry") > 0, r))

    val flip =
      results.filter(r => r.scenario.contains("FLIP-369") && r.provider.startsWith("spillstore"))
    val ratios = flip.map(_.hitRatio.get)
    assert(ratios.size === 3)
    assert(ratios(0) >= 0.95, flip.head)
    assert(ratios(1) >= 0.4 && ratios(1) <= 0.6, flip(1))
    assert(ratios(2) <= 0.1, flip(2))
  }
}
