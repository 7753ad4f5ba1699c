package spillstore

import scala.util.control.NonFatal

import org.apache.hadoop.fs.Path

import org.apache.spark.internal.Logging
import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.streaming.StreamingQueryListener
import org.apache.spark.sql.streaming.StreamingQueryListener.{
  QueryProgressEvent, QueryStartedEvent, QueryTerminatedEvent
}

import spillstore.checkpoint.QueryCheckpoint
import spillstore.conf.SparkConfs

/**
 * Tells the user at once when a query configured for spillstore runs on another provider.
 * Spark takes a restarted query's provider from its checkpoint (the offset log's metadata),
 * not from the session, and says so only in a driver WARN of its own; so a user who switches an
 * existing query to spillstore silently keeps the old provider.
 *
 * Registered by `spillstore.configure` through `spark.sql.streaming.streamingQueryListeners`.
 * On each query start (synchronously, on the thread calling `start()`), if the session selects
 * spillstore, it reads the provider recorded in the query's newest offset-log entry and logs a
 * WARN naming the checkpoint, that provider and what to do. Reading Spark's query internals is
 * by reflection on members every Spark line has; any failure only skips the check.
 */
class ProviderCheck extends StreamingQueryListener with Logging {
  override def onQueryStarted(event: QueryStartedEvent): Unit =
    try check(event)
    catch {
      case NonFatal(e) => logDebug(s"spillstore could not check the provider of ${event.id}: $e")
    }

  private def check(event: QueryStartedEvent): Unit = {
    val session = SparkSession.getActiveSession.orElse(SparkSession.getDefaultSession)
    session.filter(_.conf.getOption(SparkConfs.ProviderClass).contains(ProviderCheck.Spillstore))
      .flatMap(s => Option(s.streams.get(event.id)).map(q => s -> q))
      .foreach { case (s, query) =>
        val checkpoint = QueryCheckpoint.checkpointRoot(query)
        QueryCheckpoint.recordedProvider(new Path(checkpoint), s.sparkContext.hadoopConfiguration)
          .filter(_ != ProviderCheck.Spillstore)
          .foreach(recorded =>
            logWarning(ProviderCheck.message(
                Option(event.name).getOrElse(event.id.toString), checkpoint, recorded)))
      }
  }

  override def onQueryProgress(event: QueryProgressEvent): Unit = ()
  override def onQueryTerminated(event: QueryTerminatedEvent): Unit = ()
}

object ProviderCheck {
  val Spillstore: String = classOf[SpillStoreProvider].getName

  def message(query: String, checkpoint: String, recorded: String): String =
    s"Query '$query' is configured for spillstore (${SparkConfs.ProviderClass}=$Spillstore), but its " +
      s"checkpoint $checkpoint records $recorded, and Spark keeps the provider a checkpoint " +
      s"was started with: this query runs on $recorded, not on spillstore. To run it on " +
      s"spillstore with its state, stop it and run `python -m spillstore migrate $checkpoint` " +
      "(README: Moving an existing query); `python -m spillstore checkpoint <location>` shows " +
      "what a checkpoint records."
}
