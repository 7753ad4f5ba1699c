package spillstore.checkpoint

import scala.util.Random

import org.scalatest.funsuite.AnyFunSuite

class MergePlanSuite extends AnyFunSuite {
  import MergePlan._

  test("a journal far larger than the ones after it (the batch that loaded the state) is kept, " +
    "not copied; journals of one size merge") {
    assert(mergeFrom(IndexedSeq(1000L, 10, 10, 10), firstJournal = 0, forced = false) === 1)
    assert(mergeFrom(IndexedSeq(10L, 12, 9, 11), firstJournal = 0, forced = false) === 0)
    // Over a big oldest part: the journals merge, the part stays.
    assert(mergeFrom(IndexedSeq(5000L, 10, 10, 10), firstJournal = 1, forced = false) === 1)
  }

  test("parts of about the size of the new changes merge with them once that makes " +
    s"$MinMergeFiles files, not before") {
    // Three runs of ~30 and the journals (30): four files.
    assert(mergeFrom(IndexedSeq(5000L, 30, 30, 30, 10, 10, 10), 4, forced = false) === 1)
    // Two runs: three files, so only the journals merge.
    assert(mergeFrom(IndexedSeq(5000L, 30, 30, 10, 10, 10), 3, forced = false) === 3)
    // A forced snapshot never tiers.
    assert(mergeFrom(IndexedSeq(5000L, 30, 30, 30, 10, 10, 10), 4, forced = true) === 4)
  }

  test("parts above the oldest holding more than the amplification bound merge into one run, " +
    "unless forced") {
    val sizes = IndexedSeq(100L, 120, 80, 10, 10)
    assert(mergeFrom(sizes, 3, forced = false) === 0)
    assert(mergeFrom(sizes, 3, forced = true) === 3)
  }

  test("for any sizes: a suffix that holds the newest journal, at most the part cap after it, " +
    "the oldest part only unforced, and within the amplification bound unless all merge") {
    val rnd = new Random(44)
    for (trial <- 1 to 20000) {
      val parts = rnd.nextInt(MaxParts + 1)
      val journals = 1 + rnd.nextInt(12)
      def size() = 1L + (if (rnd.nextInt(5) == 0) rnd.nextInt(1 << 20) else rnd.nextInt(1000))
      val sizes = IndexedSeq.fill(parts + journals)(size())
      for (forced <- Seq(false, true)) {
        val clue = s"trial $trial: $sizes over $parts parts, forced $forced"
        val from = mergeFrom(sizes, parts, forced)
        assert(from >= 0 && from < sizes.length, clue)
        assert(from + 1 <= MaxParts, clue)
        if (forced && parts > 0) assert(from >= 1, clue)
        if (!forced && from > 0) assert(sizes.drop(1).sum <= MaxAmplification * sizes(0), clue)
        // A journal is kept only if far larger than the ones merged (unless the cap took more).
        if (from > parts && from + 1 < MaxParts)
          assert(sizes(from - 1) > Ratio * sizes.drop(from).sum, clue)
      }
    }
  }
}
