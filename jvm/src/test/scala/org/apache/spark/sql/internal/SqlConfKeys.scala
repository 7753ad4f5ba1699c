package org.apache.spark.sql.internal

/** Which SQL confs Spark defines, for tests (`SQLConf.getConfigEntry` is Spark-private). */
object SqlConfKeys {
  def defined(key: String): Boolean = SQLConf.getConfigEntry(key) != null
}
