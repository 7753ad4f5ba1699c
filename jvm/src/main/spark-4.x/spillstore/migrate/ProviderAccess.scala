package spillstore.migrate

import org.apache.hadoop.conf.Configuration

import org.apache.spark.sql.execution.streaming.state._
import org.apache.spark.sql.types.StructType

/**
 * Spark 4.x: a provider is initialised with a key encoder spec (prefix scan or none); with
 * checkpoint format v2 a version is read by its checkpoint id, and a commit names its own.
 */
private[migrate] object ProviderAccess {
  def open(className: String, id: StateStoreId, keySchema: StructType, valueSchema: StructType,
      prefixKeyColumns: Int, conf: StateStoreConf, hadoopConf: Configuration)
      : StateStoreProvider = {
    val encoder =
      if (prefixKeyColumns > 0) PrefixKeyScanStateEncoderSpec(keySchema, prefixKeyColumns)
      else NoPrefixKeyStateEncoderSpec(keySchema)
    val provider = StateStoreProvider.create(className)
    provider.init(id, keySchema, valueSchema, encoder, useColumnFamilies = false, conf, hadoopConf,
      useMultipleValuesPerKey = false, stateSchemaProvider = None)
    provider
  }

  def readStore(provider: StateStoreProvider, version: Long, checkpointId: Option[String])
      : ReadStateStore = provider.getReadStore(version, checkpointId)

  /** The checkpoint id of the version `store` committed (format v2); None with format v1. */
  def committedId(store: StateStore): Option[String] =
    store.getStateStoreCheckpointInfo().stateStoreCkptId
}
