package spillstore

import org.scalatest.funsuite.AnyFunSuite

import org.apache.spark.{SparkConf, SparkContext}
import org.apache.spark.sql.internal.SQLConf

import spillstore.SpillStoreProviderSuite.{budgetConf, key, openProvider, value}
import spillstore.memory.MemoryConf

class ExecutorScopeSuite extends AnyFunSuite {
  test("stores left registered under a one-byte budget do not hold a renewed scope to it") {
    TempDirs.withTempDir("scope") { root =>
      ExecutorScope.renew()
      val strict = openProvider(root, budgetConf("1"), partition = 0)
      val relaxed =
        try {
          // Opened outside a task and never ended, as Spark's conformance tests leave some.
          val s = strict.getStore(0)
          s.put(key(1), value(1))
          s.commit()
          assert(strict.memory.status.budgetBytes === 1L)
          ExecutorScope.renew()
          openProvider(root, new SQLConf, partition = 1)
        } catch { case e: Throwable => strict.close(); throw e }
      try {
        assert(
          !(relaxed.memory eq strict.memory) && !(relaxed.executorStats eq strict.executorStats))
        val s = relaxed.getStore(0)
        (1L to 100L).foreach(i => s.put(key(i), value(i)))
        s.commit()
        val status = relaxed.memory.status
        assert(status.budgetBytes === MemoryConf().budgetFor(Runtime.getRuntime.maxMemory))
        assert(status.totalEntries === 100L,
          "the new scope's store spilled: the old budget applied")
        assert(strict.memory.status.budgetBytes === 1L, "the old scope's stores keep theirs")
      } finally {
        relaxed.close()
        strict.close()
      }
    }
  }

  test("each SparkContext's executor has a scope of its own, and one for its whole life") {
    def scopesWhileRunning(): (ExecutorScope, ExecutorScope) = {
      val sc = new SparkContext(new SparkConf().setMaster("local[1]").setAppName("scope"))
      try (ExecutorScope.current, ExecutorScope.current)
      finally sc.stop()
    }
    val (first, again) = scopesWhileRunning()
    val (second, _) = scopesWhileRunning()
    assert(first eq again)
    assert(!(first eq second))
  }
}
