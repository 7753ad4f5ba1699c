package spillstore.conf

/**
 * A conf key as the README's conf table shows it: the full key, its default as users see it
 * and what it means in spillstore (both markdown). The table is rendered from these
 * (`DocTables`), so it lists what the code reads, with the defaults the code applies.
 */
final case class ConfKey(key: String, default: String, meaning: String)

object ConfKey {
  /** A default that is a value the user could write, shown as code. */
  def literal(value: Any): String = s"`$value`"
}
