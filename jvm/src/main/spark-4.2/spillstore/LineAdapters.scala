package spillstore

/** Spark 4.2: the 4.2+ API as is. */
trait ProviderAdapter extends Spark42ProviderAdapter { self: SpillStoreProvider => }

trait StoreAdapter extends Spark42StoreAdapter { self: SpillStateStore => }
