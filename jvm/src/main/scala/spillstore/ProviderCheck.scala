package spillstore

import java.nio.charset.StandardCharsets

import scala.io.Source
import scala.util.Try
import scala.util.control.NonFatal

import org.apache.hadoop.fs.Path

import org.apache.spark.internal.Logging
import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.streaming.StreamingQueryListener
import org.apache.spark.sql.streaming.StreamingQueryListener.{QueryProgressEvent, QueryStartedEvent, QueryTerminatedEvent}

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
    try check(event) catch {
      case NonFatal(e) => logDebug(s"spillstore could not check the provider of ${event.id}: $e")
    }

  private def check(event: QueryStartedEvent): Unit = {
    val session = SparkSession.getActiveSession.orElse(SparkSession.getDefaultSession)
    session.filter(_.conf.getOption(ProviderCheck.ProviderConf).contains(ProviderCheck.Spillstore))
      .flatMap(s => Option(s.streams.get(event.id)).map(q => s -> q))
      .foreach { case (s, query) =>
        val root = query.getClass.getMethod("streamingQuery").invoke(query)
        val checkpoint = root.getClass.getMethod("resolvedCheckpointRoot").invoke(root).toString
        ProviderCheck.recordedProvider(checkpoint, s.sparkContext.hadoopConfiguration)
          .filter(_ != ProviderCheck.Spillstore)
          .foreach(recorded => logWarning(ProviderCheck.message(
            Option(event.name).getOrElse(event.id.toString), checkpoint, recorded)))
      }
  }

  override def onQueryProgress(event: QueryProgressEvent): Unit = ()
  override def onQueryTerminated(event: QueryTerminatedEvent): Unit = ()
}

object ProviderCheck {
  val ProviderConf = "spark.sql.streaming.stateStore.providerClass"
  val Spillstore: String = classOf[SpillStoreProvider].getName
  private val Recorded = ("\"" + java.util.regex.Pattern.quote(ProviderConf) +
    "\"\\s*:\\s*\"([^\"]+)\"").r

  /** The provider the newest offset-log entry under `checkpoint` records; None for a new query. */
  def recordedProvider(checkpoint: String, hadoopConf: org.apache.hadoop.conf.Configuration)
      : Option[String] = {
    val offsets = new Path(checkpoint, "offsets")
    val fs = offsets.getFileSystem(hadoopConf)
    if (!fs.exists(offsets)) return None
    val batches = fs.listStatus(offsets).map(_.getPath)
      .flatMap(p => Try(p.getName.toLong).toOption.map(_ -> p))
    // no maxByOption on Scala 2.12 (Spark 3.5)
    val newest = if (batches.isEmpty) None else Some(batches.maxBy(_._1))
    newest.flatMap { case (_, file) =>
      val in = fs.open(file)
      val text = try Source.fromInputStream(in, StandardCharsets.UTF_8.name).mkString
        finally in.close()
      Recorded.findFirstMatchIn(text).map(_.group(1))
    }
  }

  def message(query: String, checkpoint: String, recorded: String): String =
    s"Query '$query' is configured for spillstore ($ProviderConf=$Spillstore), but its " +
      s"checkpoint $checkpoint records $recorded, and Spark keeps the provider a checkpoint " +
      s"was started with: this query runs on $recorded, not on spillstore. To run it on " +
      "spillstore, start it from a new checkpoint location (its state then starts empty); " +
      "`python -m spillstore checkpoint <location>` shows what a checkpoint records."
}
