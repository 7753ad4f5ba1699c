package spillstore

import java.io.File

/** The checkout the tests run in: the first directory at or above the working directory that
 *  holds README.md beside build.sbt (sbt runs tests from the project's base). */
object RepoRoot {
  lazy val dir: File = {
    val start = new File(sys.props("user.dir")).getAbsoluteFile
    Iterator.iterate(start)(_.getParentFile).takeWhile(_ != null)
      .find(d => new File(d, "README.md").isFile && new File(d, "build.sbt").isFile)
      .getOrElse(throw new IllegalStateException(
          s"no README.md beside a build.sbt in $start or above: run the tests from the checkout"))
  }
}
