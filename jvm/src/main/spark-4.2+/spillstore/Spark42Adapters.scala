package spillstore

import org.apache.spark.sql.catalyst.expressions.UnsafeRow
import org.apache.spark.sql.execution.streaming.state._

import spillstore.checkpoint.ForeignFiles
import spillstore.conf.SparkConfs
import spillstore.metrics.SnapshotLag

/** 4.2's getStore (forceSnapshotOnCommit, loadEmpty) and upgrade, kept by 4.3. */
trait Spark42ProviderAdapter
    extends Spark4ProviderAdapter with Spark41Replay with SnapshotLag.Provider {
  self: SpillStoreProvider =>
  override def getStore(
      version: Long,
      stateStoreCkptId: Option[String],
      forceSnapshotOnCommit: Boolean,
      loadEmpty: Boolean): StateStore = {
    if (loadEmpty) {
      throw Unsupported("loading an empty store (loadEmpty)", s"store $stateStoreId")
    }
    open(version, writable = true, forceSnapshotOnCommit, upgrading = null,
      ckptId = stateStoreCkptId)
  }

  override def upgradeReadStoreToWriteStore(
      readStore: ReadStateStore,
      version: Long,
      uniqueId: Option[String],
      forceSnapshotOnCommit: Boolean): StateStore =
    upgrade(readStore, version, forceSnapshotOnCommit, uniqueId)

  /**
   * Row checksums (4.2+) are written by Spark's providers themselves, in their files: spillstore
   * writes none (its files carry one CRC32C over their records, checked when a file is read to
   * its end), so a query that
   * asks for them is refused rather than run without them.
   */
  override protected def refuseLineConfs(stateStoreId: StateStoreId,
      storeConfs: StateStoreConf): Unit =
    if (storeConfs.rowChecksumEnabled) {
      throw Unsupported(s"Spark's row checksums (${SparkConfs.RowChecksumEnabled}=true)",
        s"store $stateStoreId",
        "Its journals and snapshots carry a CRC32C over their records, checked when a file is " +
          "read. Set it to false before the query's first batch (Spark records it in the " +
          s"offset log), or use Spark's ${ForeignFiles.RocksDbProvider} for this query")
    }
}

/** The read calls 4.2 made abstract (or added with a default spillstore does better). */
trait Spark42StoreAdapter extends Spark41StoreAdapter { self: SpillStateStore =>
  override def multiGet(keys: Array[UnsafeRow], colFamilyName: String): Iterator[UnsafeRow] =
    keys.iterator.map(get(_, colFamilyName))

  override def allColumnFamilyNames: Set[String] = Set(StateStore.DEFAULT_COL_FAMILY_NAME)

  override def prefixScanWithMultiValues(prefixKey: UnsafeRow,
      colFamilyName: String): StateStoreIterator[UnsafeRowPair] =
    unsupported("multiple values per key")
  override def iteratorWithMultiValues(colFamilyName: String): StateStoreIterator[UnsafeRowPair] =
    unsupported("multiple values per key")
}
