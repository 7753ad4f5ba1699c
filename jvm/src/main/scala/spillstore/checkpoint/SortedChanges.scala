package spillstore.checkpoint

import java.io.{BufferedInputStream, BufferedOutputStream, File, FileInputStream, FileOutputStream}
import java.nio.ByteBuffer
import java.nio.file.Files
import java.util.{Arrays => JArrays, HashMap => JHashMap}

import scala.collection.mutable.ArrayBuffer
import scala.util.control.NonFatal

import org.apache.commons.io.FileUtils
import org.apache.hadoop.fs.Path

/**
 * The final value (null = removed) of every key changed in journals (base, version], in
 * unsigned key order: a k-way merge of sorted sources in which a later source's value wins.
 *
 * Journals are sorted by key, so each is merged as it is read and no key is held in memory: a
 * snapshot costs one pass over its base and journals, with no hashing or sorting on the
 * maintenance thread (which took a third of a 25M-key run's CPU). At most `maxOpenSources`
 * sources are open at once; past that, the open ones are first merged into one run file under
 * `spillDir`, so a long backlog of journals costs disk, not memory.
 *
 * [[SortedChanges.sort]] gives records in no order the same shape: sorted in memory, at most
 * `maxKeysInMemory` keys at a time, into sorted run files (without that bound a 1 GB executor
 * died sorting 2.5M keys).
 *
 * Use `head` / `advance()`, then `close()` (which closes the sources and deletes the runs).
 */
final class SortedChanges private (sources: IndexedSeq[SortedChanges.Source], onClose: () => Unit)
    extends AutoCloseable {

  private val heads = sources.map(_.next()).toArray

  /** The smallest key not yet consumed with its newest value; null when all are consumed. */
  var head: (Array[Byte], Array[Byte]) = pull()

  def advance(): Unit = head = pull()

  /** Hands every record not yet consumed to `visit`, in key order, consuming them. */
  def drain(visit: (Array[Byte], Array[Byte]) => Unit): Unit =
    while (head != null) {
      visit(head._1, head._2)
      advance()
    }

  private def pull(): (Array[Byte], Array[Byte]) = {
    var min: Array[Byte] = null
    var i = 0
    while (i < heads.length) {
      if (heads(i) != null && (min == null || JArrays.compareUnsigned(heads(i)._1, min) < 0))
        min = heads(i)._1
      i += 1
    }
    if (min == null) return null
    var value: Array[Byte] = null
    i = 0
    while (i < heads.length) { // ascending: a later source's value overrides an earlier one's
      if (heads(i) != null && JArrays.equals(heads(i)._1, min)) {
        value = heads(i)._2; heads(i) = sources(i).next()
      }
      i += 1
    }
    (min, value)
  }

  override def close(): Unit = onClose()
}

object SortedChanges {
  /** About 180 heap bytes a key while sorting (map node, buffer, arrays): ~36 MB at 200k. */
  val DefaultMaxKeysInMemory = 200000
  /** Each open source buffers ~150 KB (file stream, codec, record buffer). */
  val DefaultMaxOpenSources = 32

  /**
   * Journal `version` (`file`) could not be read: `cause` says why. Kept apart from what the
   * merge's other inputs throw, so that a damaged journal is never taken for a damaged base.
   */
  final class UnreadableJournal(val file: Path, val version: Long,
      cause: Throwable)
      extends RuntimeException(s"Cannot read journal $file: ${cause.getMessage}", cause)

  /** Records in ascending unsigned key order, each key once; null when exhausted. */
  private trait Source { def next(): (Array[Byte], Array[Byte]) }

  /**
   * Merges `parts` (oldest first; their read failures are a bad base, see
   * `CheckpointDir.asBase`), then the journals (base, version] of `dir`; see the class comment.
   */
  def squash(dir: CheckpointDir, parts: Seq[Manifest.Part], base: Long, version: Long,
      spillDir: () => File, maxOpenSources: Int = DefaultMaxOpenSources): SortedChanges =
    build(dir, spillDir, maxOpenSources) { merge =>
      parts.foreach(merge.addPart)
      var v = base + 1
      while (v <= version) { merge.addJournal(v); v += 1 }
    }

  /**
   * `records` (each key once, in any order) in key order, at most `maxKeysInMemory` of them in
   * memory at a time, the rest in sorted runs under `spillDir`: what a snapshot of a live state
   * (whose heap has no key order) is written from.
   */
  def sort(dir: CheckpointDir, records: Iterator[(Array[Byte], Array[Byte])],
      spillDir: () => File, maxKeysInMemory: Int = DefaultMaxKeysInMemory,
      maxOpenSources: Int = DefaultMaxOpenSources): SortedChanges =
    build(dir, spillDir, maxOpenSources)(_.addUnsorted(records, maxKeysInMemory))

