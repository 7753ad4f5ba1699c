package spillstore

import org.apache.spark.sql.catalyst.expressions.UnsafeRow
import org.apache.spark.sql.execution.streaming.state._

/** 4.2's getStore (forceSnapshotOnCommit, loadEmpty) and upgrade, kept by 4.3. */
trait SparkLine42Provider extends SparkLine4Provider with SparkLine41Replay { self: SpillStoreProvider =>
  override def getStore(
      version: Long,
      stateStoreCkptId: Option[String],
      forceSnapshotOnCommit: Boolean,
      loadEmpty: Boolean): StateStore = {
    if (loadEmpty) {
      throw new UnsupportedOperationException(
        s"spillstore does not support loading an empty store (loadEmpty) for $stateStoreId yet")
    }
    open(version, writable = true, forceSnapshotOnCommit, upgrading = null)
  }

  override def upgradeReadStoreToWriteStore(
      readStore: ReadStateStore,
      version: Long,
      uniqueId: Option[String],
      forceSnapshotOnCommit: Boolean): StateStore =
    upgrade(readStore, version, forceSnapshotOnCommit)
}

/** The read calls 4.2 made abstract (or added with a default spillstore does better). */
trait SparkLine42Store extends SparkLine41Store { self: SpillStateStore =>
  override def multiGet(keys: Array[UnsafeRow], colFamilyName: String): Iterator[UnsafeRow] =
    keys.iterator.map(get(_, colFamilyName))

  override def allColumnFamilyNames: Set[String] = Set(StateStore.DEFAULT_COL_FAMILY_NAME)

  override def prefixScanWithMultiValues(prefixKey: UnsafeRow,
      colFamilyName: String): StateStoreIterator[UnsafeRowPair] =
    unsupported("multiple values per key")
  override def iteratorWithMultiValues(colFamilyName: String): StateStoreIterator[UnsafeRowPair] =
    unsupported("multiple values per key")
}
