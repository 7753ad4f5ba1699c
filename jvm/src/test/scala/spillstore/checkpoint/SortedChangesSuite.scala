package spillstore.checkpoint

import java.io.{File, RandomAccessFile}

import scala.collection.immutable.TreeMap
import scala.util.Random

import org.scalatest.funsuite.AnyFunSuite

import spillstore.checkpoint.CheckpointDirs.{unsignedOrder, withDirs}

class SortedChangesSuite extends AnyFunSuite {
  private type Record = (Seq[Byte], Option[Seq[Byte]])

  /** 0 to 2 bytes from a few values around the sign bit: 31 keys, many repeats. */
  private def key(rnd: Random): Seq[Byte] =
    Seq.fill(rnd.nextInt(3))(Seq[Byte](0, 1, 127, -128, -1)(rnd.nextInt(5)))

  /** Writes journal `v` of `records`: the newest record of each key, sorted. */
  private def writeJournal(dir: CheckpointDir, v: Long, records: Seq[Record]): Unit =
    dir.write(StateFile.Journal, v) { w =>
      TreeMap(records: _*)(unsignedOrder).foreach { case (k, value) =>
        w.record(k.toArray, value.map(_.toArray).orNull)
      }
    }

  /** What `changes` gives, in its order (a removal is None); closes it, also when it fails. */
  private def drain(changes: SortedChanges): Seq[Record] =
    try {
      val out = Seq.newBuilder[Record]
      while (changes.head != null) {
        out += changes.head._1.toSeq -> Option(changes.head._2).map(_.toSeq)
        changes.advance()
      }
      out.result()
    } finally changes.close()

  /** Files and dirs left under `local`. */
  private def leftUnder(local: File): Seq[String] =
    Option(local.listFiles()).toSeq.flatten.map(_.getName)

  /** Run files under `local` (each merge writes its runs in a dir of its own there). */
  private def runFilesUnder(local: File): Int =
    Option(local.listFiles()).toSeq.flatten.flatMap(d => Option(d.listFiles()).toSeq.flatten).size

  test("the newest value of each key changed in (base, version], in unsigned order, equals a " +
    "model for any fan-in; no run is left") {
    var runsWritten = 0
    for (seed <- 1 to 40) withDirs("sorted-changes") { (dir, local) =>
      val rnd = new Random(seed)
      val version = rnd.nextInt(12).toLong
      val base = if (version == 0) 0L else rnd.nextInt(version.toInt + 1).toLong
      val model = TreeMap.newBuilder[Seq[Byte], Option[Seq[Byte]]](unsignedOrder)
      for (v <- 1L to version) {
        val records = Seq.fill(rnd.nextInt(40)) {
          key(rnd) -> (if (rnd.nextInt(4) == 0) None
                       else Some(Seq.fill(rnd.nextInt(3))(rnd.nextInt().toByte)))
        }
        writeJournal(dir, v, records)
        if (v > base) model ++= records // a builder keeps the last value of a repeated key
      }
      val maxOpen =
        if (rnd.nextBoolean()) 2 + rnd.nextInt(3) else SortedChanges.DefaultMaxOpenSources
      val changes = SortedChanges.squash(dir, Nil, base, version, () => local, maxOpen)
      val runs = runFilesUnder(local)
      val merged = drain(changes)
      val clue = s"seed $seed: journals ($base, $version], $maxOpen sources"
      assert(runs <= maxOpen, s"$clue: $runs run files open at once")
      assert(merged === model.result().toSeq, clue)
      assert(leftUnder(local).isEmpty, s"$clue: left ${leftUnder(local)}")
      if (local.exists()) runsWritten += 1
    }
    assert(runsWritten > 5, "too few seeds wrote run files to test them")
  }

  test("sort gives records in no order (a live state's, each key once) in unsigned order, for " +
    "any budget and fan-in; no run is left") {
    var runsWritten = 0
    for (seed <- 1 to 20) withDirs("sorted-changes") { (dir, local) =>
      val rnd = new Random(seed)
      val model = TreeMap(Seq.fill(rnd.nextInt(300)) {
        Seq.fill(rnd.nextInt(4))(rnd.nextInt().toByte) -> Some(
          Seq.fill(rnd.nextInt(3))(rnd.nextInt().toByte))
      }: _*)(unsignedOrder)
      val (maxKeys, maxOpen) = (1 + rnd.nextInt(60), 2 + rnd.nextInt(3))
      val records = rnd.shuffle(model.toSeq).iterator.map { case (k, v) =>
        k.toArray -> v.get.toArray
      }
      val changes = SortedChanges.sort(dir, records, () => local, maxKeys, maxOpen)
      val runs = runFilesUnder(local)
      val clue = s"seed $seed: ${model.size} records, $maxKeys keys in memory, $maxOpen sources"
      assert(runs <= maxOpen, s"$clue: $runs run files open at once")
      assert(drain(changes) === model.toSeq, clue)
      assert(leftUnder(local).isEmpty, s"$clue: left ${leftUnder(local)}")
      if (local.exists()) runsWritten += 1
    }
    assert(runsWritten > 5, "too few seeds wrote run files to test them")
  }

