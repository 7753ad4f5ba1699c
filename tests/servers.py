"""Real storage servers for the end-to-end tests, started and stopped by the tests themselves:
S3 (``moto`` in server mode, reached through ``s3a://``) and HDFS (Hadoop's MiniDFSCluster in
a JVM of its own). Both are context managers: the server runs for the ``with`` block and is
stopped, with every process it started, even when the block raises.

The JVM side comes from sbt, per Spark line (``make servers``, build.sbt ``serverClasspaths``):
``target/hdfs-classpath-<line>.txt``, the class path MiniDFSCluster runs with (the line's test
class path, with ``MiniHdfsMain``), and ``target/s3a-jars-<line>.txt``, hadoop-aws at the
Hadoop version of the line's Spark and its AWS SDK bundle, which a session gets on
``spark.jars``.

Imported by test modules and by job scripts (which put this directory on ``sys.path`` first).
"""

from __future__ import annotations

import http.client
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, NamedTuple

import pyspark

ROOT = Path(__file__).resolve().parent.parent
# The Spark line of this venv's pyspark: which of sbt's files to read.
SPARK_LINE = ".".join(pyspark.__version__.split(".")[:2])
START_TIMEOUT_S = 120
STOP_TIMEOUT_S = 60
# moto takes any credentials; its default region.
CREDENTIAL = "testing"
REGION = "us-east-1"


def _sbt_file(kind: str) -> str:
    """The one line of ``target/<kind>-<line>.txt``, written by ``make servers``."""
    path = ROOT / "target" / f"{kind}-{SPARK_LINE}.txt"
    if not path.exists():
        raise FileNotFoundError(
            f"{path} is missing: `make servers` writes it (Spark line {SPARK_LINE}; the lines "
            "with servers are those whose sbt project runs the `remote` test dir, build.sbt)")
    return path.read_text().strip()


def hadoop_version() -> str:
    """The Hadoop version this venv's pyspark ships (its ``hadoop-client-api`` jar)."""
    jars = Path(pyspark.__file__).parent / "jars"
    found = [m.group(1) for j in jars.glob("hadoop-client-api-*.jar")
             if (m := re.fullmatch(r"hadoop-client-api-(.+)\.jar", j.name))]
    if len(found) != 1:
        raise FileNotFoundError(f"not one hadoop-client-api jar in {jars}: {found}")
    return found[0]


def s3a_jars() -> str:
    """``spark.jars`` for s3a://: hadoop-aws and its SDK, checked to be at pyspark's Hadoop
    version (a file left by another pyspark would fail only at the first s3a:// call)."""
    jars = _sbt_file("s3a-jars")
    expected = f"hadoop-aws-{hadoop_version()}.jar"
    if not any(Path(j).name == expected for j in jars.split(",")):
        raise FileNotFoundError(
            f"target/s3a-jars-{SPARK_LINE}.txt has no {expected} (pyspark {pyspark.__version__}"
            f"): {jars}\nrun `make servers` again")
    return jars


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass  # the group is empty


