package org.apache.spark.sql.execution.streaming.state

import java.io.File
import java.nio.file.Files
import java.util.{Properties, UUID}
import java.util.concurrent.{ArrayBlockingQueue, TimeUnit}

import scala.util.Random

import org.apache.commons.io.FileUtils
import org.apache.hadoop.conf.Configuration
import org.scalatest.funsuite.AnyFunSuite

import org.apache.spark.{TaskContext, TaskContextImpl}
import org.apache.spark.executor.TaskMetrics
import org.apache.spark.sql.catalyst.expressions.{GenericInternalRow, UnsafeProjection}
import org.apache.spark.sql.internal.SQLConf
import org.apache.spark.sql.types.{LongType, StructField, StructType}

import spillstore.SpillStoreProvider

/**
 * Spark 3.5's `applyInPandasWithState` uses one store from two threads of one task: the
 * Python runner's writer thread reads each group's state as it sends the group, while the task
 * thread writes the state Python returns for earlier groups. Driven here the same way, with
 * real task contexts, a budget small enough that reads promote from the cold tier and writes
 * evict, and every count compared with a model. (In Spark's package: task contexts are
 * completed by `private[spark]` methods.)
 */
class SpillStoreTwoThreadSuite extends AnyFunSuite {
  private val keySchema = StructType(Seq(StructField("k", LongType)))
  private val valueSchema = StructType(Seq(StructField("count", LongType)))

  test("reads on the writer thread while the task thread writes: every count exact") {
    val root = Files.createTempDirectory("spillstore-two-threads").toFile
    val KeySpace = 200000
    val GroupsPerBatch = 100000
    val Batches = 4
    try {
      val sqlConf = new SQLConf
      sqlConf.setConfString("spark.sql.streaming.stateStore.spillstore.memoryBudget", "1m")
      val provider = open(root, sqlConf)
      val model = new Array[Long](KeySpace)
      val rnd = new Random(28)
      try {
        for (batch <- 0 until Batches) {
          // Each group once per batch, as Spark groups the input by key.
          val groups = rnd.shuffle((0 until KeySpace).toVector).take(GroupsPerBatch)
          groups.foreach(g => model(g) += 1)
          asTask(batch) { ctx =>
            val store = provider.getStore(batch)
            val sent = new ArrayBlockingQueue[(Long, Long)](64)
            val writer = new Thread(() => {
              TaskContext.setTaskContext(ctx) // as Spark's writer thread does
              val key = UnsafeProjection.create(keySchema)
              groups.foreach { g =>
                val state = store.get(key(new GenericInternalRow(Array[Any](g.toLong))))
                val count = if (state == null) 0L else state.getLong(0)
                if (!sent.offer((g.toLong, count), 60, TimeUnit.SECONDS)) sys.error("stuck")
              }
            }, "writer thread of batch " + batch)
            writer.setDaemon(true)
            @volatile var writerFailure: Throwable = null
            writer.setUncaughtExceptionHandler((_, e) => writerFailure = e)
            writer.start()
            val key = UnsafeProjection.create(keySchema)
            val value = UnsafeProjection.create(valueSchema)
            for (_ <- groups.indices) {
              val next = sent.poll(60, TimeUnit.SECONDS)
              if (next == null) fail(s"batch $batch: the writer thread stopped: $writerFailure")
              val (g, count) = next
              store.put(key(new GenericInternalRow(Array[Any](g))),
                value(new GenericInternalRow(Array[Any](count + 1))))
            }
            writer.join(60000)
            assert(writerFailure == null, s"the writer thread failed: $writerFailure")
            assert(store.commit() === batch + 1)
          }
        }
      } finally provider.close()
      val fresh = open(root, new SQLConf)
      try {
        val counts = fresh.getReadStore(Batches).iterator()
          .map(p => p.key.getLong(0).toInt -> p.value.getLong(0)).toMap
        val expected = model.indices.filter(model(_) > 0).map(g => g -> model(g)).toMap
        assert(counts.size === expected.size)
        assert(counts === expected)
      } finally fresh.close()
    } finally FileUtils.deleteQuietly(root)
  }

  private def open(root: File, sqlConf: SQLConf): SpillStoreProvider = {
    val p = new SpillStoreProvider
    val hadoopConf = new Configuration
    hadoopConf.set("sql.streaming.runId", UUID.randomUUID().toString)
    p.init(StateStoreId(root.getPath, 0, 0), keySchema, valueSchema, 0,
      new StateStoreConf(sqlConf), hadoopConf)
    p
  }

  /** Runs `body` as a real task attempt on this thread; its completion listeners fire after. */
  private def asTask[T](attempt: Long)(body: TaskContextImpl => T): T = {
    val ctx = new TaskContextImpl(0, 0, 0, attempt, 0, 1, null, new Properties, null,
      TaskMetrics.empty, 1, Map.empty)
    TaskContext.setTaskContext(ctx)
    try body(ctx) finally {
      try ctx.markTaskCompleted(None) finally TaskContext.unset()
    }
  }
}
