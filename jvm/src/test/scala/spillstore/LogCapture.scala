package spillstore

import java.util.concurrent.ConcurrentLinkedQueue

import scala.jdk.CollectionConverters._

import org.apache.logging.log4j.{Level, LogManager}
import org.apache.logging.log4j.core.{LogEvent, LoggerContext}
import org.apache.logging.log4j.core.appender.AbstractAppender
import org.apache.logging.log4j.core.config.{LoggerConfig, Property}

/** What tests log: captures the events of a logger and its children while a body runs. */
object LogCapture {
  final case class Line(level: Level, logger: String, message: String)

  /**
   * Runs `body` with logger `name` (and the loggers under it) at `level`; `body` gets what they
   * logged at or above it so far. The logger's configuration is restored afterwards, even on
   * failure.
   */
  def apply[T](name: String, level: Level = Level.INFO)(body: (() => Seq[Line]) => T): T = {
    val lines = new ConcurrentLinkedQueue[Line]()
    val appender = new AbstractAppender("capture", null, null, true, Property.EMPTY_ARRAY) {
      override def append(e: LogEvent): Unit =
        lines.add(Line(e.getLevel, e.getLoggerName, e.getMessage.getFormattedMessage))
    }
    appender.start()
    val context = LogManager.getContext(false).asInstanceOf[LoggerContext]
    val config = context.getConfiguration
    val existing = config.getLoggerConfig(name)
    val own = existing.getName == name
    val logger = if (own) existing
    else {
      val created = new LoggerConfig(name, level, false)
      config.addLogger(name, created)
      created
    }
    val oldLevel = logger.getLevel
    logger.setLevel(level)
    logger.addAppender(appender, level, null)
    context.updateLoggers()
    try body(() => lines.asScala.toSeq)
    finally {
      logger.removeAppender(appender.getName)
      if (own) logger.setLevel(oldLevel) else config.removeLogger(name)
      context.updateLoggers()
      appender.stop()
    }
  }
}
