package spillstore

import java.io.File
import java.nio.file.Files

import org.apache.commons.io.FileUtils
import org.scalatest.funsuite.AnyFunSuite

import org.apache.spark.{SparkConf, SparkContext, TestTasks}
import org.apache.spark.sql.execution.streaming.state.{
  NoPrefixKeyStateEncoderSpec, TwoThreadWorkload
}
import org.apache.spark.sql.internal.SQLConf

/**
 * Spark 4.3 with `spark.python.udf.pipelined.enabled`: a Python runner's writer thread reads
 * `applyInPandasWithState`'s state while the task thread writes it, as on 3.5
 * ([[TwoThreadWorkload]]). The setting is the executor's Spark conf, so the test runs a local
 * SparkContext with it.
 */
class PipelinedPythonSuite extends AnyFunSuite {
  test("with pipelined Python runners, reads on the writer thread while the task thread " +
    "writes: every count exact") {
    val sc = new SparkContext(new SparkConf().setMaster("local[1]").setAppName("pipelined")
        .set("spark.ui.enabled", "false").set("spark.python.udf.pipelined.enabled", "true"))
    val root = Files.createTempDirectory("spillstore-pipelined").toFile
    try {
      val r = TwoThreadWorkload.run(root, open, attempt => body => TestTasks.run(attempt)(body))
      assert(r.evictions > 0 && r.coldLoads > 0,
        "the race's preconditions did not happen: " +
          s"${r.evictions} evictions, ${r.coldLoads} cold loads")
      assert(r.counts.size === r.expected.size)
      assert(r.counts === r.expected)
    } finally {
      FileUtils.deleteQuietly(root)
      sc.stop()
    }
  }

  private def open(root: File, confs: Map[String, String]): SpillStoreProvider = {
    val sqlConf = new SQLConf
    confs.foreach { case (k, v) => sqlConf.setConfString(k, v) }
    // No query, so no coordinator to report commits to.
    sqlConf.setConfString("spark.sql.streaming.stateStore.commitValidation.enabled", "false")
    SpillStoreProviderSuite.openProvider(root.getPath, sqlConf,
      spec = NoPrefixKeyStateEncoderSpec(TwoThreadWorkload.KeySchema),
      keySchema = TwoThreadWorkload.KeySchema)
  }
}
