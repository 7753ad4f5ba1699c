package spillstore

import java.io.File
import java.nio.file.Files
import java.util.UUID

import scala.collection.mutable
import scala.util.Random

import org.apache.hadoop.conf.Configuration
import org.apache.hadoop.fs.Path
import org.scalatest.funsuite.AnyFunSuite

import org.apache.spark.SparkException
import org.apache.spark.sql.catalyst.expressions.{GenericInternalRow, UnsafeProjection, UnsafeRow}
import org.apache.spark.sql.execution.streaming.state._
import org.apache.spark.sql.internal.SQLConf
import org.apache.spark.sql.types._
import org.apache.spark.unsafe.types.UTF8String

import spillstore.checkpoint.{CheckpointDir, FaultyFileSystem, StateFile}
import spillstore.cold.ColdTier

class SpillStoreProviderSuite extends AnyFunSuite {
  import SpillStoreProviderSuite._

  test("commit writes one journal with only the batch's squashed changes") {
    withProvider() { (p, dir) =>
      val s0 = p.getStore(0)
      (1L to 10000L).foreach(i => s0.put(key(i), value(i)))
      assert(s0.commit() === 1)
      val s1 = p.getStore(1)
      (1 to 10).foreach(n => s1.put(key(5), value(n))) // ten updates of one key
      s1.put(key(20000), value(1)) // a new key
      s1.remove(key(7)) // a removal
      s1.put(key(30000), value(1)); s1.remove(key(30000)) // born and gone: no record
      assert(s1.commit() === 2)
      assert(customMetric(s1, "spillstoreJournalRecords") === 3)
      assert(customMetric(s1, "spillstoreJournalBytes") === new File(dir, "2.journal").length())
      assert(s1.metrics.numKeys === 10000)
      assert(readAll(dir, 2) === (1L to 10000L).filter(_ != 7).map(i =>
        i -> (if (i == 5) 10L else i)).toMap + (20000L -> 1L))
    }
  }

  test("abort restores version N-1 in place, and the next batch starts from it") {
    withProvider() { (p, _) =>
      val s0 = p.getStore(0)
      (1L to 100L).foreach(i => s0.put(key(i), value(i)))
      s0.commit()
      val s1 = p.getStore(1)
      s1.put(key(1), value(-1)); s1.remove(key(2)); s1.put(key(500), value(5))
      s1.abort()
      assert(!s1.hasCommitted)
      val again = p.getStore(1)
      assert(contents(again) === (1L to 100L).map(i => i -> i).toMap)
      again.abort()
    }
  }

  test("getStore of an older or newer version yields exactly that version") {
    withProvider() { (p, dir) =>
      val expected = commitVersions(p, versions = 6, seed = 1)
      for (v <- Seq(3, 6, 1, 5, 0, 2)) {
        val s = p.getStore(v)
        assert(contents(s) === expected(v), s"version $v")
        s.abort()
      }
      // A second provider commits 7 and 8; the first one rolls forward from 6 by journals.
      withProvider(rootOf(dir)) { (other, _) =>
        val s = other.getStore(6)
        s.put(key(1), value(77)); s.commit()
        val t = other.getStore(7)
        t.remove(key(1)); t.commit()
      }
      val s8 = p.getStore(8)
      assert(contents(s8) === (expected(6) - 1L))
      s8.abort()
    }
  }

  test("random workload: every version reloads exactly, across snapshots and cleanup") {
    val sqlConf = new SQLConf
    sqlConf.setConf(SQLConf.STATE_STORE_MIN_DELTAS_FOR_SNAPSHOT, 3)
    sqlConf.setConf(SQLConf.MIN_BATCHES_TO_RETAIN, 5)
    withProvider(sqlConf = sqlConf) { (p, dir) =>
      val expected = commitVersions(p, versions = 30, seed = 7, maintain = true)
      val listed = new File(dir).list().toSeq
      assert(listed.exists(_.endsWith(".snapshot")), listed)
      assert(!listed.contains("1.journal"), s"cleanup kept old journals: $listed")
      // Every version within retention loads exactly, in a fresh provider (a new executor).
      for (v <- 25 to 30) withProvider(rootOf(dir), sqlConf) { (fresh, _) =>
        val s = fresh.getStore(v)
        assert(contents(s) === expected(v), s"version $v")
        s.abort()
      }
    }
  }

