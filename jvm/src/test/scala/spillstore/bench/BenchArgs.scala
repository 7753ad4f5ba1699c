package spillstore.bench

/** Command-line arguments of the cold-tier benches: `name=integer` pairs. */
object BenchArgs {
  /** The `name=integer` arguments; others are ignored, a non-integer value throws. */
  def ints(args: Array[String]): Map[String, Int] =
    args.map(_.split("=", 2)).collect { case Array(k, v) => k -> v.toInt }.toMap
}
