package spillstore.migrate

import java.nio.charset.StandardCharsets
import java.text.SimpleDateFormat
import java.util.{Date, TimeZone}

import com.fasterxml.jackson.databind.JsonNode
import org.apache.hadoop.conf.Configuration
import org.apache.hadoop.fs.{FileUtil, Path}

import org.apache.spark.internal.Logging
import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.execution.streaming.state.{StateStoreConf, StateStoreId}
import org.apache.spark.sql.execution.streaming.state.SpillStoreSparkShim.CheckpointFileManager

import spillstore.checkpoint.QueryCheckpoint
import spillstore.conf.SparkConfs

/**
 * Moves a stopped query's state to another provider: `python -m spillstore migrate`.
 *
 * Everything happens in the workspace `<checkpoint>/_spillstore_migration`, so the original
 * files stay untouched until the new ones are complete and verified:
 *
 *   1. plan     `plan.json`: source and target provider and checkpoint format, the batch, the
 *               newest offset and commit.
 *   2. stage    each store's last committed version is copied into `staged-state/` by the
 *               providers' own code and read back (rows + checksum), then marked in `done/`
 *               (with format v2, with the checkpoint id its commit got).
 *   3. swap     (`swap` written first) `state/` moves to `original-state/`, `staged-state/` to
 *               `state/` (each move marked done in the workspace), the offset-log entries from
 *               the batch on are rewritten to record the target provider (and the format), and
 *               the commit log to record the format and, with v2, the new stores' checkpoint
 *               ids (the originals kept in `original-offsets/` and `original-commits/`).
 *   4. finish   (`finish` written first, naming the place) the workspace moves to
 *               `_spillstore_migrations/<time>-<from>-to-<to>`, which keeps the originals for the
 *               user to delete.
 *
 * Checkpoint format v2 (Spark 4.0+): the source is read by the checkpoint ids the commit log
 * records. The target format is the source's, but `hdfs` (Spark's HDFS-backed provider refuses
 * v2), or the one asked for: a migration may change the format alone (spillstore to spillstore).
 *
 * Every step can be interrupted (kill -9) and the same command re-run: staging resumes from the
 * stores not marked done, and each swap step is done only if its marker is not there. Moves
 * are resumable on object stores too, where a directory rename is a copy per object
 * ([[DirectoryMove]]). A query that ran meanwhile (new offset or commit) voids the staging
 * before anything moves.
 *
 * Spark keeps no lock on a checkpoint, so "the query is stopped" is checked as: no offset or
 * commit written for `idleMs`, at the start and again just before the swap.
 *
 * Single-threaded: one `Migration` per checkpoint at a time (the workspace's plan names it).
 *
 * Tests stop the JVM dead (`Runtime.halt`, as kill -9) at a named step with the system
 * property `spillstore.migrate.haltAt`: `store-<n>` (n stores staged), `state-moved`,
 * `staged-moved`, `offsets-rewritten`; and, where directories move file by file, after n files
 * of a move: `state-moved-<n>`, `staged-moved-<n>`, `finishing-<n>`.
 */
