"""Unit tests of the spillstore Python package (no Spark session, no real jar needed)."""

from __future__ import annotations

import ast
import importlib.metadata
import warnings
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pyspark
import pytest
import spillstore
from conftest import write_stand_in_jar
from pyspark import SparkConf
from pyspark.errors import AnalysisException
from pyspark.sql import SparkSession
from spillstore import SPARK_LINES, _config, _lines
from spillstore.metrics import cache_hit_ratio, state_metrics

PREFIX = "spark.sql.streaming.stateStore.spillstore."
UI_LIST = "spark.sql.streaming.ui.enabledCustomMetricList"
LISTENERS = "spark.sql.streaming.streamingQueryListeners"


def _builder_conf(builder: Any) -> dict[str, str]:
    return dict(builder._options)


def test_public_api() -> None:
    assert spillstore.PROVIDER_CLASS == "spillstore.SpillStoreProvider"
    assert spillstore.CONF_PREFIX == PREFIX
    assert spillstore.PROVIDER_CLASS_CONF == "spark.sql.streaming.stateStore.providerClass"
    assert issubclass(spillstore.UnsupportedSparkVersionError, RuntimeError)
    assert set(spillstore.__all__) <= set(dir(spillstore))


def test_version_matches_distribution() -> None:
    assert spillstore.__version__ == importlib.metadata.version("spillstore")


def _imports_within_package(package: Path) -> dict[str, set[str]]:
    """Module -> the package's modules it imports, at module level or inside functions, by
    their names within the package (``cli``, ``bench`` for ``bench/__init__.py``,
    ``bench._runner``; ``__init__`` for the package itself): `import spillstore` and `from
    spillstore import x` count as importing `__init__`, `from .bench import _runner` as
    importing ``bench._runner`` (importing a module's parent package is not counted)."""

    def name_of(f: Path) -> str:
        parts = f.relative_to(package).with_suffix("").parts
        if parts[-1] == "__init__" and len(parts) > 1:
            parts = parts[:-1]
        return ".".join(parts)

    files = {name_of(f): f for f in package.rglob("*.py")}

    def within(dotted: str) -> str | None:
        """``spillstore.x.y`` -> ``x.y`` (``__init__`` for ``spillstore``), ``None`` outside."""
        if dotted == "spillstore":
            return "__init__"
        return dotted.removeprefix("spillstore.") if dotted.startswith("spillstore.") else None

    graph: dict[str, set[str]] = {}
    for module, f in files.items():
        is_package = f.name == "__init__.py"
        # The dotted package a relative import of this module starts from.
        here = ["spillstore", *([] if module == "__init__" else module.split("."))]
        if not is_package:
            here = here[:-1]
        deps: set[str] = set()
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.ImportFrom):
                base = here[:len(here) - node.level + 1] if node.level else []
                source = ".".join([*base, *([node.module] if node.module else [])])
                inside = within(source)
                if inside is None:
                    continue
                prefix = "" if inside == "__init__" else inside + "."
                submodules = {prefix + a.name for a in node.names} & files.keys()
                deps |= submodules or {inside}
            elif isinstance(node, ast.Import):
                deps |= {m for a in node.names if (m := within(a.name)) is not None}
        graph[module] = {d for d in deps if d in files and d != module}
    return graph


def test_requirements_agree_with_the_spark_lines() -> None:
    """spark_lines.txt is the one list of lines; what cannot read it says the same: the
    package's pyspark requirement and the default line's pinned pyspark."""
    root = Path(__file__).resolve().parent.parent
    pyproject = (root / "python" / "pyproject.toml").read_text(encoding="utf-8")
    assert f'"pyspark{_lines.SUPPORTED_PYSPARK}"' in pyproject
    rows = [row.split() for row in (root / "python" / "spillstore" / "spark_lines.txt")
            .read_text(encoding="utf-8").splitlines() if row.strip() and not row.startswith("#")]
    [default] = [row[1] for row in rows if "default" in row[4].split(",")]
    pinned = (root / "python" / "requirements-dev.txt").read_text(encoding="utf-8").splitlines()
    assert f"pyspark=={default}" in pinned


