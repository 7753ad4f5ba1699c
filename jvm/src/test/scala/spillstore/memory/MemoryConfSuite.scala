package spillstore.memory

import org.scalatest.funsuite.AnyFunSuite

class MemoryConfSuite extends AnyFunSuite {
  private val P = "spark.sql.streaming.stateStore.spillstore."

  test("defaults when nothing is set; unrelated keys are left to the provider's conf") {
    val c = MemoryConf.fromOptions(Map("somethingElse" -> "x"))
    assert(c === MemoryConf(None, 0.15, 0L, pressureMonitor = true, 0.85, 0.6))
    assert(c.budgetFor(1000L) === 150L)
  }

  test("every key parses; an absolute budget overrides the fraction") {
    val c = MemoryConf.fromOptions(Map(
        "memoryBudget" -> "512m",
        "memoryBudgetFraction" -> "0.5",
        "maxHeapEntries" -> "1000000",
        "heapPressureMonitor" -> "FALSE",
        "heapPressureHighThreshold" -> " 0.9 ",
        "heapPressureLowThreshold" -> "0.7"))
    assert(c === MemoryConf(Some(512L << 20), 0.5, 1000000L, pressureMonitor = false, 0.9, 0.7))
    assert(c.budgetFor(1L << 40) === (512L << 20))
  }

  test("Keys documents exactly the keys fromOptions reads, each with the default it applies") {
    assert(MemoryConf.Keys.map(k => k.key.stripPrefix(P) -> k.default) === Seq(
      "memoryBudget" -> "unset", "memoryBudgetFraction" -> "`0.15`", "maxHeapEntries" -> "`0`",
      "heapPressureMonitor" -> "`true`", "heapPressureHighThreshold" -> "`0.85`",
      "heapPressureLowThreshold" -> "`0.6`"))
    assert(MemoryConf.Prefix === P)
  }

  // (key, bad value, words the message must hold besides the full key): each rejection names
  // the key with its prefix and the valid range.
  private val rejections = Seq(
    ("memoryBudget", "lots", "a size > 0 such as 512m"),
    ("memoryBudget", "0", "a size > 0"),
    ("memoryBudget", "1.5g", "a size > 0"),
    ("memoryBudgetFraction", "0", "(0, 0.9]"),
    ("memoryBudgetFraction", "0.95", "(0, 0.9]"),
    ("memoryBudgetFraction", "half", "(0, 0.9]"),
    ("maxHeapEntries", "-1", ">= 0"),
    ("maxHeapEntries", "1e6", ">= 0"),
    ("heapPressureMonitor", "yes", "true or false"),
    ("heapPressureHighThreshold", "1", "(0, 1)"),
    ("heapPressureHighThreshold", "0", "(0, 1)"),
    ("heapPressureLowThreshold", "0.9", "(0, heapPressureHighThreshold = 0.85)"),
    ("heapPressureLowThreshold", "x", "(0, heapPressureHighThreshold = 0.85)"))

  rejections.foreach { case (key, value, range) =>
    test(s"$key=$value is rejected with the key and its range") {
      val e = intercept[IllegalArgumentException](MemoryConf.fromOptions(Map(key -> value)))
      assert(e.getMessage.contains(s"$P$key=$value"), e.getMessage)
      assert(e.getMessage.contains(range), e.getMessage)
    }
  }

  test("the low threshold is checked against the high one given with it") {
    val e = intercept[IllegalArgumentException](MemoryConf.fromOptions(Map(
          "heapPressureHighThreshold" -> "0.5", "heapPressureLowThreshold" -> "0.6")))
    assert(e.getMessage.contains(s"${P}heapPressureLowThreshold=0.6"), e.getMessage)
    assert(e.getMessage.contains("heapPressureHighThreshold = 0.5"), e.getMessage)
  }
}
