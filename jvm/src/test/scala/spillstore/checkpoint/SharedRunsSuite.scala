package spillstore.checkpoint

import java.io.{File, IOException}
import java.nio.file.Files

import scala.collection.mutable
import scala.util.Random

import org.apache.hadoop.conf.Configuration
import org.apache.hadoop.fs.Path
import org.scalatest.Assertions._
import org.scalatest.funsuite.AnyFunSuite

import org.apache.spark.sql.execution.streaming.state.{SpillStoreSparkBridge, SpillStoreSparkShim}

import spillstore.TempDirs
import spillstore.metrics.ExecutorStats

/**
 * Snapshots that share runs, held to the rules Spark's RocksDB provider and Flink learnt from
 * bugs: a name never holds two contents (SPARK-43404), a manifest never lists what another
 * executor's cleanup deleted meanwhile, or is never relied on if it does (SPARK-55892), and an
 * attempt that fails deletes the runs it wrote (FLINK-30461). The store's files are written
 * through `faulty:` so that tests can fail or interleave listings and publishes.
 */
class SharedRunsSuite extends AnyFunSuite {
  import SharedRunsSuite._

  test("SPARK-43404: no name is published twice over a long run with failed and retried " +
    "snapshots and cleanups, every retained version loads exactly, and a retry writes runs of " +
    "its own") {
    withStore { store =>
      import store._
      val published = mutable.ArrayBuffer.empty[String]
      var manifests = 0
      var failed = 0
      FaultyFileSystem.hooking(FaultyFileSystem.Publish) { target =>
        published += target.getName
        // Every third manifest fails as it is published, after its run was.
        if (target.getName.endsWith(".snapshot")) manifests += 1
        if (target.getName.endsWith(".snapshot") && manifests % 3 == 0) {
          failed += 1
          throw new IOException(s"injected failure publishing $target")
        }
      } {
        for (v <- 1L to 60L) {
          commit(v)
          if (v % 3 == 0) {
            val attempt =
              try snapshotter.snapshot(v, dir.list())
              catch { case _: IOException => snapshotter.snapshot(v, dir.list()) }
            assert(attempt === Some(v), s"version $v")
          }
          if (v % 7 == 0) new Cleaner(dir).cleanup(10)
        }
      }
      assert(failed > 5)
      val runs = published.filter(_.endsWith(".run"))
      assert(runs.distinct.size === runs.size, "a run name was published twice")
      assertRunsListed()
      val latest = dir.list().latestVersion
      for (v <- latest - 10 to latest) assert(load(v) === model(v), s"version $v")
    }
  }

  test("SPARK-43404: a run replaced by another file of the same name and length is damage: the " +
    "version is rebuilt from an older snapshot and journals, and the file set aside") {
    withStore { store =>
      import store._
      (1L to 8L).foreach { v =>
        commit(v)
        if (v % 4 == 0) assert(snapshotter.snapshot(v, dir.list()) === Some(v))
      }
      val newest = dir.readManifest(8).parts.last
      assert(newest.source.isInstanceOf[Manifest.RunFile], newest)
      val file = new File(storeDir, newest.source.name)
      // The same keys, a bit of each value's last byte flipped: a valid run of the same
      // version and count, and of the same length once a flip leaves lz4's matches as they were.
      val records = mutable.ArrayBuffer.empty[(Array[Byte], Array[Byte])]
      dir.read(newest)((k, x) => records += k -> x)
      val replacement = Iterator.range(0, 8).map { bit =>
        val (name, _) = dir.writeRun(8) { w =>
          records.foreach { case (k, x) =>
            w.record(k,
              Option(x).map { b =>
                val c = b.clone(); c(c.length - 1) = (c(c.length - 1) ^ (1 << bit)).toByte; c
              }.orNull)
          }
        }
        new File(storeDir, name)
      }.find(f => f.length == file.length || { f.delete(); false })
        .getOrElse(fail("no replacement of the same length"))
      Files.move(replacement.toPath, file.toPath, java.nio.file.StandardCopyOption.REPLACE_EXISTING)
      assert(load(8) === model(8))
      assert(!file.exists() && storeDir.list().exists(_.startsWith(s"${file.getName}.corrupt-")))
      assert(dir.takeRepairedSnapshots() === 1)
    }
  }

