package spillstore.bench

import java.lang.management.ManagementFactory
import javax.management.ObjectName

import scala.collection.mutable

import org.apache.spark.sql.execution.streaming.state.{
  ReadStateStore, StateStore, StateStoreProvider
}

import spillstore.bench.BenchProviders.{customMetric, LongRow}

/**
 * StateStore-API benchmark of spillstore against Spark's two providers, all in one JVM and
 * interleaved round by round (the order rotates each round), so that JIT, GC and machine noise
 * fall on all three alike. Every provider is driven exactly as Spark drives it on an executor:
 * getStore(v), gets and puts, commit; read-only scenarios use getReadStore(v) and release.
 *
 *   make bench-api          (all scenarios at full size, -Xmx12g; about 10 minutes)
 *   bin/sbt "spillstore/Test/runMain spillstore.bench.ApiBench keys=1000000 ops=100000 \
 *     batches=12 bigKeys=10000000 scenarios=rmw,absent,iterate,delete,recovery,hit-ratio,heap-bytes,commit-scaling \
 *     providers=spillstore,hdfs,rocksdb"
 *
 * Prints one markdown table per scenario (docs/benchmarks.md holds the measured ones).
 */
object ApiBench {
  val Scenarios: Seq[String] =
    Seq("rmw", "absent", "iterate", "delete", "recovery", "hit-ratio", "heap-bytes",
      "commit-scaling")

  final case class Settings(
      keys: Int = 1000000,
      ops: Int = 100000,
      batches: Int = 12,
      bigKeys: Int = 10000000,
      scenarios: Seq[String] = Scenarios,
      providers: Seq[String] = BenchProviders.All) {
    require(batches >= 3, "batches must be >= 3 (the first round of each scenario is warm-up)")
    require(keys >= 4 * ops, "keys must be >= 4 * ops (the delete scenario removes distinct keys)")
    scenarios.foreach(s =>
      require(Scenarios.contains(s), s"unknown scenario $s; known: ${Scenarios.mkString(",")}"))
    providers.foreach(p =>
      require(BenchProviders.All.contains(p),
        s"unknown provider $p; known: ${BenchProviders.All.mkString(",")}"))
  }

  /** One measured round of one provider: load (getStore), the records, commit. */
  final case class Sample(loadMs: Double, workMs: Double, commitMs: Double, hits: Long = 0,
      misses: Long = 0) {
    def totalMs: Double = loadMs + workMs + commitMs
  }

  /** What one provider did in one scenario; `value` holds single figures (bytes per entry). */
  final case class Result(scenario: String, provider: String, opsPerRound: Long,
      samples: IndexedSeq[Sample], value: Map[String, Double] = Map.empty) {
    /** Records per second over all rounds together: a bimodal run (FLIP-369's alternating
     *  all-hit and all-miss batches) is not summed up by one typical round. */
    def opsPerSec: Double = opsPerRound * samples.size / (samples.map(_.workMs).sum / 1000)
    /** Records per second of each round. */
    def roundRates: Seq[Double] = samples.map(s => opsPerRound / (s.workMs / 1000))
    def median(f: Sample => Double): Double = { val s = samples.map(f).sorted; s(s.size / 2) }
    def hitRatio: Option[Double] = {
      val h = samples.map(_.hits).sum
      val m = samples.map(_.misses).sum
      if (h + m == 0) None else Some(h.toDouble / (h + m))
    }
  }

  /**
   * A provider under test (`kind`, one of [[BenchProviders.All]], with spillstore options
   * `conf`), shown as `name`, and the newest version it committed.
   */
  private final class Subject(kind: String, conf: Map[String, String] = Map.empty,
      val name: String = "") {
    private val root = BenchProviders.newRoot()
    def label: String = if (name.isEmpty) kind else name
    var provider: StateStoreProvider = BenchProviders.open(kind, root, conf)
    var version = 0L
    def reopen(): Unit = provider = BenchProviders.open(kind, root, conf)
    /** Closes the provider; its checkpoint stays for [[reopen]]. */
    def unload(): Unit = provider.close()
    /** Closes the provider and deletes its checkpoint. */
    def close(): Unit =
      try provider.close()
      finally spillstore.TempDirs.delete(root)
  }

