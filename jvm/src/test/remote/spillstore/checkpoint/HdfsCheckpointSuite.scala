package spillstore.checkpoint

import java.util.UUID

import scala.reflect.ClassTag
import scala.util.Random

import org.apache.hadoop.fs.Path
import org.apache.hadoop.hdfs.protocol.HdfsFileStatus
import org.scalatest.BeforeAndAfterAll
import org.scalatest.concurrent.Eventually.{eventually, timeout}
import org.scalatest.funsuite.AnyFunSuite

import org.apache.spark.sql.catalyst.expressions.{GenericInternalRow, UnsafeProjection, UnsafeRow}
import org.apache.spark.sql.execution.streaming.state.{
  ReadStateStore, SpillStoreSparkBridge, StateStore
}
import org.apache.spark.sql.internal.SQLConf
import org.apache.spark.sql.types.{LongType, StructField, StructType}
import org.scalatest.time.SpanSugar._

import spillstore.SpillStoreProvider
import spillstore.migrate.LineProviders

/**
 * spillstore's provider on a real HDFS ([[MiniHdfs]]): checkpoint files written, renamed,
 * listed and read through HDFS's client, and commits, maintenance and loads while its datanode
 * or namenode is down. Every line with the `remote` test dir runs it, against the Hadoop its Spark
 * ships.
 *
 * | state  | owner                                                                   |
 * |--------|-------------------------------------------------------------------------|
 * | `hdfs` | the suite's thread: started in beforeAll, closed (and deleted) in afterAll |
 */
class HdfsCheckpointSuite extends AnyFunSuite with BeforeAndAfterAll {
  import HdfsCheckpointSuite._

  private var hdfs: MiniHdfs = _

  override def beforeAll(): Unit = {
    super.beforeAll()
    hdfs = MiniHdfs.start()
  }

  override def afterAll(): Unit =
    try if (hdfs != null) hdfs.close()
    finally super.afterAll()

  /** A checkpoint root of its own on the HDFS. */
  private def newRoot(): String = hdfs.path(s"/ckpt-${UUID.randomUUID()}").toString

  /** Confs under which maintenance snapshots a store once it has `deltas` journals since its last. */
  private def snapshotAfter(deltas: Int): SQLConf = {
    val c = new SQLConf
    c.setConf(SQLConf.STATE_STORE_MIN_DELTAS_FOR_SNAPSHOT, deltas)
    c
  }

  private def withProvider[T](root: String, sqlConf: SQLConf = new SQLConf)(
      f: SpillStoreProvider => T): T = {
    val p = LineProviders.open(root, keySchema, valueSchema, sqlConf, hdfs.conf)
    try f(p)
    finally p.close()
  }

  /** Version `v` as a fresh provider (a new executor) loads it. */
  private def load(root: String, v: Long): Map[Long, Long] =
    withProvider(root)(p => contents(p.getReadStore(v)))

  private def storeDir(root: String): Path = new Path(root, "0/0")

  /** Every name in the store directory (of partition 0 of operator 0), temp files too. */
  private def files(root: String): Set[String] =
    hdfs.fs.listStatus(storeDir(root)).map(_.getPath.getName).toSet

  private def tempFiles(root: String): Set[String] = files(root).filter(_.endsWith(".tmp"))

  /** HDFS's inode id of `p`, which a rename keeps. */
  private def fileId(p: Path): Long =
    hdfs.fs.getFileStatus(p).asInstanceOf[HdfsFileStatus].getFileId

  private def journals(versions: Range): Set[String] = versions.map(v => s"$v.journal").toSet

  private def commitBatches(p: SpillStoreProvider, rnd: Random, states: Seq[Map[Long, Long]],
      batches: Int, maintain: Boolean = false): Seq[Map[Long, Long]] =
    (1 to batches).foldLeft(states) { (acc, _) =>
      val s = p.getStore(acc.size - 1L)
      val next = randomBatch(s, rnd, acc.last)
      assert(s.commit() === acc.size)
      if (maintain) p.doMaintenance()
      acc :+ next
    }

  test("every version committed on HDFS reloads exactly in a fresh provider") {
    val root = newRoot()
    val states = withProvider(root)(p => commitBatches(p, new Random(1), Seq(Map.empty), 8))
    assert(files(root) === journals(1 to 8))
    for (v <- states.indices) assert(load(root, v) === states(v), s"version $v")
  }

  test(
    "snapshots maintenance writes on HDFS are bases: loads without the journals before them are exact") {
    val root = newRoot()
    val sqlConf = snapshotAfter(deltas = 3)
    val states = withProvider(root, sqlConf) { p =>
      commitBatches(p, new Random(2), Seq(Map.empty), 10, maintain = true)
    }
    val snapshots = files(root).collect { case SnapshotName(v) => v.toInt }
    assert(snapshots.nonEmpty, files(root))
    // The journals the newest snapshot replaces go: its version and later must load without them.
    val base = snapshots.max
    assert(base < 10, snapshots)
    (1 to base).foreach(v => assert(hdfs.fs.delete(new Path(root, s"0/0/$v.journal"), false)))
    for (v <- base to 10) assert(load(root, v) === states(v), s"version $v")
  }

