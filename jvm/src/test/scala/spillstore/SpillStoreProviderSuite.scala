package spillstore

import java.nio.file.Files
import java.util.UUID

import org.apache.hadoop.conf.Configuration
import org.scalatest.funsuite.AnyFunSuite

import org.apache.spark.sql.catalyst.expressions.{GenericInternalRow, UnsafeProjection, UnsafeRow}
import org.apache.spark.sql.execution.streaming.state._
import org.apache.spark.sql.internal.SQLConf
import org.apache.spark.sql.types._

class SpillStoreProviderSuite extends AnyFunSuite {
  private val keySchema = StructType(Seq(StructField("k", LongType)))
  private val valueSchema = StructType(Seq(StructField("v", LongType)))
  private val keyProj = UnsafeProjection.create(keySchema)
  private val valueProj = UnsafeProjection.create(valueSchema)
  private def key(i: Long): UnsafeRow = keyProj(new GenericInternalRow(Array[Any](i)))
  private def value(i: Long): UnsafeRow = valueProj(new GenericInternalRow(Array[Any](i)))

  private def newProvider(dir: String = Files.createTempDirectory("spill").toString): SpillStoreProvider = {
    val p = new SpillStoreProvider
    val hadoopConf = new Configuration
    p.init(StateStoreId(dir, 0, 0), keySchema, valueSchema, NoPrefixKeyStateEncoderSpec(keySchema),
      useColumnFamilies = false, new StateStoreConf(new SQLConf), hadoopConf,
      useMultipleValuesPerKey = false, stateSchemaProvider = None)
    p
  }

  test("iterator sees puts") {
    val p = newProvider()
    val s = p.getStore(0)
    assert(s.iterator().isEmpty)
    s.put(key(1), value(1))
    assert(s.iterator().nonEmpty)
    assert(s.iterator().map(_.key.getLong(0)).toSeq === Seq(1L))
  }
}
