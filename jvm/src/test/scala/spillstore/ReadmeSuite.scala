package spillstore

import org.scalatest.funsuite.AnyFunSuite

import org.apache.spark.sql.internal.SqlConfKeys

import spillstore.conf.{SparkConfDocs, SparkConfs}
import spillstore.metrics.SpillStoreMetrics

/**
 * The docs' tables (README.md's conf and metric tables, docs/monitoring.md's) against what
 * [[DocTables]] renders from the code now, and what rendering cannot hold by itself: each key
 * and metric documented once, and Spark's confs named right.
 */
class ReadmeSuite extends AnyFunSuite {
  DocTables.blocks.foreach { b =>
    test(s"${b.file}: the ${b.name} is what the code renders") {
      val inFile = DocTables.inFile(DocTables.read(b.file), b)
      val rendered = b.render()
      val at = inFile.zipAll(rendered, "(none)", "(none)").indexWhere { case (f, r) => f != r }
      if (at >= 0) fail(s"${b.file}'s ${b.name} differs from what the code renders, from the " +
        s"table's line ${at + 1}:\n  file: ${inFile.lift(at).getOrElse("(none)")}\n  code: " +
        s"${rendered.lift(at).getOrElse("(none)")}\nRun `make doc-tables` to rewrite it.")
    }
  }

  test("each conf key and each metric is documented once") {
    val keys = (SparkConfDocs.keys ++ SpillStoreConf.Keys).map(_.key)
    val metrics = SpillStoreMetrics.all.map(_.name)
    for ((what, names) <- Seq("conf keys" -> keys, "metrics" -> metrics)) {
      val twice = names.diff(names.distinct)
      assert(twice.isEmpty, s"$what documented twice: $twice")
    }
  }

  test("the Spark confs documented are confs Spark defines") {
    // Spark 4.3 has no SQL conf entry for the file manager's (spillstore reads it by name).
    val unknown = SparkConfDocs.keys.map(_.key)
      .filterNot(k => SqlConfKeys.defined(k) || k == SparkConfs.CheckpointFileManagerClass)
    assert(unknown.isEmpty, s"documented as Spark confs, but Spark does not define them: $unknown")
  }

  test("a block is replaced between its markers; a file without them fails") {
    val b = DocTables.Block("f.md", "t", () => Seq("| new |"))
    val text = Seq("# F", b.begin, "| old |", "| rows |", DocTables.End, "after")
    assert(DocTables.inFile(text, b) === Seq("| old |", "| rows |"))
    assert(DocTables.rewritten(text, b) === Seq("# F", b.begin, "| new |", DocTables.End, "after"))
    intercept[IllegalArgumentException](DocTables.inFile(Seq("# F", "| old |"), b))
    intercept[IllegalArgumentException](DocTables.inFile(Seq(b.begin, "| old |"), b))
  }
}