  test("journals fewer than the fan-in are merged as read: no run file, no local dir") {
    withDirs("sorted-changes") { (dir, local) =>
      val rnd = new Random(3)
      val journals = (1L to 5L).map(v => Seq.fill(200)(key(rnd) -> Some(Seq(v.toByte))))
      journals.zipWithIndex.foreach { case (records, i) => writeJournal(dir, i + 1L, records) }
      val changes = SortedChanges.squash(dir, Nil, 0, 5,
        () => fail("a run file was written for journals within the fan-in"), maxOpenSources = 6)
      assert(drain(changes) === TreeMap(journals.flatten: _*)(unsignedOrder).toSeq)
      assert(!local.exists())
    }
  }

  test("no journal (base = version), or only empty ones, gives no change") {
    withDirs("sorted-changes") { (dir, local) =>
      writeJournal(dir, 1, Seq(Seq[Byte](1) -> None))
      (2L to 3L).foreach(v => writeJournal(dir, v, Nil))
      assert(drain(SortedChanges.squash(dir, Nil, 1, 1, () => local)) === Nil)
      assert(drain(SortedChanges.squash(dir, Nil, 1, 3, () => local, 2)) === Nil)
      assert(drain(SortedChanges.squash(dir, Nil, 0, 3, () => local, 2)) === Seq(
        Seq[Byte](1) -> None))
    }
  }

  test("fewer than two open sources is refused") {
    withDirs("sorted-changes") { (dir, local) =>
      writeJournal(dir, 1, Seq(Seq[Byte](1) -> None))
      for (n <- Seq(1, 0, -1)) {
        val e = intercept[IllegalArgumentException](
          SortedChanges.squash(dir, Nil, 0, 1, () => local, maxOpenSources = n))
        assert(e.getMessage.contains(s"maxOpenSources must be at least 2, got $n"), e.getMessage)
      }
    }
  }

  /** Journals 1 to 4 of 20 keys each, merged with a fan-in of 3: a run is on disk. */
  private def withRunsThenJournal5(five: CheckpointDir => Unit)(
      check: (CheckpointDir, () => SortedChanges, File) => Unit): Unit =
    withDirs("sorted-changes") { (dir, local) =>
      val rnd = new Random(5)
      (1L to 4L).foreach(v => writeJournal(dir, v, Seq.fill(20)(key(rnd) -> Some(Seq(1)))))
      five(dir)
      check(dir, () => SortedChanges.squash(dir, Nil, 0, 5, () => local, 3), local)
    }

  test(
    "a missing journal fails the merge, naming the journal, and deletes the runs written before it") {
    withRunsThenJournal5(_ => ()) { (_, squash, local) =>
      val e = intercept[SortedChanges.UnreadableJournal](squash())
      assert(e.version == 5 && e.getCause.isInstanceOf[java.io.FileNotFoundException], e)
      assert(local.isDirectory, "the journals before the missing one were to be spilled")
      assert(leftUnder(local).isEmpty, s"left ${leftUnder(local)}")
    }
  }

  test("a truncated journal fails the merge, naming the journal, and the runs are deleted") {
    withRunsThenJournal5(dir => {
      val rnd = new Random(2)
      writeJournal(dir, 5, Seq.fill(3000)(Seq.fill(4)(rnd.nextInt().toByte) -> Some(Seq(2))))
      val f = new RandomAccessFile(new File(dir.file(StateFile.Journal, 5).toUri), "rw")
      try f.setLength(f.length - 20)
      finally f.close()
    }) { (_, squash, local) =>
      val e = intercept[SortedChanges.UnreadableJournal](drain(squash()))
      assert(e.version == 5 && e.getCause.isInstanceOf[StateFile.CorruptFileException], e)
      assert(local.isDirectory, "the journals before the damaged one were to be spilled")
      assert(leftUnder(local).isEmpty, s"left ${leftUnder(local)}")
    }
  }

  test("closing a merge before reading it to the end deletes its runs") {
    withRunsThenJournal5(dir => writeJournal(dir, 5, Seq(Seq[Byte](9) -> None))) {
      (_, squash, local) =>
        val changes = squash()
        assert(changes.head != null)
        changes.advance()
        changes.close()
        assert(local.isDirectory && leftUnder(local).isEmpty, s"left ${leftUnder(local)}")
    }
  }
}
