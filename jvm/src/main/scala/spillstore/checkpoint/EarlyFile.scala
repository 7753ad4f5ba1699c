package spillstore.checkpoint

import java.util.concurrent.{
  CompletableFuture, ExecutionException, LinkedBlockingQueue, ThreadPoolExecutor,
  TimeUnit
}
import java.util.concurrent.atomic.{AtomicBoolean, AtomicInteger, AtomicReference}

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
 * | queued   | nobody: behind other stores' opens          | opening (a pool thread), skipped |
 * | opening  | a thread of the JVM's pool (runs `open`)    | ready, or failed                 |
 * | ready    | nobody until claimed                        | claimed                          |
 * | skipped  | nobody: never opened                        | -                                |
 * | claimed  | the one caller whose `take` or `drop` won   | -                                |
 *
 * Exactly one `take` or `drop` claims the file. A claim of a file still queued skips it: the
 * pool (a few threads for the JVM's stores) may be busy with other stores' opens on slow
 * storage, and a commit must not wait behind them; its writer opens the file itself. A claim
 * of a file being opened waits for it (`take`) or leaves its discard to the pool thread (`drop`).
 */
private[checkpoint] final class EarlyFile(val kind: Kind, val version: Long,
    open: () => EarlyFile.Opened)
    extends Logging {
  private val claimed = new AtomicBoolean
  /** Whether a pool thread has started opening it (true), or a claim skipped it (false). */
  private val started = new AtomicReference[java.lang.Boolean]
  // null once skipped: never opened
  private val opened: CompletableFuture[EarlyFile.Opened] = CompletableFuture.supplyAsync(
    () => if (started.compareAndSet(null, true)) open() else null, EarlyFile.pool)

  /** Skips the file if no pool thread has started opening it; whether it did. */
  private def skipIfQueued(): Boolean = started.compareAndSet(null, false)

  /**
   * The opened file, to write and publish or discard; None if it was still queued or opening it
   * failed (the caller opens it itself, which fails with its own error if the cause persists).
   * Waits while a pool thread opens it; an interrupt leaves the file to be discarded once opened.
   */
  def take(): Option[EarlyFile.Opened] = {
    if (!claimed.compareAndSet(false, true)) {
      throw new IllegalStateException(s"$this is taken or dropped already")
    }
    if (skipIfQueued()) return None
    try Some(opened.get())
    catch {
      case e: ExecutionException =>
        logWarning(s"Opening $this early failed; the commit opens it again: ${e.getCause}")
        None
      case e: InterruptedException =>
        discardWhenOpened()
        throw e
    }
  }

  /** Discards the file (once it is open), or skips it if still queued; a no-op once taken or
   *  dropped. */
  def drop(): Unit = if (claimed.compareAndSet(false, true) && !skipIfQueued()) discardWhenOpened()

  private def discardWhenOpened(): Unit = opened.whenComplete {
    (o: EarlyFile.Opened, _: Throwable) =>
      if (o != null) {
        try o.output.discard()
        catch { case NonFatal(e) => logWarning(s"Cannot discard $this", e) }
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
