package spillstore.bench

import java.util
import java.util.concurrent.atomic.{AtomicIntegerArray, AtomicLongArray}
import java.util.concurrent.locks.LockSupport

import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.UnsafeRow
import org.apache.spark.sql.connector.catalog.{SupportsRead, Table, TableCapability, TableProvider}
import org.apache.spark.sql.connector.expressions.Transform
import org.apache.spark.sql.connector.read.{
  InputPartition, PartitionReader, PartitionReaderFactory, Scan, ScanBuilder
}
import org.apache.spark.sql.connector.read.streaming.{
  MicroBatchStream, Offset, PartitionOffset, SupportsRealTimeMode, SupportsRealTimeRead
}
import org.apache.spark.sql.connector.read.streaming.SupportsRealTimeRead.RecordStatus
import org.apache.spark.sql.types.{LongType, StructField, StructType}
import org.apache.spark.sql.util.CaseInsensitiveStringMap

/** Wall clock in microseconds, from nanoTime: one JVM (local mode) stamps and reads it. */
object BenchClock {
  private val baseMicros = System.currentTimeMillis() * 1000L
  private val baseNanos = System.nanoTime()
  def nowMicros(): Long = baseMicros + (System.nanoTime() - baseNanos) / 1000L
}

/**
 * The records of the real-time latency bench, made in the driver's JVM and read by the tasks in
 * the same JVM (local mode only). Records are numbered per source partition; the feeder
 * publishes them in chunks (every ~1 ms at the rate in force), each chunk stamped with the time
 * it was published: a record's creation time. Nothing is stored per record: a record's key is a
 * function of its number, its creation time its chunk's.
 *
 * Keys: the first `ceil(keys / partitions)` records of a partition are the warm-up, which touches
 * every key once (partition p's record n has key n * partitions + p); after them each record's
 * key is uniform over `[0, keys)` (a hash of its partition and number).
 */
final class RateKeyGenerator(val partitions: Int, val keys: Long, capacity: Int) {
  val warmupPerPartition: Long = (keys + partitions - 1) / partitions
  private val ends = Array.fill(partitions)(new Array[Long](capacity))
  private val times = Array.fill(partitions)(new Array[Long](capacity))
  private val counts = new AtomicIntegerArray(partitions)
  /** Each partition's next record to read, as its reader last reported it. */
  val consumed = new AtomicLongArray(partitions)

  def produced(p: Int): Long = {
    val c = counts.get(p)
    if (c == 0) 0L else ends(p)(c - 1)
  }
  def producedTotal: Long = (0 until partitions).map(produced).sum
  def consumedTotal: Long = (0 until partitions).map(consumed.get).sum

  /** One writer (the feeder's lock): records up to `upTo` (exclusive), created at `micros`. */
  private[bench] def append(p: Int, upTo: Long, micros: Long): Unit = {
    val c = counts.get(p)
    if (c >= capacity) throw new IllegalStateException(s"generator full ($capacity chunks)")
    ends(p)(c) = upTo
    times(p)(c) = micros
    counts.set(p, c + 1) // volatile: publishes the chunk
  }

  def chunkEnd(p: Int, i: Int): Long = ends(p)(i)
  def chunkTime(p: Int, i: Int): Long = times(p)(i)

  /** The first published chunk holding record n or later (the count if none is published). */
  def chunkOf(p: Int, n: Long): Int = {
    var lo = 0
    var hi = counts.get(p)
    while (lo < hi) {
      val mid = (lo + hi) >>> 1
      if (ends(p)(mid) <= n) lo = mid + 1 else hi = mid
    }
    lo
  }

  /** Records created (published) in [fromMicros, untilMicros), over all partitions. */
  def producedBetween(fromMicros: Long, untilMicros: Long): Long = (0 until partitions).map { p =>
    val c = counts.get(p)
    // The first chunk published at or after t; chunk i holds records [ends(i - 1), ends(i)).
    def firstAt(t: Long): Int = {
      var lo = 0
      var hi = c
      while (lo < hi) {
        val mid = (lo + hi) >>> 1
        if (times(p)(mid) < t) lo = mid + 1 else hi = mid
      }
      lo
    }
    def endBefore(i: Int): Long = if (i == 0) 0L else ends(p)(i - 1)
    endBefore(firstAt(untilMicros)) - endBefore(firstAt(fromMicros))
  }.sum