def _stop_group(proc: subprocess.Popen[str], grace_s: float) -> None:
    """SIGTERM process group ``proc.pid`` (a server started with ``start_new_session``), wait
    up to ``grace_s`` for its leader, then SIGKILL whatever of the group is left (children
    that outlived the leader too)."""
    _signal_group(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        pass
    _signal_group(proc.pid, signal.SIGKILL)
    proc.wait()


# --------------------------------------------------------------------------------------------
# S3


class Request(NamedTuple):
    """One request the S3 server answered (or refused: status 0); ``method`` is ``COPY`` for a
    PUT that copies another object; ``agent`` its ``User-Agent`` header."""
    method: str
    path: str
    query: str
    status: int
    agent: str = ""


@dataclass
class _Proxy:
    """What the forwarding proxy's handler threads share.

    | state      | owner                                                              |
    |------------|--------------------------------------------------------------------|
    | `log`      | appended by the handler threads under `lock`; read under `lock`     |
    | `refusing` | set and cleared by `S3Server.refusing` (the test's thread); read by handlers |
    """
    upstream: int
    lock: threading.Lock = field(default_factory=threading.Lock)
    log: list[Request] = field(default_factory=list)
    refusing: threading.Event = field(default_factory=threading.Event)


# Headers that describe one hop's connection, not the request (the proxy reframes bodies).
_HOP_HEADERS = {"connection", "keep-alive", "transfer-encoding", "expect", "proxy-connection",
                "te", "trailer", "upgrade"}


class _ProxyHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive and 100-continue, as the AWS SDKs expect
    proxy: _Proxy
    upstream: http.client.HTTPConnection | None = None

    def log_message(self, format: str, *args: object) -> None:
        pass  # the proxy's log is `requests()`

    def _record(self, status: int) -> None:
        path, _, query = self.path.partition("?")
        # S3's copy is a PUT naming its source in a header (a rename is a copy and a delete).
        method = "COPY" if self.headers.get("x-amz-copy-source") else self.command
        with self.proxy.lock:
            self.proxy.log.append(Request(method, path, query, status,
                                          self.headers.get("User-Agent", "")))

    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while size := int(self.rfile.readline().split(b";")[0], 16):
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                pass  # trailers
            return b"".join(chunks)
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _refuse(self) -> None:
        """Reset the connection (SO_LINGER 0): to the client, the server is gone."""
        self._record(0)
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.close_connection = True

    def _forward(self) -> None:
        if self.proxy.refusing.is_set():
            self._refuse()
            return
        body = self._body()
        if self.proxy.refusing.is_set():  # switched on while the body was coming in
            self._refuse()
            return
        headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_HEADERS}
        headers["Content-Length"] = str(len(body))
        if self.upstream is None:
            self.upstream = http.client.HTTPConnection("127.0.0.1", self.proxy.upstream,
                                                       timeout=60)
        try:
            self.upstream.request(self.command, self.path, body=body, headers=headers)
            response = self.upstream.getresponse()
            data = response.read()
        except (OSError, http.client.HTTPException):
            self.upstream.close()
            self.upstream = None
            self._refuse()
            return
        self._record(response.status)
        self.send_response_only(response.status, response.reason)
        for k, v in response.getheaders():
            if k.lower() not in _HOP_HEADERS and k.lower() != "content-length":
                self.send_header(k, v)
        # A HEAD answer carries the object's length, without the object.
        length = response.getheader("Content-Length") if self.command == "HEAD" else len(data)
        self.send_header("Content-Length", str(length if length is not None else 0))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _forward

    def finish(self) -> None:
        super().finish()
        if self.upstream is not None:
            self.upstream.close()


class _QuietServer(ThreadingHTTPServer):
    """Prints no traceback when a client drops a kept-alive connection (the JVMs do, at exit)."""

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


@dataclass
class S3Server:
    """moto's S3 behind a forwarding proxy on loopback; ``endpoint`` is the proxy.

    The proxy (threads of this process, in front of ``moto_server``) is what makes the two
    test hooks possible: it records every request it forwards (``requests()``; moto's own log
    line has no status for refused requests and is written asynchronously), and it can refuse
    requests while moto keeps running (``refusing()``): stopping moto would lose its buckets,
    which live in its memory. ``create_bucket`` and ``keys`` talk to moto directly, so the
    counter counts only what went through ``endpoint``.
    """
    endpoint: str
    moto_port: int
    pid: int  # moto_server's, the leader of its process group
    _proxy: _Proxy

    def _client(self) -> Any:
        import boto3  # moto's dependency

        return boto3.client("s3", endpoint_url=f"http://127.0.0.1:{self.moto_port}",
                            region_name=REGION, aws_access_key_id=CREDENTIAL,
                            aws_secret_access_key=CREDENTIAL)

    def create_bucket(self, name: str) -> None:
        self._client().create_bucket(Bucket=name)

    def keys(self, bucket: str, prefix: str = "") -> list[str]:
        """Every object key in ``bucket`` under ``prefix``, sorted."""
        pages = self._client().get_paginator("list_objects_v2").paginate(Bucket=bucket,
                                                                         Prefix=prefix)
        return sorted(o["Key"] for page in pages for o in page.get("Contents", []))

    def spark_conf(self, bucket: str) -> dict[str, str]:
        """What a SparkSession needs for ``s3a://<bucket>/``: the s3a jars on ``spark.jars``
        (set these before ``spillstore.configure``, which appends its jar to that list), this
        endpoint with path-style access over plain HTTP, moto's fake credentials, and retries
        and timeouts small enough that a refused request fails a call in seconds."""
        s3a = {
            "endpoint": self.endpoint,
            "endpoint.region": REGION,
            "path.style.access": "true",
            "connection.ssl.enabled": "false",
            "aws.credentials.provider": "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider",
            "access.key": CREDENTIAL,
            "secret.key": CREDENTIAL,
            # One attempt in the SDK and one retry in s3a, for failures and throttling alike.
            "attempts.maximum": "1",
            "retry.limit": "1",
            "retry.interval": "100ms",
            "retry.throttle.limit": "1",
            "retry.throttle.interval": "100ms",
            "connection.establish.timeout": "5000",
            "connection.timeout": "10000",
        }
        # Per-bucket options: s3a applies them to ``bucket`` only, other buckets stay as they were.
        return {"spark.jars": s3a_jars(),
                **{f"spark.hadoop.fs.s3a.bucket.{bucket}.{k}": v for k, v in s3a.items()}}

    def requests(self) -> list[Request]:
        """Every request sent to ``endpoint`` so far, in the order they were answered."""
        with self._proxy.lock:
            return list(self._proxy.log)

    @contextmanager
    def refusing(self) -> Iterator[None]:
        """Within the block every request to ``endpoint`` has its connection reset (recorded
        with status 0); afterwards requests go through again, to the same buckets."""
        self._proxy.refusing.set()
        try:
            yield
        finally:
            self._proxy.refusing.clear()