  test("snapshots hold the same state as the journals they replace") {
    val sqlConf = new SQLConf
    sqlConf.setConf(SQLConf.STATE_STORE_MIN_DELTAS_FOR_SNAPSHOT, 1)
    withProvider(sqlConf = sqlConf) { (p, dir) =>
      val expected = commitVersions(p, versions = 8, seed = 3, maintain = true)
      assert(new File(dir, "8.snapshot").exists())
      // Remove every file its manifest does not list: version 8 must come from it alone.
      val listed = new CheckpointDir(new Path(dir), new Configuration,
        SpillStoreSparkBridge.compressionCodec("lz4")).readManifest(8).names + "8.snapshot"
      new File(dir).listFiles().filterNot(f => listed(f.getName)).foreach(_.delete())
      withProvider(rootOf(dir), sqlConf) { (fresh, _) =>
        val s = fresh.getStore(8)
        assert(contents(s) === expected(8))
        s.abort()
      }
    }
  }

  test("forceSnapshotOnCommit writes the snapshot before commit returns") {
    withProvider() { (p, dir) =>
      val s = p.getStore(0, forceSnapshotOnCommit = true)
      s.put(key(1), value(1))
      s.commit()
      assert(new File(dir, "1.snapshot").exists())
      assert(customMetric(s, "forceSnapshotCount") === 1)
    }
  }

  test("a forced snapshot after a large load lists the load's journal without reading it: the " +
    "commit that wrote it recorded its trailer") {
    TempDirs.withTempDir("forced") { root =>
      withProvider(FaultyFileSystem.uriOf(root)) { (p, dir) =>
        var version = 0L
        def commit(keys: Seq[Long], force: Boolean = false): Unit = {
          val s = p.getStore(version, forceSnapshotOnCommit = force)
          keys.foreach(k => s.put(key(k), value(k)))
          version = s.commit()
        }
        commit(0L until 5000L)
        commit(Seq(1L))
        commit(Seq(2L))
        var opened = 0
        FaultyFileSystem.hooking(FaultyFileSystem.Open) { f =>
          if (f.getName == "1.journal") opened += 1
        }(commit(Seq(3L), force = true))
        val manifest = new CheckpointDir(new Path(dir), new Configuration,
          SpillStoreSparkBridge.compressionCodec("lz4")).readManifest(4)
        assert(manifest.names.contains("1.journal"), manifest)
        assert(opened === 0)
        // The recorded trailer is the file's: a fresh load takes the snapshot, not the older
        // base (version 0 and every journal) that a mismatch would send it to.
        withProvider(FaultyFileSystem.uriOf(root)) { (fresh, _) =>
          val read = mutable.Set.empty[String]
          val s = FaultyFileSystem.hooking(FaultyFileSystem.Open)(f => read += f.getName) {
            fresh.getStore(4)
          }
          assert(contents(s) === (0L until 5000L).map(k => k -> k).toMap)
          assert(read.toSet === manifest.names + "4.snapshot", read)
          s.abort()
        }
      }
    }
  }

  test("a missing journal fails the load with an error naming the file") {
    withProvider() { (p, dir) =>
      commitVersions(p, versions = 3, seed = 2)
      new File(dir, "2.journal").delete()
      withProvider(rootOf(dir)) { (fresh, _) =>
        val e = intercept[SparkException](fresh.getStore(3))
        assert(e.getCondition === "CANNOT_LOAD_STATE_STORE.CANNOT_READ_STREAMING_STATE_FILE")
        assert(e.getMessage.contains("2.journal"), e.getMessage)
      }
    }
  }

