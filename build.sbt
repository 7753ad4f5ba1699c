// spillstore: a Spark Structured Streaming state store provider, built once per Spark line.
//
// One core (jvm/src/main/scala: heap tier, cold tier, memory manager, journal and snapshot
// files, recovery, tiered state, the provider's and store's logic) is compiled for every line
// from the same sources, together with thin adapters for that line's API:
//   jvm/src/main/spark-<line>     what only that line needs (3.5, 4.0, 4.1, 4.2, 4.3)
//   jvm/src/main/spark-4.x        shared by every 4.x line (column families, KeyStateEncoderSpec)
//   jvm/src/main/spark-4.1+       shared by 4.1, 4.2, 4.3 (checkpointing package, release, lists)
//   jvm/src/main/spark-4.2+       shared by 4.2, 4.3 (getStore(version, ckptId, force, loadEmpty))
//   jvm/src/main/spark-pre4.1     shared by 3.5, 4.0 (no commit or snapshot reports to the coordinator)
//   jvm/src/main/spark-pre4.2     shared by 3.5, 4.0, 4.1 (SQLMetric._value is private)
//   jvm/src/main/spark-pre4.3     shared by 3.5 .. 4.2 (custom metrics without isSnapshot)
// One jar per line: target/spillstore-spark<line>_<scala binary>.jar.
// Tests: jvm/src/test/scala holds the version-free unit suites, run on the default line (4.3);
// jvm/src/test/spark-<dir> hold Spark's StateStoreSuiteBase run per line (its testDirs);
// jvm/src/test/two-threads what the lines where one task can call its store from two threads
// run (3.5; 4.3 with pipelined Python runners); jvm/src/test/remote checkpoints on a real HDFS
// and S3 server (3.5 and 4.3); jvm/src/test/every-line what every line's tests share (the
// package layers, a fresh executor scope per test).
//
// Spark is never packaged (Provided). 3.5, 4.0, 4.1 and 4.2 come from the Maven repository at
// each line's own version. Spark 4.3.0 is not on the Maven repository this project can reach,
// but pyspark 4.3.0 is on PyPI and ships Spark's exact jars, so the 4.3 line (project
// `spillstore`, the default line, with the JVM unit suites) compiles against <venv>/pyspark/jars.
import java.io.File

// The one place the version is written: python/spillstore/VERSION (the Python package ships it,
// sbt reads it here, the jars' manifests and spillstore.BuildInfo record it).
val spillstoreVersion = IO.read(file("python/spillstore/VERSION")).trim

// Newest Spark test jars on Maven: StateStoreSuiteBase and its helpers, run against 4.3.0.
val sparkTestJarsVersion = "4.2.0"

// Each line's adapter dirs (under jvm/src/main) and test dirs (under jvm/src/test): the
// build's part of a line. The lines themselves, their versions and roles:
// python/spillstore/spark_lines.txt, which the Makefile and the Python package read too.
val lineDirs: Map[String, (Seq[String], Seq[String])] = Map(
  "3.5" -> (Seq("spark-3.5", "spark-pre4.1", "spark-pre4.2", "spark-pre4.3"),
    Seq("spark-3.5", "two-threads", "remote")),
  "4.0" -> (Seq("spark-4.x", "spark-4.0", "spark-pre4.1", "spark-pre4.2", "spark-pre4.3"),
    Seq("spark-4.x", "spark-4.0")),
  "4.1" -> (Seq("spark-4.x", "spark-4.1+", "spark-4.1", "spark-pre4.2", "spark-pre4.3"),
    Seq("spark-4.x", "spark-4.1+", "spark-4.1")),
  "4.2" -> (Seq("spark-4.x", "spark-4.1+", "spark-4.2+", "spark-4.2", "spark-pre4.3"),
    Seq("spark-4.x", "spark-4.1+", "spark-4.2")),
  "4.3" -> (Seq("spark-4.x", "spark-4.1+", "spark-4.2+", "spark-4.3"),
    Seq("spark-4.x", "spark-4.1+", "spark-4.3", "two-threads", "remote")))

val lines: Map[String, SparkLine] =
  SparkLine.read(file("python/spillstore/spark_lines.txt"), lineDirs)
