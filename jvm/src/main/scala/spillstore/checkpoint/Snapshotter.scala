package spillstore.checkpoint

import java.io.File
import java.util.concurrent.ConcurrentHashMap
import java.util.concurrent.atomic.AtomicLong

import scala.util.control.NonFatal

import org.apache.spark.internal.Logging

import spillstore.cold.LocalDirs
import spillstore.metrics.ExecutorStats

/**
 * Writes snapshots from checkpoint files alone. A snapshot of version v is a [[Manifest]]: the
 * parts of the snapshot before it, shared as they are, and one new run that merges the journals
 * since then with the youngest of those parts, as [[MergePlan]] chooses. So a snapshot costs
 * about what changed since the one before it, not the state. It never reads the live heap, so
 * it runs on a maintenance thread without stopping or copying the task thread's state, and it
 * sees spilled and heap entries alike. The one exception is a repair ([[snapshotFrom]]): past a
 * damaged journal the files cannot make a snapshot, and the state a provider holds is the only
 * copy left.
 *
 * What a manifest lists must exist when it is published, though another executor's cleanup may
 * run meanwhile (SPARK-55892): the writer lists the directory again just before publishing and
 * gives up if a part is gone. A run belongs to the attempt that wrote it until a published
 * manifest lists it: every failure after it was written deletes it (FLINK-30461); a killed
 * writer's run is left to [[Cleaner]].
 *
 * Inputs are sorted by key, so a run is one streaming merge; memory and the temporary run files
 * under `spillDir` (the executor's local dir) are bounded as [[SortedChanges]] describes.
 *
 * With checkpoint format v2 a snapshotter works along one lineage ([[along]]): it snapshots a
 * version of that lineage, from its files only, under that version's id.
 *
 * State: [[lastWritten]] is written by the thread that wrote a snapshot (a maintenance thread,
 * or a task committing with a forced snapshot; the provider lets one at a time snapshot) and
 * read by any thread (task threads, for the store's metrics). `committedJournals` is added to
 * by commits (task threads, [[committed]]) and read and trimmed by snapshots: a concurrent map.
 * Views along lineages share both.
 */
