package spillstore.checkpoint

import java.io.{Closeable, DataInputStream, EOFException, FileNotFoundException}
import java.util.concurrent.atomic.AtomicLong

import scala.collection.mutable.ArrayBuffer
import scala.util.control.NonFatal

import org.apache.hadoop.conf.Configuration
import org.apache.hadoop.fs.{FileStatus, Path}

import org.apache.spark.internal.Logging
import org.apache.spark.sql.execution.streaming.state.SpillStoreSparkShim.CheckpointFileManager
import org.apache.spark.sql.execution.streaming.state.SpillStoreSparkBridge

import spillstore.checkpoint.StateFile.Kind

/**
 * One store's checkpoint directory: `<version>.journal` for every committed version >= 1,
 * `<version>.snapshot` for the versions maintenance has snapshotted (a [[Manifest]]) and the
 * runs `<to>.<uuid>.run` manifests list. Files appear whole or not at all: see
 * [[AtomicOutput.creator]] for how. Files of another provider ([[ForeignFiles]])
 * are never read, renamed or deleted: listing a directory that holds them is an error naming
 * them.
 *
 * With checkpoint format v2 a version's journal and snapshot are named by the commit attempt's
 * id, `<version>_<id>.journal` and `.snapshot`, and a directory is seen along one [[Lineage]]
 * ([[along]]): names, listings and reads follow it, and other ids' files are not there for it
 * (only cleanup, through `Listing.all`, sees them). The default view is [[Lineage.V1]]: every
 * version by its v1 name, and v2 names ignored, as before v2 existed. Views of one directory
 * share its file manager, the file opened early and the repair count.
 */
