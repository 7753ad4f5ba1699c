package spillstore

import org.apache.spark.SparkEnv

import spillstore.cold.LocalDirs
import spillstore.memory.{MemoryConf, MemoryManager}
import spillstore.metrics.ExecutorStats

/**
 * What all spillstore stores of one executor share: the memory manager (the executor-wide heap
 * budget) and the executor's figures. One per executor's life, which in a JVM is one per
 * `SparkEnv`: a new SparkContext in the same JVM (local mode, notebooks, tests) starts a new
 * scope, so no budget of a stopped application's stores stays in force and its counters do not
 * carry over. Providers take the scope in force at their init and keep it; a scope replaced
 * stops its memory manager's pressure monitor (its GC listeners), and stores still using it go
 * on under its budget.
 *
 * | state | owner | who may touch it |
 * |---|---|---|
 * | `inForce` | the companion, under its lock | [[ExecutorScope.current]] (provider init, plugin init: any thread), [[ExecutorScope.renew]] (tests) |
 * | `manager` | this scope, under its lock | [[memory]] (provider init) |
 *
 * The cold tiers' native memory is not here: it is the JVM's (cold.ColdMemory), as RocksDB's
 * cache cannot be resized or handed over.
 */
final class ExecutorScope private (private val env: SparkEnv) {
  val stats = new ExecutorStats
  stats.registerColdDisk(() => LocalDirs.bytesOnDisk())

  private var manager: MemoryManager = _

  /** The executor's memory manager, created with the first provider's `conf`; each provider's
   *  conf takes effect when it registers (see [[MemoryManager.register]]). */
  def memory(conf: MemoryConf): MemoryManager = synchronized {
    if (manager == null) {
      manager = new MemoryManager(conf, stats = stats)
      stats.registerMemory(manager.figures)
    }
    manager
  }

  private def close(): Unit = synchronized { if (manager != null) manager.close() }
}

object ExecutorScope {
  private var inForce: ExecutorScope = _

  /** The scope of this JVM's `SparkEnv` (of none, outside Spark), made when that changes. */
  def current: ExecutorScope = synchronized {
    val env = SparkEnv.get
    if (inForce == null || (inForce.env ne env)) replace(env)
    inForce
  }

  /** A new scope for the `SparkEnv` in force: for tests that open stores outside Spark, so that
   *  what earlier tests left registered does not apply to them. */
  private[spillstore] def renew(): ExecutorScope = synchronized {
    replace(SparkEnv.get)
    inForce
  }

  private def replace(env: SparkEnv): Unit = {
    if (inForce != null) inForce.close()
    inForce = new ExecutorScope(env)
  }
}