  /** The merge of the sources `add` gives a builder; what they left is deleted if one fails. */
  private def build(dir: CheckpointDir, spillDir: () => File, maxOpenSources: Int)(
      add: MergeBuilder => Unit): SortedChanges = {
    val merge = new MergeBuilder(dir, spillDir, maxOpenSources)
    try {
      add(merge)
      merge.result()
    } catch {
      case e: Throwable => merge.discard(); throw e
    }
  }

  /** Collects the sources of one merge, in version order. */
  private final class MergeBuilder(dir: CheckpointDir, spillDir: () => File,
      maxOpenSources: Int) {
    require(maxOpenSources >= 2, s"maxOpenSources must be at least 2, got $maxOpenSources")
    private val sources = ArrayBuffer.empty[Source]
    private val closers = ArrayBuffer.empty[() => Unit] // one per open source
    private var pending = new JHashMap[ByteBuffer, Array[Byte]]()
    private var runDir: File = _
    private var runs = 0

    def addPart(part: Manifest.Part): Unit = {
      val f = dir.pathOf(part.source)
      val (reader, in) = dir.asBase(f)(dir.open(part))
      add(() => dir.asBase(f)(reader.next()), () => in.close())
    }

    def addJournal(v: Long): Unit = {
      val (reader, in) = reading(v)(dir.open(StateFile.Journal, v))
      add(() => reading(v)(reader.next()), () => in.close())
    }

    /**
     * `records`, later than every source added so far, in no key order: sorted runs of at most
     * `maxKeysInMemory` keys, the last one kept in memory for [[result]].
     */
    def addUnsorted(records: Iterator[(Array[Byte], Array[Byte])], maxKeysInMemory: Int): Unit =
      records.foreach { case (key, value) =>
        pending.put(ByteBuffer.wrap(key), value)
        if (pending.size >= maxKeysInMemory) spillPending()
      }

    private def reading[T](v: Long)(body: => T): T =
      try body
      catch {
        case e: UnreadableJournal => throw e
        case NonFatal(e) => throw new UnreadableJournal(dir.file(StateFile.Journal, v), v, e)
      }

    def result(): SortedChanges = {
      if (!pending.isEmpty) {
        val last = sorted(pending)
        var next = 0
        sources += (() =>
          if (next < last.length) { next += 1; last(next - 1) }
          else null)
      }
      new SortedChanges(sources.toIndexedSeq, () => discard())
    }

    def discard(): Unit = {
      closers.foreach(c =>
        try c()
        catch { case NonFatal(_) => })
      closers.clear()
      if (runDir != null) FileUtils.deleteQuietly(runDir)
    }

    private def add(source: Source, close: () => Unit): Unit = {
      sources += source
      closers += close
      if (sources.size >= maxOpenSources) {
        val merged = new SortedChanges(sources.toIndexedSeq, () => ())
        val run = writeRun(w => merged.drain(w.record))
        closers.foreach(_.apply())
        sources.clear(); closers.clear()
        sources += run._1; closers += run._2
      }
    }

    private def spillPending(): Unit = if (!pending.isEmpty) {
      val entries = sorted(pending)
      pending = new JHashMap[ByteBuffer, Array[Byte]]()
      val run = writeRun(w => entries.foreach { case (k, v) => w.record(k, v) })
      add(run._1, run._2)
    }

    /** Writes a sorted run file; returns it as a source, with what closes and deletes it. */
    private def writeRun(write: StateFile.Writer => Unit): (Source, () => Unit) = {
      if (runDir == null) {
        val parent = spillDir()
        parent.mkdirs()
        runDir = Files.createTempDirectory(parent.toPath, "spillstore-snapshot-runs-").toFile
      }
      val id = runs
      runs += 1
      val f = new File(runDir, s"run-$id")
      val out = new BufferedOutputStream(new FileOutputStream(f), 64 * 1024)
      try {
        val w = new StateFile.Writer(out, StateFile.Journal, id, dir.codec)
        write(w)
        w.finish()
      } finally out.close()
      val in = new BufferedInputStream(new FileInputStream(f), 64 * 1024)
      val reader =
        try {
          new StateFile.Reader(in, f.length, f.toString, StateFile.Journal, id, _ => dir.codec)
        } catch {
          case e: Throwable => in.close(); throw e
        }
      (() => reader.next(), () => { in.close(); f.delete() })
    }
  }

  private def sorted(m: JHashMap[ByteBuffer, Array[Byte]]): Array[(Array[Byte], Array[Byte])] = {
    val out = new Array[(Array[Byte], Array[Byte])](m.size)
    var i = 0
    m.forEach { (k, value) => out(i) = (k.array, value); i += 1 }
    JArrays.sort(out,
      (a: (Array[Byte], Array[Byte]), b: (Array[Byte], Array[Byte])) =>
        JArrays.compareUnsigned(a._1, b._1))
    out
  }
}