final class CheckpointDir private (val path: Path, hadoopConf: Configuration,
    val codec: SpillStoreSparkBridge.Codec, io: CheckpointDir.Io, val lineage: Lineage)
    extends Logging {
  def this(path: Path, hadoopConf: Configuration, codec: SpillStoreSparkBridge.Codec) =
    this(path, hadoopConf, codec, new CheckpointDir.Io(path, hadoopConf), Lineage.V1)

  private def fm = io.fm
  private def creator = io.creator

  /** This directory seen along `l`. */
  def along(l: Lineage): CheckpointDir = new CheckpointDir(path, hadoopConf, codec, io, l)

  /**
   * A version's file along this view's lineage. A version the lineage does not know (only in
   * errors about a file no listing had) is named with `?` for its id.
   */
  def file(kind: Kind, version: Long): Path =
    new Path(path,
      CheckpointDir.name(kind, version,
        if (lineage.knows(version)) lineage.idOf(version) else Some("?")))

  /** The header extension a file of `kind` at `version` is written with along this view. */
  private def idsFor(kind: Kind, version: Long): Option[StateFile.Ids] =
    lineage.idOf(version).map(id =>
      StateFile.Ids(id, if (kind == StateFile.Journal) lineage.entriesBelow(version) else Nil))

  private def formatFor(version: Long): Int =
    if (lineage.idOf(version).isDefined) StateFile.IdsFormatVersion else StateFile.FormatVersion

  /**
   * Writes a file atomically and returns its size; nothing is visible if `body` throws.
   * `format` other than the current one is for tests of files this build refuses.
   */
  def write(kind: Kind, version: Long, format: Int = -1)(
      body: StateFile.Writer => Unit): CheckpointDir.Written = {
    val early = if (format < 0) takeEarly(kind, version) else None
    finish(early.getOrElse(create(file(kind, version), kind, version,
          if (format < 0) formatFor(version) else format)), body)
  }

  /**
   * Writes a new run of the changes up to `version`, under a name no other write uses (a
   * retried or concurrent snapshot writes its own); returns its name with what was written.
   */
  def writeRun(version: Long)(body: StateFile.Writer => Unit): (String, CheckpointDir.Written) = {
    val name = s"$version.${java.util.UUID.randomUUID()}.run"
    name -> finish(create(new Path(path, name), StateFile.Run, version, StateFile.FormatVersion),
      body)
  }

  private def finish(opened: EarlyFile.Opened,
      body: StateFile.Writer => Unit): CheckpointDir.Written = {
    val EarlyFile.Opened(atomic, writer) = opened
    orDiscard(atomic) {
      body(writer)
      writer.finish()
      val publishing = System.nanoTime()
      atomic.publish()
      CheckpointDir.Written(writer.numBytes, writer.numRecords, System.nanoTime() - publishing,
        StateFile.Trailer(writer.numRecords, writer.checksum))
    }
  }

  private def create(target: Path, kind: Kind, version: Long, format: Int): EarlyFile.Opened = {
    if (!io.dirCreated) { fm.mkdirs(path); io.dirCreated = true }
    val atomic = creator.create(target)
    val ids = if (format == StateFile.IdsFormatVersion) idsFor(kind, version) else None
    orDiscard(atomic)(EarlyFile.Opened(atomic,
        new StateFile.Writer(atomic, kind, version, codec, format, ids)))
  }

  /** `body`'s result; if it throws, `atomic` is discarded first. */
  private def orDiscard[T](atomic: AtomicOutput)(body: => T): T =
    try body
    catch {
      case e: Throwable =>
        try atomic.discard()
        catch { case NonFatal(c) => e.addSuppressed(c) }
        throw e
    }

  /**
   * Where opening a file costs a round trip to remote storage (HDFS), starts opening the file
   * in the background for a `write` of it to come; drops a file opened early before (a file
   * no `write` takes is dropped by the next `openEarly` or by `dropEarly`).
   */
  def openEarly(kind: Kind, version: Long): Unit = if (creator.opensEarly) {
    val target = file(kind, version)
    replaceEarly(new EarlyFile(kind, version,
        () => {
          val opened = create(target, kind, version, formatFor(version))
          orDiscard(opened.output)(opened.output.sendAhead())
          opened
        }), target.getName)
  }

  /** Drops the file opened early, if any (its batch ended without writing it). */
  def dropEarly(): Unit = replaceEarly(null, null)

  private def replaceEarly(next: EarlyFile, name: String): Unit = {
    val previous = io.synchronized {
      val p = io.early
      io.early = next
      io.earlyName = name
      p
    }
    if (previous != null) previous.drop()
  }

  private def takeEarly(kind: Kind, version: Long): Option[EarlyFile.Opened] = {
    val name = file(kind, version).getName
    val mine = io.synchronized {
      val early = io.early
      if (early != null && early.kind == kind && early.version == version &&
        io.earlyName == name) {
        io.early = null
        early
      } else null
    }
    if (mine == null) None else mine.take()
  }

  /** Reads every record of a file in order (value null = removal); returns the record count. */
  def read(kind: Kind, version: Long)(visit: (Array[Byte], Array[Byte]) => Unit): Long = {
    val (reader, in) = open(kind, version)
    try reader.foreach(visit)
    finally in.close()
  }

  /** Opens a file for pull-based reading; the caller closes the stream. */
  def open(kind: Kind, version: Long): (StateFile.Reader, Closeable) =
    open(file(kind, version), kind, version, None, None, lineage.idOf(version))

  /**
   * Opens a manifest's part for pull-based reading; a file whose length or trailer differs from
   * what the manifest recorded is damage. The caller closes the stream.
   */
  def open(part: Manifest.Part): (StateFile.Reader, Closeable) =
    open(pathOf(part.source), part.source.kind, part.to, Some(part.length), part.trailer,
      part.source.id)

  private def open(f: Path, kind: Kind, version: Long, expectedLength: Option[Long],
      trailer: Option[StateFile.Trailer], id: Option[String]): (StateFile.Reader, Closeable) = {
    val length = f.getFileSystem(hadoopConf).getFileStatus(f).getLen
    expectedLength.filter(_ != length).foreach { l =>
      throw new StateFile.CorruptFileException(s"Corrupt spillstore state file $f: $length " +
        s"bytes, but the manifest that lists it recorded $l (another file under the same name)")
    }
    val in = fm.open(f)
    try {
      (new StateFile.Reader(in, length, f.toString, kind, version,
          SpillStoreSparkBridge.compressionCodec, trailer, id), in)
    } catch {
      case e: Throwable => in.close(); throw e
    }
  }

  /** The file a part's records are in. */
  def pathOf(source: Manifest.Source): Path = new Path(path, source.name)

  /** Reads every record of a part in order (value null = removal); returns its trailer. */
  def read(part: Manifest.Part)(visit: (Array[Byte], Array[Byte]) => Unit): StateFile.Trailer = {
    val (reader, in) = open(part)
    try { reader.foreach(visit); reader.trailer }
    finally in.close()
  }

  /**
   * The manifest of `version`'s snapshot file. A format-2 snapshot, which holds the entries
   * itself, is read as a manifest whose one part is that file (its trailer unknown until read).
   * Damage throws [[StateFile.CorruptFileException]].
   */
  def readManifest(version: Long): Manifest = readManifest(version, lineage.idOf(version))

  /** The manifest of the snapshot of (`version`, `id`), on this view's lineage or not. */
  def readManifest(version: Long, id: Option[String]): Manifest = {
    val f = new Path(path, CheckpointDir.name(StateFile.Snapshot, version, id))
    val (reader, in) = open(f, StateFile.Snapshot, version, None, None, id)
    try {
      if (reader.kind == StateFile.Snapshot) {
        Manifest(version,
          IndexedSeq(
            Manifest.Part(Manifest.FullSnapshot(version), 0, version, reader.fileLength, None)))
      } else {
        Manifest.read(version, Iterator.continually(reader.next()).takeWhile(_ != null),
          what =>
            throw new StateFile.CorruptFileException(
              s"Corrupt spillstore state file $f: $what"))
      }
    } finally in.close()
  }

  /** Writes `m` as its version's snapshot file. */
  def writeManifest(m: Manifest): CheckpointDir.Written =
    finish(create(file(StateFile.ManifestFile, m.version), StateFile.ManifestFile, m.version,
        formatFor(m.version)), Manifest.write(m, _))

  /**
   * The files of the pair (`version`, `id`) Spark passed in: with format v1 (`checkpointIds`
   * false) v1 names throughout; with v2 the lineage of the pair (below), or, without an id, v1
   * names up to `version` (a checkpoint switched from v1 there; at 0, the empty state).
   */
  def lineageOf(version: Long, id: Option[String], checkpointIds: Boolean,
      deep: Boolean): Lineage = id match {
    case Some(i) if checkpointIds && version > 0 => lineageOf(version, i, list(), deep)
    case _ => if (checkpointIds) Lineage.v1Upto(version) else Lineage.V1
  }

  /**
   * The lineage of (`version`, `id`), a pair Spark recorded: the lineage its journal's header
   * records, then the pair itself; walked back through older journals' headers until it
   * reaches a snapshot on it that `listing` has, or version 1, or a journal that is gone. A
   * snapshot of the pair with no journal (a cleanup kept it alone) is a lineage of one. Other
   * ids' files are never read. `deep`: walk back as far as journals go (a load past a
   * damaged snapshot needs the older bases).
   */
  def lineageOf(version: Long, id: String, listing: CheckpointDir.Listing,
      deep: Boolean = false): Lineage = {
    val journals = listing.all.filter(_.kind == StateFile.Journal)
    def hasJournal(v: Long, i: Option[String]) =
      journals.contains(CheckpointDir.Named(StateFile.Journal, v, i))
    def hasSnapshot(l: Lineage) = listing.all.exists(n =>
      n.kind == StateFile.Snapshot && n.version <= version && l.has(n.version, n.id))
    if (!hasJournal(version, Some(id))) {
      if (listing.all.contains(CheckpointDir.Named(StateFile.Snapshot, version, Some(id)))) {
        return Lineage.Empty.plus(version, id)
      }
      throw SpillStoreSparkBridge.cannotReadStateFile(
        new Path(path, CheckpointDir.name(StateFile.Journal, version, Some(id))),
        new FileNotFoundException(s"version $version with checkpoint id $id has no journal " +
          "nor snapshot in this store's checkpoint directory"))
    }
    var l = Lineage.of(headerIds(version, id).lineage).plus(version, id)
    while (!l.complete && (deep || !hasSnapshot(l)) && hasJournal(l.start, l.idOf(l.start))) {
      val first = l.start
      l = l.below(Lineage.of(headerIds(first, l.idOf(first).get).lineage))
      if (l.start == first) return l // a header that records nothing older
    }
    l
  }

  /** The ids in the header of the journal (`version`, `id`): one small read. */
  private def headerIds(version: Long, id: String): StateFile.Ids = {
    val f = new Path(path, CheckpointDir.name(StateFile.Journal, version, Some(id)))
    val (reader, in) =
      try open(f, StateFile.Journal, version, None, None, Some(id))
      catch { case NonFatal(e) => throw StateFile.unreadable(f, e) }
    try reader.ids.get
    finally in.close()
  }

  /** spillstore's files; throws [[ForeignFiles.ForeignFilesException]] if another provider's
   *  are there too. */
  def list(): CheckpointDir.Listing = {
    val statuses =
      try fm.list(path)
      catch {
        case _: FileNotFoundException => Array.empty[FileStatus]
      }
    val names = statuses.toSeq.map(_.getPath.getName)
    val all = names.flatMap(CheckpointDir.parse).toSet
    val onLineage = all.filter(n => lineage.has(n.version, n.id))
    val listing = CheckpointDir.Listing(
      journals = onLineage.collect { case n if n.kind == StateFile.Journal => n.version },
      snapshots = onLineage.collect { case n if n.kind == StateFile.Snapshot => n.version },
      temps = names.flatMap(n => CheckpointDir.parseTemp(n).map(n -> _)).toMap,
      runs = names.flatMap(n => Manifest.runVersion(n).map(n -> _)).toMap,
      lengths = statuses.map(s => s.getPath.getName -> s.getLen).toMap,
      all = all)
    val foreign = names.flatMap(n => ForeignFiles.ofName(n).map(new Path(path, n) -> _))
    if (foreign.nonEmpty) {
      // Then the `.snapshot` files are likely the other provider's too: a request each, only
      // on the way to an error.
      val foreignSnapshots = listing.snapshots.toSeq.flatMap { v =>
        foreignOwner(StateFile.Snapshot, v).map(file(StateFile.Snapshot, v) -> _)
      }
      throw new ForeignFiles.ForeignFilesException(foreign ++ foreignSnapshots)
    }
    listing
  }

  /**
   * Whether a file starts with spillstore's magic (false: damaged there, or shorter); another
   * provider's file throws [[ForeignFiles.ForeignFilesException]]. One small read, for
   * decisions that would otherwise trust a file's name.
   */
  private def hasOwnMagic(kind: Kind, version: Long): Boolean = {
    val f = file(kind, version)
    val magic = readMagic(f)
    ForeignFiles.ofMagic(magic).foreach(p =>
      throw new ForeignFiles.ForeignFilesException(Seq(f -> p)))
    magic == StateFile.Magic
  }

  /**
   * Whether a file has spillstore's magic and ends with the footer that pins its length (false:
   * damaged there, truncated, or appended to); another provider's file throws
   * [[ForeignFiles.ForeignFilesException]]. Two small reads, not the whole file: what a
   * decision that would otherwise trust a file's name can afford (a flipped bit in the body
   * is found only by reading it).
   */
  def looksWhole(kind: Kind, version: Long): Boolean = hasOwnMagic(kind, version) && {
    val f = file(kind, version)
    val length = f.getFileSystem(hadoopConf).getFileStatus(f).getLen
    length >= StateFile.FooterBytes && {
      val footer = new Array[Byte](StateFile.FooterBytes)
      val in = fm.open(f)
      try in.readFully(length - StateFile.FooterBytes, footer)
      finally in.close()
      StateFile.isFooter(footer, length)
    }
  }

  private def foreignOwner(kind: Kind, version: Long) =
    ForeignFiles.ofMagic(readMagic(file(kind, version)))

  /** The first four bytes of `f`, big-endian; 0 if it is shorter. */
  private def readMagic(f: Path): Int = {
    val in = new DataInputStream(fm.open(f))
    try in.readInt()
    catch { case _: EOFException => 0 }
    finally in.close()
  }

  def delete(kind: Kind, version: Long): Unit = fm.delete(file(kind, version))

  /** Deletes a temp file or a run `list` found, by name. */
  def deleteNamed(name: String): Unit = fm.delete(new Path(path, name))

  private def repaired = io.repaired

  /**
   * Repairs since the last call: corrupt snapshots rebuilt around (from an older base), and
   * snapshots written from a live state past a damaged journal ([[countRepair]]).
   */
  def takeRepairedSnapshots(): Long = repaired.getAndSet(0)

  /** Counts a repair made outside this class (see [[takeRepairedSnapshots]]). */
  def countRepair(): Unit = repaired.incrementAndGet()

  /**
   * Runs `use` on the newest base from which `version` can be rebuilt: the manifest of a
   * snapshot at or below it with every journal after it present, or the empty manifest of
   * version 0 (the empty state before version 1).
   *
   * A snapshot is a cache of its journals; a journal has no other copy. So if the base's
   * manifest or a part it lists is damaged or missing (reading them through [[asBase]]), the next
   * older base is tried; once one works, each damaged manifest and run met on the way is set
   * aside as `<name>.corrupt-<ms>`, logged and counted. A damaged file no other base can replace
   * stays where it is (the error says so), and corrupt journals are never set aside. Anything
   * else a read throws (an I/O error, a newer format, another provider's file) propagates as
   * is, leaving every file alone: the next attempt may succeed. When no base works, the error
   * names the first bad file. `use` must discard what it built from a base that fails.
   */
  def withNewestGoodBase[T](listing: CheckpointDir.Listing, version: Long)(
      use: Manifest => T): T = {
    val bases = (listing.snapshots.filter(_ <= version).toSeq.sorted.reverse :+ 0L)
      .filter(b => listing.missingJournal(b, version).isEmpty)
    var firstError: Throwable = null
    var firstBad: Path = null
    val damaged = ArrayBuffer.empty[(Path, StateFile.CorruptFileException)]
    val it = bases.iterator
    while (it.hasNext) {
      val base = it.next()
      val result =
        try {
          val manifest =
            if (base == 0) Manifest.empty(0)
            else asBase(file(StateFile.Snapshot, base))(readManifest(base))
          Some(use(manifest))
        } catch {
          case CheckpointDir.BadBase(f, e) =>
            if (firstError == null) { firstError = e; firstBad = f }
            else firstError.addSuppressed(e)
            e match {
              case c: StateFile.CorruptFileException =>
                if (!f.getName.endsWith(s".${StateFile.Journal.suffix}") &&
                  !damaged.exists(_._1 == f)) damaged += f -> c
                logWarning(s"$f is corrupt; trying to rebuild version $version from an older " +
                  s"snapshot and journals: ${c.getMessage}")
              case _ =>
                logWarning(s"$f, which snapshot $base needs, is missing; trying an older one")
            }
            None
        }
      if (result.isDefined) {
        damaged.foreach { case (f, e) =>
          val aside = setAside(f)
          repaired.incrementAndGet()
          logWarning(s"Rebuilt version $version around corrupt $f" +
            aside.fold("")(a => s" (moved to $a)") + s": ${e.getMessage}")
        }
        return result.get
      }
    }
    if (firstError == null) {
      throw new IllegalStateException(s"No base to rebuild version $version in $path from")
    }
    val cause = firstError match {
      case c: StateFile.CorruptFileException => new StateFile.CorruptFileException(
          s"${c.getMessage}; left in place, because no older snapshot, nor version 0 with " +
            s"every journal after it, can rebuild version $version (restore the file from a " +
            "copy, or start the query from a new checkpoint)", c)
      case e => e
    }
    throw StateFile.unreadable(firstBad, cause)
  }

  /**
   * `body`, which reads `f` as part of a base: damage or absence of `f` makes the base unusable
   * ([[withNewestGoodBase]] tries an older one); any other failure passes as it is.
   */
  private[spillstore] def asBase[T](f: Path)(body: => T): T =
    try body
    catch {
      case e @ (_: StateFile.CorruptFileException | _: FileNotFoundException) =>
        throw CheckpointDir.BadBase(f, e)
    }

  /** Renames a corrupt file out of the names listing sees; None if that failed. */
  private def setAside(f: Path): Option[Path] = {
    val aside = new Path(f.getParent, s"${f.getName}.corrupt-${System.currentTimeMillis()}")
    try {
      if (f.getFileSystem(hadoopConf).rename(f, aside)) Some(aside) else None
    } catch {
      case NonFatal(e) => logWarning(s"Cannot move corrupt $f aside", e); None
    }
  }
}

