package spillstore

import java.io.File
import java.nio.file.Files

import org.apache.commons.io.FileUtils

/** Temp dirs that tests delete, also when they fail. */
object TempDirs {
  def withTempDir[T](prefix: String)(f: String => T): T = {
    val dir = Files.createTempDirectory(prefix).toFile
    try f(dir.getPath)
    finally FileUtils.deleteQuietly(dir)
  }

  def delete(path: String): Unit = FileUtils.deleteQuietly(new File(path))
}