  /** Journals 1..8, snapshot 4 (one run), and a snapshot of 8 over it that another executor's
   *  maintenance interleaves with through `hook`. */
  private def lateManifest(op: FaultyFileSystem.Op)(other: Store => Unit)(check: Store => Unit)
      : Unit = withStore { store =>
    import store._
    (1L to 8L).foreach(v => commit(v))
    assert(snapshotter.snapshot(4, dir.list()) === Some(4))
    val listing = dir.list()
    var done = false
    val result = FaultyFileSystem.hooking(op) { path =>
      if (!done && (op == FaultyFileSystem.Listing || path.getName == "8.snapshot")) {
        done = true
        other(store)
      }
    }(snapshotter.snapshot(8, listing))
    assert(done)
    store.result = result
    check(store)
  }

  test("SPARK-55892: a snapshot whose base another executor's maintenance deleted while it was " +
    "written is not published, and leaves no run") {
    lateManifest(FaultyFileSystem.Listing) { store =>
      import store._
      // Another executor commits on, snapshots with a full merge, and cleans up: snapshot 4
      // and its run go, while the first writer is about to publish a manifest listing them.
      (9L to 30L).foreach(v => commit(v))
      val otherSnapshotter = new Snapshotter(dir, () => local, new ExecutorStats)
      assert(otherSnapshotter.snapshot(30, dir.list()) === Some(30))
      assert(dir.readManifest(30).parts.size === 1, "a full merge")
      new Cleaner(dir).cleanup(0)
      assert(!new File(storeDir, "4.snapshot").exists())
    } { store =>
      import store._
      assert(result === None)
      assert(!new File(storeDir, "8.snapshot").exists())
      assertRunsListed()
      assert(load(30) === model(30))
    }
  }

  test("SPARK-55892: a manifest published after a part it lists was deleted is never a base or " +
    "kept from: loads rebuild around it and cleanup deletes nothing it would need") {
    lateManifest(FaultyFileSystem.Publish) { store =>
      // Past the writer's check, just before its publish: as a cleanup that listed earlier.
      val shared = store.dir.readManifest(4).parts.head.source.name
      assert(new File(store.storeDir, shared).delete())
    } { store =>
      import store._
      assert(result === Some(8), "published: the window cannot be closed without a lock")
      (9L to 12L).foreach(v => commit(v))
      val before = storeDir.list().toSet
      assert(new Cleaner(dir).cleanup(4) === 0, "kept from 8, which misses a part")
      assert(storeDir.list().toSet === before)
      for (v <- 1L to 12L) assert(load(v) === model(v), s"version $v")
    }
  }

  for ((what, failing) <- Seq("manifest" -> ".snapshot", "run" -> ".run")) {
    test(s"FLINK-30461: a snapshot whose $what fails to publish leaves the directory as it was") {
      withStore { store =>
        import store._
        (1L to 8L).foreach { v =>
          commit(v)
          if (v == 4) assert(snapshotter.snapshot(v, dir.list()) === Some(v))
        }
        val before = storeDir.list().toSet
        val e = intercept[IOException] {
          FaultyFileSystem.hooking(FaultyFileSystem.Publish) { target =>
            if (target.getName.endsWith(failing)) throw new IOException(s"injected: $target")
          }(snapshotter.snapshot(8, dir.list()))
        }
        assert(e.getMessage.contains("injected"))
        assert(storeDir.list().toSet === before)
        assert(snapshotter.snapshot(8, dir.list()) === Some(8), "the retry")
        assert(load(8) === model(8))
      }
    }
  }

