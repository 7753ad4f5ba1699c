package spillstore.faults

import java.io.File
import java.util.UUID
import java.util.concurrent.{ConcurrentLinkedQueue, CountDownLatch, TimeUnit}

import org.apache.logging.log4j.Level
import org.rocksdb.{RocksDBException, WriteBatch}
import org.scalatest.funsuite.AnyFunSuite

import org.apache.spark.{SparkException, TestTasks}
import org.apache.spark.sql.execution.streaming.state.StateStore

import spillstore.LogCapture
import spillstore.SpillStoreProviderSuite._
import spillstore.cold.ColdTier
import spillstore.memory.{FakeSpillable, MemoryConf, MemoryManager}

/**
 * The live-state ownership rules, one failure mode at a time, with real task contexts
 * (completion listeners fire at task end) and stores used from several threads.
 */
class OwnershipSuite extends AnyFunSuite {

  private def fill(s: StateStore, keys: Range): Unit = keys.foreach(i => s.put(key(i), value(i)))

  test("a task's end after its commit does not release the state the next task holds") {
    withProvider(sqlConf = budgetConf("64m")) { (p, _) =>
      TestTasks.run(1) { _ =>
        val s = p.getStore(0); fill(s, 0 until 2000); s.commit()
      }
      val opened = new CountDownLatch(1)
      val firstTaskEnded = new CountDownLatch(1)
      var spilledWhileOwned = -1L
      val next = new Thread(() =>
        TestTasks.run(3) { _ =>
          val r = p.getReadStore(2)
          opened.countDown()
          firstTaskEnded.await(60, TimeUnit.SECONDS)
          // A relief round on another thread must find the state owned, however task 2 ended.
          spilledWhileOwned = onOwnThread(p.live.trySpill(Long.MaxValue, Long.MaxValue))
          assert(contents(r) === (0L until 2000L).map(i => i -> (if (i < 10) -i else i)).toMap)
        })
      TestTasks.run(2) { _ =>
        val s = p.getStore(1)
        (0L until 10L).foreach(i => s.put(key(i), value(-i)))
        s.commit()
        next.start()
        assert(opened.await(60, TimeUnit.SECONDS))
      } // task 2's completion listener runs here, after task 3 took the state
      firstTaskEnded.countDown()
      next.join(60000)
      assert(spilledWhileOwned === 0L, "a relief round spilled a state a task was using")
    }
  }

  test("an unloaded provider's open store fails its next call instead of using freed state") {
    withProvider(sqlConf = budgetConf("64k")) { (p, _) =>
      TestTasks.run(1) { _ =>
        val s = p.getStore(0); fill(s, 0 until 5000); s.commit()
      }
      TestTasks.run(2) { _ =>
        val s = p.getStore(1)
        val it = s.iterator()
        it.next()
        assert(customMetric(s, "spillstoreColdEntries") > 0, "nothing spilled: the test is moot")
        onOwnThread(p.close()) // Spark's unload, from a maintenance thread
        def unloaded(e: IllegalStateException) = assert(e.getMessage.contains("unloaded"), e)
        unloaded(intercept[IllegalStateException](s.get(key(1))))
        unloaded(intercept[IllegalStateException](s.put(key(1), value(1))))
        unloaded(intercept[IllegalStateException](it.next()))
        intercept[IllegalStateException](s.commit())
        intercept[IllegalStateException](p.getStore(1))
      }
    }
  }

  test("a read store then a write store opened by one task share its lease, as 3.5 and 4.0's " +
    "aggregation opens them (Spark's 'two concurrent StateStores' test opens them outside a task)") {
    withProvider() { (p, dir) =>
      TestTasks.run(1) { _ =>
        val s = p.getStore(0); s.put(key(1), value(1)); s.commit()
      }
      TestTasks.run(2) { _ =>
        val r = p.getReadStore(1)
        assert(r.get(key(1)).getLong(0) === 1)
        val w = p.getStore(1)
        w.put(key(2), value(2))
        assert(r.get(key(2)).getLong(0) === 2, "the read store sees the task's batch")
        assert(w.commit() === 2)
        r.abort() // 3.5 and 4.0 abort read stores at task end
      }
      assert(readAll(dir, 2) === Map(1L -> 1L, 2L -> 2L))
    }
  }

  test("a read store opened by the writing task itself joins its batch instead of aborting it") {
    withProvider() { (p, dir) =>
      TestTasks.run(1) { _ =>
        val w = p.getStore(0)
        w.put(key(1), value(1))
        val r = p.getReadStore(0) // Spark 3.5/4.0 operators open both in one task
        assert(r.get(key(1)).getLong(0) === 1)
        w.put(key(2), value(2))
        assert(w.commit() === 1)
      }
      assert(readAll(dir, 1) === Map(1L -> 1L, 2L -> 2L))
    }
  }

