package spillstore.migrate

import org.apache.hadoop.conf.Configuration

import org.apache.spark.sql.execution.streaming.state.{
  StateStoreConf, StateStoreId, StateStoreProvider
}
import org.apache.spark.sql.types.StructType

/** Spark 3.5: a provider is initialised with its number of prefix-key columns. */
private[migrate] object ProviderAccess {
  def open(className: String, id: StateStoreId, keySchema: StructType, valueSchema: StructType,
      prefixKeyColumns: Int, conf: StateStoreConf, hadoopConf: Configuration)
      : StateStoreProvider = {
    val provider = StateStoreProvider.create(className)
    provider.init(id, keySchema, valueSchema, prefixKeyColumns, conf, hadoopConf)
    provider
  }
}