object CheckpointDir {
  /**
   * What every view of one directory shares. `dirCreated` is volatile (any thread may create
   * the directory first); `early` is guarded by this object's monitor (stores open and commit
   * under their provider's lock, snapshots are written by maintenance threads).
   */
  private[checkpoint] final class Io(path: Path, hadoopConf: Configuration) {
    val fm: CheckpointFileManager =
      CheckpointFileManager.create(path, ClientConf.forCheckpoint(hadoopConf))
    val creator: AtomicOutput.Creator = AtomicOutput.creator(path, hadoopConf, fm)
    @volatile var dirCreated: Boolean = !creator.needsDir
    /** The file opened early, if any (see `openEarly`), and its name: two attempts' journals
     *  of one version differ only by it. */
    var early: EarlyFile = _
    var earlyName: String = _
    val repaired = new AtomicLong
  }

  /** A journal or snapshot file's name parts (id None: a v1 name). */
  final case class Named(kind: Kind, version: Long, id: Option[String]) {
    def name: String = CheckpointDir.name(kind, version, id)
  }

  def name(kind: Kind, version: Long, id: Option[String]): String =
    id.fold(s"$version.${kind.suffix}")(i => s"${version}_$i.${kind.suffix}")

  /** `file`, part of the base given to `withNewestGoodBase`'s body, could not be read. */
  private[spillstore] final case class BadBase(file: Path, cause: Throwable)
      extends Exception(cause)