val defaultLine: SparkLine = lines.values.find(_.isDefault).get
// The default line compiles against the pyspark wheel's jars, not a Maven artifact.
val sparkVersion = defaultLine.sparkVersion

def pysparkJarsDir(root: File): File = {
  val fromEnv = sys.env.get("SPILLSTORE_SPARK_JARS").map(new File(_))
  lazy val fromVenv = Option(new File(root, ".venv/lib").listFiles()).toSeq.flatten
    .map(py => new File(py, "site-packages/pyspark/jars"))
    .find(_.isDirectory)
  fromEnv.orElse(fromVenv).getOrElse(sys.error(
      s"Spark $sparkVersion jars not found: run `make venv` (installs pyspark==$sparkVersion " +
        "into .venv) or set SPILLSTORE_SPARK_JARS to a directory of Spark 4.3.0 jars"))
}

// Spark on JDK 17 needs these opens (Spark's launcher adds the same).
val sparkJavaOpens = Seq(
  "java.base/java.lang", "java.base/java.lang.invoke", "java.base/java.lang.reflect",
  "java.base/java.io", "java.base/java.net", "java.base/java.nio", "java.base/java.util",
  "java.base/java.util.concurrent", "java.base/java.util.concurrent.atomic",
  "java.base/jdk.internal.ref", "java.base/sun.nio.ch", "java.base/sun.nio.cs",
  "java.base/sun.security.action", "java.base/sun.util.calendar"
).map(m => s"--add-opens=$m=ALL-UNNAMED")

// The Python tests' servers (tests/servers.py) on the lines that run the `remote` test dir: the
// class path of the child JVM that runs MiniDFSCluster (the line's test class path), and the
// jars PySpark needs for s3a:// (hadoop-aws at the line's Hadoop version with its AWS SDK
// bundle, kept in a configuration of their own, off every other class path).
val S3a = config("s3a").hide
val serverClasspaths = taskKey[Seq[File]](
  "Writes target/hdfs-classpath-<line>.txt and target/s3a-jars-<line>.txt for tests/servers.py")

def serverSettings(l: SparkLine): Seq[Setting[_]] = if (!l.testDirs.contains("remote")) Nil
else Seq(
  ivyConfigurations += S3a,
  libraryDependencies += "org.apache.hadoop" % "hadoop-aws" % l.hadoop % S3a,
  serverClasspaths := {
    val target = (ThisBuild / baseDirectory).value / "target"
    val hdfs = target / s"hdfs-classpath-${l.line}.txt"
    val s3a = target / s"s3a-jars-${l.line}.txt"
    IO.write(hdfs, (Test / fullClasspath).value.files.mkString(File.pathSeparator) + "\n")
    // spark.jars takes a comma-separated list.
    IO.write(s3a, update.value.select(configurationFilter(S3a.name)).mkString(",") + "\n")
    Seq(hdfs, s3a)
  }
)