  test("a store of a newer task attempt takes over: the older attempt's reads and writes fail") {
    withProvider(sqlConf = budgetConf("64k")) { (p, dir) =>
      TestTasks.run(1) { _ =>
        val s = p.getStore(0); fill(s, 0 until 3000); s.commit()
      }
      val zombieOpened = new CountDownLatch(1)
      val takenOver = new CountDownLatch(1)
      val zombieErrors = new ConcurrentLinkedQueue[String]()
      val zombie = new Thread(() =>
        TestTasks.run(2) { _ =>
          val z = p.getStore(1)
          z.put(key(0), value(-1))
          zombieOpened.countDown()
          takenOver.await(60, TimeUnit.SECONDS)
          for (call <- Seq[() => Any](() => z.get(key(5)), () => z.put(key(1), value(-1)),
              () => z.remove(key(2)), () => z.iterator().hasNext, () => z.commit())) {
            try { call(); zombieErrors.add("no error") }
            catch {
              case e: IllegalStateException => zombieErrors.add(e.getMessage)
            }
          }
        })
      zombie.start()
      assert(zombieOpened.await(60, TimeUnit.SECONDS))
      TestTasks.run(3) { _ =>
        val r = p.getReadStore(1) // the retry restores first (4.1+ aggregation)
        takenOver.countDown()
        val w = p.upgradeReadStoreToWriteStore(r, 1)
        assert(w.get(key(0)).getLong(0) === 0, "the zombie's write is in the retry's batch")
        w.put(key(7), value(70))
        zombie.join(60000)
        assert(w.commit() === 2)
      }
      assert(zombieErrors.size === 5)
      zombieErrors.forEach(m => assert(m.contains("replaced by task attempt 3"), m))
      assert(readAll(dir, 2) === (0L until 3000L).map(i => i -> (if (i == 7) 70L else i)).toMap)
    }
  }

  test("closing an iterator early lets eviction go on within the batch; an open one pins") {
    withProvider(sqlConf = budgetConf("1m")) { (p, _) =>
      TestTasks.run(1) { _ =>
        val s = p.getStore(0); fill(s, 0 until 6000); s.commit()
      }
      def batch(version: Long, closeIterator: Boolean): (Long, Long) =
        TestTasks.run(version + 10) { _ =>
          val s = p.getStore(version)
          val it = s.iterator()
          it.next()
          if (closeIterator) it.close()
          val before = customMetric(s, "spillstoreEvictions")
          fill(s, (version * 100000).toInt until (version * 100000).toInt + 6000)
          val during = customMetric(s, "spillstoreEvictions") - before
          s.commit()
          (during, customMetric(s, "spillstoreHeapBytes"))
        }
      val (pinned, _) = batch(1, closeIterator = false)
      assert(pinned === 0, "eviction ran under an open iterator")
      val (evicted, heap) = batch(2, closeIterator = true)
      assert(evicted > 0, "a closed iterator still held eviction back")
      assert(heap <= (1L << 20))
    }
  }

  test("a cold-tier write that fails after the journal is durable: the retry on the same " +
    "executor reloads, and a removed key never comes back") {
    @volatile var failWrites = false
    val failing = (parent: File, name: String) =>
      new ColdTier(new File(spillstore.cold.LocalDirs.jvmDirUnder(parent),
          s"$name-${UUID.randomUUID()}")) {
        override def write(batch: WriteBatch): Unit =
          if (failWrites) throw new RocksDBException("injected cold-tier write failure")
          else super.write(batch)
      }
    withProvider(sqlConf = budgetConf("64k"), coldTiers = failing) { (p, dir) =>
      TestTasks.run(1) { _ =>
        val s = p.getStore(0); fill(s, 0 until 3000); s.commit()
      }
      val failed = intercept[SparkException](TestTasks.run(2) { _ =>
        val s = p.getStore(1)
        s.remove(key(5)) // key 5 is in RocksDB: commit deletes it there
        failWrites = true
        try s.commit()
        finally failWrites = false
      })
      assert(failed.getMessage.contains("injected cold-tier write failure") ||
          Option(failed.getCause).exists(_.getMessage.contains("injected")), failed)
      // Spark retries the batch from version 1 on the same executor.
      TestTasks.run(3) { _ =>
        val s = p.getStore(1)
        assert(s.get(key(5)).getLong(0) === 5)
        s.remove(key(5))
        assert(s.commit() === 2)
      }
      val expected = (0L until 3000L).filter(_ != 5).map(i => i -> i).toMap
      TestTasks.run(4) { _ =>
        val s = p.getStore(2)
        assert(s.get(key(5)) === null, "a removed key came back from the cold tier")
        assert(contents(s) === expected)
        s.abort()
      }
      assert(readAll(dir, 2) === expected)
    }
  }

  test("the memory conf in force is the strictest of the loaded stores'; a store asking for " +
    "another gets a WARN naming both") {
    val mm = new MemoryManager(MemoryConf(budgetBytes = Some(4000), pressureMonitor = false),
      relief = _.run())
    try LogCapture(classOf[MemoryManager].getName, Level.WARN) { logged =>
        def warnings = logged().map(_.message)
        val loose = MemoryConf(budgetBytes = Some(4000), pressureMonitor = false)
        val strict = MemoryConf(budgetBytes = Some(1000), maxEntries = 50, pressureMonitor = false)
        val a = new FakeSpillable("a", 10, lastUsedNanos = 0)
        val b = new FakeSpillable("b", 10, lastUsedNanos = 0)
        mm.register(a, loose)
        assert(mm.effectiveBudgetBytes === 4000)
        assert(warnings.isEmpty)
        mm.register(b, strict)
        assert(mm.effectiveBudgetBytes === 1000 && mm.status.maxEntries === 50)
        assert(warnings.size === 1)
        val w = warnings.head
        assert(w.contains("memoryBudget=1000") && w.contains("memoryBudget=4000"), w)
        mm.register(new FakeSpillable("c", 10, lastUsedNanos = 0), loose) // stricter one stays
        assert(mm.effectiveBudgetBytes === 1000)
        mm.unregister(b)
        assert(mm.effectiveBudgetBytes === 4000 && mm.status.maxEntries === 0)
      }
    finally mm.close()
  }
}
