"""spillstore through Spark Connect, end to end: a Connect server started from the installed
pyspark with spillstore's jar and static confs, as docs/connect.md says, and a client that
``spillstore.configure`` sets up, in a process of its own
(tests/jobs/connect_job.py; a Connect session makes pyspark treat every later session of its
process as a Connect one). One server for the module, stopped even when a test fails.

`make test` runs this on 4.3 (test-python), `make test-connect` on every 4.x line; pyspark 3.5
ships no Connect server.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import harness
import pyspark
import pytest
import spillstore
from jobs.connect_job import BUDGET, MISSING_CLASS, OTHER_VERSION, SCHEMA

pytestmark = pytest.mark.skipif(harness.SPARK_LINE < (4, 0),
                                reason="pyspark 3.5 ships no Spark Connect server")

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
# What README's server command adds to the jar (spillstore._config._server_confs' keys).
SERVER_CONFS = {
    "spark.sql.streaming.stateStore.providerClass": spillstore.PROVIDER_CLASS,
    "spark.plugins": spillstore.PLUGIN_CLASS,
    "spark.sql.streaming.streamingQueryListeners": "spillstore.ProviderCheck",
    "spark.sql.streaming.ui.enabledCustomMetricList": ",".join(spillstore.UI_CUSTOM_METRICS),
}
START_TIMEOUT_S = 180
STOP_TIMEOUT_S = 30
# One file per batch: keys a, b, c, d are counted 3, 2, 3 and 1 times in all.
BATCHES = [[("a",), ("b",), ("a",)], [("b",), ("c",)], [("a",), ("c",), ("c",), ("d",)]]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def log_tail(log_dir: Path) -> str:
    return "\n".join(p.read_text(errors="replace")[-6000:] for p in sorted(log_dir.glob("*")))


@contextmanager
def connect_server(tmp: Path, jar: str) -> Iterator[str]:
    """A Spark Connect server from the installed pyspark (``SPARK_HOME`` is the package) with
    ``jar`` and :data:`SERVER_CONFS` on a free loopback port, for the ``with`` block; yields its
    URL. Its conf, log and pid dirs, its JVM's temp dir and its working directory are in
    ``tmp``. It runs in a process group of its own, ended when the block ends, failed or not
    (SIGTERM, SIGKILL what is left after STOP_TIMEOUT_S)."""
    home = Path(pyspark.__file__).parent
    port = free_port()
    dirs = {name: tmp / name for name in ("conf", "logs", "pids", "jvm-tmp", "cwd")}
    for path in dirs.values():
        path.mkdir()
    env = {k: v for k, v in os.environ.items()
           if k not in ("SPARK_REMOTE", "SPARK_CONNECT_MODE_ENABLED", "SPARK_LOCAL_REMOTE")}
    env.update(harness.jvm_tmp_env(dirs["jvm-tmp"]), SPARK_HOME=str(home),
               SPARK_CONF_DIR=str(dirs["conf"]), SPARK_LOG_DIR=str(dirs["logs"]),
               SPARK_PID_DIR=str(dirs["pids"]))
    args = ["--master", "local[2]", "--jars", jar,
            "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
            "--conf", f"spark.connect.grpc.binding.port={port}",
            "--conf", "spark.ui.enabled=false"]
    for key, value in SERVER_CONFS.items():
        args += ["--conf", f"{key}={value}"]
    script = home / "sbin" / "start-connect-server.sh"
    # 4.0 to 4.2's wheels leave the script out (their distributions have it): its one command
    command = ([str(script), *args] if script.exists() else
               [str(home / "sbin" / "spark-daemon.sh"), "submit", SERVER_CLASS, "1",
                "--name", "Spark Connect server", *args])
    started = time.monotonic()
    # spark-daemon.sh puts the server in the background (nohup) and returns; the server stays
    # in the launcher's process group
    launcher = subprocess.Popen(command, env=env, cwd=dirs["cwd"], stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = launcher.communicate(timeout=60)
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                pass
            if not harness._group_alive(launcher.pid):
                raise AssertionError(f"the Connect server exited:\n{out}\n{log_tail(dirs['logs'])}")
            if time.monotonic() - started > START_TIMEOUT_S:
                raise AssertionError(f"the Connect server did not listen within "
                                     f"{START_TIMEOUT_S} s:\n{log_tail(dirs['logs'])}")
            time.sleep(0.5)
        print(f"\nConnect server of pyspark {pyspark.__version__} up in "
              f"{time.monotonic() - started:.1f} s")
        yield f"sc://127.0.0.1:{port}"
    finally:
        try:
            os.killpg(launcher.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        harness._wait_group(launcher.pid, timeout_s=STOP_TIMEOUT_S)
        harness._kill_group(launcher.pid)
        launcher.kill()
        launcher.wait()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with connect_server(tmp_path_factory.mktemp("connect-server"), spillstore.jar_path()) as url:
        yield url


@pytest.fixture(scope="module")
def client(server: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The report of tests/jobs/connect_job.py, run once against the server."""
    workdir = tmp_path_factory.mktemp("connect-client")
    harness.write_batches(workdir / "input", SCHEMA, BATCHES, range(len(BATCHES)))
    spec = {"url": server, "input": str(workdir / "input"),
            "checkpoint": str(workdir / "checkpoint")}
    report = harness.run_reporting_job(harness.JOBS / "connect_job.py", spec, workdir,
                                       timeout_s=300)
    report["checkpoint_providers"] = harness.checkpoint_provider(workdir / "checkpoint")
    return report


