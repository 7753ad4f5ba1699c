package spillstore

import com.tngtech.archunit.core.domain.{JavaClass, JavaClasses}
import com.tngtech.archunit.core.importer.ClassFileImporter
import com.tngtech.archunit.library.Architectures.{layeredArchitecture, LayeredArchitecture}
import com.tngtech.archunit.library.dependencies.{SliceAssignment, SliceIdentifier}
import com.tngtech.archunit.library.dependencies.SlicesRuleDefinition.slices
import org.scalatest.funsuite.AnyFunSuite

/**
 * The package layering docs/design.md states ("Package layout and dependency direction"),
 * checked by ArchUnit on the classes this line compiled (the core and this line's adapters;
 * every line runs this suite on its own build): each dependency from one of spillstore's
 * packages to another points down the layers, and no dependencies form a circle, counting each
 * file of the shims in Spark's packages as a node of its own (they are called from any layer,
 * so a shim may depend only on what none of its callers sits above).
 *
 * Bytecode, not source text: an `object` (`Foo$`), a nested or anonymous class and a lambda's
 * body (a method of the class it is written in) sit in their source's package, so the rules
 * see them; an import nothing uses compiles to nothing and is not a dependency.
 */
class PackageLayersSuite extends AnyFunSuite {
  import PackageLayersSuite._

  // The main classes only, where this line's build put them: ArchUnit's DoNotIncludeTests knows
  // Maven's, Gradle's and IntelliJ's test output dirs, not sbt's (target/scala-*/test-classes).
  private lazy val classes: JavaClasses = new ClassFileImporter()
    .importUrl(classOf[SpillStoreProvider].getProtectionDomain.getCodeSource.getLocation)

  test("the main classes are imported, the shims' and objects' too, and no test class") {
    val names = Seq.newBuilder[String]
    classes.forEach((c: JavaClass) => names += c.getName)
    val all = names.result()
    assert(all.size > 100, s"imported only ${all.size} classes")
    assert(!all.exists(_.endsWith("Suite")), "test classes were imported")
    assert(all.contains("spillstore.checkpoint.StateFile$"), "objects are imported as Foo$")
    assert(all.exists(_.startsWith("org.apache.spark.")), "no shim in Spark's packages")
  }

  test("every dependency between spillstore's packages points down the documented layers") {
    Layers.check(classes)
  }

  test("no circle of dependencies, the shims in Spark's packages counted") {
    slices().assignedFrom(new Nodes(classes)).should().beFreeOfCycles().check(classes)
  }
}

object PackageLayersSuite {
  /** docs/design.md's layers, top to bottom; the packages of one level depend on none of each
   *  other. `root` is the package `spillstore` itself (provider, stores, per-line adapters). */
  private val Levels = Seq(Seq("root"), Seq("migrate", "recovery"), Seq("tiered"), Seq("heap"),
    Seq("checkpoint"), Seq("cold", "memory"), Seq("metrics"), Seq("conf"))

  private def packageOf(layer: String): String =
    if (layer == "root") "spillstore" else s"spillstore.$layer.."

  /** Each layer may be accessed by the layers above it only; Java's, Scala's and Spark's
   *  classes are no layer's. */
  private val Layers: LayeredArchitecture = {
    val defined =
      Levels.flatten.foldLeft(layeredArchitecture().consideringOnlyDependenciesInLayers()) {
        (arch, layer) => arch.layer(layer).definedBy(packageOf(layer))
      }
    Levels.indices.foldLeft(defined) { (arch, i) =>
      val above = Levels.take(i).flatten
      Levels(i).foldLeft(arch) { (arch, layer) =>
        if (above.isEmpty) arch.whereLayer(layer).mayNotBeAccessedByAnyLayer()
        else arch.whereLayer(layer).mayOnlyBeAccessedByLayers(above: _*)
      }
    }
  }

  /**
   * The nodes of the circle check: spillstore's packages, and each shim's source file. ArchUnit
   * asks about the classes depended on too (Java's, Scala's, Spark's own): of the classes in
   * Spark's packages, only those `imported` (this build's) are shims.
   */
  private final class Nodes(imported: JavaClasses) extends SliceAssignment {
    override def getIdentifierOf(c: JavaClass): SliceIdentifier = {
      val base = c.getBaseComponentType // an array counts as its elements' class
      base.getPackageName match {
        case "spillstore" => SliceIdentifier.of("root")
        case p if p.startsWith("spillstore.") => SliceIdentifier.of(p.split('.')(1))
        case _ if imported.contain(base.getName) =>
          SliceIdentifier.of(s"shim ${base.getSourceCodeLocation.getSourceFileName}")
        case _ => SliceIdentifier.ignore()
      }
    }

    override def getDescription: String = "spillstore's packages and each shim file"
  }
}
