package org.apache.spark.sql.execution.streaming.state

import java.io.File
import java.util.concurrent.{ArrayBlockingQueue, TimeUnit}

import scala.util.Random

import org.apache.spark.TaskContext
import org.apache.spark.sql.catalyst.expressions.{GenericInternalRow, UnsafeProjection}
import org.apache.spark.sql.types.{LongType, StructField, StructType}

import spillstore.SpillStoreProvider

/**
 * How `applyInPandasWithState` uses a store when its Python runner has a writer thread (Spark
 * 3.5; 4.3 with `spark.python.udf.pipelined.enabled`): the writer thread reads each group's
 * state as it sends the group, while the task thread writes the state Python returned for
 * earlier groups, then commits. Each batch counts a random half of the keys once (Spark groups
 * the input by key); the final counts are returned with the model's, and how many entries
 * the batches evicted and loaded back from the cold tier (the race needs both: reads that
 * promote spilled entries while writes evict). A line's suite supplies how to open a provider
 * and run a task attempt. (In Spark's package: writer threads set the
 * task's context with a `private[spark]` method.)
 */
object TwoThreadWorkload {
  val KeySchema: StructType = StructType(Seq(StructField("k", LongType)))
  val ValueSchema: StructType = StructType(Seq(StructField("count", LongType)))

  /** Counts read back by a fresh provider, the model's, and the batches' evictions and cold
   *  loads (from each commit's metrics). */
  final case class Result(counts: Map[Int, Long], expected: Map[Int, Long], evictions: Long,
      coldLoads: Long)

  def run(root: File, open: (File, Map[String, String]) => SpillStoreProvider,
      asTask: Long => (TaskContext => Unit) => Unit, keySpace: Int = 200000,
      batches: Int = 4): Result = {
    val provider = open(root, Map("spark.sql.streaming.stateStore.spillstore.memoryBudget" -> "1m"))
    val model = new Array[Long](keySpace)
    val rnd = new Random(28)
    var evictions, coldLoads = 0L
    try {
      for (batch <- 0 until batches) {
        val groups = rnd.shuffle((0 until keySpace).toVector).take(keySpace / 2)
        groups.foreach(g => model(g) += 1)
        asTask(batch) { ctx =>
          val metrics = countBatch(provider, batch, groups, ctx)
          evictions += metrics("spillstoreEvictions")
          coldLoads += metrics("spillstoreColdLoads")
        }
      }
    } finally provider.close()
    val fresh = open(root, Map.empty)
    try {
      val counts = fresh.getReadStore(batches).iterator()
        .map(p => p.key.getLong(0).toInt -> p.value.getLong(0)).toMap
      Result(counts, model.indices.filter(model(_) > 0).map(g => g -> model(g)).toMap, evictions,
        coldLoads)
    } finally fresh.close()
  }

  /** Returns the committed store's custom metrics by name. */
  private def countBatch(provider: SpillStoreProvider, batch: Int, groups: Seq[Int],
      ctx: TaskContext): Map[String, Long] = {
    val store = provider.getStore(batch)
    val sent = new ArrayBlockingQueue[(Long, Long)](64)
    @volatile var writerFailure: Throwable = null
    val writer = new Thread(() => {
        TaskContext.setTaskContext(ctx) // as Spark's writer threads do
        val key = UnsafeProjection.create(KeySchema)
        groups.foreach { g =>
          val state = store.get(key(new GenericInternalRow(Array[Any](g.toLong))))
          val count = if (state == null) 0L else state.getLong(0)
          if (!sent.offer((g.toLong, count), 60, TimeUnit.SECONDS)) sys.error("nobody reads")
        }
      }, s"writer thread of batch $batch")
    writer.setDaemon(true) // a corrupted heap can leave it spinning
    writer.setUncaughtExceptionHandler((_, e) => writerFailure = e)
    writer.start()
    val key = UnsafeProjection.create(KeySchema)
    val value = UnsafeProjection.create(ValueSchema)
    for (_ <- groups.indices) {
      val next = sent.poll(60, TimeUnit.SECONDS)
      if (next == null)
        throw new AssertionError(s"batch $batch: the writer thread stopped: $writerFailure")
      store.put(key(new GenericInternalRow(Array[Any](next._1))),
        value(new GenericInternalRow(Array[Any](next._2 + 1))))
    }
    writer.join(60000)
    if (writerFailure != null) throw new AssertionError(s"the writer thread failed", writerFailure)
    if (store.commit() != batch + 1)
      throw new AssertionError(s"batch $batch committed another version")
    store.metrics.customMetrics.map { case (m, v) => m.name -> v }
  }
}