def test_client_sets_session_confs_alone(client: dict[str, Any], server: str) -> None:
    assert client["builder"] == {
        "spark.remote": server,
        "spark.sql.shuffle.partitions": "2",
        spillstore.PROVIDER_CLASS_CONF: spillstore.PROVIDER_CLASS,
        spillstore.CONF_PREFIX + "memoryBudget": BUDGET,
    }


def test_server_takes_the_clients_confs_without_a_warning(client: dict[str, Any]) -> None:
    # the server answers each conf it refuses from a client with a warning
    assert not [w for w in client["warnings"] if w.startswith("UserWarning")], client["warnings"]


def test_streaming_count_runs_on_spillstore(client: dict[str, Any]) -> None:
    assert client["rows"] == [["a", 3], ["b", 2], ["c", 3], ["d", 1]]
    assert client["checkpoint_providers"] == {spillstore.PROVIDER_CLASS}
    # A Connect client's progress has no top-level numInputRows (its JSON from the server
    # leaves it out): the source's
    rows = [(p, sum(s["numInputRows"] for s in p["sources"])) for p in client["progress"]]
    batches = [p for p, n in rows if n > 0]
    assert [n for _, n in rows if n > 0] == [3, 2, 4]
    metrics = [spillstore.state_metrics(p) for p in batches]
    assert [m["numRowsTotal"] for m in metrics] == [2, 3, 4]
    assert [m["numRowsUpdated"] for m in metrics] == [2, 2, 3]
    # nothing leaves the heap at this budget: every lookup is a hit
    assert all(m["spillstoreCacheHits"] > 0 and m["spillstoreCacheMisses"] == 0
               for m in metrics), metrics
    # state_metrics reads the Connect StreamingQuery itself too
    assert client["query_metrics"]["numRowsTotal"] == 4
    assert "spillstoreCacheHits" in client["query_metrics"]


def test_check_says_what_to_start_the_server_with(client: dict[str, Any]) -> None:
    line = spillstore.SPARK_LINES[".".join(map(str, harness.SPARK_LINE))]
    coordinate = f"io.spillstore:spillstore-spark{line.line}_{line.scala}:{spillstore.__version__}"
    assert client["without_jar"].startswith(
        f"the session's Spark Connect server (Spark {pyspark.__version__}) has no spillstore "
        f"jar: {MISSING_CLASS} is not on its class path. Start the server with ")
    assert f"--packages {coordinate} --conf " in client["without_jar"]
    assert client["other_version"].startswith(
        f"the session's Spark Connect server has the jar of spillstore {spillstore.__version__}, "
        f"but this spillstore package is {OTHER_VERSION}: install "
        f"spillstore=={spillstore.__version__} here")
