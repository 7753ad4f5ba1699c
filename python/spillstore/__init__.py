"""spillstore: a Spark Structured Streaming state store provider that keeps state on the heap
while it fits and spills to a local RocksDB instead of failing with OOM.

Typical use::

    from pyspark.sql import SparkSession
    import spillstore

    builder = SparkSession.builder.master("local[2]").appName("app")
    spark = spillstore.configure(builder).getOrCreate()

Every stateful streaming query started by that session with a new checkpoint then keeps its
state in spillstore (a checkpoint keeps the provider it was created with). Provider options
are keyword arguments of :func:`configure`; :func:`operator_metrics` reads spillstore's
metrics of each stateful operator back from a query's progress (:func:`state_metrics` sums
them over operators), and :class:`ProgressLogger` logs them per batch. :func:`migrate` moves a
stopped query's state onto spillstore (or back to Spark's default provider).

On a Spark Connect client (``SparkSession.builder.remote("sc://...")``), :func:`configure` sets
only session confs, and the session checks that its server was started with spillstore's jar
(:func:`check_connect_server`).
"""

from ._config import (
    CONF_PREFIX,
    PLUGIN_CLASS,
    PLUGINS_CONF,
    PROVIDER_CLASS,
    PROVIDER_CLASS_CONF,
    REQUIRED_SPARK_VERSION,
    UI_CUSTOM_METRICS,
    UI_CUSTOM_METRICS_CONF,
    ConnectServerError,
    JarMismatchError,
    UnsupportedSparkVersionError,
    check_connect_server,
    configure,
    jar_path,
    option_key,
)
from ._lines import SPARK_LINES, SparkLine
from ._version import __version__
from .metrics import (
    METRICS,
    OperatorMetrics,
    ProgressLogger,
    cache_hit_ratio,
    operator_metrics,
    state_metrics,
    summary,
)
from .migrate import MigrationRefused, MigrationResult, migrate

__all__ = [
    "CONF_PREFIX",
    "ConnectServerError",
    "JarMismatchError",
    "METRICS",
    "MigrationRefused",
    "MigrationResult",
    "PLUGIN_CLASS",
    "PLUGINS_CONF",
    "OperatorMetrics",
    "PROVIDER_CLASS",
    "PROVIDER_CLASS_CONF",
    "ProgressLogger",
    "REQUIRED_SPARK_VERSION",
    "SPARK_LINES",
    "SparkLine",
    "UI_CUSTOM_METRICS",
    "UI_CUSTOM_METRICS_CONF",
    "UnsupportedSparkVersionError",
    "__version__",
    "cache_hit_ratio",
    "check_connect_server",
    "configure",
    "jar_path",
    "migrate",
    "operator_metrics",
    "option_key",
    "state_metrics",
    "summary",
]