/** What every line's project shares: the core and the line's adapter dirs, one jar. */
def lineSettings(l: SparkLine): Seq[Setting[_]] = serverSettings(l) ++ Seq(
  // The `remote` test dir's servers' clients, at the Hadoop version of the line's Spark: HDFS
  // (Hadoop's MiniDFSCluster, shaded as hadoop-client-api is: its client half comes with Spark)
  // and S3A (hadoop-aws and the AWS SDK it names, as users add them).
  libraryDependencies ++= (if (l.testDirs.contains("remote")) Seq(
                             ("org.apache.hadoop" % "hadoop-client-minicluster" % l.hadoop % Test).intransitive(),
                             "org.apache.hadoop" % "hadoop-aws" % l.hadoop % Test)
                           else Nil),
  organization := "io.spillstore",
  name := s"spillstore-spark${l.line}",
  moduleName := name.value,
  version := spillstoreVersion,
  scalaVersion := l.scala,
  scalacOptions ++= Seq("-deprecation", "-feature", "-unchecked", "-Xlint:-unused,_", "-release",
    "17"),
  javacOptions ++= Seq("--release", "17"),
  Compile / unmanagedSourceDirectories := {
    val main = (ThisBuild / baseDirectory).value / "jvm" / "src" / "main"
    (main / "scala") +: l.dirs.map(main / _)
  },
  Compile / packageBin / artifactPath := (ThisBuild / baseDirectory).value / "target" / l.jarName,
  // The jar says which Spark line it was built for: `spillstore.configure` and the provider
  // refuse it on another line (BuildInfo carries the same facts into the code).
  Compile / packageBin / packageOptions += Package.ManifestAttributes(
    "Spillstore-Spark-Line" -> l.line, "Spillstore-Scala-Binary" -> l.scalaBinary),
  Compile / sourceGenerators += Def.task {
    val q = "\""
    val allLines = lines.values.toSeq.sortBy(_.line)
      .map(o => s"$q${o.line}$q -> $q${o.scalaBinary}$q").mkString(", ")
    val out = (Compile / sourceManaged).value / "spillstore" / "BuildInfo.scala"
    IO.write(out,
      s"""package spillstore
         |
         |/** Generated by build.sbt: what this jar is. */
         |object BuildInfo {
         |  val Version = "${version.value}"
         |  /** The Spark line (major.minor) this jar is compiled against. */
         |  val SparkLine = "${l.line}"
         |  val ScalaBinary = "${l.scalaBinary}"
         |  val JarName = "${l.jarName}"
         |  /** Every line spillstore has a jar for, with that jar's Scala binary version. */
         |  val Lines: Seq[(String, String)] = Seq($allLines)
         |}
         |""".stripMargin)
    Seq(out)
  }.taskValue,
  // Every line's tests include jvm/src/test/every-line: PackageLayersSuite checks the classes
  // the line compiled (the core and its adapters) with ArchUnit; FreshExecutorScope.
  Test / unmanagedSourceDirectories += (ThisBuild / baseDirectory).value / "jvm" / "src" / "test" / "every-line",
  libraryDependencies += "com.tngtech.archunit" % "archunit" % "1.5.0" % Test,
  Test / fork := true,
  Test / run / fork := true,
  Test / parallelExecution := false,
  Test / javaOptions ++= sparkJavaOpens ++ Seq("-Xmx3g",
    "-Dspark.ui.enabled=false", "-Dspark.unsafe.exceptionOnMemoryLeak=true"),
  // Test JVMs (and the child JVMs tests start and SIGKILL, which cannot clean up: native
  // libraries unpacked by RocksDB and LZ4, cold tiers) keep temp files out of /tmp.
  Test / javaOptions += {
    val dir = (ThisBuild / baseDirectory).value / "jvm" / "target" / "test-tmp"
    IO.createDirectory(dir)
    s"-Djava.io.tmpdir=$dir"
  },
  // The project venv's Python, which runs the tests' S3 server (moto).
  Test / javaOptions += s"-Dspillstore.test.python=${(ThisBuild / baseDirectory).value / ".venv" / "bin" / "python"}",
  Test / testOptions += Tests.Argument(TestFrameworks.ScalaTest, "-oDF")
)

/**
 * What `make dist` publishes per line into dist/maven (a Maven-layout repository): the jar, its
 * sources and scaladoc jars, and a POM whose only dependencies are what Spark provides (Spark
 * itself, Scala and, on 2.12, scala-collection-compat), all `provided`, so `--packages` adds
 * nothing to a cluster's classpath but spillstore. Publishing it further is a manual step
 * (README, "Build from source").
 */
def publishSettings(l: SparkLine): Seq[Setting[_]] = Seq(
  description := "A Spark Structured Streaming state store: heap speed while state fits, " +
    "spills to RocksDB instead of OOM",
  licenses := Seq("Apache-2.0" -> url("https://www.apache.org/licenses/LICENSE-2.0.txt")),
  publishMavenStyle := true,
  versionScheme := Some("early-semver"),
  publishTo := Some(MavenCache("dist", (ThisBuild / baseDirectory).value / "dist" / "maven")),
  pomPostProcess := { (pom: scala.xml.Node) =>
    import scala.xml.{Elem, Node, NodeSeq}
    import scala.xml.transform.{RewriteRule, RuleTransformer}
    def sparkSql(v: String): Node =
      <dependency><groupId>org.apache.spark</groupId><artifactId>{
        s"spark-sql_${l.scalaBinary}"
      }</artifactId><version>{v}</version><scope>provided</scope></dependency>
    new RuleTransformer(new RewriteRule {
      override def transform(n: Node): Seq[Node] = n match {
        // Test jars stay out of the POM.
        case d: Elem if d.label == "dependency" && (d \ "scope").text == "test" => NodeSeq.Empty
        case d: Elem if d.label == "dependency" && (d \ "artifactId").text == "scala-library" =>
          d.copy(child = d.child.filterNot(_.label == "scope") :+ <scope>provided</scope>)
        // 4.3 compiles against the pyspark wheel's jars, not a Maven dependency: name it here.
        case d: Elem if d.label == "dependencies" && l.isDefault =>
          d.copy(child = d.child :+ sparkSql(sparkVersion))
        case other => other
      }
    }).transform(pom).head
  }
)