final class Migration(spark: SparkSession, checkpoint: String, target: ProviderKind,
    expectedBatch: Option[Long], idleMs: Long, progress: String => Unit,
    requestedFormat: Option[Int] = None)
    extends Logging {
  import Migration._

  private val hadoopConf: Configuration = {
    val c = spark.sessionState.newHadoopConf()
    // Spark's providers take a run id from here (a running query's); this is a run of its own.
    c.set(RunIdKey, java.util.UUID.randomUUID().toString)
    c
  }
  private val root = {
    val p = new Path(checkpoint)
    p.getFileSystem(hadoopConf).makeQualified(p)
  }
  private val fs = root.getFileSystem(hadoopConf)
  private val workspace = new Path(root, WorkspaceName)
  private val planFile = new Path(workspace, "plan.json")
  private val swapMarker = new Path(workspace, "swap")
  private val stagedState = new Path(workspace, "staged-state")
  private val originalState = new Path(workspace, "original-state")
  private val originalOffsets = new Path(workspace, "original-offsets")
  private val originalCommits = new Path(workspace, "original-commits")
  private val doneDir = new Path(workspace, "done")
  private val finishMarker = new Path(workspace, "finish")
  private val move = new DirectoryMove(fs, DirectoryMove.byFile(fs))
  private val fm = CheckpointFileManager.create(root, hadoopConf)

  def run(): String = {
    val started = System.nanoTime()
    if (fs.exists(finishMarker)) { // switched; killed while the workspace moved file by file
      progress(s"Resuming the end of the switch of $root to ${target.name}")
      val kept = finish()
      val plan = Plan.read(fs, new Path(kept, planFile.getName))
      return summary(plan, storesIn(new Path(kept, doneDir.getName)), Some(kept), started)
    }
    val layout = new CheckpointLayout(root, hadoopConf)
    val plan = existingPlan(layout).getOrElse(newPlan(layout))
    if (!plan.changes) {
      progress(s"$root already records the ${target.name} provider with checkpoint format " +
        s"${plan.targetFormat}: nothing to migrate")
      return summary(plan, Seq.empty, None, started)
    }
    val stores = if (fs.exists(swapMarker)) storesIn(doneDir) else stage(layout, plan)
    val backup = swap(plan)
    summary(plan, stores, Some(backup), started)
  }

  // ---- 1. plan --------------------------------------------------------------------------

  private def existingPlan(layout: CheckpointLayout): Option[Plan] = {
    if (!fs.exists(planFile)) {
      if (fs.exists(workspace)) fs.delete(workspace, true) // crashed before its plan existed
      return None
    }
    val plan = Plan.read(fs, planFile)
    if (plan.target != target || requestedFormat.exists(_ != plan.targetFormat)) {
      refuse(s"$workspace holds an unfinished migration of batch ${plan.batch} to " +
        s"${plan.target.name} with checkpoint format ${plan.targetFormat}: run migrate with " +
        s"--to ${plan.target.name} --checkpoint-format ${plan.targetFormat} to finish it" +
        (if (fs.exists(swapMarker)) "" else s", or delete $workspace (nothing was changed yet)"))
    }
    if (fs.exists(swapMarker)) {
      progress(s"Resuming the switch of $root to ${target.name} (batch ${plan.batch})")
      Some(plan)
    } else if (plan.lastOffset != layout.offsets.lastOption ||
      plan.lastCommit != layout.commits.lastOption) {
      progress(s"The query ran since the unfinished migration in $workspace was planned: " +
        "starting over")
      fs.delete(workspace, true)
      None
    } else {
      progress(s"Resuming the migration of $root to ${target.name} (batch ${plan.batch})")
      Some(plan)
    }
  }

  private def newPlan(layout: CheckpointLayout): Plan = {
    target.targetRefusal.foreach(refuse)
    val lastCommit = layout.commits.lastOption.getOrElse(refuse(
        s"$root has no committed batch: there is no state to migrate (start the query with " +
          "the provider you want instead)"))
    val sourceClass = layout.recordedProvider.getOrElse(refuse(
        s"${layout.offsetFile(layout.offsets.last)} records no state store provider"))
    val source = ProviderKind.byClass(sourceClass).getOrElse(refuse(
        s"${layout.offsetFile(layout.offsets.last)} records the provider $sourceClass, which " +
          s"migrate cannot read: it reads ${ProviderKind.all.map(_.className).mkString(", ")}"))
    expectedBatch.filter(_ != lastCommit).foreach { b =>
      refuse(s"--batch $b: the last committed batch of $root is $lastCommit, and a restarted " +
        s"query continues from it, so only its state can be migrated")
    }
    val sourceFormat = CommitLogEntry.read(fs, commitFile(lastCommit)).checkpointFormat
    val targetFormat =
      requestedFormat.getOrElse(if (target == ProviderKind.Hdfs) 1 else sourceFormat)
    checkFormat(targetFormat)
    checkIdle(layout)
    spark.streams.active.find(q => new Path(QueryCheckpoint.checkpointRoot(q)) == root).foreach {
      q =>
        refuse(s"query '${Option(q.name).getOrElse(q.id)}' is running on $root in this session: " +
          "stop it first")
    }
    val plan = Plan(source, target, lastCommit, layout.offsets.lastOption, Some(lastCommit),
      sourceFormat, targetFormat)
    if (plan.changes) {
      // Reads every operator's metadata and the ids to copy: refusals come before any write.
      layout.operators.foreach { op =>
        sourceIds(plan, op)
        if (targetFormat == 2 && op.partitions != op.partitions.indices) {
          refuse(s"${new Path(root, s"state/${op.id}")} has the partitions " +
            s"${op.partitions.mkString(", ")}: checkpoint format 2 records an id for each " +
            "partition from 0 on")
        }
      }
      fs.mkdirs(workspace)
      writeAtomically(planFile, plan.json)
    }
    plan
  }

  private def commitFile(batch: Long): Path = new Path(root, s"commits/$batch")

  private def checkFormat(format: Int): Unit = {
    val key = s"--checkpoint-format $format"
    if (format != 1 && format != 2) refuse(s"$key: checkpoint formats are 1 and 2")
    if (format == 2 && org.apache.spark.SPARK_VERSION.startsWith("3.")) {
      refuse(s"$key: checkpoint format 2 needs Spark 4.0 or later; this is Spark " +
        s"${org.apache.spark.SPARK_VERSION}")
    }
    if (format == 2 && target == ProviderKind.Hdfs) {
      refuse(s"$key: Spark's HDFS-backed provider does not support checkpoint format 2 (Spark " +
        "refuses it with STATE_STORE_CHECKPOINT_IDS_NOT_SUPPORTED): migrate to hdfs with " +
        "--checkpoint-format 1, its default")
    }
  }

  /**
   * Each partition's checkpoint id of each store of `op` at the batch (format v2), as the
   * batch's commit-log entry records them; refused if any is missing.
   */
  private def sourceIds(plan: Plan, op: CheckpointLayout.Operator): Map[(Int, String), String] =
    if (plan.sourceFormat == 1) Map.empty
    else {
      val entry = CommitLogEntry.read(fs, commitFile(plan.batch))
      entry.storeIds(op.id, op.partitions, op.stores.map(_.name)).getOrElse(
        refuse(s"${entry.file} records no checkpoint ids of operator ${op.id}, whose state is " +
          s"in ${new Path(root, s"state/${op.id}")}"))
    }

  private def checkIdle(layout: CheckpointLayout): Unit = {
    val logs = Seq("offsets", "commits").map(new Path(root, _)).filter(fs.exists)
    val newest = logs.flatMap(d => fs.listStatus(d)).filter(!_.getPath.getName.startsWith("."))
      .maxBy(_.getModificationTime)
    val age = System.currentTimeMillis() - newest.getModificationTime
    if (age < idleMs) {
      refuse(s"$root looks in use: ${newest.getPath} was written ${age / 1000} s ago. Stop " +
        s"the query first (migrate waits for ${idleMs / 1000} s without a new offset or " +
        "commit; --idle-seconds changes that)")
    }
  }

  // ---- 2. stage -------------------------------------------------------------------------

  private def stage(layout: CheckpointLayout, plan: Plan): Seq[StoreResult] = {
    // The confs the query recorded (codec, format versions) apply, as when Spark restarts it.
    val sqlConf = spark.sessionState.conf.clone()
    layout.recordedConf.foreach { case (k, v) =>
      if (k != SparkConfs.ProviderClass) sqlConf.setConfString(k, v)
    }
    // Reads a RocksDB checkpoint whether or not it was written with changelog checkpointing.
    if (plan.source == ProviderKind.RocksDb)
      sqlConf.setConfString(SparkConfs.RocksDbChangelogCheckpointing, "true")
    def storeConf(format: Int) = {
      val c = sqlConf.clone()
      c.setConfString(SparkConfs.CheckpointFormatVersion, format.toString)
      new StateStoreConf(c)
    }
    val copier = new StoreCopy(plan.source, target, storeConf(plan.sourceFormat),
      storeConf(plan.targetFormat), hadoopConf)
    // Spark 4.1+'s providers report loads to the state store coordinator, which a session
    // creates (on every line, through this accessor) only for its first streaming query.
    spark.streams.getClass.getMethod("stateStoreCoordinator").invoke(spark.streams)
    val version = plan.batch + 1
    val total = layout.operators.map(o => o.partitions.size * o.stores.size).sum
    var rows = 0L
    var n = 0
    progress(s"Migrating $root from ${plan.source.name} to ${target.name}" +
      (if (plan.sourceFormat == plan.targetFormat) ""
       else s", checkpoint format ${plan.sourceFormat} to ${plan.targetFormat}") +
      s": state of batch ${plan.batch}, ${layout.operators.size} operators, $total stores")
    val results = for {
      op <- layout.operators
      ids = sourceIds(plan, op)
      store <- op.stores
      part <- op.partitions
    } yield {
      n += 1
      val marker = new Path(doneDir, s"${op.id}-$part-${store.name}")
      val result = if (fs.exists(marker)) StoreResult.read(fs, marker)
      else {
        val from = StateStoreId(layout.stateRoot.toString, op.id, part, store.name)
        val to = StateStoreId(stagedState.toString, op.id, part, store.name)
        clearFiles(to.storeCheckpointLocation()) // what a killed earlier run left
        val copied = copier.copy(from, to, store, version, ids.get((part, store.name)),
          { r =>
            if ((rows + r) / RowsPerProgressLine > rows / RowsPerProgressLine) {
              progress(f"  ... ${rows + r}%,d rows copied")
            }
            rows += r
          })
        val r = StoreResult(op.id, op.name.getOrElse(""), part, store.name, copied.digest,
          copied.checkpointId)
        writeAtomically(marker, r.json)
        haltPoint(s"store-$n")
        r
      }
      progress(f"  [$n/$total] operator ${op.id} ${op.name.getOrElse("")} store ${store.name} " +
        f"partition $part: ${result.digest.rows}%,d rows, verified")
      result
    }
    copyMetadata(layout.stateRoot, stagedState)
    checkIdle(layout)
    val now = new CheckpointLayout(root, hadoopConf)
    if (now.offsets.lastOption != plan.lastOffset || now.commits.lastOption != plan.lastCommit) {
      fs.delete(workspace, true)
      refuse(s"$root changed while migrating (a query ran: offsets ${now.offsets.lastOption
          .getOrElse("-")}, commits ${now.commits.lastOption.getOrElse("-")}); nothing was " +
        "changed. Stop the query and run migrate again")
    }
    results
  }

  private def storesIn(dir: Path): Seq[StoreResult] =
    if (!fs.exists(dir)) Seq.empty
    else fs.listStatus(dir).toSeq.map(s => StoreResult.read(fs, s.getPath))

  /** Spark's provider-independent files (schemas, operator metadata): every `_metadata` dir. */
  private def copyMetadata(from: Path, to: Path): Unit = if (fs.exists(from)) {
    fs.listStatus(from).filter(_.isDirectory).foreach { d =>
      val name = d.getPath.getName
      if (name == "_metadata") {
        FileUtil.copy(fs, d.getPath, fs, new Path(to, name), false, true, hadoopConf)
      } else if (!name.startsWith(".") && name != "SSTs") {
        copyMetadata(d.getPath, new Path(to, name))
      }
    }
  }

  private def clearFiles(dir: Path): Unit =
    if (fs.exists(dir))
      fs.listStatus(dir).filter(_.isFile).foreach(f => fs.delete(f.getPath, false))

  // ---- 3. swap and 4. finish ------------------------------------------------------------

  private def swap(plan: Plan): Path = {
    if (!fs.exists(swapMarker)) {
      fs.mkdirs(originalOffsets)
      writeAtomically(swapMarker, "swapping\n")
    }
    val entries = plan.lastOffset.toSeq.flatMap(last => plan.batch to last)
    // A changed format: every entry (Spark 4.0 and 4.1 read an entry of the other format as an
    // error); format v2 kept: the batch's, whose ids change.
    val commits = new CheckpointLayout(root, hadoopConf).commits.filter(b =>
      plan.sourceFormat != plan.targetFormat || (plan.targetFormat == 2 && b == plan.batch))
    def backUp(dir: String, backups: Path, batches: Seq[Long]): Unit = batches.foreach { b =>
      val backup = new Path(backups, b.toString)
      if (!fs.exists(backup)) {
        FileUtil.copy(fs, new Path(root, s"$dir/$b"), fs, backup, false, true, hadoopConf)
      }
    }
    backUp("offsets", originalOffsets, entries)
    backUp("commits", originalCommits, commits)
    val state = new Path(root, "state")
    // Each move is marked done before the next starts: `state/` is the source of the first and
    // the destination of the second, so only the marker tells which one a re-run resumes.
    moveOnce(state, originalState, "state-moved")
    moveOnce(stagedState, state, "staged-moved")
    entries.foreach { b =>
      val entry = CheckpointLayout.readEntry(fs, new Path(originalOffsets, b.toString))
      val format: Map[String, String] =
        if (plan.sourceFormat == plan.targetFormat &&
          !entry.conf.contains(SparkConfs.CheckpointFormatVersion)) Map.empty
        else Map(SparkConfs.CheckpointFormatVersion -> plan.targetFormat.toString)
      writeAtomically(new Path(root, s"offsets/$b"),
        entry.withConf(format + (SparkConfs.ProviderClass -> target.className)))
    }
    haltPoint("offsets-rewritten")
    val ids =
      if (plan.targetFormat == 2) {
        CommitLogEntry.layout(storesIn(doneDir).map(s =>
            (s.operator, s.partition, s.store) -> s.checkpointId.getOrElse(
              throw new IllegalStateException(s"Migration: $s has no checkpoint id"))).toMap)
      } else Map.empty[Long, IndexedSeq[IndexedSeq[String]]]
    commits.foreach { b =>
      val entry = CommitLogEntry.read(fs, new Path(originalCommits, b.toString))
      writeAtomically(commitFile(b),
        entry.rewritten(plan.targetFormat, if (b == plan.batch) ids else Map.empty))
    }
    val recorded = new CheckpointLayout(root, hadoopConf).recordedProvider
    if (!recorded.contains(target.className)) {
      throw new IllegalStateException(s"Migration: the offset log of $root records $recorded " +
        s"after the switch, expected ${target.className}")
    }
    val stamp = new SimpleDateFormat("yyyyMMdd-HHmmss")
    stamp.setTimeZone(TimeZone.getTimeZone("UTC"))
    val format = if (plan.sourceFormat == plan.targetFormat) "" else s"-v${plan.targetFormat}"
    val kept = new Path(root,
      s"$KeptName/${stamp.format(new Date)}-${plan.source.name}-to-${target.name}$format")
    writeAtomically(finishMarker, kept.toString)
    finish()
  }

  /** Moves `from` to `to` unless the workspace's `marker` says it was; then marks it. */
  private def moveOnce(from: Path, to: Path, marker: String): Unit = {
    val done = new Path(workspace, marker)
    if (!fs.exists(done)) {
      move(from, to, n => haltPoint(s"$marker-$n"))
      writeAtomically(done, "")
      haltPoint(marker)
    }
  }

  /**
   * 4. finish: moves the workspace to the place `finish` names, that file last (where a
   * directory moves file by file, a re-run that finds it finishes the move). Returns the place.
   */
  private def finish(): Path = {
    val kept = new Path(readText(finishMarker))
    fs.mkdirs(kept.getParent)
    if (move.byFile) {
      val rest = fs.listStatus(workspace).map(_.getPath).filter(_ != finishMarker)
      rest.foreach(p => move(p, new Path(kept, p.getName), n => haltPoint(s"finishing-$n")))
      fs.delete(workspace, true)
    } else {
      move(workspace, kept)
    }
    progress(s"Done: $root now records ${target.className}; the original files are in $kept " +
      "(delete it once the query runs well)")
    kept
  }

  private def readText(file: Path): String = {
    val in = fs.open(file)
    try new String(in.readAllBytes(), StandardCharsets.UTF_8)
    finally in.close()
  }

  private def writeAtomically(file: Path, text: String): Unit = {
    fm.mkdirs(file.getParent)
    val out = fm.createAtomic(file, overwriteIfPossible = true)
    try {
      out.write(text.getBytes(StandardCharsets.UTF_8))
      out.close()
    } catch {
      case e: Throwable => out.cancel(); throw e
    }
  }

  private def summary(plan: Plan, stores: Seq[StoreResult], kept: Option[Path],
      started: Long): String = {
    val json = Json.createObjectNode()
    json.put("checkpoint", root.toString)
    json.put("source", plan.source.name)
    json.put("target", target.name)
    json.put("batch", plan.batch)
    json.put("sourceCheckpointFormat", plan.sourceFormat)
    json.put("checkpointFormat", plan.targetFormat)
    json.put("migrated", kept.isDefined)
    kept.foreach(k => json.put("originals", k.toString))
    json.put("rows", stores.map(_.digest.rows).sum)
    json.put("seconds", (System.nanoTime() - started) / 1e9)
    val ops = json.putArray("operators")
    stores.groupBy(_.operator).toSeq.sortBy(_._1).foreach { case (id, s) =>
      val o = ops.addObject()
      o.put("id", id)
      o.put("name", s.head.operatorName)
      o.put("stores", s.map(_.store).distinct.sorted.mkString(","))
      o.put("partitions", s.map(_.partition).distinct.size)
      o.put("rows", s.map(_.digest.rows).sum)
    }
    Json.writeValueAsString(json)
  }
}

