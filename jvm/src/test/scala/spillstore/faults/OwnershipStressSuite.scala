package spillstore.faults

import java.util.concurrent.{BrokenBarrierException, ConcurrentLinkedQueue, CyclicBarrier, TimeUnit}
import java.util.concurrent.atomic.{AtomicLong, AtomicReferenceArray}

import scala.collection.mutable
import scala.util.Random

import org.scalatest.funsuite.AnyFunSuite

import org.apache.spark.TestTasks
import org.apache.spark.sql.catalyst.expressions.{GenericInternalRow, UnsafeProjection, UnsafeRow}
import org.apache.spark.sql.execution.streaming.state.StateStore

import spillstore.{SpillStoreProvider, TempDirs}
import spillstore.SpillStoreProviderSuite._

/**
 * The live-state ownership rules under fire: task threads running real tasks (TaskContexts
 * whose completion listeners fire at task end) on providers that share a budget of a few
 * hundred KB, so every batch spills and other tasks' relief rounds spill idle stores; zombie
 * attempts overtaken by retries; providers unloaded (closed) while a task uses them; snapshot
 * and cleanup maintenance in a loop. After every round each provider's live state must equal a
 * model exactly, and every few rounds so must a fresh load from the checkpoint.
 */
class OwnershipStressSuite extends AnyFunSuite {
  // `make test` runs 1,000; `make test-soak` many more.
  private val rounds = sys.env.getOrElse("SPILLSTORE_STRESS_ROUNDS", "1000").toInt
  private val numProviders = 6
  private val numThreads = 3
  private val keySpace = 3000

  /** Per-thread row builders: Spark's projections reuse their output row. */
  private final class Rows {
    private val kp = UnsafeProjection.create(keySchema)
    private val vp = UnsafeProjection.create(valueSchema)
    def key(i: Long): UnsafeRow = kp(new GenericInternalRow(Array[Any](i)))
    def value(i: Long): UnsafeRow = vp(new GenericInternalRow(Array[Any](i)))
  }

  /** What a provider committed last: the version and its exact contents. */
  private final class Committed(var version: Long, val state: mutable.HashMap[Long, Long])

