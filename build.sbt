// spillstore: a Spark Structured Streaming state store provider.
//
// Spark 4.3.0 is not on the Maven repository this project can reach, but pyspark 4.3.0 is on
// PyPI and ships Spark's exact jars. So the venv (`make venv`) is the source of every Spark
// class: we compile against <venv>/pyspark/jars and never package them (Provided in effect).
import java.io.File

val sparkVersion = "4.3.0"
// Newest Spark test jars on Maven: StateStoreSuiteBase and its helpers, run against 4.3.0.
val sparkTestJarsVersion = "4.2.0"

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

lazy val spillstore = (project in file("jvm"))
  .settings(
    name := "spillstore",
    organization := "io.spillstore",
    version := "0.1.0",
    scalaVersion := "2.13.18",
    scalacOptions ++= Seq("-deprecation", "-feature", "-unchecked", "-Xlint:-unused,_", "-release", "17"),
    javacOptions ++= Seq("--release", "17"),
    Compile / unmanagedJars := {
      val dir = pysparkJarsDir((ThisBuild / baseDirectory).value)
      (dir ** "*.jar").classpath
    },
    libraryDependencies ++= Seq(
      "org.scalatest" %% "scalatest" % "3.2.19" % Test,
      "org.scalatestplus" %% "scalacheck-1-18" % "3.2.19.0" % Test,
      ("org.apache.spark" %% "spark-core" % sparkTestJarsVersion % Test classifier "tests").intransitive(),
      ("org.apache.spark" %% "spark-catalyst" % sparkTestJarsVersion % Test classifier "tests").intransitive(),
      ("org.apache.spark" %% "spark-sql" % sparkTestJarsVersion % Test classifier "tests").intransitive()
    ),
    Compile / packageBin / artifactPath := (ThisBuild / baseDirectory).value / "target" / "spillstore.jar",
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
    Test / testOptions += Tests.Argument(TestFrameworks.ScalaTest, "-oDF")
  )

lazy val root = (project in file("."))
  .aggregate(spillstore)
  .settings(publish / skip := true)
