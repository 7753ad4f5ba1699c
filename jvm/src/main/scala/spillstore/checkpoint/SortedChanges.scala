package spillstore.checkpoint

import java.io.{BufferedInputStream, BufferedOutputStream, File, FileInputStream, FileOutputStream, InputStream}
import java.nio.ByteBuffer
import java.nio.file.Files
import java.util.{Arrays => JArrays, HashMap => JHashMap}

import scala.collection.mutable.ArrayBuffer
import scala.util.control.NonFatal

import org.apache.commons.io.FileUtils

import org.apache.spark.sql.execution.streaming.state.SpillStoreSparkBridge

/**
 * The final value (null = removed) of every key changed in journals (base, version], in
 * unsigned key order, with bounded memory: at most `maxKeysInMemory` distinct keys are held at
 * once; past that, the squashed keys so far are sorted and written to a run file under
 * `spillDir`, and the runs are merged on the way out (a later run's value wins). Without this,
 * a snapshot after ten batches of 250k new keys each held 2.5M keys (about 450 MB) on a
 * maintenance thread, outside any budget, and a 1 GB executor died of it.
 *
 * Use `head` / `advance()`, then `close()` (which deletes the runs).
 */
final class SortedChanges private (runs: Seq[File], last: Array[(Array[Byte], Array[Byte])],
    codec: SpillStoreSparkBridge.Codec) extends AutoCloseable {
  import SortedChanges._

  private val streams = ArrayBuffer.empty[InputStream]
  private val sources: IndexedSeq[() => (Array[Byte], Array[Byte])] = {
    val fromRuns = runs.zipWithIndex.map { case (f, i) =>
      val in = new BufferedInputStream(new FileInputStream(f), 64 * 1024)
      streams += in
      val reader = new StateFile.Reader(in, f.length, f.toString, StateFile.Journal, i, _ => codec)
      () => reader.next()
    }
    var next = 0
    fromRuns.toIndexedSeq :+ (() => if (next < last.length) { next += 1; last(next - 1) } else null)
  }
  private val heads = sources.map(_.apply()).toArray

  /** The smallest key not yet consumed with its newest value; null when all are consumed. */
  var head: (Array[Byte], Array[Byte]) = pull()

  def advance(): Unit = head = pull()

  private def pull(): (Array[Byte], Array[Byte]) = {
    var min: Array[Byte] = null
    var i = 0
    while (i < heads.length) {
      if (heads(i) != null && (min == null || JArrays.compareUnsigned(heads(i)._1, min) < 0)) min = heads(i)._1
      i += 1
    }
    if (min == null) return null
    var value: Array[Byte] = null
    i = 0
    while (i < heads.length) { // ascending: a later source's value overrides an earlier one's
      if (heads(i) != null && JArrays.equals(heads(i)._1, min)) { value = heads(i)._2; heads(i) = sources(i)() }
      i += 1
    }
    (min, value)
  }

  override def close(): Unit = {
    streams.foreach(s => try s.close() catch { case NonFatal(_) => })
    runs.headOption.foreach(f => FileUtils.deleteQuietly(f.getParentFile))
  }
}

object SortedChanges {
  /** About 180 heap bytes a key while squashing (map node, buffer, arrays): ~36 MB at 200k. */
  val DefaultMaxKeysInMemory = 200000

  /**
   * Squashes the journals (base, version] of `dir`, spilling sorted runs to a new directory
   * under `spillDir` when more than `maxKeysInMemory` distinct keys are pending.
   */
  def squash(dir: CheckpointDir, base: Long, version: Long, spillDir: () => File,
      maxKeysInMemory: Int = DefaultMaxKeysInMemory): SortedChanges = {
    val runs = ArrayBuffer.empty[File]
    var runDir: File = null
    var pending = new JHashMap[ByteBuffer, Array[Byte]]()
    def spill(): Unit = {
      if (runDir == null) {
        val parent = spillDir()
        parent.mkdirs()
        runDir = Files.createTempDirectory(parent.toPath, "spillstore-snapshot-runs-").toFile
      }
      val f = new File(runDir, s"run-${runs.size}")
      val out = new BufferedOutputStream(new FileOutputStream(f), 64 * 1024)
      try {
        val w = new StateFile.Writer(out, StateFile.Journal, runs.size, dir.codec)
        sorted(pending).foreach { case (k, v) => if (v == null) w.remove(k) else w.put(k, v) }
        w.finish()
      } finally out.close()
      runs += f
      pending = new JHashMap[ByteBuffer, Array[Byte]]()
    }
    try {
      var v = base + 1
      while (v <= version) {
        dir.read(StateFile.Journal, v) { (k, value) =>
          pending.put(ByteBuffer.wrap(k), value)
          if (pending.size >= maxKeysInMemory) spill()
        }
        v += 1
      }
      new SortedChanges(runs.toSeq, sorted(pending), dir.codec)
    } catch {
      case e: Throwable =>
        if (runDir != null) FileUtils.deleteQuietly(runDir)
        throw e
    }
  }

  private def sorted(m: JHashMap[ByteBuffer, Array[Byte]]): Array[(Array[Byte], Array[Byte])] = {
    val out = new Array[(Array[Byte], Array[Byte])](m.size)
    var i = 0
    m.forEach { (k, value) => out(i) = (k.array, value); i += 1 }
    JArrays.sort(out, (a: (Array[Byte], Array[Byte]), b: (Array[Byte], Array[Byte])) =>
      JArrays.compareUnsigned(a._1, b._1))
    out
  }
}
