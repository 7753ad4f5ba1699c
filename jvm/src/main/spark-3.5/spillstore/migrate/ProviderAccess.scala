package spillstore.migrate

import org.apache.hadoop.conf.Configuration

import org.apache.spark.sql.execution.streaming.state.{
  ReadStateStore, StateStore, StateStoreConf, StateStoreId, StateStoreProvider
}
import org.apache.spark.sql.types.StructType

/**
 * Spark 3.5: a provider is initialised with its number of prefix-key columns; there are no
 * checkpoint ids (format v2 is Spark 4's, which migrate refuses on 3.5 before any read).
 */
private[migrate] object ProviderAccess {
  def open(className: String, id: StateStoreId, keySchema: StructType, valueSchema: StructType,
      prefixKeyColumns: Int, conf: StateStoreConf, hadoopConf: Configuration)
      : StateStoreProvider = {
    val provider = StateStoreProvider.create(className)
    provider.init(id, keySchema, valueSchema, prefixKeyColumns, conf, hadoopConf)
    provider
  }

  def readStore(provider: StateStoreProvider, version: Long, checkpointId: Option[String])
      : ReadStateStore = {
    checkpointId.foreach { id =>
      throw new IllegalStateException(s"ProviderAccess: checkpoint id $id on Spark 3.5")
    }
    provider.getReadStore(version)
  }

  def committedId(store: StateStore): Option[String] = None
}
