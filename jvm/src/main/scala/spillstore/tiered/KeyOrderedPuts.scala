package spillstore.tiered

import org.rocksdb.WriteBatch

import spillstore.cold.WriteBatchBytes
import spillstore.heap.KeyOrder

/**
 * Puts gathered for one cold-tier write, each a slice of an array (an entry's packed heap page,
 * or a key and a value read from a snapshot), written in key order: then RocksDB's memtable
 * inserts each key next to where the previous one went (its skip list keeps that position):
 * 583 ns a key written against 753 in eviction order, sorting included
 * (`spillstore.bench.WriteBatchBytesBench`, 7,490 16-byte keys a write). The bytes are copied once,
 * into the [[WriteBatchBytes]]; the arrays are only referenced until then.
 *
 * Filled and written by one thread: an eviction, or a snapshot load past the budget.
 */
private[tiered] final class KeyOrderedPuts(capacity: Int) {
  private val keys = new Array[Array[Byte]](capacity)
  private val keyOffsets = new Array[Int](capacity)
  private val keyLengths = new Array[Int](capacity)
  private val values = new Array[Array[Byte]](capacity)
  private val valueOffsets = new Array[Int](capacity)
  private val valueLengths = new Array[Int](capacity)
  private var n = 0
  private var bytes = 0L

  def size: Int = n

  /** Whether the write is as large as one should be: [[Evictor.MaxBytesPerWrite]] or `capacity` puts. */
  def isFull: Boolean = n == capacity || bytes >= Evictor.MaxBytesPerWrite

  def add(key: Array[Byte], keyOffset: Int, keyLength: Int,
      value: Array[Byte], valueOffset: Int, valueLength: Int): Unit = {
    if (n == capacity) throw new IllegalStateException(s"$this is full")
    keys(n) = key; keyOffsets(n) = keyOffset; keyLengths(n) = keyLength
    values(n) = value; valueOffsets(n) = valueOffset; valueLengths(n) = valueLength
    bytes += WriteBatchBytes.putBytes(keyLength, valueLength)
    n += 1
  }

  /** The puts as one RocksDB write batch, in key order; the caller closes it. */
  def toWriteBatch: WriteBatch = {
    val write = new WriteBatchBytes(Math.toIntExact(bytes))
    KeyOrder.order(keys, keyOffsets, keyLengths, n).foreach { j =>
      write.put(keys(j), keyOffsets(j), keyLengths(j), values(j), valueOffsets(j), valueLengths(j))
    }
    write.toWriteBatch
  }

  /** Empties it for the next write, letting go of the arrays. */
  def clear(): Unit = {
    java.util.Arrays.fill(keys.asInstanceOf[Array[AnyRef]], 0, n, null)
    java.util.Arrays.fill(values.asInstanceOf[Array[AnyRef]], 0, n, null)
    n = 0
    bytes = 0
  }

  override def toString: String = s"KeyOrderedPuts($n of $capacity puts, $bytes bytes)"
}