  test(
    "a store's journal opens on HDFS while its batch runs, and its commit publishes that file; an abort or an unload leaves no temp file") {
    val root = newRoot()
    withProvider(root) { p =>
      val rnd = new Random(11)
      val states = commitBatches(p, rnd, Seq(Map.empty), 1)
      val s = p.getStore(1)
      val temp = eventually(timeout(30.seconds)) {
        val t = tempFiles(root)
        assert(t.size === 1 && t.head.startsWith(".2.journal."), files(root))
        t.head
      }
      val early = fileId(new Path(storeDir(root), temp))
      val next = randomBatch(s, rnd, states.last)
      assert(s.commit() === 2)
      assert(files(root) === journals(1 to 2))
      assert(fileId(new Path(storeDir(root), "2.journal")) === early,
        "the journal is the file opened early, renamed")
      assert(load(root, 2) === next)

      val aborted = p.getStore(2)
      eventually(timeout(30.seconds))(assert(tempFiles(root).size === 1))
      randomBatch(aborted, rnd, next)
      aborted.abort()
      eventually(timeout(30.seconds))(assert(files(root) === journals(1 to 2)))

      val unloaded = p.getStore(2)
      eventually(timeout(30.seconds))(assert(tempFiles(root).size === 1))
      p.close()
      eventually(timeout(30.seconds))(assert(files(root) === journals(1 to 2)))
      unloaded.abort() // its holder frees the live state the unload left to it
      assert(load(root, 2) === next)
    }
  }

  test("a journal that cannot open early (the datanode down) is opened again at commit") {
    val root = newRoot()
    withProvider(root) { p =>
      val rnd = new Random(12)
      val states = commitBatches(p, rnd, Seq(Map.empty), 1)
      val s = hdfs.withDataNodeDown {
        val s = p.getStore(1)
        // Created, but its header cannot reach a datanode: the early file is deleted.
        Thread.sleep(2000)
        s
      }
      eventually(timeout(30.seconds))(assert(files(root) === journals(1 to 1)))
      val next = randomBatch(s, rnd, states.last)
      assert(s.commit() === 2)
      assert(files(root) === journals(1 to 2))
      assert(load(root, 2) === next)
    }
  }

  test(
    "a commit with the datanode down publishes nothing; after it returns the batch commits and every version reloads exactly") {
    val root = newRoot()
    withProvider(root) { p =>
      val rnd = new Random(3)
      val states = commitBatches(p, rnd, Seq(Map.empty), 3)
      val attempt = new Random(4)
      hdfs.withDataNodeDown {
        val s = p.getStore(3)
        randomBatch(s, attempt, states.last)
        storageError(s.commit())
        assert(!s.hasCommitted)
      }
      // The journal's temp file was created, its block could not be written: it is deleted
      // (Spark's own atomic stream leaves it when its close fails).
      assert(files(root) === journals(1 to 3))
      assertNoVersion(root, 4)
      assert(load(root, 3) === states(3))
      // The task's retry, on the same provider: the failed batch left nothing in the live state.
      val retried = commitBatches(p, new Random(4), states, 1)
      val more = commitBatches(p, rnd, retried, 2)
      for (v <- more.indices) assert(load(root, v) === more(v), s"version $v")
    }
  }

  test(
    "a commit with the namenode down publishes nothing; after its restart the batch commits and every version reloads exactly") {
    val root = newRoot()
    withProvider(root) { p =>
      val states = commitBatches(p, new Random(5), Seq(Map.empty), 3)
      hdfs.withNameNodeDown {
        val s = p.getStore(3)
        randomBatch(s, new Random(6), states.last)
        storageError(s.commit())
        assert(!s.hasCommitted)
      }
      assert(files(root) === journals(1 to 3))
      assertNoVersion(root, 4)
      val retried = commitBatches(p, new Random(6), states, 1)
      for (v <- retried.indices) assert(load(root, v) === retried(v), s"version $v")
    }
  }

  test(
    "a snapshot unreadable with the datanode down fails the load, is not set aside as corrupt, and is the base once it returns") {
    val root = newRoot()
    val sqlConf = snapshotAfter(deltas = 1)
    val states = withProvider(root, sqlConf) { p =>
      val s = commitBatches(p, new Random(7), Seq(Map.empty), 4)
      p.doMaintenance()
      s
    }
    assert(files(root).contains("4.snapshot"), files(root))
    (1 to 4).foreach(v => assert(hdfs.fs.delete(new Path(root, s"0/0/$v.journal"), false)))
    hdfs.withDataNodeDown {
      storageError(load(root, 4))
    }
    assert(files(root).filterNot(_.endsWith(".run")) === Set("4.snapshot"))
    assert(files(root).count(_.endsWith(".run")) === 1, "the one run the manifest lists")
    assert(load(root, 4) === states(4))
  }

