package org.apache.spark

import java.util.Properties

import org.apache.spark.executor.TaskMetrics

/**
 * Real task contexts for JVM tests: a store opened inside [[TestTasks.run]] registers its
 * completion listener on a genuine `TaskContextImpl`, and the listeners fire when the task
 * ends, on the task's thread, exactly as in an executor (`markTaskCompleted`, which is
 * `private[spark]`, hence this package).
 */
object TestTasks {
  /** Runs `body` as task attempt `attemptId` of `partition`, then completes the task. */
  def run[T](attemptId: Long, partition: Int = 0)(body: TaskContext => T): T = {
    val ctx = new TaskContextImpl(0, 0, partition, attemptId, 0, 1, null, new Properties, null,
      TaskMetrics.empty, BigDecimal(1), Map.empty)
    TaskContext.setTaskContext(ctx)
    var failure: Option[Throwable] = None
    try body(ctx)
    catch {
      case e: Throwable =>
        failure = Some(e)
        ctx.markTaskFailed(e)
        throw e
    } finally {
      try ctx.markTaskCompleted(failure)
      finally TaskContext.unset()
    }
  }
}
