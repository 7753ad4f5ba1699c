package spillstore.cold

import org.apache.spark.unsafe.Platform
import org.apache.spark.unsafe.hash.Murmur3_x86_32

/**
 * Which keys the cold tier may hold: a Bloom filter on the heap, so that a key the state does
 * not have costs a hash and a few cache lines instead of a RocksDB get through JNI. A streaming
 * aggregation looks up every new key twice (restore, then save); on the 25M-key end-to-end
 * benchmark those absent-key gets were a quarter of the task threads' time.
 *
 * Keys are added when they are first written to the cold tier and never removed (a removed
 * key is a false positive, which only costs the RocksDB get it would have cost anyway). It
 * grows in layers: when the newest is full, one twice its size is added, so it needs no key
 * enumeration and costs 12 to 24 bits a key. Each layer is a blocked Bloom filter
 * (all of a key's bits in one 64-byte block: one cache miss a layer) with under 1 % false
 * positives when full. An absent key probes every layer, so both its cost and its chance of a
 * false positive grow with the number of layers: a state that starts to spill sizes the first
 * layer for the keys it holds ([[expect]]), since what it evicts over its life is usually of
 * that order or more. On the 25M-key benchmark, doubling from 8k keys gave each store about
 * ten layers, and 6.7 % of the lookups (all of absent keys) reached RocksDB.
 *
 * The filter is heap the budget counts but eviction cannot free, so it starts small (12 KB)
 * and stops growing at `maxBytes` (the memory manager allows 1/16 of the budget, at most 32 MB:
 * over 10M keys), or when `reserve` refuses a layer (the filters of all stores of an executor
 * share an 8th of the budget). When the next layer would pass either, the layers it has take
 * more keys instead, largest first, down to 6 bits a key (about 10 % false positives a layer,
 * against under 1 % at 12): a state that outgrows its filter reads RocksDB for a growing share
 * of absent keys rather than for all of them at once. Only when every layer is that full (or
 * the first layer is refused) does the filter give up: it is dropped and every lookup goes to
 * RocksDB again, as without it, until the cold tier is cleared.
 *
 * Keys are the heap's key bytes; `hash` is the heap's hash of them (HeapTier.hashOf).
 *
 * @param reserve asked for a new layer's bytes before it is made; false refuses the layer
 * @param release given back the bytes of the layers the filter lets go (clear, or giving up)
 */
final class ColdKeyFilter(firstCapacity: Int = ColdKeyFilter.FirstCapacity,
    maxBytes: Long = ColdKeyFilter.MaxBytes,
    reserve: Long => Boolean = _ => true,
    release: Long => Unit = _ => ()) {
  import ColdKeyFilter._

  private var layers: List[Layer] = Nil // newest first
  private var layerBytes = 0L
  private var saturated = false
  /** Capacity of the first layer, when one is added. */
  private var nextCapacity = firstCapacity

  /** Heap bytes of the filter's bit arrays. */
  def bytes: Long = layerBytes

  /** Layers an absent key probes. */
  def layerCount: Int = layers.size

  /**
   * Sizes the first layer for `keys` keys (at least the constructor's `firstCapacity`, at most
   * a quarter of `maxBytes`, so that the next layer still fits) if there is none yet.
   */
  def expect(keys: Long): Unit = if (layers.isEmpty && !saturated) {
    var capacity = math.max(firstCapacity.toLong, math.min(keys, Int.MaxValue / 2)).toInt
    while (capacity > firstCapacity && Layer.bytes(capacity) > maxBytes / 4) capacity /= 2
    nextCapacity = math.max(capacity, firstCapacity)
  }

  /** False only if the key was never added since the last clear. */
  def mightContain(base: AnyRef, offset: Long, length: Int, hash: Int): Boolean = {
    if (saturated) return true
    if (layers.isEmpty) return false
    val h = hash64(base, offset, length, hash)
    var l = layers
    while (l.nonEmpty) {
      if (l.head.contains(h)) return true
      l = l.tail
    }
    false
  }

  /** Adds a key; true if this add made the filter give up (every layer full within `maxBytes`). */
  def add(base: AnyRef, offset: Long, length: Int, hash: Int): Boolean = {
    if (saturated) return false
    if ((layers.isEmpty || layers.head.isFull) && !makeRoom()) {
      saturated = true
      dropLayers()
      return true
    }
    layers.head.add(hash64(base, offset, length, hash))
    false
  }

  /**
   * Puts a layer with room for a key at the head: a new one twice the newest while it fits in
   * `maxBytes` and `reserve` grants it, then (for good: a later layer would be larger still) the
   * largest layer not yet overfilled. False if none is left.
   */
  private def makeRoom(): Boolean = {
    if (!layers.exists(_.overfilled)) {
      val capacity = if (layers.isEmpty) nextCapacity else layers.head.capacity * 2
      if (layerBytes + Layer.bytes(capacity) <= maxBytes && reserve(Layer.bytes(capacity))) {
        layers = new Layer(capacity) :: layers
        layerBytes += Layer.bytes(capacity)
        return true
      }
    }
    val room = layers.filterNot(_.overfilled).sortBy(-_.blockCount).find { l =>
      l.overfill(); !l.isFull
    }
    room.foreach(l => layers = l :: layers.filterNot(_ eq l))
    room.isDefined
  }

  def clear(): Unit = { dropLayers(); saturated = false; nextCapacity = firstCapacity }

  private def dropLayers(): Unit = {
    if (layerBytes > 0) release(layerBytes)
    layers = Nil
    layerBytes = 0
  }
}

