package spillstore.heap

/**
 * A key and its value packed in one array, key first, as heap entries hold them and as the
 * live state's iterators hand them out (Spark's rows point into `kv` without a copy).
 */
final class KeyValue(val kv: Array[Byte], val keyLength: Int) {
  def valueLength: Int = kv.length - keyLength
  /** A copy of the key bytes. */
  def key: Array[Byte] = java.util.Arrays.copyOf(kv, keyLength)
  /** A copy of the value bytes. */
  def value: Array[Byte] = java.util.Arrays.copyOfRange(kv, keyLength, kv.length)
}

object KeyValue {
  def of(e: Entry): KeyValue = new KeyValue(e.kv, e.keyLength)
  def of(key: Array[Byte], value: Array[Byte]): KeyValue =
    new KeyValue(Entry.pack(key, value), key.length)
}
