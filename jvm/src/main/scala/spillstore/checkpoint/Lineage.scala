package spillstore.checkpoint

import scala.collection.immutable.SortedMap

/**
 * Which file holds each version along one line of commits: with checkpoint format v2 every
 * commit attempt names its files by a checkpoint id of its own (`<v>_<id>.journal`), so a
 * version has one file per attempt and only the lineage says which one a load must read.
 * Versions at or below `v1Upto` have v1 names (`<v>.journal`, one per version: a checkpoint
 * written with format v1, or before it switched to v2); a version above it is on the lineage
 * only if `ids` has it. Immutable: threads share it freely.
 *
 * [[V1]] is format v1's lineage: every version, v1 names. A journal written under format v2
 * records its writer's lineage, from the newest snapshot it knew up to its base (`entries`),
 * so that one header read finds which files rebuild a version (docs/file-format.md).
 */
final case class Lineage(v1Upto: Long, ids: SortedMap[Long, String]) {
  require(ids.keys.forall(_ > v1Upto), s"lineage $this: an id at a v1 version")

  /** The id of `version`'s files on this lineage (None: v1 names). */
  def idOf(version: Long): Option[String] = if (version <= v1Upto) None else ids.get(version)

  /** Whether this lineage says which files `version` has. */
  def knows(version: Long): Boolean = version <= v1Upto || ids.contains(version)

  /** Whether (`version`, `id`) is on this lineage (id None: a v1 name). */
  def has(version: Long, id: Option[String]): Boolean =
    if (version <= v1Upto) id.isEmpty else id.isDefined && ids.get(version) == id

  /** The newest version this lineage knows a v2 id of, or `v1Upto`. */
  def tip: Long = ids.lastOption.fold(v1Upto)(_._1)

  /** The oldest version whose name this lineage knows, if it knows any below `tip`. */
  def start: Long = if (v1Upto > 0) 1L else ids.headOption.fold(tip + 1)(_._1)

  /** Whether every version from 1 to `tip` is known: nothing left to find in older headers. */
  def complete: Boolean = v1Upto > 0 || ids.isEmpty || ids.head._1 == 1L

  def plus(version: Long, id: String): Lineage = {
    require(version > tip, s"lineage $this: version $version is not after its tip")
    copy(ids = ids + (version -> id))
  }

  /** This lineage without v2 ids below `version` (v1 names stay known: they are unique). */
  def from(version: Long): Lineage = copy(ids = ids.filter(_._1 >= version))

  /** `older` (a journal header's entries, all below this lineage's start) joined below. */
  def below(older: Lineage): Lineage =
    Lineage(math.max(v1Upto, older.v1Upto), older.ids ++ ids)

  /**
   * What a journal of version `version` records: this lineage's versions from `start` up to
   * `version - 1`, each with its id (None: a v1 name). The v1 part is one entry, its newest
   * version, since v1 names need no id.
   */
  def entriesBelow(version: Long): Seq[(Long, Option[String])] = {
    val v1 = if (v1Upto > 0 && v1Upto < version) Seq(v1Upto -> None) else Nil
    v1 ++ ids.iterator.takeWhile(_._1 < version).map { case (v, id) => v -> Some(id) }.toSeq
  }

  override def toString: String =
    if (this == Lineage.V1) "v1" else s"v1 up to $v1Upto, ids ${ids.mkString(", ")}"
}

object Lineage {
  /** Format v1: every version by its v1 name. */
  val V1: Lineage = Lineage(Long.MaxValue, SortedMap.empty)

  /** Format v2 from version 0 (the empty state): nothing committed yet. */
  val Empty: Lineage = Lineage(0L, SortedMap.empty)

  /** The v1 names of versions up to `version`: a checkpoint switching from v1 to v2 there. */
  def v1Upto(version: Long): Lineage = Lineage(version, SortedMap.empty)

  /** The lineage a journal header's entries (increasing versions) describe. */
  def of(entries: Seq[(Long, Option[String])]): Lineage = {
    val v1 = entries.collect { case (v, None) => v }.foldLeft(0L)(math.max)
    Lineage(v1, SortedMap(entries.collect { case (v, Some(id)) => v -> id }: _*))
  }
}
