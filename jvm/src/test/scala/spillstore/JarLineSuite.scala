package spillstore

import org.scalatest.funsuite.AnyFunSuite

class JarLineSuite extends AnyFunSuite {
  test("the jar runs on its own line, whatever the patch or suffix") {
    assert(BuildInfo.SparkLine == "4.3")
    Seq("4.3.0", "4.3.1", "4.3.0-SNAPSHOT", "4.3.2+custom", org.apache.spark.SPARK_VERSION)
      .foreach(v => assert(JarLine.mismatch(v).isEmpty, v))
  }

  test("on another supported line the error names both lines and the right artifact") {
    val e = intercept[IllegalStateException](JarLine.require("3.5.9"))
    assert(e.getMessage.contains("spillstore-spark4.3_2.13.jar is built for Spark 4.3"))
    assert(e.getMessage.contains("Spark 3.5.9"))
    assert(e.getMessage.contains(s"io.spillstore:spillstore-spark3.5_2.12:${BuildInfo.Version}"))
    assert(JarLine.mismatch("4.2.0").get.contains("spillstore-spark4.2_2.13.jar"))
  }

  test("a line spillstore has no jar for, or no version at all, is refused by name") {
    Seq("4.4.0", "3.4.1", "4.30.0", "unknown").foreach { v =>
      val m = JarLine.mismatch(v).getOrElse(fail(s"$v accepted"))
      assert(m.contains(s"Spark $v") && m.contains("jars for Spark 3.5, 4.0, 4.1, 4.2 and 4.3"), m)
    }
  }
}
