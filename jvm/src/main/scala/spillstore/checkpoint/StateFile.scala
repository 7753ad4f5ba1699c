package spillstore.checkpoint

import java.io.{
  BufferedInputStream, BufferedOutputStream, DataInputStream, DataOutputStream, EOFException,
  FilterInputStream, FilterOutputStream, InputStream, IOException, OutputStream
}
import java.util.{Arrays => JArrays}
import java.util.zip.CRC32C

import scala.util.control.NonFatal

import org.apache.hadoop.fs.Path

import org.apache.spark.sql.execution.streaming.state.SpillStoreSparkBridge

/**
 * spillstore's checkpoint file format, shared by journals, runs and snapshots
 * (docs/file-format.md). In format 3 a snapshot file is a [[Manifest]]: its records name the
 * runs (and journals) that hold the version's entries; in format 2 it held the entries.
 *
 * {{{
 *   header, plain:       magic "SPLS" | format version (int) | kind (byte) | state version (long)
 *                        | codec short name (UTF)
 *                        [format 4: checkpoint id (UTF) | lineage entries (int)
 *                         | (version (long) | id (UTF, "" = a v1 name))* | CRC32C of these (long)]
 *   body, compressed:    record* | -1 (int) | record count (long) | CRC32C of the records (long)
 *   footer, plain:       length of header + body (long) | magic "SPLE"
 *   record:              key length (int) | key | value length (int, -1 = removal) | value
 * }}}
 *
 * Records are in ascending unsigned key order, each key once, so that a snapshot is a streaming
 * merge of its base and journals.
 *
 * The checksum covers every record's lengths and bytes and the footer pins the file's length,
 * so a truncated or altered file is detected when it is read to its end; files are published
 * atomically, so a reader never sees a half-written one under its final name.
 *
 * A reader tells three failures apart, because callers treat them differently: damage (a
 * [[CorruptFileException]]: a magic, length, checksum or footer mismatch, an undecodable body,
 * a truncated file), a file this build cannot read but that is not damaged (an older or newer
 * format, another provider's file), and an error of the file system (any exception the
 * underlying stream throws, e.g. an `InterruptedIOException` when a task is cancelled), which
 * is rethrown as is: the file may be fine and the next attempt may read it.
 */
object StateFile {
  val Magic: Int = 0x53504C53 // "SPLS"
  /** The format written under v1 names (and for runs, which have no checkpoint id). */
  val FormatVersion: Int = 3
  /**
   * The format of files under checkpoint format v2's names (`<v>_<id>.journal`, `.snapshot`):
   * format 3 plus the writer's checkpoint id and lineage in the header. A new format, not a new
   * kind, so that a build reading only 2 and 3 refuses such a file as a newer spillstore's
   * instead of reading a journal without its lineage, or a manifest naming files it cannot
   * list, as damage.
   */
  val IdsFormatVersion: Int = 4
  /**
   * The formats read. Format 2 (0.1.0) differs only in what a snapshot file holds: every entry
   * of its version, where format 3's holds a [[Manifest]]. Format 1 (journals in change order)
   * was written only by development builds before 0.1.0, so no release reads it.
   */
  val ReadableFormats: Seq[Int] = Seq(2, 3, 4)
  /** The format whose snapshot files hold entries, not a manifest. */
  val FullSnapshotFormat: Int = 2
  private val EndMagic: Int = 0x53504C45 // "SPLE"
  val FooterBytes: Int = 12

  sealed abstract class Kind(val id: Byte, val suffix: String) {
    override def toString: String = suffix
  }
  case object Journal extends Kind(1, "journal")
  case object Snapshot extends Kind(2, "snapshot")
  /** An immutable sorted run that snapshots share: `<to>.<uuid>.run`, format 3 on. */
  case object Run extends Kind(3, "run")
  /** A snapshot file from format 3 on: a [[Manifest]] of runs, not the entries. */
  case object ManifestFile extends Kind(4, "snapshot") {
    override def toString: String = "snapshot manifest"
  }
  private val kinds = Seq(Journal, Snapshot, Run, ManifestFile)