def test_no_import_cycles_in_the_package() -> None:
    graph = _imports_within_package(Path(spillstore.__file__).parent)
    assert {"cli", "bench", "_config", "__init__"} <= graph.keys(), graph

    def reach(start: str) -> set[str]:
        seen: set[str] = set()
        todo = list(graph[start])
        while todo:
            m = todo.pop()
            if m not in seen:
                seen.add(m)
                todo.extend(graph[m])
        return seen

    circles = sorted(m for m in graph if m in reach(m))
    assert not circles, f"modules on an import cycle: {circles}; imports: {graph}"


def test_package_is_typed() -> None:
    assert (Path(spillstore.__file__).parent / "py.typed").is_file()


def test_configure_builder(jar: str) -> None:
    builder = SparkSession.Builder().master("local[1]").config("spark.jars", "/opt/a.jar")
    result = spillstore.configure(
        builder, memory_budget_fraction=0.3, maxEntries=1_000_000, spill_enabled=True)
    assert result is builder
    assert _builder_conf(builder) == {
        "spark.master": "local[1]",
        "spark.jars": f"/opt/a.jar,{jar}",
        "spark.sql.streaming.stateStore.providerClass": "spillstore.SpillStoreProvider",
        UI_LIST: ",".join(spillstore.UI_CUSTOM_METRICS),
        "spark.plugins": spillstore.PLUGIN_CLASS,
        LISTENERS: "spillstore.ProviderCheck",
        PREFIX + "memoryBudgetFraction": "0.3",
        PREFIX + "maxEntries": "1000000",
        PREFIX + "spillEnabled": "true",
    }


def test_configure_conf(jar: str) -> None:
    conf = SparkConf(loadDefaults=False).set("spark.jars", "a.jar, b.jar")
    result = spillstore.configure(conf, compact_on_commit=False, budget="512m")
    assert result is conf
    assert conf.get("spark.jars") == f"a.jar,b.jar,{jar}"
    assert conf.get("spark.sql.streaming.stateStore.providerClass") == spillstore.PROVIDER_CLASS
    assert conf.get(PREFIX + "compactOnCommit") == "false"
    assert conf.get(PREFIX + "budget") == "512m"


@pytest.mark.parametrize("make", [lambda: SparkSession.Builder(),
                                  lambda: SparkConf(loadDefaults=False)])
def test_jar_set_once(jar: str, make: Any) -> None:
    target = make()
    spillstore.configure(spillstore.configure(target))
    jars = target._options["spark.jars"] if hasattr(target, "_options") else target.get(
        "spark.jars")
    assert jars == jar


@pytest.mark.parametrize("make", [lambda: SparkSession.Builder(),
                                  lambda: SparkConf(loadDefaults=False)])
def test_plugin_appended_once_keeping_other_plugins(jar: str, make: Any) -> None:
    target = make()
    if hasattr(target, "_options"):
        target.config("spark.plugins", "com.example.A")
    else:
        target.set("spark.plugins", "com.example.A")
    spillstore.configure(spillstore.configure(target))
    plugins = target._options["spark.plugins"] if hasattr(target, "_options") else target.get(
        "spark.plugins")
    assert plugins == f"com.example.A,{spillstore.PLUGIN_CLASS}"


def test_jar_given_as_file_uri_is_not_added_again(jar: str) -> None:
    builder = SparkSession.Builder().config("spark.jars", f"file://{jar}")
    spillstore.configure(builder)
    assert builder._options["spark.jars"] == f"file://{jar}"


def test_builder_without_options_dict_warns(jar: str) -> None:
    class Minimal:
        def __init__(self) -> None:
            self.set: dict[str, str] = {}

        def config(self, key: str, value: str) -> Minimal:
            self.set[key] = value
            return self

    builder = Minimal()
    with pytest.warns(RuntimeWarning, match="spark.jars"):
        spillstore.configure(builder, a=1)
    assert builder.set == {"spark.jars": jar, "spark.sql.streaming.stateStore.providerClass":
                           spillstore.PROVIDER_CLASS, PREFIX + "a": "1",
                           UI_LIST: ",".join(spillstore.UI_CUSTOM_METRICS),
                           "spark.plugins": spillstore.PLUGIN_CLASS,
                           LISTENERS: "spillstore.ProviderCheck"}