  test(
    "maintenance with the datanode down writes no snapshot; the next run does, and loads from it are exact") {
    val root = newRoot()
    val sqlConf = snapshotAfter(deltas = 1)
    withProvider(root, sqlConf) { p =>
      val states = commitBatches(p, new Random(8), Seq(Map.empty), 3)
      hdfs.withDataNodeDown {
        p.doMaintenance() // fails, logged and counted: an error reaching Spark unloads providers
      }
      assert(files(root) === journals(1 to 3))
      p.doMaintenance()
      assert(files(root).contains("3.snapshot"), files(root))
      (1 to 3).foreach(v => assert(hdfs.fs.delete(new Path(root, s"0/0/$v.journal"), false)))
      assert(load(root, 3) === states(3))
    }
  }

  test("a journal half-written by a writer that died (its temp file still open) is not read") {
    val root = newRoot()
    val states = withProvider(root)(p => commitBatches(p, new Random(9), Seq(Map.empty), 2))
    // What a dead executor's commit of version 3 leaves: the first bytes of a journal under the
    // temp name, flushed to the datanode, never closed or renamed.
    val journal2 = readBytes(new Path(root, "0/0/2.journal"))
    val orphan = hdfs.fs.create(new Path(root, s"0/0/.3.journal.${UUID.randomUUID()}.tmp"))
    try {
      orphan.write(journal2, 0, journal2.length / 2)
      orphan.hflush()
      assertNoVersion(root, 3)
      assert(load(root, 2) === states(2))
      // Another attempt of the batch commits version 3 beside the orphan.
      val retried = withProvider(root)(p => commitBatches(p, new Random(10), states, 1))
      assert(load(root, 3) === retried(3))
    } finally orphan.close()
  }

  /** spillstore's listing (what loads and maintenance take bases from) has no file of
   *  `version`, and a fresh provider cannot load it. */
  private def assertNoVersion(root: String, version: Long): Unit = {
    val listing = new CheckpointDir(storeDir(root), hdfs.conf,
      SpillStoreSparkBridge.compressionCodec("lz4")).list()
    assert(!listing.journals.contains(version) && !listing.snapshots.contains(version), listing)
    causedBy[java.io.FileNotFoundException](load(root, version))
  }

  /** `body`'s error, which must have a `T` among its causes. */
  private def causedBy[T <: Throwable](body: => Any)(implicit t: ClassTag[T]): T = {
    val e = intercept[Throwable](body)
    Iterator.iterate(e)(_.getCause).takeWhile(_ != null).collectFirst { case c: T => c }
      .getOrElse(fail(s"expected a ${t.runtimeClass.getName} among the causes of $e", e))
  }

  /** `body` fails because the storage did (an I/O error), never because a file read as damaged. */
  private def storageError(body: => Any): Unit = {
    val e = causedBy[java.io.IOException](body)
    assert(!e.isInstanceOf[StateFile.CorruptFileException], e)
  }

  private def readBytes(p: Path): Array[Byte] = {
    val in = hdfs.fs.open(p)
    try {
      val b = new Array[Byte](hdfs.fs.getFileStatus(p).getLen.toInt)
      in.readFully(b)
      b
    } finally in.close()
  }
}

object HdfsCheckpointSuite {
  val keySchema: StructType = StructType(Seq(StructField("k", LongType)))
  val valueSchema: StructType = StructType(Seq(StructField("v", LongType)))
  private val keyProj = UnsafeProjection.create(keySchema)
  private val valueProj = UnsafeProjection.create(valueSchema)
  private def key(i: Long): UnsafeRow = keyProj(new GenericInternalRow(Array[Any](i)))
  private def value(i: Long): UnsafeRow = valueProj(new GenericInternalRow(Array[Any](i)))

  private val SnapshotName = """(\d+)\.snapshot""".r

  /**
   * 300 random puts and removes on keys drawn from [0, 500), so they collide, applied to `s`
   * (not committed) and to `model`; returns the state `s` holds afterwards.
   */
  def randomBatch(s: StateStore, rnd: Random, model: Map[Long, Long]): Map[Long, Long] =
    (1 to 300).foldLeft(model) { (m, _) =>
      val k = rnd.nextInt(500).toLong
      if (rnd.nextInt(4) == 0) { s.remove(key(k)); m - k }
      else { val x = rnd.nextLong(); s.put(key(k), value(x)); m + (k -> x) }
    }

  def contents(s: ReadStateStore): Map[Long, Long] =
    try s.iterator().map(pair => pair.key.getLong(0) -> pair.value.getLong(0)).toMap
    finally s.abort()
}
