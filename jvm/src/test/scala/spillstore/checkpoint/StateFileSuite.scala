package spillstore.checkpoint

import java.io.{ByteArrayInputStream, ByteArrayOutputStream, DataOutputStream}
import java.lang.management.ManagementFactory

import org.scalatest.funsuite.AnyFunSuite

import org.apache.spark.sql.execution.streaming.state.SpillStoreSparkBridge

class StateFileSuite extends AnyFunSuite {
  private val codec = SpillStoreSparkBridge.compressionCodec("lz4")

  /** A journal of version 1 whose one record's value length says `valueLength`, followed by
   *  `valueBytes` bytes only. */
  private def withValueLength(valueLength: Int, valueBytes: Int): Array[Byte] = {
    val out = new ByteArrayOutputStream
    val header = new DataOutputStream(out)
    header.writeInt(StateFile.Magic)
    header.writeInt(StateFile.FormatVersion)
    header.writeByte(StateFile.Journal.id)
    header.writeLong(1L)
    header.writeUTF(codec.shortName)
    header.flush()
    val body = new DataOutputStream(codec.compress(out))
    body.writeInt(1)
    body.write(7)
    body.writeInt(valueLength)
    body.write(new Array[Byte](valueBytes))
    body.close()
    out.write(new Array[Byte](StateFile.FooterBytes))
    out.toByteArray
  }

  private def allocatedBytes(): Long = ManagementFactory.getThreadMXBean
    .asInstanceOf[com.sun.management.ThreadMXBean].getThreadAllocatedBytes(
      Thread.currentThread().getId)

  test("a damaged length field is found as a truncated file before its length is allocated") {
    val file = withValueLength(valueLength = 200 << 20, valueBytes = 1000)
    val reader = new StateFile.Reader(new ByteArrayInputStream(file), file.length, "1.journal",
      StateFile.Journal, 1L, SpillStoreSparkBridge.compressionCodec)
    val before = allocatedBytes()
    val e = intercept[StateFile.CorruptFileException](reader.next())
    val allocated = allocatedBytes() - before
    assert(e.getMessage.contains("1.journal") && e.getMessage.contains("truncated"), e.getMessage)
    assert(allocated < (16L << 20),
      s"$allocated bytes allocated for a 200 MB length in a " +
        s"${file.length}-byte file")
  }

  test("a record longer than a read chunk reads back whole") {
    val out = new ByteArrayOutputStream
    val w = new StateFile.Writer(out, StateFile.Journal, 1L, codec)
    val value = Array.tabulate[Byte](5 << 20)(i => (i * 31).toByte)
    w.put(Array[Byte](1), value)
    w.finish()
    val file = out.toByteArray
    val reader = new StateFile.Reader(new ByteArrayInputStream(file), file.length, "1.journal",
      StateFile.Journal, 1L, SpillStoreSparkBridge.compressionCodec)
    val (k, v) = reader.next()
    assert(k.toSeq === Seq[Byte](1) && java.util.Arrays.equals(v, value))
    assert(reader.next() === null)
  }
}