  def key(p: Int, n: Long): Long = {
    if (n < warmupPerPartition) {
      val k = n * partitions + p
      if (k < keys) return k
    }
    var z = n * 0x9E3779B97F4A7C15L + p * 0xBF58476D1CE4E5B9L + 0x94D049BB133111EBL
    z = (z ^ (z >>> 30)) * 0xBF58476D1CE4E5B9L
    z = (z ^ (z >>> 27)) * 0x94D049BB133111EBL
    z = z ^ (z >>> 31)
    java.lang.Long.remainderUnsigned(z, keys)
  }
}

object RateKeyGenerator {
  @volatile private var current: RateKeyGenerator = _
  def init(partitions: Int, keys: Long, capacity: Int = 4 * 1024 * 1024): RateKeyGenerator = {
    current = new RateKeyGenerator(partitions, keys, capacity)
    current
  }
  def get: RateKeyGenerator = {
    val g = current
    if (g == null) throw new IllegalStateException("RateKeyGenerator.init was not called")
    g
  }
}

/** Publishes records at a fixed rate (records/s over all partitions), about every millisecond. */
final class Feeder(gen: RateKeyGenerator) extends Thread("latency-bench-feeder") {
  setDaemon(true)
  @volatile private var running = true
  private var rate = 0.0
  private var phaseStartNanos = 0L
  private var phaseBase = new Array[Long](gen.partitions)

  def setRate(recordsPerSec: Double): Unit = synchronized {
    phaseBase = Array.tabulate(gen.partitions)(gen.produced)
    phaseStartNanos = System.nanoTime()
    rate = recordsPerSec
  }

  /** Publishes `n` more records in every partition at once (the warm-up). */
  def addBulk(n: Long): Unit = synchronized {
    val now = BenchClock.nowMicros()
    for (p <- 0 until gen.partitions) gen.append(p, gen.produced(p) + n, now)
    phaseBase = Array.tabulate(gen.partitions)(gen.produced)
    phaseStartNanos = System.nanoTime()
  }

  def shutdown(): Unit = { running = false; join(5000) }

  override def run(): Unit = {
    while (running) {
      synchronized {
        if (rate > 0) {
          val elapsed = (System.nanoTime() - phaseStartNanos) / 1e9
          val perPartition = rate / gen.partitions
          val now = BenchClock.nowMicros()
          for (p <- 0 until gen.partitions) {
            val target = phaseBase(p) + (perPartition * elapsed).toLong
            if (target > gen.produced(p)) gen.append(p, target, now)
          }
        }
      }
      LockSupport.parkNanos(1000000L)
    }
  }
}

final case class RateKeyOffset(positions: Seq[Long]) extends Offset {
  override def json(): String = positions.mkString("[", ",", "]")
}

object RateKeyOffset {
  def parse(json: String): RateKeyOffset =
    RateKeyOffset(json.trim.stripPrefix("[").stripSuffix("]").split(",").map(_.trim.toLong).toSeq)
}

final case class RateKeyPartitionOffset(partition: Int, position: Long) extends PartitionOffset

final case class RateKeyInputPartition(partition: Int, start: Long, end: Long)
    extends InputPartition

final class RateKeyReaderFactory extends PartitionReaderFactory {
  override def createReader(partition: InputPartition): PartitionReader[InternalRow] = {
    val p = partition.asInstanceOf[RateKeyInputPartition]
    new RateKeyReader(p.partition, p.start, p.end)
  }
}

/**
 * Reads one partition's records from `start`: up to `end` in a micro-batch, without end in
 * real-time mode (`nextWithTimeout` waits, polling every 0.2 ms, for the feeder's next chunk).
 * Rows are (key, et): et is the record's creation time in microseconds.
 */