object Migration {
  val WorkspaceName = "_spillstore_migration"
  val KeptName = "_spillstore_migrations"
  private val RowsPerProgressLine = 1000000L
  private val RunIdKey = "sql.streaming.runId" // StreamExecution.RUN_ID_KEY, every Spark line
  private val Json = CheckpointLayout.Json

  /**
   * Entry point of `spillstore.migrate` (Python, through py4j): migrates and returns a JSON
   * summary; a refusal is a [[MigrationRefusedException]]. `batch` < 0: the last committed;
   * `checkpointFormat` 0: the source's (1 for hdfs).
   */
  def migrate(spark: SparkSession, checkpoint: String, target: String, batch: Long,
      idleSeconds: Long, printProgress: Boolean, checkpointFormat: Int): String = {
    val out = (line: String) => if (printProgress) { System.out.println(line); System.out.flush() }
    new Migration(spark, checkpoint, ProviderKind.byName(target),
      if (batch < 0) None else Some(batch), idleSeconds * 1000, out,
      if (checkpointFormat <= 0) None else Some(checkpointFormat)).run()
  }

  private def refuse(message: String): Nothing = CheckpointLayout.refuse(message)

  private def haltPoint(step: String): Unit =
    if (sys.props.get("spillstore.migrate.haltAt").contains(step)) Runtime.getRuntime.halt(137)