  /**
   * Which kinds each format has. A kind outside its format is damage: one flipped bit must never
   * turn a manifest into a snapshot of entries (formats 3 and 2 differ by one bit).
   */
  private def hasKind(format: Int, kind: Kind): Boolean = kind match {
    case Journal => true
    case Snapshot => format < 3
    case Run | ManifestFile => format >= 3
  }

  /** What a file's trailer holds: its record count and the CRC32C of its records. */
  final case class Trailer(records: Long, checksum: Long)

  /**
   * A format-4 header's extension: the checkpoint id in the file's name and, for a journal, the
   * lineage of its base (increasing versions up to the one before the file's; None: v1 names).
   */
  final case class Ids(id: String, lineage: Seq[(Long, Option[String])] = Nil) {
    require(id.nonEmpty, "a checkpoint id is never empty")
  }

  private def writeIds(out: DataOutputStream, ids: Ids): Unit = {
    val bytes = new java.io.ByteArrayOutputStream(64)
    val data = new DataOutputStream(bytes)
    data.writeUTF(ids.id)
    data.writeInt(ids.lineage.size)
    ids.lineage.foreach { case (v, id) => data.writeLong(v); data.writeUTF(id.getOrElse("")) }
    data.flush()
    val crc = new CRC32C
    crc.update(bytes.toByteArray)
    out.write(bytes.toByteArray)
    out.writeLong(crc.getValue)
  }

  /** A damaged file: not a complete, valid spillstore file of the expected kind. */
  final class CorruptFileException(msg: String, cause: Throwable = null)
      extends IOException(msg, cause)

  /** Whether `e` or a cause of it says a file is damaged (not, say, unreachable). */
  def isDamage(e: Throwable): Boolean =
    Iterator.iterate(e)(_.getCause).takeWhile(_ != null).exists(
      _.isInstanceOf[CorruptFileException])

  /**
   * Spark's error for `file`, which `e` kept from being read: damage says so (it is never
   * reported as a missing file); anything else is Spark's read error.
   */
  def unreadable(file: Path, e: Throwable): Throwable = e match {
    case c: CorruptFileException => SpillStoreSparkBridge.damagedStateFile(file, c)
    case _ => SpillStoreSparkBridge.cannotReadStateFile(file, e)
  }

  /** Whether `footer`, the last [[FooterBytes]] of a file of `fileLength` bytes, is the footer
   *  a whole file ends with (its length and end magic). */
  def isFooter(footer: Array[Byte], fileLength: Long): Boolean = {
    val in = new DataInputStream(new java.io.ByteArrayInputStream(footer))
    in.readLong() == fileLength - FooterBytes && in.readInt() == EndMagic
  }

  /** A spillstore file of a format this build does not read: not damage, never set aside. */
  final class UnreadableFormatException(msg: String) extends IllegalStateException(msg)

  /**
   * A format field above this is damage, not another spillstore's file: formats are bumped
   * rarely, and a flipped high bit must still read as damage (a flip to 3 cannot be told apart).
   */
  private val NewestPlausibleFormat = 99

  /** Where changed entries go: a file being written, or (in tests) a buffer. */
  trait RecordSink {
    def put(key: Array[Byte], value: Array[Byte]): Unit
    def remove(key: Array[Byte]): Unit
    /** A put of the key at `kv`[offset, offset + keyLength) and the value right after it. */
    def putPacked(kv: Array[Byte], offset: Int, keyLength: Int, valueLength: Int): Unit = {
      val valueFrom = offset + keyLength
      put(JArrays.copyOfRange(kv, offset, valueFrom),
        JArrays.copyOfRange(kv, valueFrom, valueFrom + valueLength))
    }
    /** A removal of the key at `kv`[offset, offset + keyLength). */
    def removePacked(kv: Array[Byte], offset: Int, keyLength: Int): Unit =
      remove(JArrays.copyOfRange(kv, offset, offset + keyLength))
    /** A record as readers return it: a null value is a removal. */
    final def record(key: Array[Byte], value: Array[Byte]): Unit =
      if (value == null) remove(key) else put(key, value)
  }

