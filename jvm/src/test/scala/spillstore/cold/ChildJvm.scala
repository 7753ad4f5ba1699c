package spillstore.cold

import java.io.{BufferedReader, File, InputStreamReader}
import java.util.concurrent.TimeUnit

import scala.collection.mutable.ArrayBuffer

/** Test helpers that run a `main` of the test classes in a child JVM. */
object ChildJvm {
  /**
   * Starts `main` with `args` on this JVM's class path and temp dir, under `umask` if given
   * (through `sh`, as a JVM cannot set its own), and waits for the first output line starting
   * with `prefix`; returns the child and the rest of that line. The child's later output is
   * drained, so that it never blocks on a full pipe.
   */
  def start(main: String, args: Seq[String], prefix: String, umask: Option[String] = None,
      jvmOptions: Seq[String] = Seq("-Xmx256m")): (Process, String) = {
    val java = new File(System.getProperty("java.home"), "bin/java").getPath
    val jvm = Seq(java, "-XX:TieredStopAtLevel=1") ++ jvmOptions ++ Seq(
      s"-Djava.io.tmpdir=${System.getProperty("java.io.tmpdir")}", "-cp",
      System.getProperty("java.class.path"), main) ++ args
    val cmd = umask.fold(jvm)(u => Seq("sh", "-c", s"umask $u && exec " + "\"$0\" \"$@\"") ++ jvm)
    val child = new ProcessBuilder(cmd: _*).redirectErrorStream(true).start()
    val out = new BufferedReader(new InputStreamReader(child.getInputStream))
    val before = ArrayBuffer.empty[String]
    val seen = Iterator.continually(out.readLine()).takeWhile(_ != null).take(500)
      .find { l => before += l; l.startsWith(prefix) }
    val drain = new Thread(() => while (out.readLine() != null) {}, s"$main-output")
    drain.setDaemon(true)
    drain.start()
    if (seen.isEmpty) stop(child)
    assert(seen.isDefined,
      s"the child JVM ($main) never printed '$prefix' (exit ${
          if (child.isAlive) "none yet" else child.exitValue()
        }):\n${before.takeRight(20).mkString("\n")}")
    (child, seen.get.stripPrefix(prefix))
  }

  /** SIGKILLs `child` (no shutdown hook runs) and waits for it to be gone. */
  def stop(child: Process): Unit = if (child != null) {
    child.destroyForcibly()
    child.waitFor(30, TimeUnit.SECONDS)
  }

  /** Asks a child that waits for a line on stdin to exit; returns its exit code. */
  def exit(child: Process): Int = {
    child.getOutputStream.write("exit\n".getBytes)
    child.getOutputStream.flush()
    assert(child.waitFor(30, TimeUnit.SECONDS), "the child JVM did not exit")
    child.exitValue()
  }
}