  private def readJson(fs: org.apache.hadoop.fs.FileSystem, file: Path): JsonNode = {
    val in = fs.open(file)
    try Json.readTree(in)
    finally in.close()
  }

  private final case class Plan(source: ProviderKind, target: ProviderKind, batch: Long,
      lastOffset: Option[Long], lastCommit: Option[Long], sourceFormat: Int, targetFormat: Int) {
    /** Whether the migration changes anything: the provider, or the checkpoint format. */
    def changes: Boolean = source != target || sourceFormat != targetFormat

    def json: String = {
      val o = Json.createObjectNode()
      o.put("source", source.name)
      o.put("target", target.name)
      o.put("batch", batch)
      o.put("sourceFormat", sourceFormat)
      o.put("targetFormat", targetFormat)
      lastOffset.foreach(o.put("lastOffset", _))
      lastCommit.foreach(o.put("lastCommit", _))
      Json.writeValueAsString(o)
    }
  }

  private object Plan {
    def read(fs: org.apache.hadoop.fs.FileSystem, file: Path): Plan = {
      val j = readJson(fs, file)
      def opt(name: String) = Option(j.get(name)).map(_.asLong())
      Plan(ProviderKind.byName(j.get("source").asText()),
        ProviderKind.byName(j.get("target").asText()),
        j.get("batch").asLong(), opt("lastOffset"), opt("lastCommit"),
        j.path("sourceFormat").asInt(1), j.path("targetFormat").asInt(1))
    }
  }

  private final case class StoreResult(operator: Long, operatorName: String, partition: Int,
      store: String, digest: StateDigest, checkpointId: Option[String]) {
    def json: String = {
      val o = Json.createObjectNode()
      o.put("operator", operator)
      o.put("operatorName", operatorName)
      o.put("partition", partition)
      o.put("store", store)
      o.put("rows", digest.rows)
      o.put("checksum", digest.checksum)
      checkpointId.foreach(o.put("checkpointId", _))
      Json.writeValueAsString(o)
    }
  }

  private object StoreResult {
    def read(fs: org.apache.hadoop.fs.FileSystem, file: Path): StoreResult = {
      val j = readJson(fs, file)
      StoreResult(j.get("operator").asLong(), j.get("operatorName").asText(),
        j.get("partition").asInt(), j.get("store").asText(),
        StateDigest(j.get("rows").asLong(), j.get("checksum").asLong()),
        Option(j.get("checkpointId")).map(_.asText()))
    }
  }
}
