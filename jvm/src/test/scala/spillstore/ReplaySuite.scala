package spillstore

import scala.util.Random

import org.scalatest.funsuite.AnyFunSuite

import org.apache.spark.SparkException
import org.apache.spark.sql.execution.streaming.state.RecordType

/**
 * Spark's `SupportsFineGrainedReplay` on spillstore (the state data source's
 * `snapshotStartBatchId` and `readChangeFeed`), compared with a model of every version:
 * removals, re-puts after removals, versions without a change, several changes of a key in
 * one batch, and the errors for a missing snapshot or journal.
 */
class ReplaySuite extends AnyFunSuite {
  import SpillStoreProviderSuite._

  private val Versions = 8

  /** Commits `Versions` random batches; returns the model of each version (0 = empty) and
   * each version's net changes (key -> Some(value) | None for removed). */
  private def commitBatches(p: SpillStoreProvider, rnd: Random, snapshotAt: Int = -1)
      : (IndexedSeq[Map[Long, Long]], IndexedSeq[Map[Long, Option[Long]]]) = {
    var model = Map.empty[Long, Long]
    val states = IndexedSeq.newBuilder[Map[Long, Long]]
    val changes = IndexedSeq.newBuilder[Map[Long, Option[Long]]]
    states += model
    changes += Map.empty
    for (v <- 1 to Versions) {
      val store = p.getStore(v - 1)
      val before = model
      if (v != 4) { // version 4 changes nothing
        for (_ <- 0 until 40) {
          val k = rnd.nextInt(30).toLong
          if (rnd.nextInt(3) == 0) { store.remove(key(k)); model -= k }
          else { val x = rnd.nextLong(); store.put(key(k), value(x)); model += k -> x }
        }
      }
      assert(store.commit() == v)
      if (v == snapshotAt) p.snapshotMaintenance()
      states += model
      val keys = before.keySet ++ model.keySet
      changes += keys.filter(k => before.get(k) != model.get(k)).map(k => k -> model.get(k)).toMap
    }
    (states.result(), changes.result())
  }

  test("replay from a snapshot equals the model; a missing snapshot is an error naming it") {
    val conf = new org.apache.spark.sql.internal.SQLConf
    conf.setConfString("spark.sql.streaming.stateStore.minDeltasForSnapshot", "2")
    withProvider(sqlConf = conf) { (p, dir) =>
      val (states, _) = commitBatches(p, new Random(7), snapshotAt = 5)
      assert(
        new java.io.File(dir).list().filter(_.endsWith(".snapshot")).toSeq == Seq("5.snapshot"))
      for (end <- 5 to Versions) {
        assert(contents(p.replayReadStateFromSnapshot(5, end, None, None)) == states(end))
      }
      for (end <- 0 to Versions) { // from empty (version 0) and all journals
        assert(contents(p.replayReadStateFromSnapshot(0, end, None, None)) == states(end))
      }
      // a write store replayed from a snapshot goes on committing
      val store = p.replayStateFromSnapshot(0, 5, readOnly = false, None, None)
      store.put(key(1000), value(1))
      assert(store.commit() == 6)
      assert(contents(p.getReadStore(6)) == states(5) + (1000L -> 1L))
      val e = intercept[SparkException](p.replayReadStateFromSnapshot(3, Versions, None, None))
      assert(e.getCondition == "CANNOT_LOAD_STATE_STORE.UNCATEGORIZED", e.getMessage)
      assert(e.getCause.getMessage.contains(s"$dir/3.snapshot"), e.getCause.getMessage)
    }
  }

  test("the change feed is each version's net change per key, as batch ids") {
    withProvider() { (p, dir) =>
      val (_, changes) = commitBatches(p, new Random(11))
      for ((start, end) <- Seq((1, Versions), (3, 5), (4, 4))) {
        val reader = p.getStateStoreChangeDataReader(start, end, None, None)
        val got =
          try reader.map { case (kind, k, v, batch) =>
              (batch, k.getLong(0),
                if (kind == RecordType.DELETE_RECORD) None else Some(v.getLong(0)))
            }.toList
          finally reader.closeIfNeeded()
        val expected = (start to end).flatMap(v =>
          changes(v).toSeq.map { case (k, x) =>
            (v - 1L, k, x)
          })
        assert(got.sortBy(r => (r._1, r._2)) == expected.sortBy(r => (r._1, r._2)),
          s"versions $start to $end")
      }
      assert(p.getStateStoreChangeDataReader(4, 4, None, None).isEmpty) // version 4 changed nothing
      new java.io.File(dir, "6.journal").delete()
      val e = intercept[SparkException](p.getStateStoreChangeDataReader(5, 7, None, None))
      assert(e.getMessage.contains(s"$dir/6.journal does not exist"), e.getMessage)
    }
  }
}
