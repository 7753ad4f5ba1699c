package spillstore.bench

import spillstore.bench.ApiBench.Result

/** Markdown tables of benchmark results, with each provider's ratios to Spark's two. */
object Report {
  def table(rs: Seq[Result]): String =
    if (rs.forall(_.samples.isEmpty)) figures(rs) else rates(rs)

  private def rates(rs: Seq[Result]): String = {
    val hdfs = rs.find(_.provider == BenchProviders.Hdfs)
    val rocks = rs.find(_.provider == BenchProviders.Rocksdb)
    val header = Seq("provider", "records/s (min–max of rounds)", "getStore ms", "records ms",
      "commit ms", "batch ms (medians)", "hit ratio", "records/s ÷ hdfs", "÷ rocksdb",
      "batch time hdfs ÷ this")
    val rows = rs.map { r =>
      val rate = r.opsPerSec
      val all = r.roundRates
      def ratio(o: Option[Result]) = o.fold("")(x => f"${rate / x.opsPerSec}%.2fx")
      Seq(r.provider, f"$rate%,.0f (${all.min}%,.0f–${all.max}%,.0f)",
        f"${r.median(_.loadMs)}%,.1f", f"${r.median(_.workMs)}%,.1f",
        f"${r.median(_.commitMs)}%,.1f",
        f"${r.median(_.totalMs)}%,.1f", r.hitRatio.fold("")(h => f"${h * 100}%.1f %%"),
        ratio(hdfs), ratio(rocks),
        hdfs.fold("")(h => f"${h.median(_.totalMs) / r.median(_.totalMs)}%.2fx"))
    }
    markdown(rs.head.scenario + s" (${rs.head.opsPerRound} records per round, " +
        s"${rs.head.samples.size} rounds after warm-up)", header, rows)
  }

  private def figures(rs: Seq[Result]): String = {
    val names = rs.flatMap(_.value.keys).distinct
    markdown(rs.head.scenario, "provider" +: names,
      rs.map(r => r.provider +: names.map(n => r.value.get(n).fold("")(v => f"$v%,.1f"))))
  }

  private def markdown(title: String, header: Seq[String], rows: Seq[Seq[String]]): String =
    (Seq(s"\n### $title\n", header.mkString("| ", " | ", " |"),
      header.map(_ => "---").mkString("|", "|", "|")) ++
      rows.map(_.mkString("| ", " | ", " |"))).mkString("\n")
}
