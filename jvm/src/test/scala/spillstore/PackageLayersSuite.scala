package spillstore

import java.io.File
import java.nio.charset.StandardCharsets
import java.nio.file.Files

import scala.jdk.CollectionConverters._

import org.scalatest.funsuite.AnyFunSuite

/**
 * The package layering docs/design.md states ("Package layout and dependency direction"),
 * checked on the main sources of every line: each reference from one of spillstore's packages
 * to another points down the layers, and no references form a circle, counting each file of
 * the shims in Spark's packages as a node of its own (they are called from any layer, so a
 * shim may reference only what none of its callers sits above).
 */
class PackageLayersSuite extends AnyFunSuite {
  import PackageLayersSuite._

  private lazy val graph: Map[String, Map[String, Set[String]]] = {
    val sources = Files.walk(new File(RepoRoot.dir, "jvm/src/main").toPath).iterator.asScala
      .map(_.toFile).filter(_.getName.endsWith(".scala")).map(f => f -> code(f)).toSeq
    assert(sources.size > 50, s"found only ${sources.size} sources under jvm/src/main")
    // A shim's top-level names -> its node (several lines' twins of one file share one)
    val shims = sources.collect { case (f, c) if nodeOf(f, c).startsWith(Shims) =>
      TopLevel.findAllMatchIn(c).map(_.group(1) -> nodeOf(f, c)) }.flatten.toMap
    val edges = for {
      (file, c) <- sources
      from = nodeOf(file, c)
      to <- SpillstoreRef.findAllMatchIn(c).map(m => packageOf(m.group(1))) ++
        Identifier.findAllMatchIn(c).map(_.group(0)).flatMap(shims.get)
      if to != from
    } yield (from, to, file.getName)
    edges.groupBy(_._1).map { case (from, es) =>
      from -> es.groupBy(_._2).map { case (to, fs) => to -> fs.map(_._3).toSet } }
  }

  test("every reference between spillstore's packages points down the documented layers") {
    val up = for {
      (from, tos) <- graph.toSeq if Layers.contains(from)
      (to, files) <- tos if Layers.contains(to) && Layers(from) >= Layers(to)
    } yield s"$from -> $to (${files.toSeq.sorted.mkString(", ")})"
    info(graph.toSeq.sortBy(_._1).map { case (f, t) => s"$f -> ${t.keys.toSeq.sorted.mkString(", ")}" }
      .mkString("; "))
    assert(up.isEmpty, s"references that point up or across the layers $Layers: $up")
  }

  test("no circle of references, the shims in Spark's packages counted") {
    def reach(from: String, seen: Set[String]): Set[String] =
      graph.getOrElse(from, Map.empty).keySet.diff(seen).foldLeft(seen)((s, n) => reach(n, s + n))
    val circles = graph.keys.filter(n => reach(n, Set.empty).contains(n)).toSeq.sorted
    assert(circles.isEmpty, s"packages on a circle of references: $circles; graph: $graph")
  }
}

object PackageLayersSuite {
  private val Shims = "spark-shim "
  /** docs/design.md's layers, top (0) to bottom. */
  private val Layers = Map("(root)" -> 0, "migrate" -> 1, "recovery" -> 1, "tiered" -> 2,
    "heap" -> 3, "checkpoint" -> 4, "cold" -> 5, "memory" -> 5, "metrics" -> 6, "conf" -> 7)

  private val Package = """(?m)^package\s+([\w.]+)""".r
  private val SpillstoreRef = """\bspillstore\.(\w+)""".r
  private val TopLevel = """(?m)^(?:private\[\w+\]\s+)?(?:final\s+|abstract\s+|sealed\s+|case\s+)*(?:class|object|trait)\s+(\w+)""".r
  private val Identifier = """\b[A-Z]\w+\b""".r

  /** A file's text without comments and string literals (which name things they do not use). */
  private def code(f: File): String = {
    val text = new String(Files.readAllBytes(f.toPath), StandardCharsets.UTF_8)
    text.replaceAll("(?s)/\\*.*?\\*/", "").replaceAll("//[^\n]*", "")
      .replaceAll("(?s)\"\"\".*?\"\"\"", "\"\"").replaceAll("\"(?:\\\\.|[^\"\\\\\n])*\"", "\"\"")
  }

  private def nodeOf(file: File, code: String): String =
    Package.findFirstMatchIn(code).map(_.group(1)) match {
      case Some(p) if p == "spillstore" || p.startsWith("spillstore.") =>
        p.split('.').lift(1).getOrElse("(root)")
      case _ => Shims + file.getName.stripSuffix(".scala")
    }

  /** `spillstore.<name>`: a subpackage if `name` is one of the layers, else a root member. */
  private def packageOf(name: String): String = if (Layers.contains(name)) name else "(root)"
}