  test("tasks, relief rounds, zombies, unloads and maintenance at once keep every key exact") {
    TempDirs.withTempDir("ownership-stress") { root =>
      val conf = CorruptionRepairSuite.conf(minDeltas = 3, retain = 4)
      conf.setConfString("spark.sql.streaming.stateStore.spillstore.memoryBudget", "256k")
      val providers = new AtomicReferenceArray[SpillStoreProvider](numProviders)
      (0 until numProviders).foreach(p => providers.set(p, openProvider(root, conf, partition = p)))
      val committed = Array.fill(numProviders)(new Committed(0L, mutable.HashMap.empty))
      val errors = new ConcurrentLinkedQueue[Throwable]()
      val attempts = new AtomicLong
      val rejected, takeovers, unloadsInFlight, commits, aborts, evictions = new AtomicLong
      @volatile var running = true

      def background(name: String)(body: Random => Unit): Thread = {
        val t = new Thread(() => {
            val rnd = new Random(name.hashCode)
            try while (running) body(rnd)
            catch { case e: Throwable => errors.add(e) }
          }, name)
        t.setDaemon(true)
        t.start()
        t
      }

      /**
       * One task attempt's batch on provider `p`: random gets (checked against the model as
       * the batch changed it), puts and removes, then commit, abort or nothing (the task's end
       * aborts it). Returns normally also when the store was taken away (unload, takeover):
       * that attempt's batch is then lost, which the model reflects.
       */
      def task(p: Int, rnd: Random, rows: Rows, zombieStop: () => Boolean = null): Unit = {
        val provider = providers.get(p)
        val c = committed(p)
        val v = c.version
        val batch = mutable.HashMap.empty[Long, Option[Long]]
        def expected(k: Long): Option[Long] = batch.getOrElse(k, c.state.get(k))
        def batchOf(store: StateStore): Unit = {
          for (_ <- 0 until 120) {
            val k = rnd.nextInt(keySpace).toLong
            rnd.nextInt(10) match {
              case 0 | 1 | 2 | 3 =>
                val got = Option(store.get(rows.key(k))).map(_.getLong(0))
                if (got != expected(k)) {
                  throw new AssertionError(s"provider $p version $v key $k: got $got, " +
                    s"expected ${expected(k)}")
                }
              case 4 | 5 | 6 | 7 =>
                val x = rnd.nextInt(1000000).toLong
                store.put(rows.key(k), rows.value(x)); batch(k) = Some(x)
              case _ =>
                store.remove(rows.key(k)); batch(k) = None
            }
          }
          if (rnd.nextInt(20) == 0) {
            val all = store.iterator().map(r => r.key.getLong(0) -> r.value.getLong(0)).toMap
            val want = (c.state.keySet ++ batch.keySet).flatMap(k => expected(k).map(k -> _)).toMap
            if (all != want) throw new AssertionError(s"provider $p: iterator differs")
          }
          rnd.nextInt(10) match {
            case 0 => store.abort(); aborts.incrementAndGet()
            case 1 => () // left open: the task's completion listener aborts it
            case _ =>
              val nv = store.commit()
              assert(nv == v + 1)
              batch.foreach { case (k, x) =>
                if (x.isDefined) c.state(k) = x.get else c.state.remove(k)
              }
              c.version = nv
              commits.incrementAndGet()
              evictions.addAndGet(customMetric(store, "spillstoreEvictions"))
          }
        }
        TestTasks.run(attempts.incrementAndGet(), p) { _ =>
          try {
            val store: StateStore =
              if (rnd.nextBoolean()) provider.getStore(v)
              else provider.upgradeReadStoreToWriteStore(provider.getReadStore(v), v)
            if (zombieStop != null) {
              // A zombie writes values no version may ever hold until it is stopped.
              var i = 0L
              while (!zombieStop()) { store.put(rows.key(i % keySpace), rows.value(-1)); i += 1 }
            } else batchOf(store)
          } catch {
            case e: IllegalStateException =>
              // Unloaded or replaced mid-batch: this attempt's batch is lost; never corrupt.
              rejected.incrementAndGet()
              if (!e.getMessage.contains("spillstore") && !e.getMessage.contains("Spill")) throw e
          }
        }
      }

      /** Every key of `p`'s live state equals the model, read by a new task. */
      def check(p: Int, round: Int): Unit = TestTasks.run(attempts.incrementAndGet(), p) { _ =>
        val c = committed(p)
        def read(): Map[Long, Long] = {
          val provider = providers.get(p)
          try contents(provider.getReadStore(c.version))
          catch {
            // Unloaded while read: read the provider that replaced it.
            case e: IllegalStateException if providers.get(p) ne provider => read()
          }
        }
        val live = read()
        val want = c.state.toMap
        if (live != want) {
          val wrong =
            (live.keySet ++ want.keySet).filter(k => live.get(k) != want.get(k)).toSeq.sorted
          fail(s"round $round: provider $p version ${c.version}: ${wrong.size} keys differ, e.g. " +
            wrong.take(5).map(k => s"$k: live ${live.get(k)}, model ${want.get(k)}").mkString("; "))
        }
      }

      val maintenance = background("maintenance") { rnd =>
        providers.get(rnd.nextInt(numProviders)).doMaintenance()
      }
      val barrier = new CyclicBarrier(numThreads + 1)
      val workers = (0 until numThreads).map { t =>
        val worker = new Thread(() => {
            val rnd = new Random(1000 + t)
            val rows = new Rows
            try for (round <- 0 until rounds) {
                barrier.await()
                for (p <- 0 until numProviders if (p + round) % numThreads == t) {
                  if (rnd.nextInt(25) == 0) {
                    // A zombie attempt is overtaken by a retry on this thread.
                    @volatile var stop = false
                    val zombie = new Thread(() =>
                      try task(p, new Random(round), new Rows, () => stop)
                      catch {
                        case e: Throwable => errors.add(e)
                      })
                    zombie.start()
                    Thread.sleep(0, 100000)
                    task(p, rnd, rows)
                    takeovers.incrementAndGet()
                    stop = true
                    zombie.join(30000)
                  } else task(p, rnd, rows)
                }
                barrier.await()
              }
            catch {
              case _: BrokenBarrierException if !errors.isEmpty || !running =>
              case e: Throwable => errors.add(e); running = false; barrier.reset()
            }
          }, s"task-thread-$t")
        worker.start()
        worker
      }
      val unloader = background("unloader") { rnd =>
        // Spark unloads a provider from a maintenance thread, possibly while a task uses it.
        Thread.sleep(100L + rnd.nextInt(400))
        val p = rnd.nextInt(numProviders)
        val old = providers.get(p)
        providers.set(p, openProvider(root, conf, partition = p))
        old.close()
        unloadsInFlight.incrementAndGet()
      }
      var round = 0
      try {
        while (round < rounds && errors.isEmpty) {
          barrier.await(5, TimeUnit.MINUTES)
          barrier.await(5, TimeUnit.MINUTES)
          (0 until numProviders).foreach(check(_, round))
          if (round % 100 == 99) {
            (0 until numProviders).foreach { p =>
              val fresh = openProvider(root, conf, partition = p)
              try TestTasks.run(attempts.incrementAndGet(), p) { _ =>
                  assert(
                    contents(fresh.getReadStore(committed(p).version)) == committed(p).state.toMap,
                    s"round $round: provider $p checkpoint differs")
                }
              finally fresh.close()
            }
          }
          round += 1
        }
      } catch {
        // A worker failed and broke the barrier: report the worker's error below.
        case _: BrokenBarrierException if !errors.isEmpty =>
      } finally {
        running = false
        barrier.reset()
        (workers :+ maintenance :+ unloader).foreach(_.join(60000))
        (0 until numProviders).foreach(p => providers.get(p).close())
      }
      Option(errors.peek()).foreach(e => throw new AssertionError(s"failed in round $round", e))
      assert(commits.get > rounds, s"only ${commits.get} commits")
      assert(takeovers.get > 0 && unloadsInFlight.get > 0 && evictions.get > 0)
      info(s"$rounds rounds: ${commits.get} commits, ${aborts.get} aborts, ${takeovers.get} " +
        s"takeovers, ${unloadsInFlight.get} unloads, ${rejected.get} attempts rejected, " +
        s"${evictions.get} evictions")
    }
  }
}
