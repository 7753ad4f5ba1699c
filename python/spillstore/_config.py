"""Configuring a Spark session (builder or conf) to use the spillstore state store provider."""

from __future__ import annotations

import os
import re
import warnings
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from ._lines import SUPPORTED_PYSPARK, SparkLine, line_of, supported_lines_text
from ._version import __version__

__all__ = [
    "CONF_PREFIX",
    "JarMismatchError",
    "PLUGIN_CLASS",
    "PLUGINS_CONF",
    "PROVIDER_CLASS",
    "PROVIDER_CLASS_CONF",
    "REQUIRED_SPARK_VERSION",
    "UI_CUSTOM_METRICS",
    "UI_CUSTOM_METRICS_CONF",
    "UnsupportedSparkVersionError",
    "configure",
    "jar_path",
    "option_key",
]

PROVIDER_CLASS = "spillstore.SpillStoreProvider"
"""Fully qualified name of the provider class inside the bundled jar."""

PROVIDER_CLASS_CONF = "spark.sql.streaming.stateStore.providerClass"

PROVIDERS = {
    "spillstore": PROVIDER_CLASS,
    "hdfs": "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider",
    "rocksdb": "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
}
"""The providers by the short name the command line, migrate and ``inspect_checkpoint`` use:
spillstore and Spark's own two."""
"""The Spark SQL conf that selects the state store provider."""

PLUGIN_CLASS = "spillstore.SpillStorePlugin"
"""spillstore's Spark plugin: publishes executor-wide figures (budget, heap, cold bytes, hits,
evictions, commit time) through Spark's metrics system, as sources ``spillstore`` (per JVM)
and ``spillstore.executors`` (the driver's sum over executors)."""

PLUGINS_CONF = "spark.plugins"
"""Spark's static conf listing the plugins to load (comma-separated class names)."""

_LISTENERS_CONF = "spark.sql.streaming.streamingQueryListeners"
# Warns (driver log) when a query configured for spillstore restarts on a checkpoint that
# records another provider, which Spark then keeps using.
_LISTENER_CLASS = "spillstore.ProviderCheck"

CONF_PREFIX = "spark.sql.streaming.stateStore.spillstore."
"""Prefix of every spillstore option. Spark forwards to a provider only the SQL confs under
``spark.sql.streaming.stateStore.``, hence the nesting."""

REQUIRED_SPARK_VERSION = SUPPORTED_PYSPARK
"""The pyspark versions spillstore supports (``>=3.5.0,<4.4``): Spark lines 3.5, 4.0, 4.1, 4.2
and 4.3, each served by its own bundled jar (see ``SPARK_LINES``)."""

UI_CUSTOM_METRICS_CONF = "spark.sql.streaming.ui.enabledCustomMetricList"
"""Spark's static conf listing the state store custom metrics the Structured Streaming tab
charts. Spark 4.3's statistics page reads it, and the provider class whose
``supportedCustomMetrics`` describe them, from the ``SparkConf`` once, when the session starts;
a name the provider does not support would fail the page, so only spillstore's own names go
in, and only together with the provider class."""

UI_CUSTOM_METRICS = (
    "spillstoreCacheHits",
    "spillstoreCacheMisses",
    "spillstoreEvictions",
    "spillstoreHeapBytes",
)
"""The spillstore metrics :func:`configure` adds to :data:`UI_CUSTOM_METRICS_CONF`. The page
sums each metric over the stores, so the hit ratio (a per-store percentage) is left out."""

_JARS_CONF = "spark.jars"
# Where `make jars` (and a wheel build) puts the provider jars, one per Spark line.
_JAR_DIR = Path(__file__).resolve().parent / "jars"

_OPTION_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*")

T = TypeVar("T")


class UnsupportedSparkVersionError(RuntimeError):
    """The installed pyspark is not one of the Spark lines spillstore has a jar for."""


class JarMismatchError(RuntimeError):
    """The provider jar found for the installed pyspark was built for another Spark line or
    another spillstore version (a jar copied or renamed by hand, or left from an older build)."""


def _manifest(jar: Path) -> dict[str, str]:
    """The main attributes of ``jar``'s manifest (empty if it has none)."""
    with zipfile.ZipFile(jar) as archive:
        try:
            text = archive.read("META-INF/MANIFEST.MF").decode("utf-8")
        except KeyError:
            return {}
    # Continuation lines start with one space (JAR spec); the main section ends at a blank line.
    text = text.replace("\r\n", "\n").replace("\n ", "").split("\n\n", 1)[0]
    return dict(line.split(": ", 1) for line in text.splitlines() if ": " in line)