  def main(args: Array[String]): Unit = {
    val opts = args.map { a =>
      val (k, v) = a.span(_ != '=')
      require(v.nonEmpty, s"expected name=value, got $a")
      k -> v.drop(1)
    }.toMap
    val d = Settings()
    val settings = Settings(
      keys = opts.get("keys").map(_.toInt).getOrElse(d.keys),
      ops = opts.get("ops").map(_.toInt).getOrElse(d.ops),
      batches = opts.get("batches").map(_.toInt).getOrElse(d.batches),
      bigKeys = opts.get("bigKeys").map(_.toInt).getOrElse(d.bigKeys),
      scenarios = opts.get("scenarios").map(_.split(',').toSeq).getOrElse(d.scenarios),
      providers = opts.get("providers").map(_.split(',').toSeq).getOrElse(d.providers))
    run(settings, println)
  }

  /** Runs the chosen scenarios, printing each table as it completes; returns every result. */
  def run(s: Settings, out: String => Unit): Seq[Result] = new Runner(s, out).run()

  private type Round = (Subject, Int) => Sample

  private def ms(from: Long, to: Long): Double = (to - from) / 1e6

  /** Bytes of live objects on the heap, from the JVM's class histogram (after a full GC). */
  private def liveObjectBytes(): Long = {
    val histogram = ManagementFactory.getPlatformMBeanServer.invoke(
      new ObjectName("com.sun.management:type=DiagnosticCommand"), "gcClassHistogram",
      Array[AnyRef](Array.empty[String]), Array(classOf[Array[String]].getName)).toString
    histogram.linesIterator.map(_.trim).find(_.startsWith("Total")).map(_.split("\\s+")(2).toLong)
      .getOrElse(sys.error(s"no Total line in the class histogram: ${histogram.takeRight(300)}"))
  }

  private def usedHeapAfterGc(): Long = {
    val bean = ManagementFactory.getMemoryMXBean
    System.gc(); System.gc()
    bean.getHeapMemoryUsage.getUsed
  }

  /** The scenarios of one run; `out` gets the tables and progress lines. */
  private final class Runner(s: Settings, out: String => Unit) {
    def run(): Seq[Result] = {
      out(s"ApiBench: $s; JVM max heap ${Runtime.getRuntime.maxMemory() >> 20} MB, " +
        s"${Runtime.getRuntime.availableProcessors()} cores, ${System.getProperty("java.vm.name")} " +
        s"${System.getProperty("java.version")}")
      val results = mutable.ArrayBuffer.empty[Result]
      def report(rs: Seq[Result]): Unit = { results ++= rs; out(Report.table(rs)) }
      val shared = Seq("rmw", "absent", "iterate", "delete", "recovery")
      if (s.scenarios.exists(shared.contains)) sharedScenarios(report)
      if (s.scenarios.contains("hit-ratio")) report(hitRatio())
      if (s.scenarios.contains("heap-bytes")) report(heapBytes(s.keys))
      if (s.scenarios.contains("commit-scaling")) report(atScale(s.bigKeys))
      results.toSeq
    }

    // ------------------------------------------------------------------ scenarios

    /** The scenarios that share one preloaded state of `keys` entries per provider. */
    private def sharedScenarios(report: Seq[Result] => Unit): Unit = {
      val subjects = s.providers.map(new Subject(_))
      try {
        subjects.foreach(preload(_, s.keys))
        val want = s.scenarios.toSet
        if (want("rmw")) {
          Seq(new KeyPattern.Uniform(s.keys, 1), new KeyPattern.Zipf(s.keys, 0.99, 2)).foreach {
            keys =>
              report(rounds(f"get+put, ${keys.name}, ${s.keys}%,d keys", subjects, s.batches,
                  s.ops)(rmwRound(keys, s.ops)))
          }
        }
        if (want("absent")) {
          report(rounds("get of absent keys", subjects, s.batches, s.ops)(
              absentRound(new KeyPattern.Absent(s.keys, s.keys, 3), s.ops)))
        }
        if (want("iterate")) {
          report(rounds("full iteration", subjects, math.min(s.batches, 5), s.keys)(
              iterateRound(s.keys)))
        }
        if (want("delete")) {
          val order = KeyPattern.shuffled(s.keys, 4)
          val n = math.min(s.batches, s.keys / s.ops / 2)
          report(rounds("remove", subjects, n, s.ops)(deleteRound(order, s.ops)))
        }
        if (want("recovery")) report(recovery(subjects))
      } finally subjects.foreach(_.close())
    }