@pytest.mark.parametrize("name, key", [
    ("memoryBudgetFraction", "memoryBudgetFraction"),
    ("memory_budget_fraction", "memoryBudgetFraction"),
    ("maxEntries", "maxEntries"),
    ("max_entries", "maxEntries"),
    ("codec", "codec"),
    ("cold_tier_dir", "coldTierDir"),
])
def test_option_key(name: str, key: str) -> None:
    assert spillstore.option_key(name) == PREFIX + key


@pytest.mark.parametrize("name", ["", "_private", "memory-budget", "a.b", "1st", "a b"])
def test_invalid_option_name(jar: str, name: str) -> None:
    with pytest.raises(ValueError, match="option name"):
        spillstore.configure(SparkSession.Builder(), **{name: 1})


@pytest.mark.parametrize("value", [None, [1], {"a": 1}, 1j])
def test_invalid_option_value(jar: str, value: Any) -> None:
    with pytest.raises(TypeError, match="maxEntries"):
        spillstore.configure(SparkSession.Builder(), maxEntries=value)


def test_configure_rejects_other_objects(jar: str) -> None:
    with pytest.raises(TypeError, match="Builder or a pyspark.SparkConf"):
        spillstore.configure({"spark.jars": ""})


@pytest.mark.parametrize("installed", ["3.4.4", "2.4.8", "4.30.0", "5.0.0", "4.4.0.dev1", "4"])
def test_unsupported_spark_version(jar: str, monkeypatch: pytest.MonkeyPatch,
                                   installed: str) -> None:
    monkeypatch.setattr(pyspark, "__version__", installed)
    builder = SparkSession.Builder()
    with pytest.raises(spillstore.UnsupportedSparkVersionError) as error:
        spillstore.configure(builder)
    assert f"installed pyspark is {installed}" in str(error.value)
    assert "supports pyspark >=3.5.0,<4.4" in str(error.value)
    assert "Spark lines 3.5, 4.0, 4.1, 4.2 and 4.3" in str(error.value)
    assert builder._options == {}, "nothing may be set when the version is wrong"


@pytest.mark.parametrize("installed,jar_name", [
    ("4.3.0", "spillstore-spark4.3_2.13.jar"), ("4.3.2", "spillstore-spark4.3_2.13.jar"),
    ("4.3.1.dev0", "spillstore-spark4.3_2.13.jar"), ("4.2.1", "spillstore-spark4.2_2.13.jar"),
    ("4.1.4", "spillstore-spark4.1_2.13.jar"), ("4.0.0", "spillstore-spark4.0_2.13.jar"),
    ("3.5.0", "spillstore-spark3.5_2.12.jar"), ("3.5.9", "spillstore-spark3.5_2.12.jar"),
])
def test_supported_spark_version(jar: str, monkeypatch: pytest.MonkeyPatch,
                                 installed: str, jar_name: str) -> None:
    monkeypatch.setattr(pyspark, "__version__", installed)
    builder = spillstore.configure(SparkSession.Builder())
    assert Path(builder._options["spark.jars"]).name == jar_name
    assert Path(spillstore.jar_path()).name == jar_name


def test_jar_path(jar: str) -> None:
    assert spillstore.jar_path() == jar


