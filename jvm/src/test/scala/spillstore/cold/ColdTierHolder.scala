package spillstore.cold

import java.io.File

import scala.io.StdIn

/**
 * The child JVM of LocalDirsSweepSuite: opens a cold tier under the given parent, writes to it,
 * prints `cold <dir>`, then waits. A line on stdin (or its end, if the test JVM is gone) makes
 * it exit normally without closing the tier, as an executor that never unloads its stores.
 *
 * Usage: ColdTierHolder <parent>
 */
object ColdTierHolder {
  def main(args: Array[String]): Unit = {
    val tier = ColdTier.create(new File(args(0)), "holder")
    val batch = ColdTier.newBatch()
    try {
      (0 until 1000).foreach(i => batch.put(s"key-$i".getBytes, new Array[Byte](100)))
      tier.write(batch)
    } finally batch.close()
    println(s"cold ${tier.dir}")
    System.out.flush()
    StdIn.readLine()
    System.exit(0)
  }
}
