package spillstore.memory

import org.apache.spark.network.util.JavaUtils

import spillstore.conf.ConfKey
import spillstore.conf.ConfKey.literal

/**
 * The memory manager's knobs, validated where they are built so that no code path can hold a
 * budget of zero or thresholds that cross; every error names the full conf key and its range.
 *
 * The manager is executor-wide but confs arrive with each provider's init: the strictest of
 * the loaded providers' confs is in force (see [[MemoryConf.strictest]]).
 *
 * @param budgetBytes absolute byte budget for all providers' heap tiers together; when set it
 *                    takes precedence over `budgetFraction`
 * @param budgetFraction budget as a fraction of `Runtime.maxMemory`, used without `budgetBytes`
 * @param maxEntries cap on heap entries over all providers (FLIP-369's max-entries-num); 0 = none
 * @param pressureMonitor whether GC readings may lower the budget in force
 * @param pressureHighThreshold tenured occupancy after a GC at or above which the budget shrinks
 * @param pressureLowThreshold tenured occupancy below which the budget recovers
 */
final case class MemoryConf(
    budgetBytes: Option[Long] = None,
    budgetFraction: Double = 0.15,
    maxEntries: Long = 0L,
    pressureMonitor: Boolean = true,
    pressureHighThreshold: Double = 0.85,
    pressureLowThreshold: Double = 0.6) {
  import MemoryConf._

  budgetBytes.foreach(b => check(b > 0, BudgetKey, b, SizeRange))
  check(budgetFraction > 0 && budgetFraction <= MaxFraction, FractionKey, budgetFraction,
    FractionRange)
  check(maxEntries >= 0, MaxEntriesKey, maxEntries, CountRange)
  check(pressureHighThreshold > 0 && pressureHighThreshold < 1, HighKey, pressureHighThreshold,
    HighRange)
  check(pressureLowThreshold > 0 && pressureLowThreshold < pressureHighThreshold, LowKey,
    pressureLowThreshold, lowRange(pressureHighThreshold.toString))

  /** In the conf keys' names, for logs and errors. */
  override def toString: String =
    s"$BudgetKey=${budgetBytes.getOrElse("unset")}, $FractionKey=$budgetFraction, " +
      s"$MaxEntriesKey=$maxEntries, $MonitorKey=$pressureMonitor, " +
      s"$HighKey=$pressureHighThreshold, $LowKey=$pressureLowThreshold"

  /** The byte budget on a JVM whose heap can grow to `maxHeapBytes`. */
  def budgetFor(maxHeapBytes: Long): Long =
    budgetBytes.getOrElse(math.max(1L, (maxHeapBytes * budgetFraction).toLong))
}

object MemoryConf {
  /** The prefix under which Spark forwards provider confs (the provider's conf object's too). */
  final val Prefix = "spark.sql.streaming.stateStore.spillstore."

  private val BudgetKey = "memoryBudget"
  private val FractionKey = "memoryBudgetFraction"
  private val MaxEntriesKey = "maxHeapEntries"
  private val MonitorKey = "heapPressureMonitor"
  private val HighKey = "heapPressureHighThreshold"
  private val LowKey = "heapPressureLowThreshold"

  private val SizeRange = "a size > 0 such as 512m or 2g"
  /** The largest budget fraction: the rest of the heap is Spark's and the tasks'. */
  private val MaxFraction = 0.9
  private val FractionRange = s"a fraction in (0, $MaxFraction]"
  private val CountRange = "a whole number >= 0 (0 = unlimited)"
  private val BooleanRange = "true or false"
  private val HighRange = "a fraction in (0, 1)"
  private def lowRange(high: String) = s"a fraction in (0, $HighKey = $high)"

  /** The defaults, which the key docs below and [[fromOptions]] read: each is written once. */
  private val Defaults = MemoryConf()

