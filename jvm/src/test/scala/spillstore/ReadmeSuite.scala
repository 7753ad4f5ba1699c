package spillstore

import java.io.File
import java.nio.charset.StandardCharsets
import java.nio.file.Files

import scala.jdk.CollectionConverters._

import org.scalatest.funsuite.AnyFunSuite

import org.apache.spark.sql.internal.SqlConfKeys

import spillstore.conf.{SparkConfDocs, SparkConfs}
import spillstore.metrics.SpillStoreMetricsSource

/**
 * The docs' tables against what the code accepts and publishes: the README's conf table against
 * [[SpillStoreConf.Keys]] and [[SparkConfDocs]] (confs Spark defines), its metric table against the
 * provider's `supportedCustomMetrics`, docs/monitoring.md's table against the metrics sources'
 * registries. A key or metric added to one side only fails here.
 */
class ReadmeSuite extends AnyFunSuite {
  import ReadmeSuite._

  private def lines(file: String): Seq[String] = Files.readAllLines(
    new File(RepoRoot.dir, file).toPath, StandardCharsets.UTF_8).asScala.toSeq
  private lazy val readme = lines("README.md")

  test("the conf table lists exactly spillstore's keys, and only confs Spark defines besides") {
    val listed = names(firstTable(readme, "### Options"))
    val (own, spark) = listed.partition(_.startsWith(SpillStoreConf.Prefix))
    assertSame(own, SpillStoreConf.Keys.map(_.key).toSet, "spillstore keys")
    // Spark 4.3 has no SQL conf entry for the file manager's (spillstore reads it by name).
    val unknown = spark.filterNot(k => SqlConfKeys.defined(k) || k == SparkConfs.CheckpointFileManagerClass)
    assert(unknown.isEmpty, s"the README's conf table lists confs Spark does not define: $unknown")
    assertSame(spark, SparkConfDocs.keys.map(_.key).toSet, "Spark confs")
  }

  test("the metric table lists exactly the provider's custom metrics") {
    val published = new SpillStoreProvider().supportedCustomMetrics.map(_.name).toSet
    assertSame(names(firstTable(readme, "## Metrics")), published, "custom metrics")
  }

  test("the monitoring table lists exactly the metrics sources' metrics") {
    val registries = Seq(SpillStoreMetricsSource.forThisJvm(),
      new SpillStoreMetricsSource.Executors(staleAfterMillis = 1000L).registry())
    val published = registries.flatMap(_.getNames.asScala).toSet
    assertSame(names(firstTable(lines("docs/monitoring.md"), "## Sinks, dashboard, alerts and logs")),
      published, "metrics-system metrics")
  }

  test("the parser finds names where they are and fails on a missing section") {
    val text = Seq("## A", "", "| key | x |", "|---|---|", "| `a.b` / `c` (`src`) | `d` |",
      "| `e`, `f` | g |", "", "| `h` | i |")
    assert(names(firstTable(text, "## A")) === Seq("a.b", "c", "e", "f"))
    intercept[IllegalArgumentException](firstTable(text, "## B"))
  }

  private def assertSame(listed: Seq[String], inCode: Set[String], what: String): Unit = {
    val dup = listed.diff(listed.distinct)
    assert(dup.isEmpty, s"$what listed twice: $dup")
    val missing = inCode -- listed
    val extra = listed.toSet -- inCode
    assert(missing.isEmpty && extra.isEmpty,
      s"$what: in the code but not the docs: ${missing.toSeq.sorted}; " +
        s"in the docs but not the code: ${extra.toSeq.sorted}")
  }
}

object ReadmeSuite {
  /** The body rows of the first table after `heading` (header and separator rows dropped). */
  def firstTable(lines: Seq[String], heading: String): Seq[String] = {
    val at = lines.indexWhere(_.trim == heading)
    require(at >= 0, s"no section $heading")
    lines.drop(at + 1).dropWhile(!_.startsWith("|")).takeWhile(_.startsWith("|")).drop(2)
  }

  private val Parenthesized = """\([^)]*\)""".r
  private val Code = "`([^`]+)`".r

  /** The code-formatted names in each row's first cell, leaving out annotations in parentheses. */
  def names(rows: Seq[String]): Seq[String] = rows.flatMap { row =>
    val first = row.stripPrefix("|").split('|').head
    Code.findAllMatchIn(Parenthesized.replaceAllIn(first, "")).map(_.group(1)).toSeq
  }
}