def _check_jar(jar: Path, line: SparkLine, installed: str) -> None:
    attributes = _manifest(jar)
    built_for = attributes.get("Spillstore-Spark-Line", "an unknown line")
    built_version = attributes.get("Implementation-Version", "an unknown version")
    if built_for != line.line:
        raise JarMismatchError(
            f"{jar} is built for Spark {built_for}, but the installed pyspark is {installed} "
            f"(Spark {line.line}), which needs {line.jar} built for Spark {line.line}. "
            "Reinstall the spillstore package; in a source checkout run `make jar`."
        )
    if built_version != __version__:
        raise JarMismatchError(
            f"{jar} is spillstore {built_version}, but this spillstore package is "
            f"{__version__}. Reinstall the spillstore package; in a source checkout run "
            "`make jar`."
        )


def jar_path() -> str:
    """Return the absolute path of the bundled provider jar for the installed pyspark's line
    (e.g. ``spillstore-spark3.5_2.12.jar`` next to pyspark 3.5.x).

    Raises:
        UnsupportedSparkVersionError: the installed pyspark is outside ``>=3.5.0,<4.4``.
        FileNotFoundError: the jar is not there, e.g. in a source checkout where it has not
            been built yet. Run ``make jar`` in the spillstore repository (it builds the jars
            and copies them into ``python/spillstore/jars/``), or reinstall the package.
        JarMismatchError: the jar's manifest says it was built for another Spark line, or is
            another spillstore version than this package.
    """
    line, installed = _spark_line()
    jar = _JAR_DIR / line.jar
    if not jar.is_file():
        raise FileNotFoundError(
            f"spillstore's provider jar is missing: {jar} does not exist. "
            "In a source checkout run `make jar` (it builds the jars in target/ and copies "
            "them into python/spillstore/jars/); otherwise reinstall the spillstore package."
        )
    _check_jar(jar, line, installed)
    return str(jar)


def option_key(name: str) -> str:
    """Return the Spark conf key of a spillstore option.

    ``name`` may be camelCase (``memoryBudgetFraction``) or snake_case
    (``memory_budget_fraction``); both give
    ``spark.sql.streaming.stateStore.spillstore.memoryBudgetFraction``.
    """
    if not isinstance(name, str) or not _OPTION_NAME.fullmatch(name):
        raise ValueError(
            f"invalid spillstore option name {name!r}: expected an identifier such as "
            "'memoryBudgetFraction' or 'memory_budget_fraction'"
        )
    first, *rest = name.split("_")
    return CONF_PREFIX + first + "".join(part[:1].upper() + part[1:] for part in rest)


def _render(name: str, value: Any) -> str:
    """Render an option value the way Spark parses confs (booleans lower-case)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float, str)):
        return str(value)
    raise TypeError(
        f"spillstore option {name!r} must be a bool, int, float or str, "
        f"not {type(value).__name__}"
    )


def _spark_line() -> tuple[SparkLine, str]:
    """The installed pyspark's line and version."""
    import pyspark

    installed = getattr(pyspark, "__version__", "unknown")
    line = line_of(installed)
    if line is None:
        raise UnsupportedSparkVersionError(
            f"spillstore {__version__} supports pyspark {SUPPORTED_PYSPARK} (Spark lines "
            f"{supported_lines_text()}, one provider jar each, compiled against that line's "
            f"state store API), but the installed pyspark is {installed}. Install a pyspark of "
            "one of those lines, e.g. pyspark==4.3.0 or pyspark==3.5.*."
        )
    return line, installed


def _same_jar(entry: str, jar: str) -> bool:
    path = re.sub(r"^file:(//)?", "", entry.strip())
    return path == jar or os.path.realpath(path) == os.path.realpath(jar)


def _with_jar(existing: str | None, jar: str) -> str:
    entries = [e.strip() for e in (existing or "").split(",") if e.strip()]
    if not any(_same_jar(e, jar) for e in entries):
        entries.append(jar)
    return ",".join(entries)


def _with_names(existing: str | None, names: tuple[str, ...], case_sensitive: bool) -> str:
    """A comma-separated list with ``names`` appended, keeping the existing entries and their
    order, and never adding a name twice."""
    entries = [e.strip() for e in (existing or "").split(",") if e.strip()]
    fold = (lambda n: n) if case_sensitive else str.lower
    known = {fold(e) for e in entries}
    entries += [n for n in names if fold(n) not in known]
    return ",".join(entries)


def _with_ui_metrics(existing: str | None) -> str:
    # Spark compares these names case-insensitively
    return _with_names(existing, UI_CUSTOM_METRICS, case_sensitive=False)


def _with_plugin(existing: str | None) -> str:
    return _with_names(existing, (PLUGIN_CLASS,), case_sensitive=True)


