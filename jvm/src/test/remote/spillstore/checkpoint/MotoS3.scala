package spillstore.checkpoint

import java.io.{File, IOException}
import java.net.{HttpURLConnection, InetSocketAddress, ServerSocket, Socket, URL}
import java.nio.charset.StandardCharsets
import java.nio.file.Files
import java.util.concurrent.TimeUnit

import scala.jdk.CollectionConverters._

import org.apache.commons.io.{FileUtils, IOUtils}
import org.apache.hadoop.conf.Configuration
import org.apache.hadoop.fs.FileSystem

/**
 * A real S3 API server for tests: `moto` in server mode (the project venv's, from PyPI), on a
 * loopback port, reached through S3A. Its request log (one line per request it served) is how
 * tests count requests. [[close]] stops the server and deletes its dir; a suite closes it in
 * afterAll, which runs also when tests fail.
 *
 * | state            | owner                                                          |
 * |------------------|----------------------------------------------------------------|
 * | `process`, `log` | the suite's thread: started by [[MotoS3.start]], ended by [[close]] |
 */
final class MotoS3 private (base: File, process: Process, port: Int) extends AutoCloseable {
  private val log = new File(base, "requests.log")

  /** A client conf for S3A against this server: path-style, plain HTTP, fixed credentials,
   *  requests failing in seconds, not after minutes of retries. */
  def conf: Configuration = {
    val c = new Configuration
    Seq(
      "fs.s3a.endpoint" -> s"http://127.0.0.1:$port",
      "fs.s3a.endpoint.region" -> "us-east-1",
      "fs.s3a.path.style.access" -> "true",
      "fs.s3a.connection.ssl.enabled" -> "false",
      "fs.s3a.aws.credentials.provider" -> "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider",
      "fs.s3a.access.key" -> "test",
      "fs.s3a.secret.key" -> "test",
      "fs.s3a.attempts.maximum" -> "1",
      "fs.s3a.retry.limit" -> "1",
      // A client per test: the cached one would outlive this server.
      "fs.s3a.impl.disable.cache" -> "true"
    ).foreach { case (k, v) => c.set(k, v) }
    c
  }

  def createBucket(name: String): Unit = { call("PUT", name); () }

  /** Multipart uploads begun in `bucket` and neither completed nor aborted. */
  def pendingUploads(bucket: String): Int =
    "<Upload>".r.findAllMatchIn(call("GET", s"$bucket?uploads")).size

  /** A request outside S3A (moto checks no signature): its response body. */
  private def call(method: String, target: String): String = {
    val c =
      new URL(s"http://127.0.0.1:$port/$target").openConnection().asInstanceOf[HttpURLConnection]
    c.setRequestMethod(method)
    try {
      if (c.getResponseCode != 200)
        throw new IOException(s"$method $target: HTTP ${c.getResponseCode}")
      IOUtils.toString(c.getInputStream, StandardCharsets.UTF_8)
    } finally c.disconnect()
  }

  /** Every request served so far, in order: (method, path with query). */
  def requests(): Seq[(String, String)] =
    Files.readAllLines(log.toPath, StandardCharsets.UTF_8).asScala.toSeq
      .map(MotoS3.AnsiStyle.replaceAllIn(_, "")) // the log colours every status but 200
      .flatMap {
        case MotoS3.RequestLine(method, target) => Some(method -> target)
        case _ => None
      }

  def fs(bucket: String): FileSystem = FileSystem.get(new java.net.URI(s"s3a://$bucket/"), conf)

  override def close(): Unit =
    try {
      process.descendants().forEach(p => { p.destroy(); () })
      process.destroy()
      if (!process.waitFor(20, TimeUnit.SECONDS)) process.destroyForcibly().waitFor()
    } finally FileUtils.deleteQuietly(base)
}

object MotoS3 {
  private val AnsiStyle = "\u001b\\[[0-9;]*m".r
  private val RequestLine = """.*\] "([A-Z]+) (\S+) HTTP/[\d.]+" \d+ .*""".r

  /** Starts a server; if it does not answer within a minute, it is stopped and its dir deleted. */
  def start(): MotoS3 = {
    val python = new File(sys.props("spillstore.test.python")) // build.sbt: the project venv's
    require(python.canExecute,
      s"$python not found: run `make venv` (the project's venv has moto, the tests' S3 server)")
    val base = Files.createTempDirectory("moto").toFile
    val port = {
      val s = new ServerSocket(0);
      try s.getLocalPort
      finally s.close()
    }
    val process = new ProcessBuilder(python.getPath, "-m", "moto.server", "-H", "127.0.0.1", "-p",
      port.toString)
      .redirectErrorStream(true).redirectOutput(new File(base, "requests.log")).start()
    val server = new MotoS3(base, process, port)
    try {
      val deadline = System.nanoTime() + TimeUnit.MINUTES.toNanos(1)
      while (!answers(port)) {
        if (!process.isAlive || System.nanoTime() > deadline) {
          throw new IllegalStateException(s"moto did not start on port $port: " +
            FileUtils.readFileToString(new File(base, "requests.log"), StandardCharsets.UTF_8))
        }
        Thread.sleep(100)
      }
      server
    } catch {
      case e: Throwable => server.close(); throw e
    }
  }

  private def answers(port: Int): Boolean = {
    val s = new Socket()
    try { s.connect(new InetSocketAddress("127.0.0.1", port), 200); true }
    catch { case _: java.io.IOException => false }
    finally s.close()
  }
}