    /** Preloads keys 0 until n (value = key) as version 1; returns the committed store. */
    private def preload(sub: Subject, n: Int): StateStore = {
      val k = new LongRow
      val t = System.nanoTime()
      val st = sub.provider.getStore(sub.version)
      var i = 0L
      while (i < n) { st.put(k.set(i), k.row); i += 1 }
      sub.version = st.commit()
      out(f"  ${sub.label}%-10s preloaded $n%,d keys in ${(System.nanoTime() - t) / 1e6}%,.0f ms")
      st
    }

    /** `n` rounds of `round` over the subjects, rotating their order; the warm-up is dropped. */
    private def rounds(scenario: String, subjects: Seq[Subject], n: Int, opsPerRound: Long,
        warmup: Int = 1)(round: Round): Seq[Result] = {
      val samples = subjects.map(_.label -> IndexedSeq.newBuilder[Sample]).toMap
      for (r <- 0 until n; i <- subjects.indices) {
        val sub = subjects((i + r) % subjects.size)
        val sample = round(sub, r)
        if (r >= warmup) samples(sub.label) += sample
      }
      subjects.map(sub => Result(scenario, sub.label, opsPerRound, samples(sub.label).result()))
    }

    /** A batch as Spark runs one: getStore, `records` on the store, commit; timed by phase. */
    private def writeRound(records: (StateStore, Int) => Unit): Round = (sub, r) => {
      val (st, open, work, commit) =
        timePhases(sub.provider.getStore(sub.version))(records(_, r))(st =>
          sub.version = st.commit())
      Sample(open, work, commit,
        customMetric(st, "spillstoreCacheHits"), customMetric(st, "spillstoreCacheMisses"))
    }

    /** A read-only pass: getReadStore, `records` on it, release; timed by phase. */
    private def readRound(records: (ReadStateStore, Int) => Unit): Round = (sub, r) => {
      val (_, open, work, _) =
        timePhases(sub.provider.getReadStore(sub.version))(records(_, r))(_.release())
      Sample(open, work, 0) // nothing to commit
    }

    /** Opens a store, works on it and closes it; returns it with each phase's milliseconds. */
    private def timePhases[S](open: => S)(work: S => Unit)(
        close: S => Unit): (S, Double, Double, Double) = {
      val t0 = System.nanoTime()
      val st = open
      val t1 = System.nanoTime()
      work(st)
      val t2 = System.nanoTime()
      close(st)
      val t3 = System.nanoTime()
      (st, ms(t0, t1), ms(t1, t2), ms(t2, t3))
    }

    private def rmwRound(keys: KeyPattern, ops: Int): Round = {
      val k = new LongRow
      val v = new LongRow
      writeRound { (st, r) =>
        var i = 0
        while (i < ops) {
          val old = st.get(k.set(keys.key(r, i)))
          st.put(k.row, v.set(if (old == null) 1L else old.getLong(0) + 1))
          i += 1
        }
      }
    }

    private def absentRound(keys: KeyPattern, ops: Int): Round = {
      val k = new LongRow
      readRound { (st, r) =>
        var i = 0
        while (i < ops) {
          if (st.get(k.set(keys.key(r, i))) != null)
            sys.error(s"${st.getClass.getSimpleName}: an absent key was found")
          i += 1
        }
      }
    }

    private def iterateRound(expected: Int): Round = readRound { (st, _) =>
      var n = 0
      val it = st.iterator()
      while (it.hasNext) {
        if (it.next().value == null)
          sys.error(s"${st.getClass.getSimpleName}: an entry without a value")
        n += 1
      }
      if (n != expected)
        sys.error(s"${st.getClass.getSimpleName}: iterated $n entries, expected $expected")
    }

    private def deleteRound(order: Array[Int], ops: Int): Round = {
      val k = new LongRow
      writeRound { (st, r) =>
        var i = 0
        while (i < ops) { st.remove(k.set(order(r * ops + i).toLong)); i += 1 }
      }
    }