  test("a truncated or bit-flipped journal is detected, never read as valid, and named") {
    withProvider() { (p, dir) =>
      commitVersions(p, versions = 2, seed = 4)
      val f = new File(dir, "2.journal")
      val good = Files.readAllBytes(f.toPath)
      val n = good.length
      val truncations = Seq(0, 3, 20, n / 2, n - 13, n - 5, n - 1).map(len =>
        s"truncated to $len" -> good.take(len))
      val flips = Seq(2, 9, 25, n / 3, n / 2, n - 20, n - 10, n - 2).map { at =>
        val b = good.clone(); b(at) = (b(at) ^ 0x04).toByte; s"bit flip at $at" -> b
      }
      for ((damage, bytes) <- truncations ++ flips) {
        Files.write(f.toPath, bytes)
        withProvider(rootOf(dir)) { (fresh, _) =>
          val e = withClue(s"$damage of $n bytes: ")(intercept[SparkException](fresh.getStore(2)))
          assert(e.getCondition === "CANNOT_LOAD_STATE_STORE.UNCATEGORIZED", damage)
          assert(e.getCause.getMessage.contains("2.journal"), s"$damage: ${e.getCause}")
          assert(!e.getMessage.contains("does not exist"), s"$damage: ${e.getMessage}")
          // The provider stays usable: it reloads cleanly when asked for a valid version.
          val s1 = fresh.getStore(1)
          assert(contents(s1).nonEmpty)
          s1.abort()
        }
      }
      Files.write(f.toPath, good)
      assert(readAll(dir, 2).nonEmpty)
    }
  }

  test("a store replaced by a newer attempt can neither write nor commit") {
    withProvider() { (p, _) =>
      val zombie = p.getStore(0)
      zombie.put(key(1), value(1))
      val retry = p.getStore(0)
      assert(intercept[IllegalStateException](zombie.put(key(2), value(2)))
          .getMessage.contains("replaced by"))
      assert(intercept[IllegalStateException](zombie.commit()).getMessage.contains("replaced by"))
      retry.put(key(3), value(3))
      retry.commit()
      val s = p.getStore(1)
      assert(contents(s) === Map(3L -> 3L))
    }
  }

  test("read store then upgrade to write store, as streaming aggregation does") {
    withProvider() { (p, _) =>
      commitVersions(p, versions = 1, seed = 5)
      val read = p.getReadStore(1)
      val before = contents(read)
      read.get(key(1)); read.get(key(2))
      val write = p.upgradeReadStoreToWriteStore(read, 1)
      write.get(key(3))
      write.put(key(123456), value(1))
      assert(write.commit() === 2)
      // The write store reports the batch's lookups, including those made through the read store.
      assert(customMetric(write, "spillstoreCacheHits") === 3)
      assert(intercept[UnsupportedOperationException](read.asInstanceOf[StateStore].put(key(1),
            value(1)))
          .getMessage.contains("read-only"))
      assert(contents(p.getReadStore(2)) === before + (123456L -> 1L))
    }
  }

  test("removing every entry while iterating leaves an empty store") {
    withProvider() { (p, _) =>
      commitVersions(p, versions = 2, seed = 6)
      val s = p.getStore(2)
      val it = s.iterator()
      var n = 0
      while (it.hasNext) { s.remove(it.next().key); n += 1 }
      assert(n > 0)
      assert(s.iterator().isEmpty)
      s.commit()
      assert(contents(p.getStore(3)) === Map.empty)
    }
  }

  test("prefix scan finds keys by their first columns, through updates and removals") {
    import Sessions._
    withProvider(keySchema = schema, spec = spec) { (p, dir) =>
      val s0 = p.getStore(0)
      for (s <- Seq("a", "b"); t <- 1L to 3L) s0.put(k(s, t), value(t))
      s0.commit()
      val s1 = p.getStore(1)
      s1.remove(k("a", 2))
      s1.put(k("a", 9), value(9))
      assert(scan(s1, "a") === Set(1L, 3L, 9L))
      assert(scan(s1, "b") === Set(1L, 2L, 3L))
      assert(scan(s1, "zzz") === Set.empty)
      s1.commit()
      withProvider(rootOf(dir), keySchema = schema, spec = spec) { (fresh, _) =>
        assert(scan(fresh.getReadStore(2), "a") === Set(1L, 3L, 9L))
      }
    }
  }

