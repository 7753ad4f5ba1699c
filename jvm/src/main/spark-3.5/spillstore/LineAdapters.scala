package spillstore

import org.apache.hadoop.conf.Configuration

import org.apache.spark.sql.catalyst.expressions.UnsafeRow
import org.apache.spark.sql.execution.streaming.state._
import org.apache.spark.sql.types.StructType

/**
 * Spark 3.5: `init` with the number of prefix-key columns (0: no prefix scans), no column
 * families, getStore(version) and getReadStore(version). Spark aborts read stores at task end.
 */
trait ProviderAdapter extends StateStoreProvider { self: SpillStoreProvider =>
  override def init(
      stateStoreId: StateStoreId,
      keySchema: StructType,
      valueSchema: StructType,
      numColsPrefixKey: Int,
      storeConfs: StateStoreConf,
      hadoopConf: Configuration): Unit =
    initStore(stateStoreId, keySchema, valueSchema,
      if (numColsPrefixKey > 0) Some(numColsPrefixKey) else None, storeConfs, hadoopConf)

  override def getStore(version: Long): StateStore =
    open(version, writable = true, forceSnapshotOnCommit = false, upgrading = null)

  override def getReadStore(version: Long): ReadStateStore =
    open(version, writable = false, forceSnapshotOnCommit = false, upgrading = null)
}

/**
 * Spark 3.5's store API: no column families, plain iterators (Spark 3.5 does not close them:
 * eviction waits until an iteration is exhausted or its batch ends).
 *
 * One task calls its store from two threads on 3.5: `applyInPandasWithState` reads state
 * (`get`, and the iteration over timed-out state) in the input iterator, which the Python
 * runner's writer thread consumes, while the task thread writes (`put`, `remove`) and commits
 * (the single-threaded runner came in 4.0, SPARK-44705). So every call, and each step of an
 * iteration, holds the provider's monitor (`SerializedCalls`).
 */
trait StoreAdapter extends StateStore { self: SpillStateStore =>
  override def get(key: UnsafeRow): UnsafeRow = provider.synchronized(getValue(key))
  override def put(key: UnsafeRow, value: UnsafeRow): Unit =
    provider.synchronized(putValue(key, value))
  override def remove(key: UnsafeRow): Unit = provider.synchronized(removeKey(key))
  // An open store's metrics read the live state, which the other thread may be writing.
  override def metrics: StateStoreMetrics = provider.synchronized(storeMetrics)
  override def iterator(): Iterator[UnsafeRowPair] =
    provider.synchronized(SerializedCalls.stepwise(provider, allPairs()._1))
  override def prefixScan(prefixKey: UnsafeRow): Iterator[UnsafeRowPair] =
    provider.synchronized(prefixPairs(prefixKey))
}
