package spillstore.tiered

import spillstore.metrics.{ExecutorStats, TierCounters}

/**
 * What one live state's two tiers did, cumulatively: lookups (counted by the state's user),
 * evictions and write-backs (made by its user, or by a relief round while it is idle, hence
 * volatile). A batch reports what happened since the previous one committed; the executor's
 * figures get what happened since they last did.
 */
private[tiered] final class TierCounting(executor: ExecutorStats) {
  var hits = 0L
  var misses = 0L
  var coldLoads = 0L
  @volatile var evictions = 0L
  @volatile var writeBacks = 0L
  private var baseline = TierCounters.Zero
  /** As last added to `executor`; under the state's lock. */
  private var reported = TierCounters.Zero

  def now: TierCounters = TierCounters(hits, misses, coldLoads, evictions, writeBacks)

  /** What happened since the last committed batch. */
  def sinceBatch: TierCounters = now - baseline

  /** [[sinceBatch]], closing the batch: what follows counts towards the next one. */
  def takeBatch(): TierCounters = {
    val current = now
    val batch = current - baseline
    baseline = current
    batch
  }

  /** Adds what happened since the last call to the executor's figures; under the state's lock. */
  def publishToExecutor(): Unit = {
    val current = now
    executor.addTier(current - reported)
    reported = current
  }
}
