package spillstore.cold

import java.io.File
import java.util.UUID

import scala.collection.mutable.ArrayBuffer
import scala.util.control.NonFatal

import org.apache.commons.io.FileUtils
import org.rocksdb._

import org.apache.spark.internal.Logging

/**
 * The cold tier: a private local RocksDB holding entries evicted from the heap, serialized as
 * the same key and value bytes. It is a cache of committed state, never a source of truth:
 * the checkpoint's journals and snapshots are, so writes skip RocksDB's WAL and the whole
 * directory is deleted on close or reload.
 *
 * Not thread-safe beyond what RocksDB itself guarantees: the owning provider serializes use.
 * `memory` is the JVM's shared cache and write-buffer budget; tests may give tiers their own.
 */
class ColdTier private[spillstore] (val dir: File, memory: ColdMemory.Shared = ColdMemory.shared)
    extends AutoCloseable with Logging {
  import ColdTier._

  private val rocks = Rocks.open(dir, memory)
  private val db = rocks.db

  def get(key: Array[Byte]): Array[Byte] = db.get(rocks.readOptions, key)

  /** Applies puts (value non-null) and deletes in one write. */
  def write(batch: WriteBatch): Unit = db.write(rocks.writeOptions, batch)

  /**
   * Entries in key order from `from` (inclusive; null = first) while `keep(key)` holds. The
   * scan holds a native iterator until it is exhausted or closed: its owner must close it
   * before this tier closes.
   */
  def scan(from: Array[Byte], keep: Array[Byte] => Boolean): ColdTier.Scan =
    new ColdTier.Scan(db.newIterator(rocks.readOptions), from, keep)

  private var sortedFiles = 0

  /**
   * A new table file in this tier's directory for entries in strictly ascending key order, to
   * be moved into the tier by [[ingest]]: a load that writes sorted entries this way skips
   * RocksDB's memtables, flushes and compactions. The caller closes it.
   */
  def newSortedFile(): SortedFile = {
    sortedFiles += 1
    new SortedFile(new File(dir, s"load-$sortedFiles.sst"), rocks.options)
  }

  /**
   * Moves `file` (finished, not closed) into the tier. Its keys must not be in the tier yet:
   * into an empty key range it goes to the last level, where no compaction rewrites it.
   */
  def ingest(file: SortedFile): Unit = {
    val options = new IngestExternalFileOptions().setMoveFiles(true)
    try db.ingestExternalFile(java.util.Collections.singletonList(file.path.getPath), options)
    finally options.close()
  }

  /** Bytes RocksDB holds on disk and in memtables. */
  def approximateBytes: Long = property("rocksdb.total-sst-files-size") + memtableBytes

  /** Bytes in this tier's memtables, active and immutable (charged to [[ColdMemory]]). */
  def memtableBytes: Long = property("rocksdb.cur-size-all-mem-tables")

  /** A RocksDB string property of this tier (`rocksdb.levelstats`, say), for tools. */
  private[spillstore] def propertyString(name: String): String = db.getProperty(name)

  /** A RocksDB integer property of this tier, 0 if it cannot be read. */
  private[spillstore] def property(name: String): Long =
    try db.getLongProperty(name)
    catch { case NonFatal(_) => 0L }

  override def close(): Unit = {
    try rocks.close()
    finally {
      FileUtils.deleteQuietly(dir)
    }
  }
}

object ColdTier extends Logging {
  /**
   * Sorted runs that start a compaction (RocksDB's default is 4). The tier compacts size-tiered
   * (RocksDB's universal style), not by levels: evicted keys arrive in no key order, so under
   * leveled compaction every level-0 file overlapped the whole tier and each compaction
   * rewrote all of it, a cost that grew with the tier and took a fifth of a one-core
   * executor's CPU at 6M keys a store; size-tiered merges runs of similar size, so a key is
   * rewritten a few times in all. A cold read probes each run's in-memory filter, and with 8
   * runs a run reads its block only when the filter says so (the cold-read bench,
   * `ColdReadBench`, measures that cost).
   */
  private val L0CompactionTrigger = 8

  /**
   * A cold tier's RocksDB and the native objects it was opened with, closed together. Opening
   * closes what it made if any step fails: native objects are not garbage collected, so each
   * failed open of a full or broken disk (retried at every eviction) would leak a set.
   */
  private final class Rocks private (val db: RocksDB, val options: Options,
      val readOptions: ReadOptions, val writeOptions: WriteOptions, others: Seq[AutoCloseable]) {
    def close(): Unit =
      (db +: readOptions +: writeOptions +: options +: others).foreach(_.close())
  }

