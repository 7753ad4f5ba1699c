package spillstore

import org.apache.spark.sql.execution.streaming.state._

/**
 * Spark 4.0: getStore(version, ckptId); no upgrade, so a task opens a read store and then a
 * write store (they share the task's lease), and Spark aborts the read store at task end.
 */
trait SparkLineProvider extends SparkLine4Provider { self: SpillStoreProvider =>
  override def getStore(version: Long, stateStoreCkptId: Option[String]): StateStore =
    open(version, writable = true, forceSnapshotOnCommit = false, upgrading = null)
}

trait SparkLineStore extends SparkLine4Store { self: SpillStateStore => }
