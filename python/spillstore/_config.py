"""Configuring a Spark session (builder or conf) to use the spillstore state store provider."""

from __future__ import annotations

import functools
import os
import re
import warnings
import zipfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from ._lines import SUPPORTED_PYSPARK, SparkLine, line_of, supported_lines_text
from ._version import __version__

__all__ = [
    "CONF_PREFIX",
    "ConnectServerError",
    "JarMismatchError",
    "PLUGIN_CLASS",
    "PLUGINS_CONF",
    "PROVIDER_CLASS",
    "PROVIDER_CLASS_CONF",
    "REQUIRED_SPARK_VERSION",
    "UI_CUSTOM_METRICS",
    "UI_CUSTOM_METRICS_CONF",
    "UnsupportedSparkVersionError",
    "check_connect_server",
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

# The options read from the Spark conf when the application starts (by the plugin), out of a
# Spark Connect client's reach: its confs are the server session's.
_STARTUP_OPTIONS = (CONF_PREFIX + "metricsReportInterval",)

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
_REMOTE_CONF = "spark.remote"
# Generated into each jar by build.sbt: its Spark line and version, as static methods (a Scala
# object's forwarders) that Spark SQL's reflect() calls, so a Connect client can ask the server.
_BUILD_INFO_CLASS = "spillstore.BuildInfo"
# Where `make jars` (and a wheel build) puts the provider jars, one per Spark line.
_JAR_DIR = Path(__file__).resolve().parent / "jars"

_OPTION_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*")

T = TypeVar("T")


class UnsupportedSparkVersionError(RuntimeError):
    """The installed pyspark is not one of the Spark lines spillstore has a jar for."""


class JarMismatchError(RuntimeError):
    """The provider jar found for the installed pyspark was built for another Spark line or
    another spillstore version (a jar copied or renamed by hand, or left from an older build)."""


class ConnectServerError(RuntimeError):
    """A session's Spark Connect server cannot run this spillstore: it has no spillstore jar, or
    one built for another Spark line or of another spillstore version, or it runs a Spark
    version spillstore has no jar for."""


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


def _server_confs() -> dict[str, str]:
    """The confs a Spark Connect server must be started with for all of spillstore: those
    :func:`configure` sets on a local session that a Connect client cannot set, and the provider
    class, which the UI's metric list needs beside it in the server's Spark conf."""
    return {
        PROVIDER_CLASS_CONF: PROVIDER_CLASS,
        PLUGINS_CONF: PLUGIN_CLASS,
        _LISTENERS_CONF: _LISTENER_CLASS,
        UI_CUSTOM_METRICS_CONF: ",".join(UI_CUSTOM_METRICS),
    }


def _server_start_hint(line: SparkLine) -> str:
    """What to start a Spark Connect server of ``line`` with, for this spillstore."""
    coordinate = f"io.spillstore:spillstore-spark{line.line}_{line.scala}:{__version__}"
    confs = " ".join(f"--conf {key}={value}" for key, value in _server_confs().items())
    bundled = _JAR_DIR / line.jar
    return (
        f"Start the server with spillstore {__version__}'s jar for Spark {line.line} and the "
        "confs a Spark Connect client cannot set: `sbin/start-connect-server.sh --packages "
        f"{coordinate} {confs}`, or with `--jars {bundled if bundled.is_file() else line.jar}` "
        'in place of `--packages` (README, "On a Spark Connect server").'
    )


def _remote_only() -> bool:
    """Whether the installed pyspark is the Spark Connect client alone (``pyspark-client``)."""
    try:
        from pyspark.util import is_remote_only
    except ImportError:  # pyspark 3.5, which has no such package
        return False
    return is_remote_only()


def _connect_server(options: Mapping[str, Any]) -> str | None:
    """The Spark Connect server a session made with ``options`` (a builder's or a conf's) is a
    client of, named for messages; None when the session's driver runs in this process.

    The rules are pyspark's ``Builder.getOrCreate``'s: a ``spark.remote`` URL (``remote()``, or
    the ``SPARK_REMOTE`` environment variable) makes a Connect client, but a ``local...`` one,
    from which pyspark starts a Connect server in this process with the builder's confs, as for
    a local session; so do ``SPARK_CONNECT_MODE_ENABLED``, which pyspark sets while this process
    has a Connect session, and the ``pyspark-client`` package.
    """
    url = options.get(_REMOTE_CONF, os.environ.get("SPARK_REMOTE"))
    if url and not str(url).startswith("local"):
        # Without the parameters after "/;", which may hold a token.
        return f"the Spark Connect server at {str(url).split('/;')[0]}"
    if "SPARK_CONNECT_MODE_ENABLED" in os.environ or _remote_only():
        return "the session's Spark Connect server"
    return None


def check_connect_server(spark: Any) -> None:
    """Check that the Spark Connect server of ``spark`` can run this spillstore: it has the
    spillstore jar of its own Spark line, of this package's version.

    A builder that :func:`configure` set up for a Connect server runs this check when its
    ``getOrCreate()`` or ``create()`` returns the session; call it for a session made otherwise
    (from a ``SparkConf`` that ``configure`` filled, say). It asks the server for the line and
    version the jar records, through Spark SQL's ``reflect``: one query, no job.

    Args:
        spark: a Spark Connect ``SparkSession`` (on a local one, this checks its own driver).

    Raises:
        ConnectServerError: the server runs a Spark version spillstore has no jar for, or has
            no spillstore jar, or one of another line or version; the message says what to
            start the server with.
    """
    _check_server(spark, "the session's Spark Connect server")


def _check_server(spark: Any, server: str) -> None:
    """:func:`check_connect_server`, naming the server ``server`` in its messages."""
    from pyspark.errors import AnalysisException

    version = str(spark.version)
    line = line_of(version)
    if line is None:
        raise ConnectServerError(
            f"{server} runs Spark {version}, but spillstore {__version__} has jars for Spark "
            f"{supported_lines_text()} only: use a server of one of those lines."
        )
    fields = ", ".join(f"reflect('{_BUILD_INFO_CLASS}', '{name}')"
                       for name in ("SparkLine", "Version"))
    try:
        built_for, built_version = spark.sql(f"SELECT {fields}").first()
    except AnalysisException as error:
        if "UNEXPECTED_CLASS_TYPE" not in str(error):  # not reflect's "class not found"
            raise
        raise ConnectServerError(
            f"{server} (Spark {version}) has no spillstore jar: {_BUILD_INFO_CLASS} is not on "
            f"its class path. {_server_start_hint(line)}"
        ) from None
    if built_for != line.line:
        raise ConnectServerError(
            f"{server} runs Spark {version}, but its spillstore jar is built for Spark "
            f"{built_for}. {_server_start_hint(line)}"
        )
    if built_version != __version__:
        raise ConnectServerError(
            f"{server} has the jar of spillstore {built_version}, but this spillstore package is "
            f"{__version__}: install spillstore=={built_version} here, or restart the server with "
            f"this version's jar. {_server_start_hint(line)}"
        )


def _checked(start: Callable[[Any], Any], builder: Any, server: str) -> Callable[[], Any]:
    """``start`` (a builder class's ``getOrCreate`` or ``create``) on ``builder``, then the
    check of the session's server."""

    @functools.wraps(start)
    def start_and_check() -> Any:
        session = start(builder)
        _check_server(session, server)
        return session

    return start_and_check


def _check_when_created(builder: Any, server: str) -> None:
    """Make ``builder.getOrCreate()`` and ``builder.create()`` check the server of the session
    they return (:func:`check_connect_server`).

    The check needs the live session, and pyspark calls nothing of ours when it makes one (no
    public hook); a wrapper object in place of the builder would lose the check at the next
    ``.config()``, which returns the builder itself. So the two methods are replaced on this
    builder object alone, by functions calling its class's own: pyspark's classes and other
    builders stay as they are, chained calls keep the check, and a builder configured twice
    still checks once.
    """
    for name in ("getOrCreate", "create"):
        start = getattr(type(builder), name, None)
        if callable(start):
            setattr(builder, name, _checked(start, builder, server))


def _conf_access(target: Any) -> tuple[dict[str, str] | None, Callable[[str, str], Any]]:
    """The confs already set on ``target`` (a builder or a ``SparkConf``; None when a builder's
    cannot be read) and its setter."""
    from pyspark import SparkConf

    if isinstance(target, SparkConf):
        return dict(target.getAll()), target.set
    if callable(getattr(target, "config", None)):
        # The Builder has no public getter. pyspark keeps everything passed to .config()/
        # .master()/.appName()/.remote() in the dict `_options` until getOrCreate(), so read
        # what is set there; otherwise setting spark.jars here would silently drop its jars.
        known = getattr(target, "_options", None)
        if not isinstance(known, dict):
            return None, target.config
        return {str(key): str(value) for key, value in known.items()}, target.config
    raise TypeError(
        "configure() expects a pyspark.sql.SparkSession.Builder or a pyspark.SparkConf, "
        f"not {type(target).__name__}"
    )


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

    **Spark Connect.** A client of a Spark Connect server (``remote(url)``, ``spark.remote`` or
    ``SPARK_REMOTE``; any builder once this process has a Connect session, and every one with
    the ``pyspark-client`` package) cannot set static confs: the server started with its own,
    and answers a client's with a warning each. There ``configure`` sets only session confs,
    the provider class and the options, and the server must have been started with the jar and
    the other confs (README, "On a Spark Connect server"). The builder's ``getOrCreate()`` and
    ``create()`` then check the server before returning the session (:func:`check_connect_server`;
    a ``SparkConf`` cannot carry that check: call it on the session). ``remote("local...")`` is
    configured as a local session: pyspark starts that server in this process with the
    builder's confs (and replaces ``spark.plugins`` with its own Connect plugin).

    Args:
        builder_or_conf: a ``pyspark.sql.SparkSession.Builder`` or a ``pyspark.SparkConf``.
        **options: spillstore provider options.

    Returns:
        The same builder or conf, so calls can be chained.

    Raises:
        UnsupportedSparkVersionError: the installed pyspark is not 3.5.x, 4.0.x, ..., 4.3.x
            (not raised for a Connect client: the server's Spark is checked instead).
        FileNotFoundError: the bundled jar is missing (see :func:`jar_path`).
        JarMismatchError: the bundled jar is built for another line or version (see
            :func:`jar_path`).
        TypeError: ``builder_or_conf`` is neither a builder nor a conf, or an option value
            has an unsupported type.
        ValueError: an option name is not an identifier, or, for a Connect client, an option
            is one only the server's start reads (``metricsReportInterval``).
    """
    from pyspark import SparkConf

    known, put = _conf_access(builder_or_conf)
    settings = {option_key(name): _render(name, value) for name, value in options.items()}
    server = _connect_server(known or {})
    if server is not None:
        for key in _STARTUP_OPTIONS:
            if key in settings:
                raise ValueError(
                    f"{key} is read when the Spark application starts, which a Spark Connect "
                    f"client cannot set: start the server with --conf {key}={settings[key]}"
                )
        put(PROVIDER_CLASS_CONF, PROVIDER_CLASS)
        for key, value in settings.items():
            put(key, value)
        if not isinstance(builder_or_conf, SparkConf):
            _check_when_created(builder_or_conf, server)
        return builder_or_conf

    _spark_line()  # refuses an unsupported pyspark before anything is set
    jar = jar_path()
    if known is None:
        known = {}
        warnings.warn(
            "cannot read spark.jars from this builder (no `_options`); spark.jars is set to "
            "the spillstore jar alone (and spark.plugins, the query listeners and the UI's "
            "custom metric list to spillstore's)",
            RuntimeWarning,
            stacklevel=2,
        )
    get = known.get
    put(_JARS_CONF, _with_jar(get(_JARS_CONF), jar))
    put(PROVIDER_CLASS_CONF, PROVIDER_CLASS)
    put(UI_CUSTOM_METRICS_CONF, _with_ui_metrics(get(UI_CUSTOM_METRICS_CONF)))
    put(PLUGINS_CONF, _with_plugin(get(PLUGINS_CONF)))
    put(_LISTENERS_CONF, _with_listener(get(_LISTENERS_CONF)))
    for key, value in settings.items():
        put(key, value)
    return builder_or_conf