  private object Rocks {
    def open(dir: File, memory: ColdMemory.Shared): Rocks = {
      val made = ArrayBuffer.empty[AutoCloseable] // in the order closing them needs
      def own[T <: AutoCloseable](r: T): T = { r +=: made; r }
      try {
        val filter = own(new BloomFilter(10.0, false))
        // Index and filter blocks stay outside the cache (about 1.5 bytes a key): cached, they
        // competed with data blocks for a bound sized for the heap budget and slowed cold reads.
        val tableConfig = new BlockBasedTableConfig()
          .setFilterPolicy(filter)
          .setBlockCache(memory.cache)
          .setWholeKeyFiltering(true)
        val options = own(new Options())
          .setCreateIfMissing(true)
          .setTableFormatConfig(tableConfig)
          .setCompressionType(CompressionType.LZ4_COMPRESSION)
          .setWriteBufferManager(memory.writeBuffers)
          .setWriteBufferSize(memory.memtableBytes)
          .setMaxWriteBufferNumber(2)
          .setMemtablePrefixBloomSizeRatio(0.1)
          .setMaxOpenFiles(256)
          .setCompactionStyle(CompactionStyle.UNIVERSAL)
          .setLevel0FileNumCompactionTrigger(L0CompactionTrigger)
          .setLevel0SlowdownWritesTrigger(L0CompactionTrigger * 3)
          .setLevel0StopWritesTrigger(L0CompactionTrigger * 4)
          // RocksDB's INFO log records every flush and compaction in a LOG file beside the
          // state, and its periodic stats dump writes there even when the tier is idle; nobody
          // reads it (failures reach spillstore as exceptions), and it kept the tier's disk
          // usage moving after the last batch. Warnings and errors are still written.
          .setInfoLogLevel(InfoLogLevel.WARN_LEVEL)
          .setStatsDumpPeriodSec(0)
        val writeOptions = own(new WriteOptions()).setDisableWAL(true)
        val readOptions = own(new ReadOptions())
        val db = RocksDB.open(options, dir.getAbsolutePath)
        new Rocks(db, options, readOptions, writeOptions, Seq(filter))
      } catch {
        case e: Throwable =>
          made.foreach(r =>
            try r.close()
            catch { case NonFatal(c) => e.addSuppressed(c) })
          throw e
      }
    }
  }

  /**
   * One table file being written for [[ColdTier.ingest]], with the tier's table options (block
   * format, compression, filter). Closing it deletes the file if it was not ingested.
   */
  final class SortedFile private[ColdTier] (private[ColdTier] val path: File, options: Options)
      extends AutoCloseable {
    private val envOptions = new EnvOptions()
    private val writer = new SstFileWriter(envOptions, options)
    private var empty = true
    try writer.open(path.getPath)
    catch {
      case e: Throwable => writer.close(); envOptions.close(); throw e
    }

    def put(key: Array[Byte], value: Array[Byte]): Unit = { writer.put(key, value); empty = false }
    def isEmpty: Boolean = empty
    /** Bytes written so far (the blocks not yet cut are not counted). */
    def bytes: Long = writer.fileSize()
    /** Writes the file's index and footer; after that it can only be ingested or closed. */
    def finish(): Unit = writer.finish()

    override def close(): Unit = {
      try { writer.close(); envOptions.close() }
      finally FileUtils.deleteQuietly(path)
    }
  }

  /** A scan of a cold tier; see [[ColdTier.scan]]. Closing it twice is harmless. */
  final class Scan private[ColdTier] (it: RocksIterator, from: Array[Byte],
      keep: Array[Byte] => Boolean)
      extends Iterator[(Array[Byte], Array[Byte])] with AutoCloseable {
    private var open = true
    if (from == null) it.seekToFirst() else it.seek(from)

    private def valid: Boolean = open && {
      val ok = it.isValid && keep(it.key())
      if (!ok) close()
      ok
    }

    override def hasNext: Boolean = valid
    override def next(): (Array[Byte], Array[Byte]) = {
      if (!valid) throw new NoSuchElementException("cold tier scan is exhausted")
      val kv = (it.key(), it.value())
      it.next()
      kv
    }

    def isOpen: Boolean = open
    override def close(): Unit = if (open) { open = false; it.close() }
  }

  /** A write batch for [[ColdTier.write]]; the caller closes it. */
  def newBatch(): WriteBatch = { RocksDBLibrary.load(); new WriteBatch() }

  /**
   * Opens a new, empty cold tier in a directory of its own under `parent` (the executor's local
   * dir: never the checkpoint directory), inside this JVM's per-JVM directory there, so that
   * whatever a dead JVM leaves is reclaimed (see [[LocalDirs]]). The name carries the store's id
   * for operators' benefit and a UUID so that two providers never share it.
   */
  def create(parent: File, storeName: String): ColdTier = {
    RocksDBLibrary.load()
    val dir = LocalDirs.createOwnerOnly(LocalDirs.jvmDirUnder(parent),
      s"spillstore-$storeName-${UUID.randomUUID()}")
    try new ColdTier(dir)
    catch {
      case e: Throwable =>
        FileUtils.deleteQuietly(dir)
        e match {
          case r: RocksDBException => throw new IllegalStateException(
              s"spillstore cannot open its cold tier (RocksDB) in $dir: ${r.getMessage}; " +
                LocalDirs.ConfHint, r)
          case _ => throw e
        }
    }
  }
}