final class Snapshotter private (dir: CheckpointDir, spillDir: () => File, stats: ExecutorStats,
    maxKeysInMemory: Int, maxOpenSources: Int, newestWritten: AtomicLong,
    committedJournals: ConcurrentHashMap[String, Snapshotter.CommittedJournal])
    extends Logging {
  def this(dir: CheckpointDir, spillDir: () => File, stats: ExecutorStats,
      maxKeysInMemory: Int = SortedChanges.DefaultMaxKeysInMemory,
      maxOpenSources: Int = SortedChanges.DefaultMaxOpenSources) =
    this(dir, spillDir, stats, maxKeysInMemory, maxOpenSources, new AtomicLong(-1L),
      new ConcurrentHashMap[String, Snapshotter.CommittedJournal])

  /** This snapshotter along `l` (see [[CheckpointDir.along]]). */
  def along(l: Lineage): Snapshotter =
    new Snapshotter(dir.along(l), spillDir, stats, maxKeysInMemory, maxOpenSources, newestWritten,
      committedJournals)

  /**
   * Runs go in this JVM's dir under `spillDir`: a JVM killed mid-merge leaves them where the
   * next JVM's sweep reclaims them, as it does cold tiers ([[LocalDirs]]).
   */
  private val runsParent = () => LocalDirs.jvmDirUnder(spillDir())

  /**
   * The newest version this snapshotter wrote a snapshot of, -1 before its first: what Spark
   * 4.1+ shows as the store's snapshot lag (its providers, too, count only their own uploads).
   */
  def lastWritten: Long = newestWritten.get()

  /**
   * Notes what a commit wrote as `journal`. Snapshots keep its length and trailer, by file name
   * (with v2, two attempts of a version write two journals), until one covers its version:
   * adopting it as a part then needs no read. Otherwise the first snapshot after a load reads
   * the load's journal whole (the state), on the commit's thread when Spark forces the
   * snapshot. A file replaced since under the same name and length is still caught: loads
   * check every part against its trailer.
   */
  def committed(journal: Manifest.JournalFile, written: CheckpointDir.Written): Unit =
    committedJournals.put(journal.name,
      Snapshotter.CommittedJournal(journal.version, written.bytes, written.trailer))

  /**
   * Snapshots the newest version up to `committed` (the newest its provider knows committed:
   * a journal past it may not be) if at least `minDeltas` journals follow the newest snapshot.
   * Returns the version snapshotted.
   */
  def snapshotIfDue(minDeltas: Int, committed: Long): Option[Long] = {
    val listing =
      try dir.list()
      catch {
        case e: ForeignFiles.ForeignFilesException =>
          logWarning(s"Not snapshotting: ${e.getMessage}")
          return None
      }
    val latest = listing.journals.filter(_ <= committed).reduceOption(_ max _).getOrElse(0L)
    val base = listing.latestSnapshotAtOrBelow(latest)
    if (latest - base >= minDeltas) snapshot(latest, listing) else None
  }

  /**
   * Writes the snapshot of `version` from `entries`, its whole content (each key once, in any
   * order): a provider's live state, when a journal it holds a version past is damaged. It is
   * one run that lists nothing older.
   */
  def snapshotFrom(version: Long, entries: Iterator[(Array[Byte], Array[Byte])]): Unit = {
    val sorted = SortedChanges.sort(dir, entries, runsParent, maxKeysInMemory, maxOpenSources)
    val (name, written) =
      try dir.writeRun(version)(out => sorted.drain(out.put))
      finally sorted.close()
    val run = Manifest.Part(Manifest.RunFile(name, version), 0, version, written.bytes,
      Some(written.trailer))
    publish(Manifest(version, IndexedSeq(run)), Some(name)).foreach(
      wrote(version, written, _, "the live state"))
  }

  private def wrote(version: Long, run: CheckpointDir.Written, manifest: CheckpointDir.Written,
      from: String): Unit = {
    stats.snapshotBytes.inc(run.bytes + manifest.bytes)
    newestWritten.accumulateAndGet(version, (a: Long, b: Long) => math.max(a, b))
    committedJournals.values.removeIf(_.version <= version)
    logInfo(s"Wrote snapshot of version $version to ${dir.path}: a run of ${run.records} " +
      s"records, ${run.bytes} bytes, and a manifest of ${manifest.records} parts, " +
      s"${manifest.bytes} bytes ($from)")
  }

  /**
   * Writes the snapshot of `version`, unless it exists or its inputs are incomplete. `forced`
   * (a commit on a task thread) merges only what changed since the last snapshot and the
   * youngest parts, never the oldest ([[MergePlan]]).
   */
  def snapshot(version: Long, listing: CheckpointDir.Listing,
      forced: Boolean = false): Option[Long] = {
    val base = listing.latestSnapshotAtOrBelow(version)
    if (base == version) return None
    listing.missingJournal(base, version) match {
      case Some(gap) =>
        logWarning(s"Not snapshotting ${dir.path} at version $version: journal $gap is missing")
        None
      case None =>
        // An older base is used around a corrupt one (see withNewestGoodBase).
        val (manifest, ownRun, written, from) =
          dir.withNewestGoodBase(listing, version)(build(_, version, listing, forced))
        publish(manifest, ownRun).map { m =>
          wrote(version, written, m, from)
          version
        }
    }
  }

  /**
   * The manifest of `version` over `base`, with the run this attempt wrote for it (if any),
   * what that run cost and a description.
   */
  private def build(base: Manifest, version: Long, listing: CheckpointDir.Listing,
      forced: Boolean): (Manifest, Option[String], CheckpointDir.Written, String) = {
    val journals = (base.version + 1 to version).map { v =>
      val j = Manifest.JournalFile(v, dir.lineage.idOf(v))
      Manifest.Part(j, v - 1, v, listing.lengths.getOrElse(j.name, 0L), None)
    }
    val candidates = base.parts ++ journals
    val from = MergePlan.mergeFrom(candidates.map(_.length), base.parts.size, forced)
    val merged = candidates.drop(from)
    var ownRun: Option[String] = None
    try {
      val (part, written) =
        if (merged.size == 1) adopt(merged.head)
        else {
          // Journals are merged as journals: a damaged one is never taken for a bad base.
          val parts = base.parts.drop(from)
          val after = if (parts.nonEmpty) base.version else merged.head.from
          val (name, w) = dir.writeRun(version) { out =>
            MergedVersion.merge(dir, parts, after, version, runsParent, maxOpenSources,
              keepRemovals = from > 0)(out.record)
          }
          ownRun = Some(name)
          Manifest.Part(Manifest.RunFile(name, version), merged.head.from, version, w.bytes,
            Some(w.trailer)) -> w
        }
      val kept = candidates.take(from).map(p => if (p.trailer.isDefined) p else adopt(p)._1)
      val description = s"${merged.size} of ${candidates.size} files over snapshot " +
        s"${base.version}" + (if (forced) ", forced" else "")
      (Manifest(version, kept :+ part), ownRun, written, description)
    } catch {
      case e: Throwable => ownRun.foreach(deleteOwn(_, e)); throw e
    }
  }

  /**
   * `part` as it is, with its trailer read and verified if neither the manifest it came from
   * nor its commit recorded it (a journal, or a format-2 snapshot): no manifest lists a file
   * whose content it has not checked or written.
   */
  private def adopt(part: Manifest.Part): (Manifest.Part, CheckpointDir.Written) = {
    val trailer = part.trailer.orElse(committedTrailer(part)).getOrElse {
      val f = dir.pathOf(part.source)
      part.source match {
        case Manifest.JournalFile(v, _) =>
          try dir.read(part)((_, _) => ())
          catch { case NonFatal(e) => throw new SortedChanges.UnreadableJournal(f, v, e) }
        case _ => dir.asBase(f)(dir.read(part)((_, _) => ()))
      }
    }
    part.copy(trailer = Some(trailer)) -> CheckpointDir.Written(0, trailer.records, 0, trailer)
  }

  private def committedTrailer(part: Manifest.Part): Option[StateFile.Trailer] = part.source match {
    case j: Manifest.JournalFile =>
      Option(committedJournals.get(j.name)).collect {
        case c if c.length == part.length => c.trailer
      }
    case _ => None
  }

  /**
   * Publishes `manifest` unless a listing taken now shows its version snapshotted already, or a
   * part missing or changed in length (another executor's cleanup); then, and on any failure,
   * deletes `ownRun`. Returns what it published, if it did.
   */
  private def publish(manifest: Manifest, ownRun: Option[String]): Option[CheckpointDir.Written] =
    try {
      val now = dir.list()
      val gone = manifest.parts.filterNot(now.hasPart).map(_.source.name)
      if (now.snapshots.contains(manifest.version) || gone.nonEmpty) {
        logWarning(s"Not publishing the snapshot of version ${manifest.version} in " +
          s"${dir.path}: " + (if (gone.nonEmpty) s"${gone.mkString(", ")} changed or vanished " +
                              "while it was written"
                              else "another writer published it"))
        ownRun.foreach(dir.deleteNamed)
        None
      } else {
        Some(dir.writeManifest(manifest))
      }
    } catch {
      case e: Throwable => ownRun.foreach(deleteOwn(_, e)); throw e
    }

  private def deleteOwn(run: String, failure: Throwable): Unit =
    try dir.deleteNamed(run)
    catch { case NonFatal(d) => failure.addSuppressed(d) }
}

object Snapshotter {
  /** What a commit wrote as a journal of `version`: its length and trailer. */
  final case class CommittedJournal(version: Long, length: Long, trailer: StateFile.Trailer)
}
