package spillstore.checkpoint

import org.apache.hadoop.conf.Configuration

/**
 * The Hadoop client conf spillstore writes its checkpoint files with: the user's, and on HDFS a
 * shorter first wait of a file's close.
 *
 * Closing an HDFS file asks the namenode to complete it, which it refuses until a datanode has
 * reported the last block; the client then sleeps, 400 ms at first, doubling. On a small file
 * the report usually comes a few milliseconds after the close asked, so most commits of a
 * journal waited 400 ms (measured on a MiniDFSCluster: median 410 ms a commit against 40 ms
 * with a 20 ms first wait). Here the first wait is 5 ms, and the retries are as many as keep
 * the longest total wait above Hadoop's default (5 ms doubling 12 times: 20.5 s, against
 * 400 ms doubling 5 times: 12.4 s), so a slow datanode fails a close no sooner than before. The
 * client is spillstore's own (Spark's file manager opens one per checkpoint dir), so other
 * writers of the job keep Hadoop's values. A user who sets either key keeps their values.
 */
object ClientConf {
  val CloseFirstWaitKey = "dfs.client.block.write.locateFollowingBlock.initial.delay.ms"
  val CloseRetriesKey = "dfs.client.block.write.locateFollowingBlock.retries"
  val CloseFirstWaitMs = 5
  val CloseRetries = 12

  def forCheckpoint(hadoopConf: Configuration): Configuration =
    if (userSet(hadoopConf, CloseFirstWaitKey) || userSet(hadoopConf, CloseRetriesKey)) hadoopConf
    else {
      val c = new Configuration(hadoopConf)
      c.setInt(CloseFirstWaitKey, CloseFirstWaitMs)
      c.setInt(CloseRetriesKey, CloseRetries)
      c
    }

  /** Set anywhere but in Hadoop's `*-default.xml` files. */
  private def userSet(conf: Configuration, key: String): Boolean =
    conf.get(key) != null &&
      Option(conf.getPropertySources(key)).forall(_.exists(s => !s.endsWith("-default.xml")))
}
