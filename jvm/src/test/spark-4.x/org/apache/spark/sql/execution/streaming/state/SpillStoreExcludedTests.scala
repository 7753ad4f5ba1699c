package org.apache.spark.sql.execution.streaming.state

import org.scalactic.source.Position
import org.scalatest.Tag
import org.scalatest.funsuite.AnyFunSuiteLike

/** A Spark suite run against spillstore, with the tests that cannot apply ignored, each
 * with its reason in the test's name. */
trait SpillStoreExcludedTests extends AnyFunSuiteLike {
  /** (test name prefix, why it cannot apply to spillstore) */
  def spillstoreExclusions: Seq[(String, String)]

  override protected def test(testName: String, testTags: Tag*)(testFun: => Any)(
      implicit pos: Position): Unit =
    spillstoreExclusions.find { case (prefix, _) => testName.startsWith(prefix) } match {
      case Some((_, reason)) =>
        super.ignore(s"$testName [excluded: $reason]", testTags: _*)(testFun)
      case None => super.test(testName, testTags: _*)(testFun)
    }
}