  /** The keys this class reads, for validation and the README's conf table. */
  val Keys: Seq[ConfKey] = Seq(
    ConfKey(Prefix + BudgetKey, "unset",
      "heap budget for the heap tiers of all spillstore stores of an executor together, their " +
        "cold-key filters included (at most an eighth of it), a size such as `512m` or `2g`; " +
        "overrides the fraction"),
    ConfKey(Prefix + FractionKey, literal(Defaults.budgetFraction),
      s"the budget as a fraction of the executor's max heap, in (0, $MaxFraction], when " +
        s"`$BudgetKey` is unset; sized for container memory limits ([Container " +
        "memory](#container-memory-yarn-kubernetes))"),
    ConfKey(Prefix + MaxEntriesKey, literal(Defaults.maxEntries),
      "max entries on the heap over all stores of an executor (FLIP-369's cache size); " +
        "0 = unlimited"),
    ConfKey(Prefix + MonitorKey, literal(Defaults.pressureMonitor),
      "lower the budget in force while the old generation stays full after GCs"),
    ConfKey(Prefix + HighKey, literal(Defaults.pressureHighThreshold),
      "old-generation occupancy after a GC, in (0, 1), at or above which the budget in force " +
        s"shrinks (x${HeapPressureMonitor.ShrinkStep} per GC, down to " +
        s"${math.round(HeapPressureMonitor.MinFactor * 100)}%)"),
    ConfKey(Prefix + LowKey, literal(Defaults.pressureLowThreshold),
      "occupancy below which the budget in force recovers; must be below the high threshold"))

  /**
   * Reads the keys of [[Keys]] from `opts` (names after [[Prefix]]); absent keys keep their
   * defaults and other keys are ignored: rejecting unknown keys is the provider conf's job.
   */
  def fromOptions(opts: Map[String, String]): MemoryConf = {
    def parsed[T](key: String, expected: String)(parse: String => Option[T]): Option[T] =
      opts.get(key).map(_.trim).map(v => parse(v).getOrElse(throw invalid(key, v, expected)))
    // (Scala 2.12, for Spark 3.5, has no toDoubleOption and the like.)
    def number[T](parse: => T): Option[T] =
      try Some(parse)
      catch { case _: IllegalArgumentException => None }
    val high =
      parsed(HighKey, HighRange)(v => number(v.toDouble)).getOrElse(Defaults.pressureHighThreshold)
    MemoryConf(
      budgetBytes = parsed(BudgetKey, SizeRange) { v =>
        try Some(JavaUtils.byteStringAsBytes(v))
        catch { case _: NumberFormatException => None }
      },
      budgetFraction = parsed(FractionKey, FractionRange)(v => number(v.toDouble)).getOrElse(
        Defaults.budgetFraction),
      maxEntries = parsed(MaxEntriesKey, CountRange)(v => number(v.toLong)).getOrElse(
        Defaults.maxEntries),
      pressureMonitor = parsed(MonitorKey, BooleanRange)(v => number(v.toBoolean))
        .getOrElse(Defaults.pressureMonitor),
      pressureHighThreshold = high,
      pressureLowThreshold = parsed(LowKey, lowRange(high.toString))(v => number(v.toDouble))
        .getOrElse(Defaults.pressureLowThreshold))
  }

  /**
   * The stricter of two confs, key by key, on a heap of `maxHeapBytes`: the smaller budget (as
   * that conf states it, bytes or fraction), the smaller non-zero entry cap, the monitor on if
   * either has it, the lower thresholds (still low < high: the lower low is at most the low of
   * the conf with the lower high).
   */
  def strictest(a: MemoryConf, b: MemoryConf, maxHeapBytes: Long): MemoryConf = if (a == b) a
  else {
    val budget = if (a.budgetFor(maxHeapBytes) <= b.budgetFor(maxHeapBytes)) a else b
    val caps = Seq(a.maxEntries, b.maxEntries).filter(_ > 0)
    MemoryConf(
      budgetBytes = budget.budgetBytes,
      budgetFraction = budget.budgetFraction,
      maxEntries = if (caps.isEmpty) 0L else caps.min,
      pressureMonitor = a.pressureMonitor || b.pressureMonitor,
      pressureHighThreshold = math.min(a.pressureHighThreshold, b.pressureHighThreshold),
      pressureLowThreshold = math.min(a.pressureLowThreshold, b.pressureLowThreshold))
  }

  private def check(ok: Boolean, key: String, value: Any, expected: String): Unit =
    if (!ok) throw invalid(key, value.toString, expected)

  private def invalid(key: String, value: String, expected: String) =
    new IllegalArgumentException(s"Invalid $Prefix$key=$value: expected $expected")
}
