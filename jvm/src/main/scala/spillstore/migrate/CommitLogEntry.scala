package spillstore.migrate

import java.nio.charset.StandardCharsets

import scala.jdk.CollectionConverters._

import com.fasterxml.jackson.databind.node.ObjectNode
import org.apache.commons.io.IOUtils
import org.apache.hadoop.fs.{FileSystem, Path}

/**
 * One entry of a query's commit log (`commits/<batch>`): its log version line, then a JSON
 * line. The log version is the checkpoint format: `v1`, or `v2` (Spark 4.0+) whose JSON has
 * `stateUniqueIds`, each stateful operator's checkpoint ids per partition and store (the ids
 * Spark passes back to the stores when the query restarts). Spark 4.2+ may write `v3`, v2 with
 * sink metadata.
 */
final case class CommitLogEntry(file: Path, logVersion: Int, metadata: ObjectNode) {
  import CommitLogEntry._

  /** The checkpoint format the entry is written in: 1, or 2 (log versions 2 and 3). */
  def checkpointFormat: Int = if (logVersion >= 2) 2 else 1

  /** Operator `op`'s checkpoint ids: per partition, per store in Spark's order (see below). */
  def stateIds(op: Long): Option[IndexedSeq[IndexedSeq[String]]] =
    Option(metadata.path("stateUniqueIds").get(op.toString)).map { perPartition =>
      perPartition.elements().asScala.map(_.elements().asScala.map(_.asText()).toIndexedSeq)
        .toIndexedSeq
    }

  /**
   * Operator `op`'s ids keyed by (partition, store name), for `partitions` and `stores`; None if
   * the entry records none for `op`, and a missing one is refused.
   */
  def storeIds(op: Long, partitions: Seq[Int], stores: Seq[String])
      : Option[Map[(Int, String), String]] =
    stateIds(op).map { recorded =>
      (for (part <- partitions; (store, i) <- storeOrder(op, stores).zipWithIndex) yield {
        val id = recorded.lift(part).flatMap(_.lift(i)).getOrElse(
          CheckpointLayout.refuse(s"$file records no checkpoint id of operator $op's store " +
            s"$store in partition $part"))
        (part, store) -> id
      }).toMap
    }

  /**
   * The entry in checkpoint format `format` recording `ids` (format 2; operators without ids
   * record none). A `v3` entry's sink metadata has no place in format 1: refused.
   */
  def rewritten(format: Int, ids: Map[Long, IndexedSeq[IndexedSeq[String]]]): String = {
    val json = metadata.deepCopy()
    json.remove("stateUniqueIds")
    val line = format match {
      case 1 =>
        if (logVersion > 2) {
          CheckpointLayout.refuse(s"$file is a commit-log entry of version v$logVersion, whose " +
            "sink metadata checkpoint format 1 cannot record: keep checkpoint format 2")
        }
        1
      case _ =>
        if (ids.nonEmpty) {
          val node = json.putObject("stateUniqueIds")
          ids.toSeq.sortBy(_._1).foreach { case (op, perPartition) =>
            val partitions = node.putArray(op.toString)
            perPartition.foreach { stores =>
              val inPartition = partitions.addArray()
              stores.foreach(inPartition.add)
            }
          }
        }
        math.max(logVersion, 2)
    }
    s"v$line\n${CheckpointLayout.Json.writeValueAsString(json)}"
  }
}

object CommitLogEntry {
  /** Reads `file`; one that is not a commit-log entry is refused, naming it. */
  def read(fs: FileSystem, file: Path): CommitLogEntry = {
    val in = fs.open(file)
    val lines =
      try new String(IOUtils.toByteArray(in), StandardCharsets.UTF_8).split("\n", -1).toSeq
      finally in.close()
    val LogVersion = """v([1-9][0-9]*)""".r
    val version = lines.headOption.map(_.trim) match {
      case Some(LogVersion(v)) => v.toInt
      case other => CheckpointLayout.refuse(s"$file is not a commit-log entry (first line " +
          s"'${other.getOrElse("")}', expected v1, v2 or v3)")
    }
    val json = lines.drop(1).headOption.filter(_.trim.nonEmpty).getOrElse("{}")
    CheckpointLayout.Json.readTree(json) match {
      case o: ObjectNode => CommitLogEntry(file, version, o)
      case _ => CheckpointLayout.refuse(s"$file: its metadata line is not a JSON object")
    }
  }

  /**
   * The order of an operator's stores in its checkpoint ids, as Spark's operators report them:
   * one store, or a stream-stream join's four (`SymmetricHashJoinStateManager`: left before
   * right, each side's key-to-count store before its values). Other store sets are refused.
   */
  def storeOrder(op: Long, stores: Seq[String]): Seq[String] = stores.sorted match {
    case Seq(one) => Seq(one)
    case sorted if sorted == JoinStores.sorted => JoinStores
    case other => CheckpointLayout.refuse(s"operator $op has the stores ${other.mkString(", ")}," +
        " whose order in checkpoint format v2's ids migrate does not know")
  }

  /**
   * Ids keyed by (operator, partition, store name) laid out as an entry records them: per
   * operator, per partition from 0 on, per store in Spark's order.
   */
  def layout(ids: Map[(Long, Int, String), String]): Map[Long, IndexedSeq[IndexedSeq[String]]] =
    ids.groupBy(_._1._1).map { case (op, ofOp) =>
      val order = storeOrder(op, ofOp.keys.map(_._3).toSeq.distinct)
      op -> (0 to ofOp.keys.map(_._2).max).map { part =>
        order.map(store =>
          ofOp.getOrElse((op, part, store),
            throw new IllegalStateException(
              s"CommitLogEntry: no checkpoint id of operator $op's store $store in partition $part")))
          .toIndexedSeq
      }
    }

  private val JoinStores = Seq("left-keyToNumValues", "left-keyWithIndexToValue",
    "right-keyToNumValues", "right-keyWithIndexToValue")
}
