package org.apache.spark.sql.execution.streaming.state

import java.io.File
import java.nio.file.Files
import java.util.{Properties, UUID}

import org.apache.commons.io.FileUtils
import org.apache.hadoop.conf.Configuration
import org.scalatest.funsuite.AnyFunSuite

import org.apache.spark.{TaskContext, TaskContextImpl}
import org.apache.spark.executor.TaskMetrics
import org.apache.spark.sql.internal.SQLConf

import spillstore.SpillStoreProvider

/**
 * Spark 3.5's `applyInPandasWithState` reads state on the Python runner's writer thread while
 * the task thread writes it ([[TwoThreadWorkload]]), with real task contexts and a budget small
 * enough that reads promote from the cold tier and writes evict. (In Spark's package: task
 * contexts are completed by `private[spark]` methods.)
 */
class SpillStoreTwoThreadSuite extends AnyFunSuite {
  test("reads on the writer thread while the task thread writes: every count exact") {
    val root = Files.createTempDirectory("spillstore-two-threads").toFile
    try {
      val r = TwoThreadWorkload.run(root, open, asTask)
      assert(r.evictions > 0 && r.coldLoads > 0,
        "the race's preconditions did not happen: " +
          s"${r.evictions} evictions, ${r.coldLoads} cold loads")
      assert(r.counts.size === r.expected.size)
      assert(r.counts === r.expected)
    } finally FileUtils.deleteQuietly(root)
  }

  private def open(root: File, confs: Map[String, String]): SpillStoreProvider = {
    val sqlConf = new SQLConf
    confs.foreach { case (k, v) => sqlConf.setConfString(k, v) }
    val hadoopConf = new Configuration
    hadoopConf.set("sql.streaming.runId", UUID.randomUUID().toString)
    val p = new SpillStoreProvider
    p.init(StateStoreId(root.getPath, 0, 0), TwoThreadWorkload.KeySchema,
      TwoThreadWorkload.ValueSchema, 0, new StateStoreConf(sqlConf), hadoopConf)
    p
  }

  /** A real task attempt on this thread; its completion listeners fire after `body`. */
  private def asTask(attempt: Long)(body: TaskContext => Unit): Unit = {
    val ctx = new TaskContextImpl(0, 0, 0, attempt, 0, 1, null, new Properties, null,
      TaskMetrics.empty, 1, Map.empty)
    TaskContext.setTaskContext(ctx)
    try body(ctx)
    finally {
      try ctx.markTaskCompleted(None)
      finally TaskContext.unset()
    }
  }
}
