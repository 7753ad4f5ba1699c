package spillstore.memory

/** Heap readings driven by the test, delivered on the test's thread. */
final class FakeHeapStatus extends HeapStatusSource {
  @volatile private var listener: HeapReading => Unit = _

  def subscribed: Boolean = listener != null

  def subscribe(onReading: HeapReading => Unit): AutoCloseable = {
    assert(listener == null, "subscribed twice")
    listener = onReading
    () => listener = null
  }

  /** A reading at `occupancy` of a 1000-byte tenured pool; none reaches a closed subscriber. */
  def emit(occupancy: Double): Unit = {
    val l = listener
    if (l != null) l(HeapReading((occupancy * 1000).toLong, 1000L))
  }
}
