package spillstore.checkpoint

import java.io.{ByteArrayOutputStream, IOException}
import java.util.concurrent.{CountDownLatch, TimeUnit}
import java.util.concurrent.atomic.AtomicInteger

import org.scalatest.concurrent.Eventually.{eventually, timeout}
import org.scalatest.funsuite.AnyFunSuite
import org.scalatest.time.SpanSugar._

import org.apache.spark.sql.execution.streaming.state.SpillStoreSparkBridge

/** [[EarlyFile]]'s claims: one `take` or `drop` wins, and an opened file nobody takes is discarded. */
class EarlyFileSuite extends AnyFunSuite {

  /** An output that counts how it ended. */
  private final class Recorded extends AtomicOutput {
    val bytes = new ByteArrayOutputStream
    val published = new AtomicInteger
    val discarded = new AtomicInteger
    override def write(b: Int): Unit = bytes.write(b)
    def publish(): Unit = published.incrementAndGet()
    def discard(): Unit = discarded.incrementAndGet()
  }

  /**
   * An early file whose opening waits for `gate`, and the output it opens; returns once a
   * pool thread has started opening it, unless `queued` (then it may not have started).
   */
  private def gated(gate: CountDownLatch, fail: Boolean = false, queued: Boolean = false,
      opens: AtomicInteger = new AtomicInteger): (EarlyFile, Recorded) = {
    val out = new Recorded
    val started = new CountDownLatch(1)
    val early = new EarlyFile(StateFile.Journal, 7,
      () => {
        opens.incrementAndGet()
        started.countDown()
        assert(gate.await(30, TimeUnit.SECONDS))
        if (fail) throw new IOException("storage refused the create")
        EarlyFile.Opened(out,
          new StateFile.Writer(out, StateFile.Journal, 7,
            SpillStoreSparkBridge.compressionCodec("lz4")))
      })
    if (!queued) assert(started.await(30, TimeUnit.SECONDS))
    (early, out)
  }

  test("a file still queued behind other stores' opens is skipped by take and drop: the " +
    "writer opens it itself, never waiting for the pool, and the queued open never runs") {
    // The pool's four threads busy opening other stores' files on a slow storage.
    val gate = new CountDownLatch(1)
    val busy = (1 to 4).map(_ => gated(gate)._1)
    val opens = new AtomicInteger
    val (taken, _) = gated(gate, queued = true, opens = opens)
    val (dropped, droppedOut) = gated(gate, queued = true, opens = opens)
    assert(taken.take().isEmpty, "a take of a queued file must not wait for the pool")
    dropped.drop()
    gate.countDown()
    busy.foreach(_.drop())
    Thread.sleep(200) // the pool runs what was queued: nothing of the skipped files
    assert(opens.get === 0 && droppedOut.discarded.get === 0)
  }

  test("take waits for the file to open and returns it; a later drop or take does not discard it") {
    val gate = new CountDownLatch(1)
    val (early, out) = gated(gate)
    new Thread(() => { Thread.sleep(100); gate.countDown() }).start()
    val opened = early.take().get
    assert(opened.output eq out)
    assert(out.bytes.size() > 0, "the header is written when the file opens")
    early.drop()
    intercept[IllegalStateException](early.take())
    Thread.sleep(50)
    assert(out.discarded.get === 0)
  }

  test("a drop while the file opens discards it once opened, exactly once; take then throws") {
    val gate = new CountDownLatch(1)
    val (early, out) = gated(gate)
    early.drop()
    early.drop()
    assert(out.discarded.get === 0)
    gate.countDown()
    eventually(timeout(10.seconds))(assert(out.discarded.get === 1))
    val e = intercept[IllegalStateException](early.take())
    assert(e.getMessage.contains("journal 7"))
    Thread.sleep(50)
    assert(out.discarded.get === 1 && out.published.get === 0)
  }

  test("a file that failed to open is taken as None, for the writer to open it again") {
    val gate = new CountDownLatch(1)
    gate.countDown()
    val (early, out) = gated(gate, fail = true)
    assert(early.take().isEmpty)
    assert(out.discarded.get === 0)
  }

  test("an interrupted take leaves the file to be discarded once opened") {
    val gate = new CountDownLatch(1)
    val (early, out) = gated(gate)
    Thread.currentThread().interrupt()
    intercept[InterruptedException](early.take())
    assert(!Thread.interrupted())
    assert(out.discarded.get === 0)
    gate.countDown()
    eventually(timeout(10.seconds))(assert(out.discarded.get === 1))
  }
}