object ColdKeyFilter {
  val FirstCapacity: Int = 1 << 13
  val MaxBytes: Long = 32L << 20
  private val SecondSeed = 0x5BD1E995
  private val BitsPerKey = 12
  private val BitsPerKeyInBlock = 8
  /** How full an overfilled layer gets: about 10 % false positives with 8 bits set a key. */
  private val MinBitsPerKey = 6

  /** A 64-bit hash from the heap's hash and a second, independent one of the key bytes. */
  private def hash64(base: AnyRef, offset: Long, length: Int, hash: Int): Long = {
    val h2 = Murmur3_x86_32.hashUnsafeBytes(base, offset, length, SecondSeed)
    var x = (hash.toLong << 32) | (h2 & 0xFFFFFFFFL)
    x = (x ^ (x >>> 33)) * 0xFF51AFD7ED558CCDL
    x = (x ^ (x >>> 33)) * 0xC4CEB9FE1A85EC53L
    x ^ (x >>> 33)
  }

  private object Layer {
    def blocks(capacity: Int): Int = math.max(1, (capacity.toLong * BitsPerKey / 512).toInt)
    def bytes(capacity: Int): Long = 16L + blocks(capacity) * 64L
  }

  /** A layer sized for `capacity` keys at [[BitsPerKey]]; see [[overfill]]. */
  private final class Layer(val capacity: Int) {
    private val blocks = Layer.blocks(capacity)
    private val words = new Array[Long](blocks * 8)
    private var count = 0
    private var limit = capacity
    private var overfilledYet = false
    def blockCount: Int = blocks
    def isFull: Boolean = count >= limit
    def overfilled: Boolean = overfilledYet
    /** Lets the layer take keys down to [[MinBitsPerKey]] (once). */
    def overfill(): Unit = {
      overfilledYet = true
      limit = math.max(capacity, (blocks * 512L / MinBitsPerKey).toInt)
    }

    def add(h: Long): Unit = { probe(h, set = true); count += 1 }
    def contains(h: Long): Boolean = probe(h, set = false)

    // The high 32 bits pick the block; the top 9 bits of successive multiples of `h` pick
    // the bits in it.
    private def block(h: Long): Int = (((h >>> 32) * blocks) >>> 32).toInt * 8

    /** Whether all of `h`'s bits are set; with `set`, sets them first. */
    private def probe(h: Long, set: Boolean): Boolean = {
      val at = block(h)
      var b = h * 0x9E3779B97F4A7C15L
      var i = 0
      while (i < BitsPerKeyInBlock) {
        val bit = (b >>> 55).toInt // 0..511
        val word = at + (bit >>> 6)
        val mask = 1L << (bit & 63)
        if (set) words(word) |= mask else if ((words(word) & mask) == 0) return false
        b *= 0x9E3779B97F4A7C15L
        i += 1
      }
      true
    }
  }
}