  /**
   * Writes one file to `raw`, which the caller then publishes (close) or discards. Keys must
   * come in ascending unsigned order; a `format` other than [[FormatVersion]] only labels the
   * header, for tests of files this build refuses.
   */
  final class Writer(raw: OutputStream, kind: Kind, version: Long,
      codec: SpillStoreSparkBridge.Codec, format: Int = FormatVersion, ids: Option[Ids] = None)
      extends RecordSink {
    require(ids.isDefined == (format == IdsFormatVersion),
      s"${kind.suffix} $version: checkpoint ids go with format $IdsFormatVersion only")
    private val crc = new CRC32C
    private var records = 0L
    private val out = new CountingStream(raw)
    private val header = new DataOutputStream(out)
    header.writeInt(Magic)
    header.writeInt(format)
    header.writeByte(kind.id)
    header.writeLong(version)
    header.writeUTF(codec.shortName)
    ids.foreach(writeIds(header, _))
    header.flush()
    private val compressed = codec.compress(out)
    private val body = new DataOutputStream(new BufferedOutputStream(compressed, 64 * 1024))

    def put(key: Array[Byte], value: Array[Byte]): Unit =
      encode(key, 0, key.length, value, 0, value.length)

    def remove(key: Array[Byte]): Unit = encode(key, 0, key.length, null, 0, 0)

    override def putPacked(kv: Array[Byte], offset: Int, keyLength: Int, valueLength: Int): Unit =
      encode(kv, offset, keyLength, kv, offset + keyLength, valueLength)

    override def removePacked(kv: Array[Byte], offset: Int, keyLength: Int): Unit =
      encode(kv, offset, keyLength, null, 0, 0)

    def numRecords: Long = records
    def numBytes: Long = out.count
    /** The CRC32C of the records written so far, which the trailer holds once finished. */
    def checksum: Long = crc.getValue

    /** Writes the trailer and footer and flushes; `raw` stays open. */
    def finish(): Unit = {
      body.writeInt(-1)
      body.writeLong(records)
      body.writeLong(crc.getValue)
      body.flush()
      compressed.close() // ends the codec's framing; CountingStream keeps `raw` open
      val footer = new DataOutputStream(out)
      footer.writeLong(out.count)
      footer.writeInt(EndMagic)
      footer.flush()
    }

    // One record is encoded whole, then checksummed and written in one call each: per-field
    // stream writes and checksum updates cost more than the bytes on the commit path.
    private var scratch = new Array[Byte](1024)
    // The previous key: `lastKey`[lastKeyFrom, lastKeyFrom + lastKeyLength) (the bytes a
    // writer is given are never modified afterwards).
    private var lastKey: Array[Byte] = _
    private var lastKeyFrom = 0
    private var lastKeyLength = 0

    /** Key: `keyLen` bytes of `key` from `keyFrom`; value: `valueLen` bytes of `value` from
     *  `valueFrom` (null: a removal). */
    private def encode(key: Array[Byte], keyFrom: Int, keyLen: Int, value: Array[Byte],
        valueFrom: Int, valueLen: Int): Unit = {
      if (lastKey != null && JArrays.compareUnsigned(lastKey, lastKeyFrom,
          lastKeyFrom + lastKeyLength, key, keyFrom, keyFrom + keyLen) >= 0) {
        throw new IllegalArgumentException(s"${kind.suffix} $version: keys must be written " +
          s"once each, in ascending unsigned order (file format $format)")
      }
      lastKey = key
      lastKeyFrom = keyFrom
      lastKeyLength = keyLen
      val n = 8 + keyLen + valueLen
      if (n > scratch.length) scratch = new Array[Byte](math.max(n, scratch.length * 2))
      putInt(scratch, 0, keyLen)
      System.arraycopy(key, keyFrom, scratch, 4, keyLen)
      putInt(scratch, 4 + keyLen, if (value == null) -1 else valueLen)
      if (value != null) System.arraycopy(value, valueFrom, scratch, 8 + keyLen, valueLen)
      crc.update(scratch, 0, n)
      body.write(scratch, 0, n)
      records += 1
    }
  }