  /** What a `write` wrote; `publishNanos` is how long the storage took to make it durable and
   * visible under its name (a close and a rename, or the end of an upload). */
  final case class Written(bytes: Long, records: Long, publishNanos: Long,
      trailer: StateFile.Trailer)

  /**
   * spillstore's files by version; `temps`: the temp files of writes not published (by name:
   * their version), which a killed writer leaves behind; `runs`: run names with their `to`
   * version; `lengths`: every file's length by name.
   */
  final case class Listing(journals: Set[Long], snapshots: Set[Long],
      temps: Map[String, Long] = Map.empty, runs: Map[String, Long] = Map.empty,
      lengths: Map[String, Long] = Map.empty, all: Set[Named] = Set.empty) {
    /** Whether every part of `m` is listed with the length `m` recorded. */
    def hasParts(m: Manifest): Boolean = m.parts.forall(hasPart)

    /** Whether a part's file is listed with the length its manifest recorded. */
    def hasPart(p: Manifest.Part): Boolean = lengths.get(p.source.name).contains(p.length)
    def latestVersion: Long = (journals ++ snapshots).reduceOption(_ max _).getOrElse(0L)
    def latestSnapshotAtOrBelow(v: Long): Long =
      snapshots.filter(_ <= v).reduceOption(_ max _).getOrElse(0L)
    /** The first version in (from, to] with no journal, if any. */
    def missingJournal(from: Long, to: Long): Option[Long] =
      (from + 1 to to).find(v => !journals.contains(v))
  }

  private val Name = """(\d+)(?:_([0-9a-f-]{36}))?\.(journal|snapshot)""".r
  /** What [[AtomicOutput]] writes before it publishes: `.<name>.<uuid>.tmp`. */
  private val TempName =
    ("""\.(\d+)(?:_[0-9a-f-]{36})?\.(?:journal|snapshot|[0-9a-f-]{36}\.run)""" +
      """\.[0-9a-fA-F-]{36}\.tmp""").r

  private def parseTemp(name: String): Option[Long] = name match {
    case TempName(v) => Some(v.toLong)
    case _ => None
  }

  private def parse(name: String): Option[Named] = name match {
    case Name(v, id, "journal") => Some(Named(StateFile.Journal, v.toLong, Option(id)))
    case Name(v, id, "snapshot") => Some(Named(StateFile.Snapshot, v.toLong, Option(id)))
    case _ => None
  }
}
