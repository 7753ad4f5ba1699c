package spillstore.checkpoint

import java.io.{BufferedReader, File, InputStreamReader, PrintWriter}
import java.nio.charset.StandardCharsets

import org.apache.logging.log4j.{Level, LogManager}
import org.apache.logging.log4j.core.{LogEvent, LoggerContext}
import org.apache.logging.log4j.core.appender.AbstractAppender
import org.apache.logging.log4j.core.config.{LoggerConfig, Property}

/**
 * [[MiniHdfs]] in a JVM of its own, for the Python tests (tests/servers.py, `hdfs_server`).
 * `MiniHdfsMain <audit log>` writes the namenode's audit log to that file, one event a line,
 * `<epoch millis>\t<audit message>` (see [[AuditFile]]).
 * Prints `hdfs <namenode URI>` on a line of its own once the cluster is up, then reads commands
 * from stdin, one a line, and answers each on stdout when it is done:
 *   `datanode down`  stops the datanode (answer `datanode down`) until `datanode up` (answer
 *                    `datanode up`, printed once the restarted datanode has registered)
 * It shuts the cluster down and deletes its dir when stdin closes or on SIGTERM (a shutdown hook),
 * whichever comes first.
 *
 * | state     | owner                                                          |
 * |-----------|----------------------------------------------------------------|
 * | `hdfs`    | the main thread until stdin closes; then [[stop]], called once |
 * | `stopped` | [[stop]], from the main thread or the shutdown hook            |
 */
object MiniHdfsMain {
  private var stopped = false

  private def stop(hdfs: MiniHdfs): Unit = synchronized {
    if (!stopped) {
      stopped = true
      hdfs.close()
    }
  }

  def main(args: Array[String]): Unit = {
    val hdfs = MiniHdfs.start() // after Spark's log4j setup, which would drop the audit logger
    args.headOption.foreach(path => AuditFile.attach(new File(path)))
    Runtime.getRuntime.addShutdownHook(new Thread(() => stop(hdfs), "minihdfs-stop"))
    val in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8))
    def answer(line: String): Unit = {
      System.out.println(line)
      System.out.flush()
    }
    answer(s"hdfs ${hdfs.uri}")
    // A command that fails ends the JVM (Hadoop's non-daemon threads would keep it alive after
    // main), so that the test waiting for its answer reads the end of the stream, not nothing.
    val status =
      try {
        Iterator.continually(in.readLine()).takeWhile(_ != null).map(_.trim).foreach {
          case "datanode down" =>
            hdfs.withDataNodeDown {
              answer("datanode down")
              Iterator.continually(in.readLine()).takeWhile(l =>
                l != null && l.trim != "datanode up")
                .foreach(l => answer(s"unexpected while the datanode is down: $l"))
            }
            answer("datanode up")
          case "" =>
          case other => answer(s"unknown command: $other")
        }
        0
      } catch {
        case e: Throwable =>
          e.printStackTrace()
          1
      }
    try stop(hdfs)
    finally System.exit(status)
  }
}

/**
 * The namenode's audit log (Hadoop's `FSNamesystem.audit` logger, at INFO: the default audit
 * logger writes nothing below it), appended to a file and flushed per event, so that a reader
 * sees every call that has returned. Written synchronously by the RPC handler threads before
 * they answer (neither Hadoop line makes it asynchronous by default), so a call that returned
 * before another one started comes first. Through log4j2's API, which Spark binds slf4j to on
 * every line.
 *
 * | state    | owner                                                    |
 * |----------|----------------------------------------------------------|
 * | `out`    | [[append]], synchronized (the namenode's handler threads) |
 */
private final class AuditFile(file: File)
    extends AbstractAppender("minihdfs-audit", null, null, true, Property.EMPTY_ARRAY) {
  private val out = new PrintWriter(file, StandardCharsets.UTF_8.name)

  override def append(event: LogEvent): Unit = synchronized {
    out.print(s"${event.getTimeMillis}\t${event.getMessage.getFormattedMessage}\n")
    out.flush()
  }
}

private object AuditFile {
  private val Logger = "org.apache.hadoop.hdfs.server.namenode.FSNamesystem.audit"

  def attach(file: File): Unit = {
    val context = LogManager.getContext(false).asInstanceOf[LoggerContext]
    val appender = new AuditFile(file)
    appender.start()
    // Not additive: audit events go to the file only, not to the JVM's log.
    val logger = new LoggerConfig(Logger, Level.INFO, false)
    logger.addAppender(appender, Level.INFO, null)
    context.getConfiguration.addLogger(Logger, logger)
    context.updateLoggers()
  }
}
