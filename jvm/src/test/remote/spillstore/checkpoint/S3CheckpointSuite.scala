package spillstore.checkpoint

import java.io.IOException
import java.nio.ByteBuffer
import java.util.UUID

import scala.util.Random

import org.apache.hadoop.conf.Configuration
import org.apache.hadoop.fs.Path
import org.apache.hadoop.util.VersionInfo
import org.scalatest.BeforeAndAfterAll
import org.scalatest.concurrent.Eventually.eventually
import org.scalatest.concurrent.PatienceConfiguration.Timeout
import org.scalatest.time.{Seconds, Span}
import org.scalatest.funsuite.AnyFunSuite

import org.apache.spark.sql.execution.streaming.state.SpillStoreSparkBridge
import org.apache.spark.sql.execution.streaming.state.SpillStoreSparkShim.CheckpointFileManager
import org.apache.spark.sql.internal.SQLConf

import spillstore.SpillStoreProvider
import spillstore.checkpoint.HdfsCheckpointSuite.{contents, keySchema, randomBatch, valueSchema}
import spillstore.conf.SparkConfs
import spillstore.migrate.LineProviders

/**
 * spillstore's provider with its checkpoint on S3 through S3A, against a real S3 API server
 * ([[MotoS3]]), whose request log shows what a commit costs: S3A publishes a file whole when
 * its stream closes, so a journal is written straight to its name ([[AtomicOutput.Direct]]).
 * Every line with the `remote` test dir runs it, with the hadoop-aws of the Hadoop its Spark
 * ships.
 *
 * | state    | owner                                                                   |
 * |----------|-------------------------------------------------------------------------|
 * | `s3`     | the suite's thread: started in beforeAll, closed (and deleted) in afterAll |
 */
class S3CheckpointSuite extends AnyFunSuite with BeforeAndAfterAll {
  private val bucket = "spillstore-test"
  private var s3: MotoS3 = _

  override def beforeAll(): Unit = {
    super.beforeAll()
    s3 = MotoS3.start()
    s3.createBucket(bucket)
  }

  override def afterAll(): Unit =
    try if (s3 != null) s3.close()
    finally super.afterAll()

  /** Hadoop before 3.4: S3A cannot skip a create's check that its name is no directory (one
   *  listing), and deletes the parent's directory markers after every file unless told to keep
   *  them (the README's advice for Spark 3.5). */
  private val hadoop33 = VersionInfo.getVersion.startsWith("3.3.")

  private def s3Conf: Configuration = {
    val c = s3.conf
    if (hadoop33) c.set("fs.s3a.directory.marker.retention", "keep")
    c
  }

  /** Hadoop 3.3's listing of `<version>.journal/`, to fail the create if it is a directory. */
  private def probe(key: String, version: Int): String = {
    val (bucketName, prefix) = key.span(_ != '/')
    s"/$bucketName/?list-type=2&delimiter=/&max-keys=2&prefix=${prefix.drop(1)}/0/0/$version.journal/&fetch-owner=false"
  }

  private def newRoot(): String = s"s3a://$bucket/ckpt-${UUID.randomUUID()}"

  private def withProvider[T](root: String, hadoopConf: Configuration = s3Conf)(
      f: SpillStoreProvider => T): T = {
    val p = LineProviders.open(root, keySchema, valueSchema, new SQLConf, hadoopConf)
    try f(p)
    finally p.close()
  }

  private def load(root: String, v: Long): Map[Long, Long] =
    withProvider(root)(p => contents(p.getReadStore(v)))

  /** The requests each of `batches` commits made (after a first batch, which lists the dir). */
  private def requestsPerCommit(root: String, hadoopConf: Configuration, batches: Int)
      : (Seq[Map[Long, Long]], Seq[Seq[(String, String)]]) =
    withProvider(root, hadoopConf) { p =>
      val rnd = new Random(root.hashCode)
      var states = Seq(Map.empty[Long, Long])
      def commitOne(): Unit = {
        val s = p.getStore(states.size - 1L)
        states :+= randomBatch(s, rnd, states.last)
        assert(s.commit() === states.size - 1)
      }
      commitOne()
      val perCommit = (1 to batches).map { _ =>
        val before = s3.requests().size
        commitOne()
        s3.requests().drop(before)
      }
      (states, perCommit)
    }

