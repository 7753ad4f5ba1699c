package spillstore.heap

/**
 * A key and its value as the live state hands them out: bytes [offset, offset + keyLength) of
 * `base`, then the value's. Spark's rows point into `base` without a copy; its bytes are never
 * modified (a heap page, or an array of its own for an entry read from the cold tier).
 */
final class KeyValue(val base: Array[Byte], val offset: Int, val keyLength: Int,
    val valueLength: Int) {
  /** Index in `base` of the value's first byte. */
  def valueOffset: Int = offset + keyLength
  /** A copy of the key bytes. */
  def key: Array[Byte] = java.util.Arrays.copyOfRange(base, offset, offset + keyLength)
  /** A copy of the value bytes. */
  def value: Array[Byte] =
    java.util.Arrays.copyOfRange(base, valueOffset, valueOffset + valueLength)
}

object KeyValue {
  def of(key: Array[Byte], value: Array[Byte]): KeyValue = {
    val kv = java.util.Arrays.copyOf(key, key.length + value.length)
    System.arraycopy(value, 0, kv, key.length, value.length)
    new KeyValue(kv, 0, key.length, value.length)
  }
}
