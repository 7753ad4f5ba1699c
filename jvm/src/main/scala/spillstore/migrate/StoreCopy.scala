package spillstore.migrate

import java.io.DataOutputStream

import scala.util.control.NonFatal

import org.apache.hadoop.conf.Configuration
import org.apache.hadoop.fs.Path

import org.apache.spark.sql.catalyst.expressions.{UnsafeRow, XXH64}
import org.apache.spark.sql.execution.streaming.state.{
  ReadStateStore, SpillStoreSparkBridge, StateStoreConf, StateStoreId, StateStoreProvider
}
import org.apache.spark.sql.execution.streaming.state.SpillStoreSparkShim.CheckpointFileManager

import spillstore.checkpoint.{CheckpointDir, ForeignFiles, Manifest, StateFile}

/** Row count and an order-independent checksum of a store's (key, value) bytes. */
final case class StateDigest(rows: Long, checksum: Long) {
  def describe: String = f"$rows%,d rows, checksum ${java.lang.Long.toHexString(checksum)}"
}

object StateDigest {
  final class Builder {
    private var rows = 0L
    private var sum = 0L
    def add(key: UnsafeRow, value: UnsafeRow): Unit = {
      val k = XXH64.hashUnsafeBytes(key.getBaseObject, key.getBaseOffset, key.getSizeInBytes, 42L)
      sum += XXH64.hashUnsafeBytes(value.getBaseObject, value.getBaseOffset, value.getSizeInBytes,
        k)
      rows += 1
    }
    def count: Long = rows
    def result: StateDigest = StateDigest(rows, sum)
  }
}

/** A provider Spark or spillstore ships, by the name the migrate command takes. */
sealed abstract class ProviderKind(val name: String, val className: String) {
  /** Why migrate cannot write this provider's checkpoints, if it cannot. */
  def targetRefusal: Option[String] = None

  /**
   * Makes `version` of the store in `dir` loadable and empty, so that the provider's own
   * commit on top of it writes `version + 1` in its own format.
   */
  def writeEmptyVersion(dir: Path, version: Long, conf: StateStoreConf, hadoopConf: Configuration)
      : Unit
}

object ProviderKind {
  case object Spillstore extends ProviderKind("spillstore", "spillstore.SpillStoreProvider") {
    def writeEmptyVersion(dir: Path, version: Long, conf: StateStoreConf,
        hadoopConf: Configuration): Unit = {
      val codec = SpillStoreSparkBridge.compressionCodec(conf.compressionCodec)
      new CheckpointDir(dir, hadoopConf, codec).writeManifest(Manifest.empty(version))
    }
  }

  case object Hdfs extends ProviderKind("hdfs", ForeignFiles.HdfsProvider) {
    /** An HDFS provider snapshot file with no entry: the codec's stream holding only -1. */
    def writeEmptyVersion(dir: Path, version: Long, conf: StateStoreConf,
        hadoopConf: Configuration): Unit = {
      val fm = CheckpointFileManager.create(dir, hadoopConf)
      fm.mkdirs(dir)
      val atomic = fm.createAtomic(new Path(dir, s"$version.snapshot"), overwriteIfPossible = true)
      try {
        val out = new DataOutputStream(
          SpillStoreSparkBridge.compressionCodec(conf.compressionCodec).compress(atomic))
        out.writeInt(-1)
        out.close() // closes atomic: the file appears complete or not at all
      } catch {
        case NonFatal(e) => atomic.cancel(); throw e
      }
    }
  }

  case object RocksDb extends ProviderKind("rocksdb", ForeignFiles.RocksDbProvider) {
    override def targetRefusal: Option[String] = Some("migrating onto Spark's RocksDB " +
      "provider is not supported: its checkpoint (SST files and a versioned archive) can only " +
      "be started at version 0. Migrate to spillstore or hdfs instead.")

    def writeEmptyVersion(dir: Path, version: Long, conf: StateStoreConf,
        hadoopConf: Configuration): Unit =
      throw new IllegalStateException(s"ProviderKind.RocksDb: not a target (${targetRefusal.get})")
  }

  val all: Seq[ProviderKind] = Seq(Spillstore, Hdfs, RocksDb)

