package spillstore.checkpoint

import java.util.concurrent.{CompletableFuture, ExecutionException, LinkedBlockingQueue, ThreadPoolExecutor,
  TimeUnit}
import java.util.concurrent.atomic.{AtomicBoolean, AtomicInteger}

import scala.util.control.NonFatal

import org.apache.spark.internal.Logging

import spillstore.checkpoint.StateFile.Kind

/**
 * A checkpoint file opened in the background before its body is known, for a write of it to
 * come: a store writes its journal at commit, but knows the journal's version when it opens.
 * On HDFS, opening (the create call, and with the header sent ahead, the block allocation and
 * the datanode pipeline) took about half of a journal's write in a probe on a MiniDFSCluster
 * (280 KB journals: 16-19 ms write, close and rename from a cold start, 9 ms from an opened
 * and flushed file); opened early, that time overlaps the batch instead of lengthening commit.
 *
 * | state    | owner                                       | moves to                         |
 * |----------|---------------------------------------------|----------------------------------|
 * | opening  | a thread of the JVM's pool (runs `open`)    | ready, or failed                 |
 * | ready    | nobody until claimed                        | claimed                          |
 * | claimed  | the one caller whose `take` or `drop` won   | -                                |
 *
 * Exactly one `take` or `drop` claims the file; a claim of a file still opening waits for it
 * (`take`) or leaves its discard to the pool thread (`drop`).
 */
private[checkpoint] final class EarlyFile(val kind: Kind, val version: Long,
    open: () => EarlyFile.Opened) extends Logging {
  private val claimed = new AtomicBoolean
  private val opened: CompletableFuture[EarlyFile.Opened] =
    CompletableFuture.supplyAsync(() => open(), EarlyFile.pool)

  /**
   * The opened file, to write and publish or discard; None if opening it failed (the caller
   * opens it again, which fails with its own error if the cause persists). Waits while it
   * opens; an interrupt leaves the file to be discarded once opened.
   */
  def take(): Option[EarlyFile.Opened] = {
    if (!claimed.compareAndSet(false, true)) {
      throw new IllegalStateException(s"$this is taken or dropped already")
    }
    try Some(opened.get()) catch {
      case e: ExecutionException =>
        logDebug(s"Opening $this early failed; opening it again", e.getCause)
        None
      case e: InterruptedException =>
        discardWhenOpened()
        throw e
    }
  }

  /** Discards the file (once it is open); a no-op once taken or dropped. */
  def drop(): Unit = if (claimed.compareAndSet(false, true)) discardWhenOpened()

  private def discardWhenOpened(): Unit = opened.whenComplete { (o: EarlyFile.Opened, _: Throwable) =>
    if (o != null) {
      try o.output.discard() catch { case NonFatal(e) => logWarning(s"Cannot discard $this", e) }
    }
  }

  override def toString: String = s"the early ${kind.suffix} $version"
}

private[checkpoint] object EarlyFile {
  /** An open file and the writer of its records, the header written and sent ahead. */
  final case class Opened(output: AtomicOutput, writer: StateFile.Writer)

  private val threadIds = new AtomicInteger

  /**
   * Opening is mostly waiting on the storage: a few daemon threads serve the JVM's stores, and
   * go away when idle.
   */
  private lazy val pool = {
    val p = new ThreadPoolExecutor(4, 4, 30, TimeUnit.SECONDS, new LinkedBlockingQueue[Runnable](),
      (r: Runnable) => {
        val t = new Thread(r, s"spillstore-early-file-${threadIds.incrementAndGet()}")
        t.setDaemon(true)
        t
      })
    p.allowCoreThreadTimeOut(true)
    p
  }
}
