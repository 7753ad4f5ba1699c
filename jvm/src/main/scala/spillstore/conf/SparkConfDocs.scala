package spillstore.conf

import spillstore.conf.ConfKey.literal

/**
 * The rows of the README's conf table for Spark's own confs: what each means in spillstore,
 * with Spark's default. spillstore's own keys are `SpillStoreConf.Keys`.
 */
object SparkConfDocs {
  val keys: Seq[ConfKey] = Seq(
    ConfKey(SparkConfs.ProviderClass, "Spark's HDFS provider",
      "`spillstore.SpillStoreProvider` to use spillstore"),
    ConfKey(SparkConfs.CompressionCodec, literal("lz4"),
      "codec of journals and snapshots (`lz4`, `lzf`, `snappy`, `zstd`); each file records its " +
        "codec, so changing it never breaks old checkpoints"),
    ConfKey("spark.sql.streaming.stateStore.minDeltasForSnapshot", literal(10),
      "journals after the newest snapshot before maintenance writes a new snapshot"),
    ConfKey("spark.sql.streaming.minBatchesToRetain", literal(100),
      "versions kept loadable; older files are deleted by maintenance"),
    ConfKey("spark.sql.streaming.stateStore.maintenanceInterval", literal("60s"),
      "how often Spark runs snapshot and cleanup maintenance"),
    ConfKey(SparkConfs.CheckpointFormatVersion, literal(1),
      "`1`, or `2` on Spark 4.x: every commit attempt names its files by a checkpoint id " +
        "that Spark records in its commit log (docs/file-format.md)"),
    ConfKey(SparkConfs.RowChecksumEnabled, literal(false),
      "Spark 4.2+; must be `false` (see \"What it supports\")"),
    ConfKey("spark.sql.streaming.checkpoint.fileChecksum.enabled",
      "`true` on 4.1, else with checkpoint format 2",
      "Spark 4.1+: the `.checksum` files Spark's providers write beside theirs. spillstore " +
        "writes none and reads none: each of its files carries one CRC32C over its records and " +
        "a footer that pins its length, checked whenever the file is read to its end"),
    ConfKey("spark.sql.streaming.stateStore.commitValidation.enabled", literal(true),
      "Spark 4.1+: each commit is reported to Spark's coordinator, as Spark's providers do"),
    ConfKey(SparkConfs.CheckpointFileManagerClass, "unset",
      "Spark's: the class that writes checkpoint files. Unset, spillstore writes its journals " +
        "and snapshots on a local (`file:`) checkpoint with java.nio (temp file, then rename; " +
        "no `.crc` beside them, as each file has its own CRC32C), which saves the `chmod` and " +
        "`readlink` processes Hadoop's local file system forks per file (most of a commit's " +
        "time when measured); on S3A straight to their names ([Checkpoints on HDFS and " +
        "S3](#checkpoints-on-hdfs-and-s3)); elsewhere (HDFS) through Spark's manager, a temp " +
        "file then a rename. Set, spillstore writes every file through that class"))
}