def _wait_answers(port: int, proc: subprocess.Popen[str], log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        if proc.poll() is not None:
            raise RuntimeError(
                f"moto_server exited ({proc.returncode}):\n{log.read_text()[-4000:]}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5):
                return
        except urllib.error.HTTPError:
            return  # it answered
        except OSError:
            if time.monotonic() > deadline:
                raise RuntimeError(f"moto_server did not answer within {START_TIMEOUT_S} s:\n"
                                   f"{log.read_text()[-4000:]}") from None
            time.sleep(0.2)


@contextmanager
def s3_server(tmp: Path) -> Iterator[S3Server]:
    """Starts ``moto_server`` (this interpreter's moto) on a free loopback port in a process
    group of its own, its log in ``tmp/moto.log``, and the proxy; yields once moto answers.
    On exit stops both and deletes the log, whatever the block did."""
    tmp.mkdir(parents=True, exist_ok=True)
    log = tmp / "moto.log"
    port = _free_port()
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True, text=True)
    proxy_server: ThreadingHTTPServer | None = None
    try:
        _wait_answers(port, proc, log)
        state = _Proxy(upstream=port)
        handler = type("Handler", (_ProxyHandler,), {"proxy": state})
        proxy_server = _QuietServer(("127.0.0.1", 0), handler)
        proxy_server.daemon_threads = True
        threading.Thread(target=proxy_server.serve_forever, name="s3-proxy", daemon=True).start()
        yield S3Server(f"http://127.0.0.1:{proxy_server.server_address[1]}", port, proc.pid,
                       state)
    finally:
        if proxy_server is not None:
            proxy_server.shutdown()
            proxy_server.server_close()
        _stop_group(proc, grace_s=10)
        log.unlink(missing_ok=True)


# --------------------------------------------------------------------------------------------
# HDFS


class AuditRecord(NamedTuple):
    """One namenode call of the HDFS audit log: ``cmd`` as Hadoop names it (``create``,
    ``open``, ``delete``, ``listStatus``, ``getfileinfo``, ``mkdirs``, ``rename``, or
    ``rename (options=[OVERWRITE])`` for the rename that replaces its target, ...), the paths it
    names (``dst`` only for a rename; both absolute, no scheme), whether it was allowed (a call
    that failed otherwise, e.g. a create of an existing file, is not in the log; a getfileinfo
    of a missing path did not fail), when it completed, and the user who called (``ugi``
    without its authentication method)."""
    time_ms: int  # epoch milliseconds
    allowed: bool
    cmd: str
    src: str | None
    dst: str | None
    user: str | None = None


def parse_audit_log(text: str) -> list[AuditRecord]:
    """The records of ``MiniHdfsMain``'s audit log, in file order (a call that returned
    before another one started comes first); a last line still being written is left out."""
    records = []
    for line in text.splitlines(keepends=True):
        if not line.endswith("\n"):
            break
        millis, *fields = line.rstrip("\n").split("\t")
        values = dict(f.partition("=")[::2] for f in fields)
        src, dst = (None if values.get(k, "null") == "null" else values[k]
                    for k in ("src", "dst"))
        user = values["ugi"].split(" ", 1)[0] if "ugi" in values else None
        records.append(AuditRecord(int(millis), values["allowed"] == "true", values["cmd"],
                                   src, dst, user))
    return records


@dataclass
class HdfsServer:
    """A one-datanode MiniDFSCluster in a JVM of its own (``MiniHdfsMain``), with the namenode's
    audit log in ``audit_log``: one line per namenode call (create, open, rename, delete,
    listStatus, getfileinfo, mkdirs, ...). Calls the namenode does not audit are not in it,
    among them a write's block calls (addBlock, complete) and the datanode's calls."""
    uri: str  # hdfs://localhost:<port>
    pid: int  # the JVM's, the leader of its process group
    audit_log: Path
    _proc: subprocess.Popen[str]

    def audit_records(self) -> list[AuditRecord]:
        """Every namenode call audited so far, in file order (each is written before the call
        returns to its client)."""
        return parse_audit_log(self.audit_log.read_text(encoding="utf-8"))

    def spark_conf(self) -> dict[str, str]:
        """What a SparkSession needs for this HDFS beyond its URI: that its client gives up
        quickly while a node is down (Hadoop's default is minutes of retries)."""
        hadoop = {
            "ipc.client.connect.max.retries": "0",
            "ipc.client.connect.max.retries.on.timeouts": "0",
            "dfs.client.block.write.retries": "1",
            "dfs.client.block.write.replace-datanode-on-failure.enable": "false",
            "dfs.client.max.block.acquire.failures": "0",
            "dfs.client.retry.window.base": "100",
        }
        return {f"spark.hadoop.{k}": v for k, v in hadoop.items()}

    def _command(self, command: str) -> None:
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._proc.stdin.write(command + "\n")
        self._proc.stdin.flush()
        answer = self._proc.stdout.readline().strip()
        if answer != command:
            raise RuntimeError(f"MiniHdfsMain answered {answer!r} to {command!r}")

    @contextmanager
    def datanode_down(self) -> Iterator[None]:
        """Within the block the datanode is stopped: no block can be written or read (the
        namenode still answers). Afterwards it runs again, with the same blocks."""
        self._command("datanode down")
        try:
            yield
        finally:
            self._command("datanode up")


@contextmanager
def hdfs_server(tmp: Path) -> Iterator[HdfsServer]:
    """Starts ``MiniHdfsMain`` in a JVM in a process group of its own, its ``java.io.tmpdir``
    (the cluster's storage) ``tmp/hdfs``, the namenode's audit log ``tmp/hdfs/audit.log`` and
    its log ``tmp/hdfs.log``; yields once the namenode and the datanode are up. On exit closes
    the JVM's stdin, on which it shuts the cluster down and deletes its storage, waits for it
    (SIGTERM, then SIGKILL if it hangs), and deletes both paths, whatever the block did."""
    java_tmp = tmp / "hdfs"
    java_tmp.mkdir(parents=True)
    audit_log = java_tmp / "audit.log"
    log = tmp / "hdfs.log"
    java = Path(os.environ["JAVA_HOME"], "bin", "java") if "JAVA_HOME" in os.environ else "java"
    with log.open("w") as err:
        proc = subprocess.Popen(
            [str(java), "-Xmx1g", "-XX:-UsePerfData", f"-Djava.io.tmpdir={java_tmp}",
             "-cp", _sbt_file("hdfs-classpath"), "spillstore.checkpoint.MiniHdfsMain",
             str(audit_log)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True,
            start_new_session=True)
    try:
        stdout = proc.stdout
        assert stdout is not None
        # The first line is the URI; a reader thread keeps a JVM that hangs from blocking us.
        first: list[str] = []
        reader = threading.Thread(target=lambda: first.append(stdout.readline()), daemon=True)
        reader.start()
        reader.join(START_TIMEOUT_S)
        line = first[0].strip() if first else ""
        if not line.startswith("hdfs "):
            raise RuntimeError(f"MiniHdfsMain did not start (exit {proc.poll()}, said {line!r}):"
                               f"\n{log.read_text()[-4000:]}")
        yield HdfsServer(line.split(" ", 1)[1], proc.pid, audit_log, proc)
    finally:
        try:
            if proc.stdin is not None:
                proc.stdin.close()
            proc.wait(timeout=STOP_TIMEOUT_S)
        except (OSError, subprocess.TimeoutExpired):
            pass
        _stop_group(proc, grace_s=10)
        shutil.rmtree(java_tmp, ignore_errors=True)
        log.unlink(missing_ok=True)
