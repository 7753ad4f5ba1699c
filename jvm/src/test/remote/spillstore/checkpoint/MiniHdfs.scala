package spillstore.checkpoint

import java.io.File
import java.net.URI
import java.nio.file.Files

import org.apache.commons.io.FileUtils
import org.apache.hadoop.conf.Configuration
import org.apache.hadoop.fs.{FileSystem, Path}
import org.apache.hadoop.hdfs.MiniDFSCluster
import org.apache.logging.log4j.{Level, LogManager}
import org.apache.logging.log4j.core.config.Configurator

import org.apache.spark.internal.Logging

/**
 * A real HDFS for tests: Hadoop's MiniDFSCluster, one namenode and one datanode on loopback
 * ports, its storage in a temp dir under `java.io.tmpdir` (the tests' jvm/target/test-tmp).
 * [[close]] shuts both down and deletes that dir (a suite closes it in afterAll, which runs
 * also when tests fail).
 *
 * | state                  | owner                                         |
 * |------------------------|-----------------------------------------------|
 * | `cluster`'s nodes      | the thread that calls the stop / restart methods (one at a time) |
 * | `stoppedDataNode`      | the same thread                               |
 * | Hadoop's log level     | [[MiniHdfs.start]] lowers it, [[close]] restores it |
 */
final class MiniHdfs private (base: File, cluster: MiniDFSCluster, hadoopLogLevel: Level)
    extends AutoCloseable {
  private var stoppedDataNode: Option[MiniDFSCluster.DataNodeProperties] = None

  /** The namenode, `hdfs://localhost:<port>`: the same after a namenode restart. */
  val uri: URI = cluster.getURI

  /** A copy of the client conf the cluster was built with (the fast failures below). */
  def conf: Configuration = new Configuration(cluster.getConfiguration(0))

  /** A client of this HDFS (Hadoop's cached one: do not close it). */
  def fs: FileSystem = FileSystem.get(uri, conf)

  def path(p: String): Path = new Path(uri.toString + p)

  /** Runs `body` with the datanode stopped: blocks can be neither written nor read. */
  def withDataNodeDown[T](body: => T): T = {
    stoppedDataNode = Some(cluster.stopDataNode(0))
    try body
    finally restartDataNode()
  }

  /** Runs `body` with the namenode stopped: no metadata call succeeds. */
  def withNameNodeDown[T](body: => T): T = {
    cluster.shutdownNameNode(0)
    try body
    finally cluster.restartNameNode(0) // same port; waits for the datanode and safe mode
  }

  /**
   * On the same ports, so the namenode's view of it stays valid; if another process took one
   * of them while it was down (a busy machine opens ephemeral ports all the time), on new ports:
   * it registers again and the namenode hands out its new address.
   */
  private def restartDataNode(): Unit = stoppedDataNode.foreach { dn =>
    stoppedDataNode = None
    try cluster.restartDataNode(dn, true)
    catch {
      case e: Exception
          if Iterator.iterate[Throwable](e)(_.getCause).takeWhile(_ != null)
            .exists(_.isInstanceOf[java.net.BindException]) =>
        cluster.restartDataNode(dn, false)
    }
    cluster.waitActive()
  }

  override def close(): Unit =
    try {
      try FileSystem.get(uri, conf).close() // Hadoop caches clients per namenode: drop ours
      finally cluster.shutdown(true)
    } finally {
      FileUtils.deleteQuietly(base)
      Configurator.setLevel(MiniHdfs.HadoopLogger, hadoopLogLevel)
    }
}

object MiniHdfs extends Logging {
  private val HadoopLogger = "org.apache.hadoop"

  /**
   * Starts a cluster; if starting fails, its dir is deleted. The cluster's servers log every
   * block and audit event at INFO (lines where Spark's defaults log INFO, as on 3.5): Hadoop
   * logs warnings only while it runs.
   */
  def start(): MiniHdfs = {
    val base = Files.createTempDirectory("minihdfs").toFile
    // Spark configures log4j at its first log call, which would undo a level set before it.
    logInfo(s"Starting HDFS (MiniDFSCluster) under $base")
    val hadoopLogLevel = LogManager.getLogger(HadoopLogger).getLevel
    Configurator.setLevel(HadoopLogger, Level.WARN)
    try {
      val conf = new Configuration
      conf.set(MiniDFSCluster.HDFS_MINIDFS_BASEDIR, base.getPath)
      conf.setInt("dfs.replication", 1)
      // Fail fast while a node is down, instead of the clients' minutes of retries.
      conf.setInt("ipc.client.connect.max.retries", 0)
      conf.setInt("ipc.client.connect.max.retries.on.timeouts", 0)
      conf.setInt("dfs.client.block.write.retries", 1)
      conf.setBoolean("dfs.client.block.write.replace-datanode-on-failure.enable", false)
      conf.setInt("dfs.client.max.block.acquire.failures", 0)
      // A restarted namenode leaves safe mode as soon as the datanode has reported.
      conf.setInt("dfs.namenode.safemode.extension", 0)
      conf.setInt("dfs.heartbeat.interval", 1)
      val cluster = new MiniDFSCluster.Builder(conf).numDataNodes(1).storagesPerDatanode(1).build()
      cluster.waitActive()
      new MiniHdfs(base, cluster, hadoopLogLevel)
    } catch {
      case e: Throwable =>
        FileUtils.deleteQuietly(base)
        Configurator.setLevel(HadoopLogger, hadoopLogLevel)
        throw e
    }
  }
}
