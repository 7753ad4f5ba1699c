package spillstore.conf

/**
 * The Spark confs spillstore reads (or, migrating, writes) by name, in one place: Spark's own
 * entries for them are private to Spark, absent on some lines, or not at hand where they are
 * read (an offset log, a Hadoop conf). The README's rows for
 * Spark's confs are [[SparkConfDocs]].
 */
object SparkConfs {
  val ProviderClass = "spark.sql.streaming.stateStore.providerClass"
  val CompressionCodec = "spark.sql.streaming.stateStore.compression.codec"
  /** Spark's checkpoint file manager; on 4.3 it has no SQL conf entry. */
  val CheckpointFileManagerClass = "spark.sql.streaming.checkpointFileManagerClass"
  val CheckpointFormatVersion = "spark.sql.streaming.stateStore.checkpointFormatVersion"
  /** Spark 4.2+: row checksums in the providers' files, which spillstore refuses. */
  val RowChecksumEnabled = "spark.sql.streaming.stateStore.rowChecksum.enabled"
  val RocksDbChangelogCheckpointing =
    "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled"
  /** Spark 4.3: Python runners with a writer thread (a task then calls its store from two). */
  val PythonUdfPipelined = "spark.python.udf.pipelined.enabled"
}
