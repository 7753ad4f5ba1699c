package spillstore.checkpoint

import org.apache.hadoop.fs.Path

/**
 * Files Spark's other providers write in a store directory. Spark's HDFS provider writes
 * `<v>.delta` and `<v>.snapshot` (its own format: the codec's stream from the first byte, no
 * "SPLS"); RocksDB's writes `<v>.zip`, `<v>.changelog` (with a `_<id>` after `<v>` under
 * checkpoint format v2) and `SSTs/`. Only the HDFS provider's `.snapshot` shares a name with
 * spillstore's files, so a `.snapshot` is told apart by its first four bytes, the rest by name.
 */
object ForeignFiles {
  /** The providers whose files these are, by class name (migrate's `ProviderKind`s use them). */
  val HdfsProvider = "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"
  val RocksDbProvider = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"

  private val DeltaName = """\d+\.delta""".r
  private val RocksDbName = """\d+(_[0-9a-fA-F-]+)?\.(zip|changelog)|SSTs""".r

  /** The provider (class name) that writes files named `name`, if not spillstore. */
  def ofName(name: String): Option[String] = name match {
    case DeltaName() => Some(HdfsProvider)
    case RocksDbName(_*) => Some(RocksDbProvider)
    case _ => None
  }

  /**
   * The provider whose file starts with `magic` (its first four bytes, big-endian), if not
   * spillstore: the HDFS provider's files start with the stream header of Spark's codec
   * (lz4 "LZ4B", zstd's frame magic, snappy "\x82SNA", lzf "ZV" + chunk type 0 or 1).
   */
  def ofMagic(magic: Int): Option[String] =
    if (magic == 0x4C5A3442 || magic == 0x28B52FFD || magic == 0x82534E41 ||
      (magic >>> 16) == 0x5A56 && ((magic >>> 8) & 0xFF) <= 1) Some(HdfsProvider)
    else None

  /**
   * A store directory holds files of another provider: spillstore never reads, renames,
   * deletes or counts them, and says whose they are and what to do.
   */
  final class ForeignFilesException(val files: Seq[(Path, String)])
      extends IllegalStateException(message(files))

  private def message(files: Seq[(Path, String)]): String = {
    val dir = files.head._1.getParent
    val checkpoint = Iterator.iterate(dir)(_.getParent).takeWhile(_ != null)
      .find(_.getName == "state").map(_.getParent.toString).getOrElse("CHECKPOINT")
    val whose = files.groupBy(_._2).toSeq.sortBy(_._1).map { case (provider, fs) =>
      val names = fs.map(_._1.getName).sortBy { n =>
        val v = n.takeWhile(_.isDigit); (v.length, v, n) // numeric order
      }
      val shown = if (names.size > 10) names.take(10) :+ s"${names.size - 10} more" else names
      s"${shown.mkString(", ")} (written by $provider)"
    }
    val provider = files.head._2
    s"$dir holds another state store provider's files, which spillstore does not read: " +
    s"${whose.mkString("; ")}. This query's state was written by that provider: Spark runs a " +
    "restarted query on the provider its checkpoint's offset log records, and on the " +
    "session's when it records none (as old Spark versions' checkpoints do). To keep the " +
    s"query on its provider, set spark.sql.streaming.stateStore.providerClass to $provider. To " +
    s"move it and its state to spillstore, stop it and run `python -m spillstore migrate " +
    s"$checkpoint` (README: Moving an existing query; a checkpoint that records no provider " +
    "must first run a batch on its own provider, so that it records it). Nothing in " +
    s"$dir was changed."
  }
}
