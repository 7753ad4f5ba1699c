/** A Spark line spillstore is built for: its Maven version (None: the pyspark wheel's jars),
 *  its Scala version, the Hadoop version its Spark ships (hadoop-client-api: the tests' HDFS
 *  mini cluster is taken at that version), the adapter source dirs (under jvm/src/main) it
 *  compiles with the core and its test dirs (under jvm/src/test: the conformance suite and its
 *  exclusions). */
final case class SparkLine(line: String, spark: Option[String], scala: String, hadoop: String,
    dirs: Seq[String], testDirs: Seq[String] = Nil) {
  def scalaBinary: String = scala.split('.').take(2).mkString(".")
  def jarName: String = s"spillstore-spark${line}_$scalaBinary.jar"
}
