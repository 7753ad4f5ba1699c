package spillstore.migrate

import java.util.UUID

import org.apache.hadoop.conf.Configuration

import org.apache.spark.sql.execution.streaming.state.{StateStoreConf, StateStoreId}
import org.apache.spark.sql.internal.SQLConf
import org.apache.spark.sql.types.StructType

import spillstore.SpillStoreProvider

/** spillstore's provider opened through the line's [[ProviderAccess]]: for suites every line compiles. */
object LineProviders {
  /** An initialized provider for partition 0 of operator 0 under checkpoint `root`, in a new query run. */
  def open(root: String, keySchema: StructType, valueSchema: StructType, sqlConf: SQLConf,
      hadoopConf: Configuration): SpillStoreProvider = {
    val conf = new Configuration(hadoopConf)
    conf.set("sql.streaming.runId", UUID.randomUUID().toString)
    ProviderAccess.open(classOf[SpillStoreProvider].getName, StateStoreId(root, 0, 0), keySchema,
      valueSchema, prefixKeyColumns = 0, new StateStoreConf(sqlConf), conf)
      .asInstanceOf[SpillStoreProvider]
  }
}
