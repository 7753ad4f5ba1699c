package spillstore.cold

import org.apache.spark.sql.catalyst.expressions.UnsafeRow

/**
 * How heap keys (UnsafeRow bytes) are laid out as cold-tier keys. A prefix-scannable store
 * needs every key with the same prefix columns to sort together in RocksDB, which UnsafeRow
 * bytes do not guarantee, so those keys get their prefix row's bytes in front.
 */
sealed trait ColdKeys {
  def encode(key: Array[Byte]): Array[Byte]
  def decode(coldKey: Array[Byte]): Array[Byte]
}

object ColdKeys {
  /** Keys as they are: the store has no prefix scans. */
  object Plain extends ColdKeys {
    def encode(key: Array[Byte]): Array[Byte] = key
    def decode(coldKey: Array[Byte]): Array[Byte] = coldKey
  }

  /** `prefix length (int) | prefix row bytes | key bytes`. */
  final class Prefixed(prefixOf: Array[Byte] => UnsafeRow) extends ColdKeys {
    def encode(key: Array[Byte]): Array[Byte] = {
      val start = rangeStart(prefixOf(key))
      val out = java.util.Arrays.copyOf(start, start.length + key.length)
      System.arraycopy(key, 0, out, start.length, key.length)
      out
    }

    def decode(coldKey: Array[Byte]): Array[Byte] = {
      val prefixLen = java.nio.ByteBuffer.wrap(coldKey, 0, 4).getInt
      java.util.Arrays.copyOfRange(coldKey, 4 + prefixLen, coldKey.length)
    }

    /** The bytes every cold key with this prefix starts with. */
    def rangeStart(prefix: UnsafeRow): Array[Byte] = {
      val n = prefix.getSizeInBytes
      val out = java.nio.ByteBuffer.allocate(4 + n).putInt(n)
      out.put(prefix.getBytes, 0, n)
      out.array()
    }
  }
}
