package spillstore

/** Spark 4.2: the 4.2+ API as is. */
trait SparkLineProvider extends SparkLine42Provider { self: SpillStoreProvider => }

trait SparkLineStore extends SparkLine42Store { self: SpillStateStore => }
