package spillstore

import org.apache.spark.SparkEnv
import org.apache.spark.sql.catalyst.expressions.UnsafeRow
import org.apache.spark.sql.execution.streaming.state.{
  StateStoreIterator, StateStoreMetrics, UnsafeRowPair
}

import spillstore.conf.SparkConfs

/** Spark 4.3: maintenance in two pools (snapshots, cleanup) instead of doMaintenance. */
trait ProviderAdapter extends Spark42ProviderAdapter { self: SpillStoreProvider =>
  override def doSnapshotMaintenance(): Unit = snapshotMaintenance()
  override def doCleanupMaintenance(): Unit = cleanupMaintenance()
}

/**
 * Spark 4.3's `spark.python.udf.pipelined.enabled` (default off) gives Python runners a writer
 * thread again, which consumes the input: `applyInPandasWithState` then reads state on it while
 * the task thread writes, as on 3.5. With it on, every call and each step of an iteration holds
 * the provider's monitor (`SerializedCalls`); with it off, a call pays one branch.
 */
trait StoreAdapter extends Spark42StoreAdapter { self: SpillStateStore =>
  private val serialized =
    Option(SparkEnv.get).exists(_.conf.getBoolean(SparkConfs.PythonUdfPipelined, false))

  override def get(key: UnsafeRow, colFamilyName: String): UnsafeRow =
    if (serialized) provider.synchronized(super.get(key, colFamilyName))
    else super.get(key, colFamilyName)

  override def put(key: UnsafeRow, value: UnsafeRow, colFamilyName: String): Unit =
    if (serialized) provider.synchronized(super.put(key, value, colFamilyName))
    else super.put(key, value, colFamilyName)

  override def remove(key: UnsafeRow, colFamilyName: String): Unit =
    if (serialized) provider.synchronized(super.remove(key, colFamilyName))
    else super.remove(key, colFamilyName)

  override def metrics: StateStoreMetrics =
    if (serialized) provider.synchronized(super.metrics) else super.metrics

  override def iterator(colFamilyName: String): StateStoreIterator[UnsafeRowPair] =
    if (!serialized) super.iterator(colFamilyName)
    else provider.synchronized {
      val it = super.iterator(colFamilyName)
      new StateStoreIterator(SerializedCalls.stepwise(provider, it),
        () => provider.synchronized(it.close()))
    }

  override def prefixScan(prefixKey: UnsafeRow,
      colFamilyName: String): StateStoreIterator[UnsafeRowPair] =
    if (serialized) provider.synchronized(super.prefixScan(prefixKey, colFamilyName))
    else super.prefixScan(prefixKey, colFamilyName)
}
