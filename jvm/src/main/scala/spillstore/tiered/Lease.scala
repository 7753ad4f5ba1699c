package spillstore.tiered

/**
 * One task attempt's right to use a [[TieredState]] (see `Ownership`): the read and write
 * stores a task opens on a provider share it. `taskAttemptId` is -1 outside a task.
 */
final class Lease private[tiered] (val holder: String, val taskAttemptId: Long,
    val state: TieredState, private[tiered] val holderIdle: () => Boolean) {
  /** Why the lease ended, once it has; for error messages. */
  @volatile private[spillstore] var endedBy: String = _

  override def toString: String = s"Lease($holder)"
}

object Lease {
  /** The lease of a doomed state: nobody's; see `Ownership`. */
  private[tiered] val Gone =
    new Lease("nobody (the state was unloaded or taken over)", -1, null, () => true)
}
