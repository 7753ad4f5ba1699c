package org.apache.spark.sql.execution.streaming.state

/** Spark 4.1's own test jar against the 4.1 build. */
trait SpillStoreConformanceLine extends SpillStoreConformance41 {
  self: SpillStoreConformanceSuite =>
  private def checksums = "asserts the file layout of Spark's own providers with 4.1's checkpoint " +
    "file checksums (a .crc companion per delta/snapshot file); spillstore's journal and snapshot " +
    "files carry their checksum inside and have no companion files"

  def spillstoreExclusions: Seq[(String, String)] = SpillStoreConformanceExclusions.common ++ Seq(
    "checksum files are also cleaned up during maintenance" -> checksums,
    "overwrite state file without overwriting checksum file" -> checksums,
    "Load spark 4.0 golden checkpoint written without checksum" ->
      "loads a golden checkpoint written by Spark's own providers (Unknown ProviderClass otherwise)")
}