def test_jar_of_another_line_is_refused_naming_both(
    jar: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    installed = _lines.line_of(pyspark.__version__)
    other = next(line for line in SPARK_LINES.values() if line != installed)
    write_stand_in_jar(Path(jar), other.line)  # e.g. a 4.2 jar renamed by hand
    builder = SparkSession.Builder()
    with pytest.raises(spillstore.JarMismatchError) as error:
        spillstore.configure(builder)
    message = str(error.value)
    assert f"built for Spark {other.line}" in message
    assert f"installed pyspark is {pyspark.__version__} (Spark {installed.line})" in message
    assert builder._options == {}, "nothing may be set when the jar is wrong"


@pytest.mark.parametrize("version", ["0.0.9", None])
def test_jar_of_another_version_is_refused(jar: str, version: str | None) -> None:
    write_stand_in_jar(Path(jar), _lines.line_of(pyspark.__version__).line, version=version)
    with pytest.raises(spillstore.JarMismatchError, match="make jar") as error:
        spillstore.jar_path()
    assert f"this spillstore package is {spillstore.__version__}" in str(error.value)


def test_bundled_jars_record_their_line_and_version() -> None:
    """The real jars (`make jar`): each manifest names the line its file name says and this
    package's version."""
    for line in SPARK_LINES.values():
        built = _config._manifest(_config._JAR_DIR / line.jar)
        assert built["Spillstore-Spark-Line"] == line.line, line.jar
        assert built["Implementation-Version"] == spillstore.__version__, line.jar


def test_missing_jar(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_config, "_JAR_DIR", tmp_path / "jars")
    with pytest.raises(FileNotFoundError, match="make jar") as error:
        spillstore.jar_path()
    assert "reinstall" in str(error.value)
    builder = SparkSession.Builder()
    with pytest.raises(FileNotFoundError, match="make jar"):
        spillstore.configure(builder)
    assert builder._options == {}


# ----------------------------------------------------------------------------------------------
# Spark Connect clients (tests/test_e2e_connect.py runs them against a real server)

PROVIDER = "spark.sql.streaming.stateStore.providerClass"
SERVER = "sc://spark.example:15002"
# What the server must be started with, as the README's Connect section and the errors say.
SERVER_CONFS = (
    f"--conf {PROVIDER}=spillstore.SpillStoreProvider",
    "--conf spark.plugins=spillstore.SpillStorePlugin",
    f"--conf {LISTENERS}=spillstore.ProviderCheck",
    f"--conf {UI_LIST}=spillstoreCacheHits,spillstoreCacheMisses,spillstoreEvictions,"
    "spillstoreHeapBytes",
)


@pytest.fixture
def no_connect_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """None of the environment variables that make pyspark's sessions Connect clients."""
    for name in ("SPARK_REMOTE", "SPARK_CONNECT_MODE_ENABLED", "SPARK_LOCAL_REMOTE", "MASTER"):
        monkeypatch.delenv(name, raising=False)


class FakeServer:
    """Stands in for a Spark Connect session: its server's Spark version and the line and
    version that reflect() reads from spillstore's BuildInfo there (None: no such class)."""

    def __init__(self, version: str, built: tuple[str, str] | None) -> None:
        self.version = version
        self.built = built
        self.queries: list[str] = []

    def sql(self, query: str) -> Any:
        self.queries.append(query)
        if self.built is None:  # what the server answers (a Connect AnalysisException)
            raise AnalysisException(
                message="[DATATYPE_MISMATCH.UNEXPECTED_CLASS_TYPE] Cannot resolve "
                "\"reflect(spillstore.BuildInfo, SparkLine)\" due to data type mismatch: "
                "class `spillstore.BuildInfo` not found.")
        return SimpleNamespace(first=lambda: self.built)


@pytest.fixture
def connect_to(monkeypatch: pytest.MonkeyPatch, no_connect_env: None) -> Any:
    """``connect_to(server)``: builders' getOrCreate() and create() return ``server`` (a
    FakeServer) instead of connecting; call it before ``configure``."""

    def use(server: FakeServer) -> None:
        monkeypatch.setattr(SparkSession.Builder, "getOrCreate", lambda self: server)
        monkeypatch.setattr(SparkSession.Builder, "create", lambda self: server)

    return use


def _matching_server() -> FakeServer:
    line = _lines.line_of(pyspark.__version__).line
    return FakeServer(f"{line}.0", (line, spillstore.__version__))


@pytest.mark.parametrize("way", ["remote()", "spark.remote", "SPARK_REMOTE",
                                 "SPARK_CONNECT_MODE_ENABLED"])
def test_connect_client_gets_no_static_conf(way: str, no_connect_env: None,
                                            monkeypatch: pytest.MonkeyPatch,
                                            tmp_path: Path) -> None:
    """Only the provider class (a session conf) and the options: no jar (the client's path
    means nothing to the server), plugin, listener or UI metric list, which the server
    refuses from a client. The client needs no bundled jar either."""
    monkeypatch.setattr(_config, "_JAR_DIR", tmp_path / "no-jars")
    builder = SparkSession.Builder()
    if way == "remote()":
        builder.remote(SERVER)
    elif way == "spark.remote":
        builder.config("spark.remote", SERVER)
    else:
        monkeypatch.setenv(way, SERVER if way == "SPARK_REMOTE" else "1")
    before = dict(builder._options)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        spillstore.configure(builder, memory_budget="64m", heapPressureMonitor=False)
    assert {k: v for k, v in builder._options.items() if k not in before} == {
        PROVIDER: spillstore.PROVIDER_CLASS,
        PREFIX + "memoryBudget": "64m",
        PREFIX + "heapPressureMonitor": "false",
    }


def test_connect_client_conf(no_connect_env: None, monkeypatch: pytest.MonkeyPatch,
                             tmp_path: Path) -> None:
    monkeypatch.setattr(_config, "_JAR_DIR", tmp_path / "no-jars")
    conf = spillstore.configure(SparkConf(loadDefaults=False).set("spark.remote", SERVER),
                                codec="zstd")
    assert dict(conf.getAll()) == {"spark.remote": SERVER, PROVIDER: spillstore.PROVIDER_CLASS,
                                   PREFIX + "codec": "zstd"}


def test_local_connect_server_is_configured_as_a_local_session(jar: str,
                                                               no_connect_env: None) -> None:
    # pyspark starts a remote("local...") server in this process, with the builder's confs
    builder = spillstore.configure(SparkSession.Builder().remote("local[2]"))
    assert builder._options["spark.jars"] == jar
    assert builder._options[LISTENERS] == "spillstore.ProviderCheck"
    assert "getOrCreate" not in vars(builder)


def test_connect_client_refuses_an_option_read_at_the_server_start(no_connect_env: None) -> None:
    builder = SparkSession.Builder().remote(SERVER)
    with pytest.raises(ValueError) as error:
        spillstore.configure(builder, metricsReportInterval="5s")
    assert f"start the server with --conf {PREFIX}metricsReportInterval=5s" in str(error.value)
    assert builder._options == {"spark.remote": SERVER}


def test_session_of_a_configured_builder_is_checked(connect_to: Any) -> None:
    server = _matching_server()
    connect_to(server)
    builder = spillstore.configure(spillstore.configure(SparkSession.Builder().remote(SERVER)))
    # chained calls return the same builder, which keeps the check
    assert builder.config("spark.sql.shuffle.partitions", "2").getOrCreate() is server
    assert builder.create() is server
    assert server.queries == [
        "SELECT reflect('spillstore.BuildInfo', 'SparkLine'), "
        "reflect('spillstore.BuildInfo', 'Version')"] * 2
    SparkSession.Builder().remote(SERVER).getOrCreate()  # not configured: not checked
    assert len(server.queries) == 2


def test_server_without_the_jar(connect_to: Any, jar: str) -> None:
    connect_to(FakeServer("4.2.1", None))
    builder = spillstore.configure(SparkSession.Builder().remote(SERVER + "/;token=secret"))
    with pytest.raises(spillstore.ConnectServerError) as error:
        builder.getOrCreate()
    message = str(error.value)
    assert message.startswith(
        f"the Spark Connect server at {SERVER} (Spark 4.2.1) has no spillstore jar: "
        "spillstore.BuildInfo is not on its class path. Start the server with ")
    assert "secret" not in message
    assert (f"--packages io.spillstore:spillstore-spark4.2_2.13:{spillstore.__version__} "
            + " ".join(SERVER_CONFS)) in message
    # the jar this package bundles for the server's line, for a server on this machine
    assert f"--jars {Path(jar).parent / 'spillstore-spark4.2_2.13.jar'}` in place of" in message


def test_server_jar_of_another_line(connect_to: Any) -> None:
    connect_to(FakeServer("4.2.1", ("4.3", spillstore.__version__)))
    with pytest.raises(spillstore.ConnectServerError) as error:
        spillstore.configure(SparkSession.Builder().remote(SERVER)).getOrCreate()
    assert (f"the Spark Connect server at {SERVER} runs Spark 4.2.1, but its spillstore jar is "
            "built for Spark 4.3. Start the server with spillstore") in str(error.value)
    assert "spillstore-spark4.2_2.13:" in str(error.value)


def test_server_jar_of_another_version(connect_to: Any) -> None:
    line = _lines.line_of(pyspark.__version__)
    connect_to(FakeServer(f"{line.line}.1", (line.line, "0.0.9")))
    with pytest.raises(spillstore.ConnectServerError) as error:
        spillstore.configure(SparkSession.Builder().remote(SERVER)).create()
    assert (f"has the jar of spillstore 0.0.9, but this spillstore package is "
            f"{spillstore.__version__}: install spillstore==0.0.9 here, or restart the server "
            "with this version's jar") in str(error.value)


def test_server_of_an_unsupported_spark(connect_to: Any) -> None:
    connect_to(FakeServer("3.4.1", None))
    with pytest.raises(spillstore.ConnectServerError) as error:
        spillstore.configure(SparkSession.Builder().remote(SERVER)).getOrCreate()
    assert str(error.value) == (
        f"the Spark Connect server at {SERVER} runs Spark 3.4.1, but spillstore "
        f"{spillstore.__version__} has jars for Spark 3.5, 4.0, 4.1, 4.2 and 4.3 only: use a "
        "server of one of those lines.")


def test_check_connect_server_of_a_session() -> None:
    spillstore.check_connect_server(_matching_server())
    with pytest.raises(spillstore.ConnectServerError,
                       match="^the session's Spark Connect server .* has no spillstore jar"):
        spillstore.check_connect_server(FakeServer("4.3.0", None))


def test_other_analysis_errors_are_the_servers_own() -> None:
    class Refusing(FakeServer):
        def sql(self, query: str) -> Any:
            raise AnalysisException(message="[UNRESOLVED_ROUTINE] Cannot resolve `reflect`")

    with pytest.raises(AnalysisException, match="UNRESOLVED_ROUTINE"):
        spillstore.check_connect_server(Refusing("4.3.0", None))


# ----------------------------------------------------------------------------------------------
# Metrics helpers

PROGRESS = {
    "batchId": 3,
    "stateOperators": [
        {"numRowsTotal": 10, "numRowsUpdated": 2, "commitTimeMs": 5, "memoryUsedBytes": 100,
         "customMetrics": {"spillstoreJournalBytes": 300, "spillstoreCacheHits": 3,
                           "spillstoreCacheMisses": 1}},
        {"numRowsTotal": 5, "numRowsUpdated": 1, "commitTimeMs": 7, "memoryUsedBytes": 50,
         "customMetrics": {"spillstoreJournalBytes": 200, "spillstoreCacheHits": 3,
                           "spillstoreCacheMisses": 1}},
    ],
}


def test_state_metrics_sums_operators() -> None:
    m = state_metrics(PROGRESS)
    assert m == {"numRowsTotal": 15, "numRowsUpdated": 3, "commitTimeMs": 12,
                 "memoryUsedBytes": 150, "spillstoreJournalBytes": 500,
                 "spillstoreCacheHits": 6, "spillstoreCacheMisses": 2}
    assert cache_hit_ratio(m) == 0.75


def test_state_metrics_of_a_query_object() -> None:
    class Query:
        lastProgress = PROGRESS

    assert state_metrics(Query())["numRowsTotal"] == 15
    assert state_metrics(None) == {}
    assert state_metrics({"batchId": 0, "stateOperators": []}) == {}


def test_cache_hit_ratio_absent() -> None:
    assert cache_hit_ratio({}) is None
    assert cache_hit_ratio({"spillstoreCacheHits": 0, "spillstoreCacheMisses": 0}) is None


def test_ui_metric_list_keeps_existing_names(jar: str) -> None:
    assert spillstore.UI_CUSTOM_METRICS == (
        "spillstoreCacheHits", "spillstoreCacheMisses", "spillstoreEvictions",
        "spillstoreHeapBytes")
    builder = SparkSession.Builder().config(UI_LIST, "customA, SPILLSTOREEVICTIONS")
    spillstore.configure(spillstore.configure(builder))
    assert builder._options[UI_LIST] == (
        "customA,SPILLSTOREEVICTIONS,spillstoreCacheHits,spillstoreCacheMisses,"
        "spillstoreHeapBytes")
    conf = spillstore.configure(SparkConf(loadDefaults=False).set(UI_LIST, "x"))
    assert conf.get(UI_LIST) == "x," + ",".join(spillstore.UI_CUSTOM_METRICS)
    # the statistics page resolves the listed names through the provider in the same conf
    assert conf.get(spillstore.PROVIDER_CLASS_CONF) == spillstore.PROVIDER_CLASS


def _op(name: str, hits: int, misses: int, **more: int) -> dict[str, Any]:
    custom = {"spillstoreCacheHits": hits, "spillstoreCacheMisses": misses,
              "spillstoreCacheHitPermille": 1000, **more}
    return {"operatorName": name, "numRowsTotal": 5, "customMetrics": custom}


def _progress(batch: int, *ops: dict[str, Any]) -> dict[str, Any]:
    return {"id": "q-id", "runId": "r", "name": "q", "batchId": batch, "numInputRows": 10,
            "durationMs": {"triggerExecution": 42}, "stateOperators": list(ops)}


def test_operator_metrics_per_operator_and_cumulative() -> None:
    history = [
        _progress(0, _op("stateStoreSave", 0, 0), _op("dedupe", 1, 3)),
        _progress(1, _op("stateStoreSave", 3, 1, spillstoreEvictions=7,
                         spillstoreHeapBytes=2048, spillstoreColdBytes=4096,
                         spillstoreJournalBytes=100, spillstoreCommitTimeMs=9),
                  _op("dedupe", 0, 0)),
    ]
    save, dedupe = spillstore.operator_metrics(history)
    assert save == spillstore.OperatorMetrics(
        operator="stateStoreSave", index=0, batch_id=1, hit_ratio=0.75,
        cumulative_hit_ratio=0.75, cache_hits=3, cache_misses=1, evictions=7, write_backs=0,
        cold_loads=0, heap_bytes=2048, heap_entries=0, cold_bytes=4096, cold_entries=0,
        journal_bytes=100, journal_records=0, commit_time_ms=9, rows_total=5,
        provider="spillstore")
    assert dedupe.hit_ratio is None and dedupe.cumulative_hit_ratio == 0.25
    assert spillstore.operator_metrics(history[0])[1].hit_ratio == 0.25
    assert spillstore.operator_metrics(None) == []
    assert spillstore.operator_metrics([]) == []

    class Query:
        recentProgress = history

    assert spillstore.operator_metrics(Query()) == [save, dedupe]
    with pytest.raises(TypeError, match="StreamingQuery"):
        spillstore.operator_metrics(3)


@pytest.mark.parametrize("custom, provider", [
    ({"spillstoreCacheHits": 1}, "spillstore"),
    ({"loadedMapCacheHitCount": 1, "stateOnCurrentVersionSizeBytes": 9}, "hdfs"),
    ({"rocksdbCommitWriteBatchLatency": 3}, "rocksdb"),
    ({}, None),
])
def test_operator_metrics_tell_the_provider(custom: dict[str, int], provider: str | None) -> None:
    op = {"operatorName": "stateStoreSave", "numRowsTotal": 1, "customMetrics": custom}
    (metrics,) = spillstore.operator_metrics(_progress(0, op))
    assert metrics.provider == provider
    if provider in ("hdfs", "rocksdb"):
        assert metrics.summary() == f"stateStoreSave#0 runs on {provider}, not spillstore"


def test_progress_logger_logs_one_line_per_batch(caplog: pytest.LogCaptureFixture) -> None:
    listener = spillstore.ProgressLogger()
    assert isinstance(listener, pyspark.sql.streaming.StreamingQueryListener)

    class Event:
        def __init__(self, progress: dict[str, Any]) -> None:
            self.progress = progress

    with caplog.at_level("INFO", logger="spillstore.progress"):
        listener.onQueryProgress(Event(_progress(0, _op("stateStoreSave", 1, 1))))
        listener.onQueryProgress(Event(_progress(1, _op("stateStoreSave", 3, 0,
                                                        spillstoreHeapBytes=3 * 1024 * 1024))))
    assert [r.name for r in caplog.records] == ["spillstore.progress"] * 2
    assert caplog.records[0].getMessage() == (
        "q batch 0: 10 rows in 42 ms; stateStoreSave#0 hit 50.0% (cum 50.0%) hits 1 misses 1"
        " evicted 0 heap 0 B (0 keys) cold 0 B (0 keys) journal 0 B commit 0 ms")
    assert "stateStoreSave#0 hit 100.0% (cum 80.0%)" in caplog.records[1].getMessage()
    assert "heap 3.0 MiB" in caplog.records[1].getMessage()
    assert spillstore.summary(_progress(2)) == "q batch 2: 10 rows in 42 ms"