def _with_listener(existing: str | None) -> str:
    return _with_names(existing, (_LISTENER_CLASS,), case_sensitive=True)


def configure(builder_or_conf: T, /, **options: bool | int | float | str) -> T:
    """Make a Spark session use spillstore as its state store provider.

    Like delta-spark's ``configure_spark_with_delta_pip``, call it on the builder (or the
    ``SparkConf``) before the session is created::

        builder = SparkSession.builder.master("local[2]")
        spark = spillstore.configure(builder).getOrCreate()

    It

    * appends the bundled provider jar to ``spark.jars``, keeping the jars already listed there
      (and not adding it twice),
    * sets ``spark.sql.streaming.stateStore.providerClass`` to :data:`PROVIDER_CLASS`,
    * adds :data:`UI_CUSTOM_METRICS` (cache hits, misses, evictions, heap bytes) to
      ``spark.sql.streaming.ui.enabledCustomMetricList``, keeping names already listed, so
      the Structured Streaming tab charts them for each query,
    * adds :data:`PLUGIN_CLASS` to ``spark.plugins``, keeping the plugins already listed, so
      that spillstore's executor-wide metrics reach Spark's metrics system (JMX, Prometheus),
    * adds spillstore's query listener to ``spark.sql.streaming.streamingQueryListeners``: when
      a query restarts on a checkpoint that records another provider (which Spark keeps
      using), it logs a WARN in the driver log naming the checkpoint and that provider,
    * sets each keyword option as ``spark.sql.streaming.stateStore.spillstore.<name>``;
      names may be camelCase or snake_case (``some_option=1`` sets ``...spillstore.someOption``),
      booleans are rendered as ``true``/``false``. The README lists the options the provider
      knows; it rejects any other name under the prefix when a query starts.

    ``spark.jars`` is a static conf: it only takes effect when the session (its JVM) is
    created by this builder, not on an already running session. Set other jars before
    calling ``configure``, or they would replace the provider jar.

    Args:
        builder_or_conf: a ``pyspark.sql.SparkSession.Builder`` or a ``pyspark.SparkConf``.
        **options: spillstore provider options.

    Returns:
        The same builder or conf, so calls can be chained.

    Raises:
        UnsupportedSparkVersionError: the installed pyspark is not 3.5.x, 4.0.x, ..., 4.3.x.
        FileNotFoundError: the bundled jar is missing (see :func:`jar_path`).
        JarMismatchError: the bundled jar is built for another line or version (see
            :func:`jar_path`).
        TypeError: ``builder_or_conf`` is neither a builder nor a conf, or an option value
            has an unsupported type.
        ValueError: an option name is not an identifier.
    """
    from pyspark import SparkConf

    _spark_line()  # refuses an unsupported pyspark before anything is set
    settings = {option_key(name): _render(name, value) for name, value in options.items()}
    jar = jar_path()

    get: Callable[[str], str | None]
    put: Callable[[str, str], Any]
    if isinstance(builder_or_conf, SparkConf):
        get, put = builder_or_conf.get, builder_or_conf.set
    elif callable(getattr(builder_or_conf, "config", None)):
        builder: Any = builder_or_conf
        # The Builder has no public getter. pyspark keeps everything passed to .config()/
        # .master()/.appName() in the dict `_options` until getOrCreate(), so read the lists
        # already set there; otherwise setting spark.jars here would silently drop them.
        known = getattr(builder, "_options", None)
        if not isinstance(known, dict):
            known = {}
            warnings.warn(
                "cannot read spark.jars from this builder (no `_options`); spark.jars is set to "
                "the spillstore jar alone (and spark.plugins, the query listeners and the UI's "
                "custom metric list to spillstore's)",
                RuntimeWarning,
                stacklevel=2,
            )
        options_set = known

        def get(key: str) -> str | None:
            value = options_set.get(key)
            return None if value is None else str(value)

        put = builder.config
    else:
        raise TypeError(
            "configure() expects a pyspark.sql.SparkSession.Builder or a pyspark.SparkConf, "
            f"not {type(builder_or_conf).__name__}"
        )
    put(_JARS_CONF, _with_jar(get(_JARS_CONF), jar))
    put(PROVIDER_CLASS_CONF, PROVIDER_CLASS)
    put(UI_CUSTOM_METRICS_CONF, _with_ui_metrics(get(UI_CUSTOM_METRICS_CONF)))
    put(PLUGINS_CONF, _with_plugin(get(PLUGINS_CONF)))
    put(_LISTENERS_CONF, _with_listener(get(_LISTENERS_CONF)))
    for key, value in settings.items():
        put(key, value)
    return builder_or_conf
