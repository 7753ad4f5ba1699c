package spillstore.metrics

/**
 * Counts of lookups and tier movements of one live state (`TieredState.batchCounters`): what it
 * reports per batch and adds to [[ExecutorStats]].
 */
final case class TierCounters(
    hits: Long, misses: Long, coldLoads: Long, evictions: Long, writeBacks: Long) {
  def -(o: TierCounters): TierCounters = TierCounters(hits - o.hits, misses - o.misses,
    coldLoads - o.coldLoads, evictions - o.evictions, writeBacks - o.writeBacks)
}

object TierCounters {
  val Zero: TierCounters = TierCounters(0, 0, 0, 0, 0)
}
