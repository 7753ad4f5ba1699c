package spillstore.memory

import java.lang.management.{ManagementFactory, MemoryPoolMXBean, MemoryType, MemoryUsage}
import java.util.concurrent.atomic.AtomicBoolean
import javax.management.{Notification, NotificationEmitter, NotificationListener}
import javax.management.openmbean.CompositeData

import scala.jdk.CollectionConverters._
import scala.util.control.NonFatal

import com.sun.management.GarbageCollectionNotificationInfo

import org.apache.spark.internal.Logging

/** The tenured generation's occupancy right after a GC that collected it. */
final case class HeapReading(usedBytes: Long, maxBytes: Long) {
  def occupancy: Double = usedBytes.toDouble / maxBytes
}

/**
 * Where [[HeapPressureMonitor]] gets its readings: the JVM's beans in production
 * ([[JvmHeapStatus]]), a fake in tests, so that pressure can be driven without real GCs.
 */
trait HeapStatusSource {
  /**
   * Calls `onReading` (on a thread of the source's choosing) after each GC that collected the
   * tenured generation, until the returned handle is closed.
   */
  def subscribe(onReading: HeapReading => Unit): AutoCloseable
}

/**
 * Readings from GC notifications, as FLIP-50's HeapStatusMonitor takes them: heap "used" only
 * means something right after a GC, so we read the tenured pool's usage from the GC's own
 * after-GC figures instead of polling `MemoryMXBean`.
 *
 * The tenured pools are the heap pools that support a usage threshold (eden and survivor do
 * not): G1 Old Gen, PS Old Gen, Tenured Gen, ZHeap, Shenandoah. We do not set that threshold:
 * it is one JVM-wide value per pool that other libraries or agents may own.
 *
 * A GC that did not collect the tenured pool (a young-only collection: its usage did not drop
 * and the GC is not a major one) says nothing about live data, since old garbage stays counted
 * until an old collection, so it gives no reading.
 */
object JvmHeapStatus extends HeapStatusSource with Logging {
  def subscribe(onReading: HeapReading => Unit): AutoCloseable = {
    val tenured = tenuredPools(ManagementFactory.getMemoryPoolMXBeans.asScala.toSeq)
    val listener: NotificationListener = new NotificationListener {
      override def handleNotification(n: Notification, handback: AnyRef): Unit =
        if (n.getType == GarbageCollectionNotificationInfo.GARBAGE_COLLECTION_NOTIFICATION) {
          // This is the JVM's notification thread: never let an exception reach it.
          try {
            val info =
              GarbageCollectionNotificationInfo.from(n.getUserData.asInstanceOf[CompositeData])
            val gc = info.getGcInfo
            readingAfterGc(info.getGcAction, gc.getMemoryUsageBeforeGc.asScala,
              gc.getMemoryUsageAfterGc.asScala, tenured).foreach(onReading)
          } catch {
            case NonFatal(e) => logWarning(s"Heap pressure: could not handle ${n.getType}", e)
          }
        }
    }
    val emitters = ManagementFactory.getGarbageCollectorMXBeans.asScala.collect {
      case e: NotificationEmitter => e
    }.toList
    emitters.foreach(_.addNotificationListener(listener, null, null))
    logInfo(s"Heap pressure: watching tenured pools ${tenured.mkString(", ")} after GCs of " +
      emitters.size + " collectors")
    new AutoCloseable {
      private val closed = new AtomicBoolean
      // Throws ListenerNotFoundException if the listener was not attached: that is a bug.
      def close(): Unit =
        if (closed.compareAndSet(false, true))
          emitters.foreach(_.removeNotificationListener(listener))
    }
  }

  private[memory] def tenuredPools(pools: Seq[MemoryPoolMXBean]): Set[String] =
    pools.filter(p => p.getType == MemoryType.HEAP && p.isUsageThresholdSupported).map(
      _.getName).toSet

  /**
   * The reading a GC gives, from its per-pool usage before and after: None when it did not
   * collect the tenured pools. A pool without a defined max counts the JVM's max heap.
   */
  private[memory] def readingAfterGc(
      gcAction: String,
      before: collection.Map[String, MemoryUsage],
      after: collection.Map[String, MemoryUsage],
      tenured: Set[String]): Option[HeapReading] = {
    val pools = tenured.toSeq.filter(p => after.contains(p) && before.contains(p))
    if (pools.isEmpty) return None
    val usedBefore = pools.map(before(_).getUsed).sum
    val usedAfter = pools.map(after(_).getUsed).sum
    val maxes = pools.map(after(_).getMax)
    val max = if (maxes.exists(_ <= 0)) Runtime.getRuntime.maxMemory else maxes.sum
    if (gcAction.contains("major") || usedAfter < usedBefore) Some(HeapReading(usedAfter, max))
    else None
  }
}