  test(
    "a journal on S3A is one PUT to its name (Hadoop 3.3: after one listing): no temp file, copy, delete or existence check") {
    val root = newRoot()
    val key = root.stripPrefix("s3a://")
    val (states, perCommit) = requestsPerCommit(root, s3Conf, batches = 5)
    perCommit.zipWithIndex.foreach { case (requests, i) =>
      val version = i + 2
      val put = "PUT" -> s"/$key/0/0/$version.journal"
      val expected = if (hadoop33) Seq("GET" -> probe(key, version), put) else Seq(put)
      assert(requests === expected, s"commit of version $version")
    }
    for (v <- states.indices) assert(load(root, v) === states(v), s"version $v")
  }

  test(
    "through Spark's file manager (a temp file, then a rename) the same commit costs several times the requests") {
    val conf = s3Conf
    conf.set(SparkConfs.CheckpointFileManagerClass,
      CheckpointFileManager.create(new Path(newRoot()), conf).getClass.getName)
    val (_, viaRename) = requestsPerCommit(newRoot(), conf, batches = 3)
    val (_, direct) = requestsPerCommit(newRoot(), s3Conf, batches = 3)
    info(s"requests per commit: through the file manager ${viaRename.map(_.size)} " +
      s"(${viaRename.head.map(r => r._1 + " " + r._2).mkString(", ")}), direct ${direct.map(_.size)}")
    // The temp file, deleted after its copy.
    assert(viaRename.forall(_.exists { case (m, t) => m == "DELETE" && t.endsWith(".tmp") }),
      viaRename)
    assert(viaRename.map(_.size).min >= 3 * direct.map(_.size).max)
  }

  test(
    "snapshots on S3A are bases: a fresh provider loads every version exactly without the journals before them") {
    val root = newRoot()
    val sqlConf = new SQLConf
    sqlConf.setConf(SQLConf.STATE_STORE_MIN_DELTAS_FOR_SNAPSHOT, 3)
    val states = {
      val p = LineProviders.open(root, keySchema, valueSchema, sqlConf, s3Conf)
      try {
        val rnd = new Random(2)
        (1 to 8).foldLeft(Seq(Map.empty[Long, Long])) { (acc, _) =>
          val s = p.getStore(acc.size - 1L)
          val next = randomBatch(s, rnd, acc.last)
          s.commit()
          p.doMaintenance()
          acc :+ next
        }
      } finally p.close()
    }
    val fs = s3.fs(bucket)
    val names = fs.listStatus(new Path(root, "0/0")).map(_.getPath.getName).toSet
    val snapshots =
      names.collect { case n if n.endsWith(".snapshot") => n.stripSuffix(".snapshot").toInt }
    assert(snapshots.nonEmpty, names)
    val base = snapshots.max
    (1 to base).foreach(v => assert(fs.delete(new Path(root, s"0/0/$v.journal"), false)))
    for (v <- base to 8) assert(load(root, v) === states(v), s"version $v")
  }

  test(
    "a write that fails on its way leaves nothing: no file, and no multipart upload of its parts") {
    val conf = s3Conf
    conf.set("fs.s3a.multipart.size", "5M") // S3's smallest part: a 12 MB file uploads two first
    val root = newRoot()
    val dir =
      new CheckpointDir(new Path(root, "0/0"), conf, SpillStoreSparkBridge.compressionCodec("lz4"))
    val before = s3.requests().size
    val random = new Random(3)
    intercept[IOException] {
      dir.write(StateFile.Snapshot, 7) { w =>
        (1 to 12 * 1024).foreach { i =>
          val value = new Array[Byte](1024)
          random.nextBytes(value)
          w.put(ByteBuffer.allocate(4).putInt(i).array(), value)
        }
        throw new IOException("the state could not be read")
      }
    }
    assert(dir.list() === CheckpointDir.Listing(Set.empty, Set.empty))
    assert(!s3.fs(bucket).exists(dir.file(StateFile.Snapshot, 7)))
    // A multipart upload was begun (S3A does that on the writer's thread once a part is full;
    // whether a part's upload, on S3A's pool, reaches the server before the abort cancels it
    // depends on scheduling), and it is aborted (S3A's abort may finish in the background).
    eventually(Timeout(Span(20, Seconds))) {
      val requests = s3.requests().drop(before)
      assert(requests.exists { case (m, t) => m == "POST" && t.contains("?uploads") }, requests)
      assert(requests.exists { case (m, t) => m == "DELETE" && t.contains("uploadId=") }, requests)
      assert(s3.pendingUploads(bucket) === 0)
    }
  }
}
