package spillstore

import org.scalatest.{BeforeAndAfterEach, Suite}

/**
 * Each test opens its stores in an executor scope of its own ([[ExecutorScope]]): what earlier
 * tests left registered (stores Spark's tests open outside a task and never end) and the budget
 * they asked for do not apply to it, whatever order suites run in.
 */
trait FreshExecutorScope extends BeforeAndAfterEach { this: Suite =>
  override def beforeEach(): Unit = {
    ExecutorScope.renew()
    super.beforeEach()
  }
}