final class RateKeyReader(p: Int, start: Long, end: Long)
    extends SupportsRealTimeRead[InternalRow] {
  private val gen = RateKeyGenerator.get
  private var pos = start
  private var chunk = gen.chunkOf(p, start)
  private val row = new UnsafeRow(2)
  row.pointTo(new Array[Byte](24), 24)
  private var arrivalMs = 0L

  private def available: Boolean = pos < math.min(end, gen.produced(p))

  /** Only when `available`: every chunk up to the one holding `pos` is published. */
  private def emit(): Unit = {
    while (gen.chunkEnd(p, chunk) <= pos) chunk += 1
    val t = gen.chunkTime(p, chunk)
    row.setLong(0, gen.key(p, pos))
    row.setLong(1, t)
    arrivalMs = t / 1000
    pos += 1
    gen.consumed.lazySet(p, pos)
  }

  override def next(): Boolean = if (available) { emit(); true }
  else false
  override def get(): InternalRow = row
  override def close(): Unit = ()
  override def getOffset: PartitionOffset = RateKeyPartitionOffset(p, pos)

  override def nextWithTimeout(timeoutMs: java.lang.Long): RecordStatus =
    nextWithTimeout(System.currentTimeMillis(), timeoutMs)

  override def nextWithTimeout(startMs: java.lang.Long, timeoutMs: java.lang.Long)
      : RecordStatus = {
    while (true) {
      if (available) {
        emit()
        return RecordStatus.newStatusWithArrivalTimeMs(arrivalMs)
      }
      if (System.currentTimeMillis() - startMs >= timeoutMs) {
        return RecordStatus.newStatusWithoutArrivalTime(false)
      }
      LockSupport.parkNanos(200000L)
    }
    throw new IllegalStateException("unreachable")
  }
}

final class RateKeyStream(partitions: Int) extends MicroBatchStream with SupportsRealTimeMode {
  private def gen = RateKeyGenerator.get
  require(gen.partitions == partitions, s"generator has ${gen.partitions} partitions")

  override def initialOffset(): Offset = RateKeyOffset(Seq.fill(partitions)(0L))
  override def latestOffset(): Offset = RateKeyOffset((0 until partitions).map(gen.produced))
  override def deserializeOffset(json: String): Offset = RateKeyOffset.parse(json)
  override def commit(end: Offset): Unit = ()
  override def stop(): Unit = ()
  override def createReaderFactory(): PartitionReaderFactory = new RateKeyReaderFactory

  private def positions(o: Offset): Seq[Long] = o match {
    case r: RateKeyOffset => r.positions
    case other => RateKeyOffset.parse(other.json()).positions
  }

  override def planInputPartitions(start: Offset, end: Offset): Array[InputPartition] = {
    val (s, e) = (positions(start), positions(end))
    Array.tabulate[InputPartition](partitions)(p => RateKeyInputPartition(p, s(p), e(p)))
  }

  override def planInputPartitions(start: Offset): Array[InputPartition] = {
    val s = positions(start)
    Array.tabulate[InputPartition](partitions)(p => RateKeyInputPartition(p, s(p), Long.MaxValue))
  }

  override def mergeOffsets(offsets: Array[PartitionOffset]): Offset = {
    val pos = Array.fill(partitions)(-1L)
    offsets.foreach {
      case RateKeyPartitionOffset(p, n) => pos(p) = n
      case other => throw new IllegalArgumentException(s"not this source's offset: $other")
    }
    require(pos.forall(_ >= 0), s"missing partition offsets: ${offsets.mkString(", ")}")
    RateKeyOffset(pos.toSeq)
  }
}

/** `spark.readStream.format(classOf[RateKeySource].getName).option("partitions", n)`. */
final class RateKeySource extends TableProvider {
  override def inferSchema(options: CaseInsensitiveStringMap): StructType = RateKeySource.Schema

  override def getTable(schema: StructType, partitioning: Array[Transform],
      properties: util.Map[String, String]): Table = {
    val partitions = properties.getOrDefault("partitions", "1").toInt
    new Table with SupportsRead {
      override def name(): String = "latency-bench-rate-key"
      override def schema(): StructType = RateKeySource.Schema
      override def capabilities(): util.Set[TableCapability] =
        util.EnumSet.of(TableCapability.MICRO_BATCH_READ)
      override def newScanBuilder(options: CaseInsensitiveStringMap): ScanBuilder = () =>
        new Scan {
          override def readSchema(): StructType = RateKeySource.Schema
          override def toMicroBatchStream(checkpointLocation: String): MicroBatchStream =
            new RateKeyStream(partitions)
        }
    }
  }
}

object RateKeySource {
  val Schema: StructType =
    StructType(Seq(StructField("key", LongType, nullable = false),
        StructField("et", LongType, nullable = false)))
}
