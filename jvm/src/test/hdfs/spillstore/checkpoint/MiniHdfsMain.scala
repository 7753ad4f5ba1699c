package spillstore.checkpoint

import java.io.{BufferedReader, InputStreamReader}
import java.nio.charset.StandardCharsets

/**
 * [[MiniHdfs]] in a JVM of its own, for the Python tests (tests/servers.py, `hdfs_server`).
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
    val hdfs = MiniHdfs.start()
    Runtime.getRuntime.addShutdownHook(new Thread(() => stop(hdfs), "minihdfs-stop"))
    val in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8))
    def answer(line: String): Unit = {
      System.out.println(line)
      System.out.flush()
    }
    answer(s"hdfs ${hdfs.uri}")
    Iterator.continually(in.readLine()).takeWhile(_ != null).map(_.trim).foreach {
      case "datanode down" =>
        hdfs.withDataNodeDown {
          answer("datanode down")
          Iterator.continually(in.readLine()).takeWhile(l => l != null && l.trim != "datanode up")
            .foreach(l => answer(s"unexpected while the datanode is down: $l"))
        }
        answer("datanode up")
      case "" =>
      case other => answer(s"unknown command: $other")
    }
    stop(hdfs)
    System.exit(0) // Hadoop's non-daemon threads would keep the JVM alive after main
  }
}