/** Spark from the Maven repository at `v`, Provided; its test jars for StateStoreSuiteBase. */
def mavenSpark(v: String, scalaBinary: String): Seq[ModuleID] = Seq(
  "org.apache.spark" %% "spark-sql" % v % Provided,
  "org.scalatest" %% "scalatest" % "3.2.19" % Test,
  ("org.apache.spark" %% "spark-core" % v % Test classifier "tests").intransitive(),
  ("org.apache.spark" %% "spark-catalyst" % v % Test classifier "tests").intransitive(),
  ("org.apache.spark" %% "spark-sql" % v % Test classifier "tests").intransitive()
) ++ (if (scalaBinary == "2.12") {
        // Spark 3.5 ships scala-collection-compat (scala.jdk.CollectionConverters on 2.12).
        Seq("org.scala-lang.modules" %% "scala-collection-compat" % "2.7.0" % Provided)
      } else Nil)

/** A Maven line: its own project in jvm/lines/<line> (only its target lives there). */
def mavenLine(id: String): Project = {
  val l = lines(id)
  Project(s"spark${id.replace(".", "")}", file(s"jvm/lines/$id"))
    .settings(lineSettings(l) ++ publishSettings(l))
    .settings(
      libraryDependencies ++= mavenSpark(l.sparkVersion, l.scalaBinary),
      Test / unmanagedSourceDirectories ++= {
        val test = (ThisBuild / baseDirectory).value / "jvm" / "src" / "test"
        l.testDirs.map(test / _)
      }
    )
}

lazy val spark35 = mavenLine("3.5")
lazy val spark40 = mavenLine("4.0")
lazy val spark41 = mavenLine("4.1")
lazy val spark42 = mavenLine("4.2")
// A line added to (or removed from) spark_lines.txt needs its project here too.
val mavenLinesChecked: Unit = {
  val projects = Set("3.5", "4.0", "4.1", "4.2")
  val listed = lines.values.filterNot(_.isDefault).map(_.line).toSet
  require(projects == listed,
    s"python/spillstore/spark_lines.txt lists the Maven lines " +
      s"${listed.toSeq.sorted.mkString(", ")}, build.sbt has projects for " +
      s"${projects.toSeq.sorted.mkString(", ")}: add or remove a `mavenLine` project")
}

// The default line (4.3): the pyspark 4.3.0 wheel's jars; the JVM unit suites run here.
lazy val spillstore = (project in file("jvm"))
  .settings(lineSettings(defaultLine) ++ publishSettings(defaultLine))
  .settings(
    Compile / unmanagedJars := {
      val dir = pysparkJarsDir((ThisBuild / baseDirectory).value)
      (dir ** "*.jar").classpath
    },
    // The version-free unit suites (jvm/src/test/scala) run on this line only; the
    // conformance suite's shared source and this line's exclusions come from the test dirs.
    Test / unmanagedSourceDirectories ++= {
      val test = (ThisBuild / baseDirectory).value / "jvm" / "src" / "test"
      defaultLine.testDirs.map(test / _)
    },
    libraryDependencies ++= Seq(
      "org.scalatest" %% "scalatest" % "3.2.19" % Test,
      ("org.apache.spark" %% "spark-core" % sparkTestJarsVersion % Test classifier "tests").intransitive(),
      ("org.apache.spark" %% "spark-catalyst" % sparkTestJarsVersion % Test classifier "tests").intransitive(),
      ("org.apache.spark" %% "spark-sql" % sparkTestJarsVersion % Test classifier "tests").intransitive()
    )
  )

lazy val root = (project in file("."))
  .aggregate(spillstore, spark35, spark40, spark41, spark42)
  .settings(publish / skip := true)