  test("a value too long for a checkpoint file is refused by put, naming the store, the size " +
    "and the limit; the batch goes on") {
    withProvider() { (p, dir) =>
      val s = p.getStore(0)
      s.put(key(1), value(1))
      val huge = new UnsafeRow(valueSchema.length)
      huge.pointTo(new Array[Byte](StateFile.MaxRecordBytes + 8), StateFile.MaxRecordBytes + 8)
      val e = intercept[IllegalArgumentException](s.put(key(2), huge))
      for (part <- Seq(s.toString, s"${StateFile.MaxRecordBytes + 8} bytes",
          s"limited to ${StateFile.MaxRecordBytes} bytes")) {
        assert(e.getMessage.contains(part), e.getMessage)
      }
      s.put(key(3), value(3))
      assert(s.commit() === 1)
      assert(readAll(dir, 1) === Map(1L -> 1L, 3L -> 3L))
    }
  }

  test("unsupported features are rejected at init or getStore, naming what is unsupported") {
    TempDirs.withTempDir("spill") { dir =>
      def init(cf: Boolean = false, multi: Boolean = false,
          spec: KeyStateEncoderSpec = NoPrefixKeyStateEncoderSpec(keySchema),
          sqlConf: SQLConf = new SQLConf) = {
        val p = new SpillStoreProvider
        p.init(StateStoreId(dir, 0, 0), keySchema, valueSchema, spec, cf,
          new StateStoreConf(sqlConf),
          new Configuration, multi, None)
        p
      }
      assert(intercept[UnsupportedOperationException](init(cf = true)).getMessage.contains(
          "column families"))
      assert(intercept[UnsupportedOperationException](init(multi = true)).getMessage.contains(
          "multiple values"))
      assert(intercept[UnsupportedOperationException](
          init(spec = RangeKeyScanStateEncoderSpec(keySchema, Seq(0))))
          .getMessage.contains("range scans"))
      // Checkpoint format v2 is supported (CheckpointIdsSuite); init takes it.
      val v2 = new SQLConf
      v2.setConfString("spark.sql.streaming.stateStore.checkpointFormatVersion", "2")
      init(sqlConf = v2).close()
      val rowChecksums = new SQLConf
      rowChecksums.setConfString("spark.sql.streaming.stateStore.rowChecksum.enabled", "true")
      assert(intercept[UnsupportedOperationException](init(sqlConf = rowChecksums)).getMessage
          .contains("spark.sql.streaming.stateStore.rowChecksum.enabled=true"))
      val p = init()
      try assert(intercept[UnsupportedOperationException](p.getStore(0, None, false,
              loadEmpty = true))
            .getMessage.contains("loadEmpty"))
      finally p.close()
    }
  }

  test("configuration errors name the key at fault") {
    def init(key: String, v: String): Unit = {
      val sqlConf = new SQLConf
      sqlConf.setConfString(key, v)
      val p = new SpillStoreProvider
      TempDirs.withTempDir("spill") { dir =>
        p.init(StateStoreId(dir, 0, 0), keySchema, valueSchema,
          NoPrefixKeyStateEncoderSpec(keySchema),
          false, new StateStoreConf(sqlConf), new Configuration, false, None)
        p.close()
      }
    }
    val typo = intercept[IllegalArgumentException](
      init("spark.sql.streaming.stateStore.spillstore.memroyBudget", "1g"))
    assert(typo.getMessage.contains("spark.sql.streaming.stateStore.spillstore.memroyBudget"))
    assert(typo.getMessage.contains(
        SpillStoreConf.Keys.map(_.key.stripPrefix(SpillStoreConf.Prefix)).sorted.mkString(", ")))
    val codec = intercept[IllegalArgumentException](
      init("spark.sql.streaming.stateStore.compression.codec", "gzipx"))
    assert(codec.getMessage.contains("spark.sql.streaming.stateStore.compression.codec=gzipx"))
  }

