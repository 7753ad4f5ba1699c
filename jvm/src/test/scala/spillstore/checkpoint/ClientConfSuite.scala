package spillstore.checkpoint

import org.apache.hadoop.conf.Configuration
import org.apache.hadoop.hdfs.client.HdfsClientConfigKeys.BlockWrite
import org.scalatest.funsuite.AnyFunSuite

class ClientConfSuite extends AnyFunSuite {
  import ClientConf._

  /** The longest a close waits in all, doubling from `first` for `retries` waits. */
  private def patienceMs(first: Long, retries: Int): Long = (0 until retries).map(first << _).sum

  test("the keys are Hadoop's") {
    assert(CloseFirstWaitKey === BlockWrite.LOCATEFOLLOWINGBLOCK_INITIAL_DELAY_MS_KEY)
    assert(CloseRetriesKey === BlockWrite.LOCATEFOLLOWINGBLOCK_RETRIES_KEY)
  }

  test(
    "a shorter first wait, and a slow datanode fails a close no sooner than with Hadoop's defaults") {
    val user = new Configuration()
    user.set("fs.defaultFS", "hdfs://nn:8020")
    val before =
      user.get(CloseFirstWaitKey) // null, or hdfs-default.xml's once HDFS's classes loaded
    val c = forCheckpoint(user)
    assert(c.getInt(CloseFirstWaitKey, -1) === CloseFirstWaitMs)
    assert(c.getInt(CloseRetriesKey, -1) === CloseRetries)
    assert(CloseFirstWaitMs < BlockWrite.LOCATEFOLLOWINGBLOCK_INITIAL_DELAY_MS_DEFAULT)
    assert(patienceMs(CloseFirstWaitMs, CloseRetries) >= patienceMs(
      BlockWrite.LOCATEFOLLOWINGBLOCK_INITIAL_DELAY_MS_DEFAULT,
      BlockWrite.LOCATEFOLLOWINGBLOCK_RETRIES_DEFAULT))
    assert(c.get("fs.defaultFS") === "hdfs://nn:8020")
    assert(user.get(CloseFirstWaitKey) === before, "the user's conf is left as it was")
  }

  test(
    "Hadoop's defaults (hdfs-default.xml) are replaced; a value the user set, for either key, is kept") {
    val withDefaults = new Configuration()
    withDefaults.addResource("hdfs-default.xml")
    assert(withDefaults.get(CloseFirstWaitKey) != null)
    assert(forCheckpoint(withDefaults).getInt(CloseFirstWaitKey, -1) === CloseFirstWaitMs)
    for (key <- Seq(CloseFirstWaitKey, CloseRetriesKey)) {
      val user = new Configuration()
      user.set(key, "7")
      assert(forCheckpoint(user) eq user, key)
    }
  }
}
