package spillstore.cold

import org.rocksdb.WriteBatch

/**
 * Puts for one RocksDB write, laid out here in RocksDB's own write-batch format (the format of
 * its write-ahead log) and handed over in one call, `new WriteBatch(bytes)`.
 *
 * An eviction writes thousands of entries at once. Through `WriteBatch.put` each one is a JNI
 * call that copies its key and value out of Java arrays (a copy each, beforehand, to get arrays
 * of exactly the key and the value). Here the bytes are copied once, from the entry's packed
 * array into one array that crosses JNI once: 838 ns a key written became 753
 * (`spillstore.bench.WriteBatchBytesBench`, 16-byte keys and values, rocksdbjni 9.8.4).
 *
 * The format, stable since RocksDB's first releases and checked against `WriteBatch.data()` in
 * this package's tests: a 12-byte header (sequence number, 8 bytes little-endian, set by
 * RocksDB when it writes; count of records, 4 bytes little-endian), then per put a type byte
 * (1), the key length as a varint32, the key, the value length as a varint32, the value.
 *
 * Not thread-safe: one eviction fills and hands over one instance.
 */
final class WriteBatchBytes(capacityBytes: Int) {
  import WriteBatchBytes._

  private val bytes = new Array[Byte](HeaderBytes + capacityBytes)
  private var at = HeaderBytes
  private var count = 0

  /** Adds a put of key bytes [keyOffset, +keyLength) and value bytes [valueOffset, +valueLength). */
  def put(key: Array[Byte], keyOffset: Int, keyLength: Int,
      value: Array[Byte], valueOffset: Int, valueLength: Int): Unit = {
    if (at + putBytes(keyLength, valueLength) > bytes.length) {
      throw new IllegalStateException(s"$this is full: a put of a $keyLength-byte key and a " +
        s"$valueLength-byte value does not fit in its ${bytes.length - at} bytes left")
    }
    bytes(at) = TypeValue
    at += 1
    writeSlice(key, keyOffset, keyLength)
    writeSlice(value, valueOffset, valueLength)
    count += 1
  }

  /** The puts as a RocksDB write batch; the caller closes it. */
  def toWriteBatch: WriteBatch = {
    if (at != bytes.length) {
      throw new IllegalStateException(s"$this holds ${at - HeaderBytes} of the " +
        s"${bytes.length - HeaderBytes} bytes it was sized for: its puts were sized wrongly")
    }
    var i = 0
    while (i < 4) { bytes(8 + i) = (count >>> (8 * i)).toByte; i += 1 } // the sequence stays 0
    RocksDBLibrary.load()
    new WriteBatch(bytes)
  }

  private def writeSlice(from: Array[Byte], offset: Int, length: Int): Unit = {
    var v = length
    while ((v & ~0x7F) != 0) { bytes(at) = ((v & 0x7F) | 0x80).toByte; at += 1; v >>>= 7 }
    bytes(at) = v.toByte
    at += 1
    System.arraycopy(from, offset, bytes, at, length)
    at += length
  }

  override def toString: String = s"WriteBatchBytes($count puts)"
}

object WriteBatchBytes {
  private val HeaderBytes = 12
  private val TypeValue: Byte = 1

  /** Bytes one put takes in a write: size a [[WriteBatchBytes]] with the sum over its puts. */
  def putBytes(keyLength: Int, valueLength: Int): Int =
    1 + varintBytes(keyLength) + keyLength + varintBytes(valueLength) + valueLength

  private def varintBytes(v: Int): Int = {
    var n = 1
    var rest = v >>> 7
    while (rest != 0) { n += 1; rest >>>= 7 }
    n
  }
}