  test("journals record the codec, so a changed codec conf still reads old files") {
    val lz4 = new SQLConf
    lz4.setConfString("spark.sql.streaming.stateStore.compression.codec", "lz4")
    val zstd = new SQLConf
    zstd.setConfString("spark.sql.streaming.stateStore.compression.codec", "zstd")
    withProvider(sqlConf = lz4) { (p, dir) =>
      val expected = commitVersions(p, versions = 2, seed = 8)
      withProvider(rootOf(dir), zstd) { (q, _) =>
        val s = q.getStore(2)
        assert(contents(s) === expected(2))
        s.put(key(1), value(1)); s.commit()
        withProvider(rootOf(dir), lz4) { (r, _) =>
          assert(contents(r.getReadStore(3)) === expected(2) + (1L -> 1L))
        }
      }
    }
  }
}

class RecoveryUnderPressureSuite extends AnyFunSuite {
  import SpillStoreProviderSuite._

  test(
    "a store loading from the checkpoint is never spilled by other stores' relief rounds meanwhile") {
    val conf = new SQLConf
    conf.setConfString("spark.sql.streaming.stateStore.spillstore.memoryBudget", "512k")
    val keys = 20000L
    TempDirs.withTempDir("recovery-pressure") { root =>
      val loaded = withProvider(root, sqlConf = conf) { (p, dir) =>
        val s = p.getStore(0)
        (0L until keys).foreach(i => s.put(key(i), value(i)))
        s.commit()
        val s2 = p.getStore(1)
        (0L until keys by 3).foreach(i => s2.remove(key(i)))
        s2.commit()
        dir
      }
      val expected = (0L until keys).filter(_ % 3 != 0).map(i => i -> i).toMap
      withProvider(sqlConf = conf) { (other, _) =>
        for (round <- 1 to 6) {
          // Another task's store grows past the budget the whole time: its relief rounds spill
          // whatever is idle, which a loading store must not look like.
          @volatile var stop = false
          val t = new Thread(() =>
            while (!stop) {
              val s = other.getStore(0)
              var i = 0L
              while (!stop && i < 5000) { s.put(key(i), value(i)); i += 1 }
              s.abort()
            })
          t.start()
          try {
            withProvider(rootOf(loaded), conf) { (p, _) =>
              assert(contents(p.getReadStore(2)) === expected, s"round $round")
            }
          } finally { stop = true; t.join() }
        }
      }
    }
  }
}

object SpillStoreProviderSuite {
  val keySchema: StructType = StructType(Seq(StructField("k", LongType)))
  val valueSchema: StructType = StructType(Seq(StructField("v", LongType)))
  private val keyProj = UnsafeProjection.create(keySchema)
  private val valueProj = UnsafeProjection.create(valueSchema)
  // Projections reuse their output row, as Spark's operators do: the store must copy.
  def key(i: Long): UnsafeRow = keyProj(new GenericInternalRow(Array[Any](i)))
  def value(i: Long): UnsafeRow = valueProj(new GenericInternalRow(Array[Any](i)))

  /** An initialized provider for partition `partition` of operator 0 under checkpoint `root`. */
  def openProvider(root: String, sqlConf: SQLConf = new SQLConf, keySchema: StructType = keySchema,
      spec: KeyStateEncoderSpec = null, partition: Int = 0,
      coldTiers: (File, String) => ColdTier = ColdTier.create): SpillStoreProvider = {
    val p = new SpillStoreProvider
    p.coldTiers = coldTiers
    val hadoopConf = new Configuration
    hadoopConf.set("sql.streaming.runId", UUID.randomUUID().toString)
    p.init(StateStoreId(root, 0, partition), keySchema, valueSchema,
      Option(spec).getOrElse(NoPrefixKeyStateEncoderSpec(keySchema)), useColumnFamilies = false,
      new StateStoreConf(sqlConf), hadoopConf, useMultipleValuesPerKey = false,
      stateSchemaProvider = None)
    p
  }

