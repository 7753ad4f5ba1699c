package spillstore.checkpoint

import java.io.File
import java.util.{Arrays => JArrays}

import org.apache.hadoop.conf.Configuration
import org.apache.hadoop.fs.Path

import org.apache.spark.sql.execution.streaming.state.SpillStoreSparkBridge

import spillstore.TempDirs

/** Checkpoint directories for the suites of the checkpoint classes. */
object CheckpointDirs {
  /**
   * Runs `body` on a store's checkpoint directory (lz4, `<root>/ckpt`, created by its first
   * write) and a local dir for merge runs (`<root>/local`, not created), under a temp `<root>`
   * deleted afterwards, also when `body` fails.
   */
  def withDirs[T](prefix: String)(body: (CheckpointDir, File) => T): T =
    TempDirs.withTempDir(prefix) { root =>
      body(new CheckpointDir(new Path(new File(root, "ckpt").toURI), new Configuration,
          SpillStoreSparkBridge.compressionCodec("lz4")), new File(root, "local"))
    }

  /** Unsigned byte order: the order of keys in checkpoint files. */
  val unsignedOrder: Ordering[Seq[Byte]] =
    (a: Seq[Byte], b: Seq[Byte]) => JArrays.compareUnsigned(a.toArray, b.toArray)
}
