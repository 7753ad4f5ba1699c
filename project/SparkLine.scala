import java.io.File
import java.nio.charset.StandardCharsets
import java.nio.file.Files

import scala.collection.JavaConverters._

/** A Spark line spillstore is built for: its Spark version (the default line's comes from the
 *  pyspark wheel's jars, the others' from the Maven repository), its Scala version, the Hadoop
 *  version its Spark ships (hadoop-client-api: the tests' HDFS mini cluster is taken at that
 *  version), its roles (`default`, `servers`), the adapter source dirs (under jvm/src/main) it
 *  compiles with the core and its test dirs (under jvm/src/test: the conformance suite and its
 *  exclusions). */
final case class SparkLine(line: String, sparkVersion: String, scala: String, hadoop: String,
    roles: Set[String], dirs: Seq[String], testDirs: Seq[String]) {
  def scalaBinary: String = scala.split('.').take(2).mkString(".")
  def jarName: String = s"spillstore-spark${line}_$scalaBinary.jar"
  def isDefault: Boolean = roles("default")
}

object SparkLine {
  /**
   * The lines of `file` (python/spillstore/spark_lines.txt: line, Spark, Scala and Hadoop
   * versions, roles), each with its dirs from `dirs`; fails naming the file when the two
   * disagree or a row is malformed.
   */
  def read(file: File, dirs: Map[String, (Seq[String], Seq[String])]): Map[String, SparkLine] = {
    def fail(msg: String): Nothing = sys.error(s"$file: $msg")
    val rows = Files.readAllLines(file.toPath, StandardCharsets.UTF_8).asScala
      .map(_.trim).filter(l => l.nonEmpty && !l.startsWith("#")).map(_.split("\\s+").toSeq)
    val lines = rows.map {
      case Seq(line, spark, scala, hadoop, roles) =>
        val (main, test) =
          dirs.getOrElse(line, fail(s"line $line has no adapter dirs in build.sbt"))
        val r = if (roles == "-") Set.empty[String] else roles.split(',').toSet
        (r -- Set("default", "servers")).foreach(x => fail(s"line $line: unknown role $x"))
        if (r("servers") != test.contains("remote")) {
          fail(s"line $line: the servers role and build.sbt's `remote` test dir disagree")
        }
        line -> SparkLine(line, spark, scala, hadoop, r, main, test)
      case row =>
        fail(s"expected 5 columns (line spark scala hadoop roles), got: ${row.mkString(" ")}")
    }.toMap
    if (lines.size != rows.size) fail("a line is listed twice")
    if (lines.values.count(_.isDefault) != 1) fail("exactly one line must have the default role")
    (dirs.keySet -- lines.keySet).foreach(l =>
      fail(s"build.sbt has adapter dirs for line $l, which is not listed"))
    lines
  }
}