  /**
   * Reads a file written by [[Writer]]. `foreach` calls the visitor for each record (a null
   * value is a removal) and verifies the trailer before returning; a visitor that applies
   * records as they come must be ready to discard them if it throws. `next` pulls records one
   * by one instead, with the same checks.
   */
  final class Reader(in: InputStream, val fileLength: Long, fileName: String, expectedKind: Kind,
      expectedVersion: Long, codecFor: String => SpillStoreSparkBridge.Codec,
      expectedTrailer: Option[Trailer] = None, expectedId: Option[String] = None) {
    if (fileLength < FooterBytes) corrupt(s"file is truncated ($fileLength bytes)")
    private val source = new SourceStream(in)
    // The codec must not read into the footer, whatever it buffers.
    private val content = new LimitedStream(source, fileLength - FooterBytes)
    private val header = new DataInputStream(content)
    private var formatRead = 0
    private var idsRead: Option[Ids] = None
    private val codecName = readHeader()

    /** A format-4 file's checkpoint id and lineage (None: a v1-named file). */
    def ids: Option[Ids] = idsRead

    /** The file's format version. */
    def format: Int = formatRead
    private var kindRead: Kind = _

    /** The file's kind: a snapshot file is a [[Snapshot]] (format 2) or a [[ManifestFile]]. */
    def kind: Kind = kindRead
    // A damaged codec name or compressed-stream header must fail as corruption too, so that
    // callers can tell a damaged file from an unreadable one.
    private val body =
      try {
        new DataInputStream(
          new BufferedInputStream(codecFor(codecName).decompress(content), 64 * 1024))
      } catch {
        case NonFatal(e) =>
          failed(e, " in its compressed header", s"cannot decode codec '$codecName' ($e)")
      }

    private val crc = new CRC32C
    private val intBytes = new Array[Byte](4)
    private var records = 0L
    private var finished = false
    private var trailerRead: Trailer = _

    /** The trailer, once every record has been read and verified. */
    def trailer: Trailer = {
      if (trailerRead == null) {
        throw new IllegalStateException(s"Reader of $fileName: trailer asked before the end")
      }
      trailerRead
    }

    /** Calls `visit` for every record, then verifies the trailer; returns the record count. */
    def foreach(visit: (Array[Byte], Array[Byte]) => Unit): Long = {
      var r = next()
      while (r != null) { visit(r._1, r._2); r = next() }
      records
    }

    /**
     * The next record (a null value is a removal), or null once the trailer and footer have
     * been verified: pull-based reading for merges of several files.
     */
    def next(): (Array[Byte], Array[Byte]) = if (finished) null
    else decoding {
      val keyLen = readInt()
      if (keyLen >= 0) {
        crc.update(intBytes, 0, 4)
        val key = readN(keyLen, crc)
        val valueLen = readInt()
        crc.update(intBytes, 0, 4)
        val value = if (valueLen < 0) null else readN(valueLen, crc)
        records += 1
        (key, value)
      } else {
        if (keyLen != -1) corrupt(s"bad record length $keyLen")
        verifyEnd()
        finished = true
        null
      }
    }

    // One buffered read, not DataInputStream.readInt's four synchronized single-byte reads
    // (a quarter of a snapshot merge's CPU); the bytes stay in `intBytes` for the checksum.
    private def readInt(): Int = {
      body.readFully(intBytes)
      ((intBytes(0) & 0xFF) << 24) | ((intBytes(1) & 0xFF) << 16) | ((intBytes(2) & 0xFF) << 8) |
      (intBytes(3) & 0xFF)
    }

    private def verifyEnd(): Unit = {
      val count = body.readLong()
      val checksum = body.readLong()
      if (count != records) corrupt(s"trailer says $count records, read $records")
      if (checksum != crc.getValue) corrupt("checksum mismatch")
      expectedTrailer.foreach { t =>
        if (t != Trailer(count, checksum)) {
          corrupt(s"holds $count records with checksum $checksum, but the manifest that lists " +
            s"it recorded ${t.records} records with checksum ${t.checksum} (another file under " +
            "the same name)")
        }
      }
      trailerRead = Trailer(count, checksum)
      if (body.read() != -1) corrupt("unexpected bytes after the trailer")
      val footer = new DataInputStream(source)
      val length = footer.readLong()
      if (length != fileLength - FooterBytes || footer.readInt() != EndMagic) {
        corrupt(s"footer does not match the file's length $fileLength (truncated or appended)")
      }
    }

    // Some codecs report damaged input with unchecked exceptions.
    private def decoding[T](read: => T): T =
      try read
      catch {
        case NonFatal(e) => failed(e, "", s"cannot decode ($e)")
      }

    /**
     * Classifies a failure while reading: the file system's own error is rethrown as is (the
     * codec may have wrapped it, or failed on what it left half-read); otherwise an early end
     * is truncation and anything else damage, described by `what`.
     */
    private def failed(e: Throwable, where: String, what: => String): Nothing = e match {
      case c: CorruptFileException => throw c
      case _ if source.failure != null => throw source.failure
      case _: EOFException => corrupt(s"file is truncated$where", e)
      case _ => corrupt(what, e)
    }

    /**
     * The next `n` bytes. A damaged length field must not allocate what the file does not
     * have (an OutOfMemoryError in a small executor, not a damaged-file error): past the first
     * chunk the array grows only as the bytes arrive, so an early end is found first. The body
     * is compressed, so what the file has left does not bound `n` by itself.
     */
    private def readN(n: Int, crc: CRC32C): Array[Byte] = {
      if (n > MaxRecordBytes) corrupt(s"record length $n exceeds $MaxRecordBytes")
      var b = new Array[Byte](math.min(n, ReadChunkBytes))
      body.readFully(b)
      while (b.length < n) {
        val filled = b.length
        b = JArrays.copyOf(b, math.min(n.toLong, filled * 2L).toInt)
        body.readFully(b, filled, b.length - filled)
      }
      crc.update(b)
      b
    }

    /** Checks the header; returns the codec's name. */
    private def readHeader(): String =
      try {
        val magic = header.readInt()
        if (magic != Magic) {
          ForeignFiles.ofMagic(magic).foreach { provider =>
            throw new ForeignFiles.ForeignFilesException(
              Seq(new Path(fileName) -> provider))
          }
          corrupt(f"not a spillstore file (magic 0x$magic%08x)")
        }
        val format = header.readInt()
        formatRead = format
        if (format < 1 || format > NewestPlausibleFormat) {
          corrupt(s"format version $format is not one spillstore ever wrote")
        }
        if (!ReadableFormats.contains(format)) {
          val origin = if (format > FormatVersion) "a newer spillstore wrote it. Run the query " +
          s"with a spillstore that reads format $format (the one that wrote it, or later)"
          else "an older spillstore wrote it"
          throw new UnreadableFormatException(s"$fileName is written in spillstore file format " +
            s"$format, which this spillstore$thisVersion does not read (the formats it reads: " +
            s"${ReadableFormats.mkString(", ")}): $origin; the file was left as it is")
        }
        val kindId = header.readByte()
        val kind = kinds.find(_.id == kindId).getOrElse(corrupt(s"unknown file kind $kindId"))
        if (kind != expectedKind && (expectedKind != Snapshot || kind != ManifestFile)) {
          corrupt(s"is a $kind, expected a $expectedKind")
        }
        if (!hasKind(format, kind)) corrupt(s"is a $kind in format $format, which has none")
        kindRead = kind
        val version = header.readLong()
        if (version != expectedVersion) {
          corrupt(s"holds version $version, expected $expectedVersion")
        }
        val codec = header.readUTF()
        // The name says whether a file has an id: a v1 name must not hold one, nor a v2 name
        // lack it or hold another (a file under a name it was not written for is damage).
        if (format == IdsFormatVersion) {
          val ids = readIds()
          if (!expectedId.contains(ids.id)) {
            corrupt(s"holds checkpoint id ${ids.id}, expected " +
              expectedId.fold("none (a v1 name)")(identity))
          }
          idsRead = Some(ids)
        } else if (expectedId.isDefined) {
          corrupt(s"is format $format, which has no checkpoint id; expected ${expectedId.get}")
        }
        codec
      } catch {
        // A damaged codec name: UTFDataFormatException.
        case e: IOException => failed(e, " in its header", s"cannot read its header ($e)")
      }

    /** A format-4 header's extension, its CRC32C checked (it is outside the body's). */
    private def readIds(): Ids = {
      val crc = new CRC32C
      val checked = new DataInputStream(new java.util.zip.CheckedInputStream(content, crc))
      val id = checked.readUTF()
      val n = checked.readInt()
      if (n < 0 || n > MaxLineageEntries) corrupt(s"lineage of $n entries")
      val lineage = (0 until n).map { _ =>
        val v = checked.readLong()
        v -> Option(checked.readUTF()).filter(_.nonEmpty)
      }
      val expected = crc.getValue
      if (header.readLong() != expected) corrupt("checksum mismatch in its checkpoint ids")
      if (id.isEmpty || lineage.map(_._1).sliding(2).exists(p => p.size == 2 && p(0) >= p(1)) ||
        lineage.lastOption.exists(_._1 >= expectedVersion)) {
        corrupt(s"malformed checkpoint ids (id '$id', lineage ${lineage.mkString(", ")})")
      }
      Ids(id, lineage)
    }

    private def corrupt(what: String, cause: Throwable = null): Nothing =
      throw new CorruptFileException(s"Corrupt spillstore state file $fileName: $what", cause)
  }