    /**
     * Each provider snapshots (its own maintenance), commits a few more batches (journals,
     * deltas, changelogs), and is closed; then a new instance loads the newest version from the
     * checkpoint, three times. Measured: getStore of that version, ready for gets.
     */
    private def recovery(subjects: Seq[Subject]): Seq[Result] = {
      val uniform = new KeyPattern.Uniform(s.keys, 5)
      subjects.foreach(_.provider.doMaintenance())
      rounds("recovery (warm-up)", subjects, 3, s.ops)(rmwRound(uniform, s.ops))
      subjects.foreach(_.unload())
      val load: Round = (sub, _) => {
        sub.reopen()
        val t0 = System.nanoTime()
        val st = sub.provider.getStore(sub.version)
        val t1 = System.nanoTime()
        st.abort()
        sub.unload()
        Sample(0, ms(t0, t1), 0)
      }
      val results =
        rounds(f"recovery of ${s.keys}%,d keys (records = entries recovered)", subjects, 4, s.keys)(
          load)
      subjects.foreach(_.reopen()) // closed again by the caller
      results
    }

    /**
     * FLIP-369's hit-ratio experiment (see [[KeyPattern.Flip369]]): spillstore with heap
     * capacities for about 100 %, 50 % and 0 % hits, each run interleaved with the two Spark
     * providers, which keep everything on heap or in RocksDB. Capacities carry 1/0.9 slack for
     * the memory manager's low-water mark; each run measures whole 4-batch phases after one
     * phase of warm-up.
     */
    private def hitRatio(): Seq[Result] = {
      val pattern = new KeyPattern.Flip369(s.ops)
      val keys = 2 * pattern.half
      val rounds4 = 4 * ((s.batches + 3) / 4)
      val spark = s.providers.filter(_ != BenchProviders.Spillstore).map(new Subject(_))
      try {
        spark.foreach(preload(_, keys))
        val perCapacity = Seq(1.0 / 0.9, 0.5 / 0.9, 0.25).map { share =>
          val entries = (share * keys).toLong
          val sub =
            new Subject(BenchProviders.Spillstore, Map("maxHeapEntries" -> entries.toString),
              s"spillstore (maxHeapEntries=$entries)")
          try {
            preload(sub, keys)
            rounds("", sub +: spark, 4 + rounds4, s.ops, warmup = 4)(rmwRound(pattern, s.ops))
          } finally sub.close()
        }
        val spillstore = perCapacity.map(_.head)
        val others = spark.map(sub =>
          Result("", sub.label, s.ops,
            perCapacity.flatMap(_.find(_.provider == sub.label)).flatMap(_.samples).toIndexedSeq))
        (spillstore ++ others).map(_.copy(scenario = f"get+put, ${pattern.name}, $keys%,d keys"))
      } finally spark.foreach(_.close())
    }

    /**
     * Heap bytes per entry, from before opening a provider to after it committed `keys`
     * one-long entries, divided by `keys`, two ways: live object bytes (the JVM's class
     * histogram, which runs a full GC) and the heap used after a full GC (G1 also counts the
     * unused tails of the regions that hold large arrays, such as hash tables). RocksDB holds
     * its entries off heap; its figures show what it keeps on heap.
     */
    private def heapBytes(keys: Int): Seq[Result] = s.providers.map { name =>
      // A first instance pays for class loading and executor-wide singletons: not per entry.
      val warm = new Subject(name)
      try preload(warm, 1000)
      finally warm.close()
      val (objectsBefore, usedBefore) = (liveObjectBytes(), usedHeapAfterGc())
      val sub = new Subject(name)
      try {
        val estimate = customMetric(preload(sub, keys), "spillstoreHeapBytes").toDouble / keys
        val objects = (liveObjectBytes() - objectsBefore).toDouble / keys
        val used = (usedHeapAfterGc() - usedBefore).toDouble / keys
        Result(f"heap bytes per one-long entry, $keys%,d keys", name, keys, IndexedSeq.empty,
          Map("live object bytes/entry" -> objects, "G1 heap used/entry" -> used) ++
            (if (estimate > 0) Map("spillstore's own estimate" -> estimate) else Map.empty))
      } finally sub.close()
    }

    /** Uniform get+put at `keys` entries, to compare commit latency with the main size. */
    private def atScale(keys: Int): Seq[Result] = {
      val subjects = s.providers.map(new Subject(_))
      try {
        subjects.foreach(preload(_, keys))
        rounds(f"get+put, uniform, $keys%,d keys", subjects, s.batches, s.ops)(
          rmwRound(new KeyPattern.Uniform(keys, 7), s.ops))
      } finally subjects.foreach(_.close())
    }
  }
}