  def byName(name: String): ProviderKind = all.find(_.name == name).getOrElse(
    CheckpointLayout.refuse(
      s"unknown target provider '$name': use ${all.map(_.name).mkString(", ")}"))

  def byClass(className: String): Option[ProviderKind] = all.find(_.className == className)
}

/**
 * Copies one store at one version from a checkpoint written by `source` into a new store
 * directory of `target`, both through the providers' own code: the source provider reads the
 * version (with checkpoint format v2, by its checkpoint id), the target provider commits it on
 * top of an empty previous version, and a fresh target provider reads it back to verify the
 * row count and checksum. Each side runs with its own confs: they differ in the checkpoint
 * format when the copy changes it.
 */
final class StoreCopy(source: ProviderKind, target: ProviderKind, sourceConf: StateStoreConf,
    targetConf: StateStoreConf, hadoopConf: Configuration) {

  /**
   * Copies `version` (checkpoint id `fromId`, format v2) of `from`'s store to `to`'s (same
   * operator, partition, store name); the copy's digest and, with format v2, its checkpoint id.
   */
  def copy(from: StateStoreId, to: StateStoreId, store: CheckpointLayout.Store, version: Long,
      fromId: Option[String], onRows: Long => Unit): StoreCopy.Copied = {
    val copied = new StateDigest.Builder
    val toId = withProvider(source, from, store, sourceConf) { reader =>
      val in = ProviderAccess.readStore(reader, version, fromId)
      try {
        if (version > 1) {
          target.writeEmptyVersion(to.storeCheckpointLocation(), version - 1, targetConf,
            hadoopConf)
        }
        withProvider(target, to, store, targetConf) { writer =>
          val out = writer.getStore(version - 1)
          try {
            val rows = in.iterator()
            while (rows.hasNext) {
              val pair = rows.next()
              out.put(pair.key, pair.value)
              copied.add(pair.key, pair.value)
              if (copied.count % RowsPerReport == 0) onRows(RowsPerReport)
            }
            val committed = out.commit()
            if (committed != version) {
              throw new IllegalStateException(s"StoreCopy: ${target.name} committed version " +
                s"$committed of $to, expected $version")
            }
            ProviderAccess.committedId(out)
          } catch {
            case NonFatal(e) =>
              try out.abort()
              catch { case NonFatal(a) => e.addSuppressed(a) }; throw e
          }
        }
      } finally closeRead(in)
    }
    onRows(copied.count % RowsPerReport)
    val written = digest(target, to, store, version, toId, targetConf)
    if (written != copied.result) {
      throw new IllegalStateException(s"StoreCopy: verification of $to failed: read " +
        s"${copied.result.describe} from ${source.name}, but ${target.name} reads back " +
        written.describe)
    }
    StoreCopy.Copied(written, toId)
  }

  /** The digest of `version` (checkpoint id `id`) of a store as `kind`'s provider reads it. */
  private def digest(kind: ProviderKind, id: StateStoreId, store: CheckpointLayout.Store,
      version: Long, ckptId: Option[String], conf: StateStoreConf): StateDigest =
    withProvider(kind, id, store, conf) { provider =>
      val in = ProviderAccess.readStore(provider, version, ckptId)
      try {
        val d = new StateDigest.Builder
        val rows = in.iterator()
        while (rows.hasNext) { val p = rows.next(); d.add(p.key, p.value) }
        d.result
      } finally closeRead(in)
    }

  private def withProvider[T](kind: ProviderKind, id: StateStoreId, store: CheckpointLayout.Store,
      conf: StateStoreConf)(body: StateStoreProvider => T): T = {
    val provider = ProviderAccess.open(kind.className, id, store.keySchema, store.valueSchema,
      store.prefixKeyColumns, conf, hadoopConf)
    try body(provider)
    finally provider.close()
  }

  private val RowsPerReport = 100000L

  private def closeRead(store: ReadStateStore): Unit =
    try store.abort()
    catch { case NonFatal(_) => } // a read store holds nothing to undo
}

object StoreCopy {
  /** A store copied: what it holds, and its checkpoint id with format v2. */
  final case class Copied(digest: StateDigest, checkpointId: Option[String])
}
