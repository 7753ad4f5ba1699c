package spillstore

/**
 * For the Spark lines and settings where one task calls its store from two threads (see
 * docs/design.md, "Threads that call a store"): the line's store adapter runs each call under
 * the provider's monitor, which the provider's opens, commits, aborts and task ends hold too,
 * and an iteration one step at a time the same way.
 */
private[spillstore] object SerializedCalls {
  /** `it`, each step under `monitor`. */
  def stepwise[T](monitor: AnyRef, it: Iterator[T]): Iterator[T] = new Iterator[T] {
    override def hasNext: Boolean = monitor.synchronized(it.hasNext)
    override def next(): T = monitor.synchronized(it.next())
  }
}