  /**
   * Runs `f` with an initialized provider and its store directory under checkpoint `root`
   * (by default a temp dir, deleted afterwards). `f` runs on a thread of its own, which has
   * ended when the provider is closed: a store it left open outside a task is then abandoned,
   * and the unload frees it (a live thread could still be using it, directly or through
   * another thread, so its state would stay doomed and in the memory budget).
   */
  def withProvider[T](root: String = null, sqlConf: SQLConf = new SQLConf,
      keySchema: StructType = keySchema, spec: KeyStateEncoderSpec = null,
      coldTiers: (File, String) => ColdTier = ColdTier.create, partition: Int = 0)(
      f: (SpillStoreProvider, String) => T): T = {
    if (root == null) {
      return TempDirs.withTempDir("spill")(r =>
        withProvider(r, sqlConf, keySchema, spec, coldTiers, partition)(f))
    }
    val p = openProvider(root, sqlConf, keySchema, spec, partition, coldTiers)
    try onOwnThread(f(p, p.stateStoreId.storeCheckpointLocation().toUri.getPath))
    finally p.close()
  }

  /** Runs `body` on a new thread and waits for it to end; its failure is rethrown here. */
  def onOwnThread[T](body: => T): T = {
    var result: Either[Throwable, T] = null
    val t = new Thread(() =>
        result =
          try Right(body)
          catch { case e: Throwable => Left(e) },
      s"${Thread.currentThread().getName}-body")
    t.start()
    t.join()
    result.fold(e => throw e, identity)
  }

  /** Session-window keys (session, start) whose prefix scans go by session. */
  object Sessions {
    val schema: StructType =
      StructType(Seq(StructField("session", StringType), StructField("start", LongType)))
    val spec: KeyStateEncoderSpec = PrefixKeyScanStateEncoderSpec(schema, 1)
    private val proj = UnsafeProjection.create(schema)
    private val prefixProj = UnsafeProjection.create(StructType(schema.take(1)))
    def k(session: String, start: Long): UnsafeRow =
      proj(new GenericInternalRow(Array[Any](UTF8String.fromString(session), start))).copy()
    def prefix(session: String): UnsafeRow =
      prefixProj(new GenericInternalRow(Array[Any](UTF8String.fromString(session)))).copy()
    /** The starts of `session`'s keys. */
    def scan(store: ReadStateStore, session: String): Set[Long] =
      store.prefixScan(prefix(session)).map(_.key.getLong(1)).toSet
  }

  /** A conf with spillstore's memory budget set (a size such as "1m"). */
  def budgetConf(budget: String): SQLConf = {
    val c = new SQLConf
    c.setConfString("spark.sql.streaming.stateStore.spillstore.memoryBudget", budget)
    c
  }

  def contents(s: ReadStateStore): Map[Long, Long] =
    s.iterator().map(pair => pair.key.getLong(0) -> pair.value.getLong(0)).toMap

  def customMetric(s: StateStore, name: String): Long =
    s.metrics.customMetrics.collectFirst { case (m, v) if m.name == name => v }
      .getOrElse(throw new NoSuchElementException(s"metric $name"))

  /** The checkpoint root of a store directory (`<root>/<operator>/<partition>`). */
  def rootOf(storeDir: String): String = new File(storeDir).getParentFile.getParentFile.getPath

  /** Reads a committed version through a fresh provider. */
  def readAll(storeDir: String, version: Long): Map[Long, Long] =
    withProvider(rootOf(storeDir)) { (p, _) => contents(p.getReadStore(version)) }