  test("cleanup deletes a run no retained manifest lists only below the snapshot kept from, " +
    "and keeps the journals a retained manifest adopted") {
    withStore { store =>
      import store._
      // The batch that loads the state: kept as a part, never copied.
      commit(1, keys = 20000, space = 100000)
      (2L to 20L).foreach { v =>
        commit(v)
        if (v % 5 == 0) assert(snapshotter.snapshot(v, dir.list()) === Some(v))
      }
      assert(dir.readManifest(20).parts.map(_.source.name).head === "1.journal")
      // A killed writer's run below where cleanup keeps from, and an in-flight one above.
      val (dead, _) = dir.writeRun(12)(_.put(Array[Byte](1), Array[Byte](1)))
      val (inFlight, _) = dir.writeRun(21)(_.put(Array[Byte](1), Array[Byte](1)))
      commit(21)
      val listedBefore = (5L to 20L by 5).flatMap(v => dir.readManifest(v).names).toSet
      assert(new Cleaner(dir).cleanup(1) > 0) // kept from 20
      val left = storeDir.list().toSet
      assert(!left(dead) && left(inFlight))
      assert(left("1.journal") && !left("2.journal") && !left("15.snapshot"))
      val listedAfter = dir.readManifest(20).names
      assert(listedAfter.subsetOf(left))
      assert((listedBefore -- listedAfter).nonEmpty)
      assert((listedBefore -- listedAfter).forall(n => !left(n)), "runs only old manifests list")
      for (v <- 20L to 21L) assert(load(v) === model(v), s"version $v")
    }
  }
}

object SharedRunsSuite {
  type Model = Map[Seq[Byte], Seq[Byte]]

  /** A store's checkpoint dir seen through `faulty:`, with the model of every version. */
  final class Store(val storeDir: File, val local: File) {
    val dir = new CheckpointDir(new Path(FaultyFileSystem.uriOf(storeDir.getPath)), hadoopConf,
      SpillStoreSparkBridge.compressionCodec("lz4"))
    val snapshotter = new Snapshotter(dir, () => local, new ExecutorStats)
    private val models = mutable.ArrayBuffer[Model](Map.empty)

    /** The state of version `v`, as committed. */
    def model(v: Long): Model = models(v.toInt)
    private val rnd = new Random(44)
    var result: Option[Long] = None

    /** Writes journal `v`: `keys` random puts and removes of keys in [0, `space`). */
    def commit(v: Long, keys: Int = 60, space: Int = 4000): Unit = {
      assert(v == models.size, s"versions are committed in order, not $v")
      val batch = mutable.Map.empty[Seq[Byte], Array[Byte]]
      (0 until keys).foreach { _ =>
        val k = java.nio.ByteBuffer.allocate(4).putInt(rnd.nextInt(space)).array().toSeq
        batch(k) = if (rnd.nextInt(5) == 0) null else Array.fill(8)(rnd.nextInt(256).toByte)
      }
      val sorted = batch.toSeq.sortBy(_._1)(CheckpointDirs.unsignedOrder)
      dir.write(StateFile.Journal, v)(w => sorted.foreach { case (k, x) => w.record(k.toArray, x) })
      models += sorted.foldLeft(models.last) { case (m, (k, x)) =>
        if (x == null) m - k else m + (k -> x.toSeq)
      }
    }

    /** Version `v` as a load reads it: the newest good base and the journals after it. */
    def load(v: Long): Model = dir.withNewestGoodBase(dir.list(), v) { base =>
      val out = Map.newBuilder[Seq[Byte], Seq[Byte]]
      MergedVersion.foreach(dir, base, v, () => local)((k, x) => out += k.toSeq -> x.toSeq)
      out.result()
    }

    /** Every run in the directory is listed by a manifest there. */
    def assertRunsListed(): Unit = {
      val listing = dir.list()
      val listed = listing.snapshots.flatMap(v => dir.readManifest(v).names)
      assert(listing.runs.keySet.subsetOf(listed),
        s"unlisted runs: ${listing.runs.keySet -- listed}")
      assert(listing.temps.isEmpty, listing.temps)
    }
  }

  /**
   * Files written through Spark's file system checkpoint manager (a temp file renamed with the
   * file system's rename, which `faulty:` hooks), not java.nio as on other local file systems.
   */
  private def hadoopConf: Configuration = {
    val conf = new Configuration
    conf.set("spark.sql.streaming.checkpointFileManagerClass",
      classOf[SpillStoreSparkShim.CheckpointFileManager].getPackage.getName +
        ".FileSystemBasedCheckpointFileManager")
    conf
  }

  def withStore[T](body: Store => T): T = TempDirs.withTempDir("shared-runs") { root =>
    body(new Store(new File(root, "ckpt"), new File(root, "local")))
  }
}
