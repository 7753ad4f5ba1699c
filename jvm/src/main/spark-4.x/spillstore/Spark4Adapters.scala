package spillstore

import org.apache.hadoop.conf.Configuration

import org.apache.spark.sql.catalyst.expressions.UnsafeRow
import org.apache.spark.sql.execution.streaming.state._
import org.apache.spark.sql.types.StructType

/**
 * Spark 4.x's provider API that every 4.x line shares: `init` with a key encoder spec and
 * column-family flags, and `getReadStore(version, uniqueId)`. Each line's `ProviderAdapter`
 * adds its `getStore` (and 4.1+ its upgrade, 4.3 its maintenance split).
 */
trait Spark4ProviderAdapter extends StateStoreProvider { self: SpillStoreProvider =>
  override def init(
      stateStoreId: StateStoreId,
      keySchema: StructType,
      valueSchema: StructType,
      keyStateEncoderSpec: KeyStateEncoderSpec,
      useColumnFamilies: Boolean,
      storeConfs: StateStoreConf,
      hadoopConf: Configuration,
      useMultipleValuesPerKey: Boolean,
      stateSchemaProvider: Option[StateSchemaProvider]): Unit = {
    if (useColumnFamilies) reject(stateStoreId, "column families (transformWithState)")
    if (useMultipleValuesPerKey) reject(stateStoreId, "multiple values per key")
    refuseLineConfs(stateStoreId, storeConfs)
    val prefixKeyColumns = keyStateEncoderSpec match {
      case _: NoPrefixKeyStateEncoderSpec => None
      case p: PrefixKeyScanStateEncoderSpec => Some(p.numColsPrefixKey)
      case other => reject(stateStoreId, s"key encoder $other (range scans)")
    }
    initStore(stateStoreId, keySchema, valueSchema, prefixKeyColumns, storeConfs, hadoopConf,
      checkpointIds = storeConfs.enableStateStoreCheckpointIds)
  }

  override def getReadStore(version: Long, uniqueId: Option[String]): ReadStateStore =
    open(version, writable = false, forceSnapshotOnCommit = false, upgrading = null,
      ckptId = uniqueId)

  /** Refuses what a later line's confs ask a provider to write that spillstore does not. */
  protected def refuseLineConfs(stateStoreId: StateStoreId, storeConfs: StateStoreConf): Unit = ()
}

/**
 * Spark 4.x's store API that every 4.x line shares: reads and writes take a column family
 * (only the default one exists in spillstore), iterators are `StateStoreIterator`s, and the
 * multi-value and column-family calls refuse with a clear error.
 */
trait Spark4StoreAdapter extends StateStore { self: SpillStateStore =>
  override def metrics: StateStoreMetrics = storeMetrics

  override def get(key: UnsafeRow, colFamilyName: String): UnsafeRow = {
    checkColumnFamily(colFamilyName)
    getValue(key)
  }

  override def put(key: UnsafeRow, value: UnsafeRow, colFamilyName: String): Unit = {
    checkColumnFamily(colFamilyName)
    putValue(key, value)
  }

  override def remove(key: UnsafeRow, colFamilyName: String): Unit = {
    checkColumnFamily(colFamilyName)
    removeKey(key)
  }

  override def iterator(colFamilyName: String): StateStoreIterator[UnsafeRowPair] = {
    checkColumnFamily(colFamilyName)
    val (pairs, close) = allPairs()
    new StateStoreIterator(pairs, close)
  }

  override def prefixScan(
      prefixKey: UnsafeRow, colFamilyName: String): StateStoreIterator[UnsafeRowPair] = {
    checkColumnFamily(colFamilyName)
    new StateStoreIterator(prefixPairs(prefixKey))
  }

  override def getStateStoreCheckpointInfo(): StateStoreCheckpointInfo = {
    val (version, ckptId, baseId) = checkpointInfo
    StateStoreCheckpointInfo(id.partitionId, version, ckptId, baseId)
  }

  // Capabilities spillstore does not have yet (column families, multiple values per key).
  override def removeColFamilyIfExists(colFamilyName: String): Boolean =
    unsupported("column families")
  override def createColFamilyIfAbsent(colFamilyName: String, keySchema: StructType,
      valueSchema: StructType, keyStateEncoderSpec: KeyStateEncoderSpec,
      useMultipleValuesPerKey: Boolean, isInternal: Boolean): Unit = unsupported("column families")
  override def merge(key: UnsafeRow, value: UnsafeRow, colFamilyName: String): Unit =
    unsupported("multiple values per key")
  override def valuesIterator(key: UnsafeRow, colFamilyName: String): Iterator[UnsafeRow] =
    unsupported("multiple values per key")

  private def checkColumnFamily(name: String): Unit =
    if (name != StateStore.DEFAULT_COL_FAMILY_NAME) unsupported(s"column family '$name'")
}
