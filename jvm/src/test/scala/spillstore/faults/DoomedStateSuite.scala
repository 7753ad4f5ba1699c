package spillstore.faults

import java.io.File
import java.util.UUID
import java.util.concurrent.{ConcurrentLinkedQueue, CountDownLatch, TimeUnit}

import org.scalatest.funsuite.AnyFunSuite

import org.apache.spark.TestTasks
import org.apache.spark.sql.execution.streaming.state.StateStore

import spillstore.SpillStoreProviderSuite._
import spillstore.TempDirs
import spillstore.cold.{ColdTier, LocalDirs}

/**
 * A takeover leaves two live states of one provider: the doomed one (the older attempt's call
 * may still be in flight) and its successor. They share nothing mutable; the doomed one is
 * freed by its holder, or by maintenance once that holder is gone, and counts in the memory
 * budget until then. A commit reads the figures it reports while it still owns the state.
 */
class DoomedStateSuite extends AnyFunSuite {

  private def fill(s: StateStore, keys: Range): Unit = keys.foreach(i => s.put(key(i), value(i)))

  /** Opens cold tiers as the provider does, and the directories of those it opened, in order. */
  private def recordingColdTiers(): (ConcurrentLinkedQueue[File], (File, String) => ColdTier) = {
    val opened = new ConcurrentLinkedQueue[File]()
    (opened,
      (parent, name) => {
        val tier = ColdTier.create(parent, name)
        opened.add(tier.dir)
        tier
      })
  }

  test("the doomed state's end leaves its successor's prefix scans whole") {
    import Sessions._
    withProvider(keySchema = schema, spec = spec) { (p, _) =>
      TestTasks.run(1) { _ =>
        val s = p.getStore(0)
        for (g <- Seq("a", "b"); t <- 1L to 3L) s.put(k(g, t), value(t))
        s.commit()
      }
      val zombieOpened = new CountDownLatch(1)
      val takenOver = new CountDownLatch(1)
      val zombie = new Thread(() =>
        TestTasks.run(2) { _ =>
          val z = p.getStore(1)
          z.put(k("a", 7), value(7))
          zombieOpened.countDown()
          takenOver.await(60, TimeUnit.SECONDS)
        }) // its task ends here and frees the doomed state
      zombie.start()
      assert(zombieOpened.await(60, TimeUnit.SECONDS))
      TestTasks.run(3) { _ =>
        val s = p.getStore(1)
        takenOver.countDown()
        zombie.join(60000)
        assert(!zombie.isAlive)
        assert(scan(s, "a") === Set(1L, 2L, 3L))
        assert(scan(s, "b") === Set(1L, 2L, 3L))
        s.put(k("b", 4), value(4))
        assert(scan(s, "b") === Set(1L, 2L, 3L, 4L))
        s.commit()
      }
    }
  }

  test("a doomed state whose holder is gone is freed by maintenance, and counted until then") {
    val (opened, recorded) = recordingColdTiers()
    withProvider(sqlConf = budgetConf("256k"), coldTiers = recorded) { (p, dir) =>
      TestTasks.run(1) { _ =>
        val s = p.getStore(0); fill(s, 0 until 2000); s.commit()
      }
      assert(opened.isEmpty, "version 1 spilled: the test cannot tell whose cold tier is whose")
      // Opened outside a task (no completion listener) by a thread that never ends its store;
      // it grows past the budget, so it has a cold tier.
      val filled = new CountDownLatch(1)
      val leave = new CountDownLatch(1)
      val holder = new Thread(() => {
        val s = p.getStore(1)
        fill(s, 100000 until 110000)
        filled.countDown()
        leave.await(60, TimeUnit.SECONDS)
      })
      holder.start()
      assert(filled.await(60, TimeUnit.SECONDS))
      val abandoned = p.live
      val abandonedTier = opened.peek()
      assert(abandoned.coldKeyCount > 0 && abandonedTier != null, "nothing spilled: moot")
      val abandonedBytes = abandoned.heapBytes
      assert(abandonedBytes > 0)
      TestTasks.run(2) { _ =>
        val s = p.getStore(1) // takes over: the abandoned state is doomed
        assert(p.live ne abandoned)
        assert(contents(s) === (0L until 2000L).map(i => i -> i).toMap)
        s.abort()
      }
      p.doMaintenance() // its holder is alive: it could still be in a call
      assert(abandonedTier.isDirectory, "a doomed state was freed while its holder could call")
      val countedWhileDoomed = p.memory.totalHeapBytes
      leave.countDown()
      holder.join(60000)
      p.doMaintenance()
      assert(!abandonedTier.exists, "maintenance left the abandoned state's cold tier behind")
      assert(countedWhileDoomed - p.memory.totalHeapBytes >= abandonedBytes / 2,
        "the doomed state was not counted in the budget until it was freed")
      assert(readAll(dir, 1) === (0L until 2000L).map(i => i -> i).toMap)
    }
  }

  test("a store left open outside a task by a thread that ended is freed by the unload") {
    val (opened, recorded) = recordingColdTiers()
    TempDirs.withTempDir("spill") { root =>
      val p = openProvider(root, budgetConf("64k"), coldTiers = recorded)
      val before = p.memory.totalHeapBytes
      try onOwnThread {
          val s = p.getStore(0)
          fill(s, 0 until 5000)
          s.commit() // the batch's entries were pinned; now they spill
          p.getStore(1).put(key(1), value(-1)) // left open
          assert(!opened.isEmpty, "nothing spilled: moot")
        }
      finally p.close()
      assert(p.live.ownership.isFreed)
      assert(!opened.peek().exists, "the unloaded state's cold tier is still there")
      assert(p.memory.totalHeapBytes <= before)
    }
  }

  test("a commit's figures count the evictions its end made room for, with an iterator of " +
    "the batch left open (Spark 3.5 and 4.0 leave them)") {
    withProvider(sqlConf = budgetConf("1")) { (p, _) =>
      TestTasks.run(1) { _ =>
        val s = p.getStore(0); fill(s, 0 until 100); s.commit()
      }
      TestTasks.run(2) { _ =>
        val s = p.getStore(1)
        val it = s.iterator()
        it.next() // left open: it pins the heap until the batch ends
        fill(s, 1000 until 1100)
        s.commit()
        assert(customMetric(s, "spillstoreHeapEntries") === 0, "evictions after the figures")
        assert(customMetric(s, "spillstoreEvictions") >= 100)
      }
    }
  }

  test("a commit reads its figures (the cold tier's size) while its lease owns the state") {
    val unowned = new ConcurrentLinkedQueue[String]()
    @volatile var provider: spillstore.SpillStoreProvider = null
    val watched = (parent: File, name: String) =>
      new ColdTier(new File(LocalDirs.jvmDirUnder(parent), s"$name-${UUID.randomUUID()}")) {
        override def approximateBytes: Long = {
          // Relief rounds read it under the state's lock on their own threads; none run here.
          if (provider.live.ownership.current == null) {
            unowned.add(Thread.currentThread().getStackTrace.take(12).mkString("\n  "))
          }
          super.approximateBytes
        }
      }
    withProvider(sqlConf = budgetConf("64k"), coldTiers = watched) { (p, _) =>
      provider = p
      for (v <- 0 until 3) TestTasks.run(v + 1) { _ =>
        val s = p.getStore(v)
        fill(s, v * 3000 until (v + 1) * 3000)
        s.commit()
        assert(customMetric(s, "spillstoreColdEntries") > 0)
      }
      assert(unowned.isEmpty, s"the cold tier was read with no lease: ${unowned.peek()}")
    }
  }
}