  /** A damaged entry count must not allocate what no writer wrote (a lineage per batch since
   *  the last snapshot: far fewer). */
  private val MaxLineageEntries = 1 << 20

  /** " (<version>)" of this build, when its jar says. */
  private lazy val thisVersion: String =
    Option(getClass.getPackage).flatMap(p => Option(p.getImplementationVersion))
      .fold("")(v => s" ($v)")

  /**
   * The file system's stream under a reader: remembers the first error it threw, which is never
   * damage, however the codec above reports it. Never closes `in`.
   */
  private final class SourceStream(in: InputStream) extends FilterInputStream(in) {
    var failure: Throwable = _
    private def io[T](op: => T): T =
      try op
      catch {
        case NonFatal(e) => if (failure == null) failure = e; throw e
      }
    override def read(): Int = io(in.read())
    override def read(b: Array[Byte], off: Int, len: Int): Int = io(in.read(b, off, len))
    override def skip(n: Long): Long = io(in.skip(n))
    override def available(): Int = io(in.available())
    override def close(): Unit = ()
    override def markSupported(): Boolean = false
  }

  /** Counts bytes and keeps a codec's close() from closing (publishing) the atomic stream. */
  private final class CountingStream(out: OutputStream) extends FilterOutputStream(out) {
    var count = 0L
    override def write(b: Int): Unit = { out.write(b); count += 1 }
    override def write(b: Array[Byte], off: Int, len: Int): Unit = {
      out.write(b, off, len); count += len
    }
    override def close(): Unit = out.flush()
  }

