package spillstore

/**
 * The one error for what spillstore does not do (yet): what it is, where it was asked for (a
 * store, a conf), and what the user can do instead (by default: Spark's RocksDB provider).
 */
private[spillstore] object Unsupported {
  import spillstore.checkpoint.ForeignFiles.RocksDbProvider

  def apply(what: String, where: Any,
      instead: String = s"Use Spark's $RocksDbProvider for this query, or an operator that " +
        "does not need it"): UnsupportedOperationException =
    new UnsupportedOperationException(s"spillstore does not support $what yet ($where). $instead.")
}