  /**
   * Commits `versions` batches (from version `from`, state `start`) of `ops` random puts,
   * updates and removes of keys drawn from [0, `keys`), so they collide; returns the expected
   * state at every version from `from` on. `onCommit` sees each new version and its state.
   */
  def commitVersions(p: SpillStoreProvider, versions: Int, seed: Int, maintain: Boolean = false,
      keys: Int = 300, ops: Int = 200, from: Int = 0, start: Map[Long, Long] = Map.empty,
      onCommit: (Long, Map[Long, Long]) => Unit = (_, _) => ()): IndexedSeq[Map[Long, Long]] = {
    val rnd = new Random(seed)
    var model = start
    val states = IndexedSeq.newBuilder[Map[Long, Long]]
    states += model
    for (v <- from until from + versions) {
      val s = p.getStore(v)
      for (_ <- 0 until ops) {
        val k = rnd.nextInt(keys).toLong
        if (rnd.nextInt(4) == 0) { s.remove(key(k)); model -= k }
        else { val x = rnd.nextLong(); s.put(key(k), value(x)); model += k -> x }
      }
      assert(s.commit() == v + 1)
      states += model
      onCommit(v + 1L, model)
      if (maintain) p.doMaintenance()
    }
    states.result()
  }
}

class SpillStoreBudgetSuite extends AnyFunSuite {
  import SpillStoreProviderSuite._

  test("after each commit the heap is back under the budget; only the open batch exceeds it") {
    val budget = 1L << 20
    withProvider(sqlConf = budgetConf("1m")) { (p, _) =>
      var expected = Map.empty[Long, Long]
      for (v <- 0 until 6) {
        val s = p.getStore(v)
        (v * 20000L until (v + 1) * 20000L).foreach { i =>
          s.put(key(i), value(i)); expected += i -> i
        }
        s.commit()
        val heap = customMetric(s, "spillstoreHeapBytes")
        assert(heap <= budget, s"version ${v + 1}: heap $heap > budget $budget")
        assert(customMetric(s, "spillstoreEvictions") > 0 || v == 0)
      }
      val s = p.getStore(6)
      assert(contents(s) === expected)
      assert(customMetric(s, "spillstoreColdEntries") > 0)
      s.abort()
    }
  }

  test("many providers on several threads share one budget and keep exact state") {
    import java.util.concurrent.{Executors, TimeUnit}
    val budget = 2L << 20
    val providers = 8
    val batches = 5
    val root = Files.createTempDirectory("spill-many").toString
    val deleteRoot = () => TempDirs.delete(root)
    val pool = Executors.newFixedThreadPool(4)
    val stores =
      (0 until providers).map(part => openProvider(root, budgetConf("2m"), partition = part))
    try {
      // Each provider: batches of 5000 new keys plus updates of 2000 older ones.
      val futures = stores.zipWithIndex.map { case (p, part) =>
        pool.submit(new java.util.concurrent.Callable[Map[Long, Long]] {
          def call(): Map[Long, Long] = {
            // Projections are not thread-safe: each thread has its own.
            val kp = UnsafeProjection.create(keySchema)
            val vp = UnsafeProjection.create(valueSchema)
            def key(i: Long) = kp(new GenericInternalRow(Array[Any](i)))
            def value(i: Long) = vp(new GenericInternalRow(Array[Any](i)))
            var model = Map.empty[Long, Long]
            val rnd = new Random(part)
            for (v <- 0 until batches) {
              val s = p.getStore(v)
              (0 until 5000).foreach { i =>
                val k = part * 1000000L + v * 5000L + i; s.put(key(k), value(k)); model += k -> k
              }
              (0 until 2000).foreach { _ =>
                val k = model.keys.toIndexedSeq(rnd.nextInt(model.size))
                val old = s.get(key(k)).getLong(0)
                s.put(key(k), value(old + 1)); model += k -> (old + 1)
              }
              s.commit()
            }
            model
          }
        })
      }
      val models = futures.map(_.get(10, TimeUnit.MINUTES))
      val manager = stores.head.memory // the executor's, which every provider here shares
      assert(manager.totalHeapBytes <= budget,
        s"idle heap ${manager.totalHeapBytes} > budget $budget")
      stores.zip(models).foreach { case (p, model) =>
        val s = p.getReadStore(batches)
        assert(contents(s) === model)
      }
    } finally {
      pool.shutdownNow()
      stores.foreach(_.close())
      deleteRoot()
    }
  }
}
