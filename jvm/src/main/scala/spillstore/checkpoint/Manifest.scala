package spillstore.checkpoint

import java.io.{ByteArrayInputStream, ByteArrayOutputStream, DataInputStream, DataOutputStream}
import java.nio.ByteBuffer

import scala.collection.mutable.ArrayBuffer

/**
 * What a format-3 snapshot file (`<version>.snapshot`) holds: the parts whose merge is every
 * entry of `version`, oldest first. Part i holds the changes of versions (from, to]; the parts
 * tile (0, version] without gap or overlap, so a later part's record for a key (a removal
 * included) overrides an earlier one's. No parts: the empty state.
 *
 * Parts are immutable files that several snapshots share, so a snapshot writes only what
 * changed since the one before it ([[Snapshotter]], [[MergePlan]]). A part is one of
 *  - a run, `<to>.<uuid>.run`: written once under a name no other write uses;
 *  - a journal, `<to>.journal` (`<to>_<id>.journal` with checkpoint format v2), adopted as it
 *    is (from = to - 1);
 *  - a format-2 snapshot, `<to>.snapshot`, adopted as it is (from = 0).
 * Each part's length and trailer (record count and checksum) are recorded, and a reader refuses
 * a file that differs from them as damage: equal names never prove equal content (a journal can
 * be rewritten by a retried commit, SPARK-43404).
 */
final case class Manifest(version: Long, parts: IndexedSeq[Manifest.Part]) {
  /** The files that hold this version's entries, its own snapshot file excluded. */
  def names: Set[String] = parts.map(_.source.name).toSet
}

object Manifest {
  def empty(version: Long): Manifest = Manifest(version, IndexedSeq.empty)

  /** Where a part's records are. */
  sealed abstract class Source(val kind: StateFile.Kind, val tag: Byte) {
    def name: String
    /** The state version in the file's header. */
    def version: Long
    /** The checkpoint id in the file's name and header (format v2's journals). */
    def id: Option[String] = None
  }
  final case class RunFile(name: String, version: Long) extends Source(StateFile.Run, 3)
  final case class JournalFile(version: Long, override val id: Option[String] = None)
      extends Source(StateFile.Journal, 1) {
    def name: String = CheckpointDir.name(StateFile.Journal, version, id)
  }
  final case class FullSnapshot(version: Long) extends Source(StateFile.Snapshot, 2) {
    def name: String = s"$version.snapshot"
  }

  /**
   * One part: the changes of versions (from, to] in `source`, a file of `length` bytes whose
   * trailer is `trailer` (None only for a format-2 snapshot read as its own base, which no
   * manifest lists yet).
   */
  final case class Part(source: Source, from: Long, to: Long, length: Long,
      trailer: Option[StateFile.Trailer]) {
    require(from < to && to == source.version, s"part $this: bad version range")
  }

  private val V2JournalName = """(\d+)_([0-9a-f-]{36})\.journal""".r

  private val RunName =
    """(\d+)\.[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\.run""".r

  /** A journal name's checkpoint id if it is `to`'s journal (None inside: a v1 name). */
  private def journalId(name: String, to: Long): Option[Option[String]] =
    if (name == s"$to.journal") Some(None)
    else name match {
      case V2JournalName(v, id) if v.toLong == to => Some(Some(id))
      case _ => None
    }

  /** The `to` version of a run's file name, if it is one. */
  def runVersion(name: String): Option[Long] = name match {
    case RunName(v) => Some(v.toLong)
    case _ => None
  }

  /** Writes `m`'s parts, one record each, keyed by their position (4 bytes, big-endian). */
  def write(m: Manifest, out: StateFile.Writer): Unit =
    m.parts.zipWithIndex.foreach { case (p, i) =>
      val trailer = p.trailer.getOrElse(throw new IllegalArgumentException(
          s"manifest of version ${m.version}: part ${p.source.name} has no recorded trailer"))
      val bytes = new ByteArrayOutputStream(96)
      val data = new DataOutputStream(bytes)
      data.writeByte(p.source.tag)
      data.writeUTF(p.source.name)
      data.writeLong(p.from)
      data.writeLong(p.to)
      data.writeLong(p.length)
      data.writeLong(trailer.records)
      data.writeLong(trailer.checksum)
      data.flush()
      out.put(ByteBuffer.allocate(4).putInt(i).array(), bytes.toByteArray)
    }

  /**
   * The manifest of `version` from its records; a record that does not decode, names a file
   * its kind cannot have, or parts that do not tile (0, version] are damage (`corrupt`).
   */
  def read(version: Long, records: Iterator[(Array[Byte], Array[Byte])],
      corrupt: String => Nothing): Manifest = {
    val parts = ArrayBuffer.empty[Part]
    records.foreach { case (key, value) =>
      if (key.length != 4 || ByteBuffer.wrap(key).getInt != parts.size || value == null) {
        corrupt(s"manifest record ${parts.size} is malformed")
      }
      val in = new DataInputStream(new ByteArrayInputStream(value))
      val part =
        try {
          val tag = in.readByte()
          val name = in.readUTF()
          val from = in.readLong()
          val to = in.readLong()
          val source = tag match {
            case 1 if from == to - 1 && journalId(name, to).isDefined =>
              JournalFile(to, journalId(name, to).get)
            case 2 if name == s"$to.snapshot" && from == 0 => FullSnapshot(to)
            case 3 if runVersion(name).contains(to) => RunFile(name, to)
            case _ => corrupt(s"manifest part ${parts.size} ($name, tag $tag) is malformed")
          }
          val length = in.readLong()
          val trailer = StateFile.Trailer(in.readLong(), in.readLong())
          if (in.available() != 0 || from >= to) corrupt(s"manifest part $name is malformed")
          Part(source, from, to, length, Some(trailer))
        } catch {
          case _: java.io.IOException => corrupt(s"manifest part ${parts.size} is malformed")
        }
      val expectedFrom = parts.lastOption.fold(0L)(_.to)
      if (part.from != expectedFrom) {
        corrupt(s"manifest part ${part.source.name} covers versions (${part.from}, ${part.to}], " +
          s"expected to start at $expectedFrom")
      }
      parts += part
    }
    if (parts.nonEmpty && parts.last.to != version) {
      corrupt(s"manifest parts end at version ${parts.last.to}, not at its version $version")
    }
    Manifest(version, parts.toIndexedSeq)
  }
}
