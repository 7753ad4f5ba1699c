package spillstore.checkpoint

/**
 * Which files a new snapshot merges into its one new run, as a pure function of their sizes.
 *
 * The candidates, oldest first, are the parts of the snapshot it builds on, then the journals
 * after it. A snapshot merges a suffix of them (only neighbours merge: a later file's record
 * wins, so order is meaning) and keeps the files before it as they are, shared:
 *  1. the journals, from the newest, while the next older is at most [[Ratio]] times what is
 *     gathered: a journal far larger than the ones after it (a batch that loaded the state) is
 *     kept as a part instead of being copied;
 *  2. if every journal joined, older parts join as in size-tiered compaction: while the next
 *     older is at most [[Ratio]] times what is gathered, merged only if that makes at least
 *     [[MinMergeFiles]] files (the journals counting as one);
 *  3. at most [[MaxParts]] parts after the snapshot: the next older parts join until so;
 *  4. when the parts above the oldest hold more than [[MaxAmplification]] times its bytes,
 *     everything merges into one run (a load reads at most about that much more than the
 *     state, and the tombstones go).
 * A forced snapshot (on a task thread, at commit) takes only steps 1 and 3 and never the
 * oldest part: it costs about the journals since the last snapshot, never the state.
 * Merging a lone journal writes nothing: it is adopted as the new part.
 */
object MergePlan {
  val Ratio = 2L
  val MinMergeFiles = 4
  val MaxParts = 8
  val MaxAmplification = 2L

  /**
   * The index of the first candidate to merge: candidates [result, sizes.length) become one
   * part. `firstJournal` is the index of the first journal (the base's part count); there is
   * at least one journal.
   */
  def mergeFrom(sizes: IndexedSeq[Long], firstJournal: Int, forced: Boolean): Int = {
    val n = sizes.length
    require(firstJournal >= 0 && firstJournal < n, s"no journal among $n candidates")
    var from = n - 1
    var sum = sizes(from)
    while (from > firstJournal && sizes(from - 1) <= Ratio * sum) { from -= 1; sum += sizes(from) }
    if (from == firstJournal && !forced) {
      var older = from
      var tiered = sum
      while (older > 0 && sizes(older - 1) <= Ratio * tiered) {
        older -= 1; tiered += sizes(older)
      }
      if (from - older + 1 >= MinMergeFiles) from = older
    }
    if (from + 1 > MaxParts) from = MaxParts - 1
    if (!forced && from > 0 && sizes.iterator.drop(1).sum > MaxAmplification * sizes(0)) from = 0
    from
  }
}