  /** Reads at most `limit` bytes of `in`; never closes it. */
  private final class LimitedStream(in: InputStream, private var limit: Long)
      extends FilterInputStream(in) {
    override def read(): Int = if (limit <= 0) -1
    else {
      val b = in.read(); if (b >= 0) limit -= 1; b
    }
    override def read(b: Array[Byte], off: Int, len: Int): Int = if (limit <= 0) -1
    else {
      val n = in.read(b, off, math.min(len.toLong, limit).toInt)
      if (n > 0) limit -= n
      n
    }
    override def skip(n: Long): Long = { val s = in.skip(math.min(n, limit)); limit -= s; s }
    override def available(): Int = math.min(in.available().toLong, limit).toInt
    override def close(): Unit = ()
    override def markSupported(): Boolean = false
  }

  /** Guard against allocating absurd arrays from a damaged length field. */
  private[spillstore] val MaxRecordBytes = 256 * 1024 * 1024

  /** A record longer than this is read a chunk at a time (see `Reader.readN`). */
  private val ReadChunkBytes = 1 << 20

  private def putInt(b: Array[Byte], at: Int, n: Int): Unit = {
    b(at) = (n >>> 24).toByte
    b(at + 1) = (n >>> 16).toByte
    b(at + 2) = (n >>> 8).toByte
    b(at + 3) = n.toByte
  }
}
