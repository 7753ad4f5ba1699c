"""The end-to-end tests' storage servers (``servers.py``): a parquet batch written and read on
s3a:// (moto) and on hdfs:// (MiniDFSCluster) from one PySpark session in a JVM of its own
(``jobs/servers_batch.py``), the S3 request counter, the HDFS audit log, both fault switches,
and that a server leaves no process and no file behind.

| state                  | owner                                                          |
|------------------------|----------------------------------------------------------------|
| the servers            | the module fixtures `s3` and `hdfs` (stopped at module end)    |
| the batch job's pipes  | `BatchJob`, used by one test at a time                         |
| the parquet tables     | each test writes its own path                                  |
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import harness
import pytest
import servers

pytestmark = pytest.mark.remote

BUCKET = "spillstore-tests"
ROWS = 1000  # jobs/servers_batch.py writes ids 0 until ROWS
COMMAND_TIMEOUT_S = 180


class BatchJob:
    """``jobs/servers_batch.py`` running in its own process group: one command at a time.
    ``close`` ends it and deletes ``workdir`` (its conf, its stderr, its JVM's temp files)."""

    def __init__(self, conf: dict[str, str], workdir: Path) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        self.workdir = workdir
        conf_file = workdir / "conf.json"
        conf_file.write_text(json.dumps(conf))
        self.tmp = workdir / "tmp"
        self.tmp.mkdir()
        self.stderr = (workdir / "stderr.log").open("w")
        # The job's JVM keeps its temp files in the test's dir.
        self.proc = subprocess.Popen(
            [sys.executable, str(harness.JOBS / "servers_batch.py"), str(conf_file)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr, text=True,
            env={**os.environ, "PYSPARK_PYTHON": sys.executable, **harness.jvm_tmp_env(self.tmp)},
            start_new_session=True)

    def run(self, command: str, url: str) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(f"{command} {url}\n")
        self.proc.stdin.flush()
        for line in self.proc.stdout:  # a command waits for its answer (or the job's end)
            if line.startswith("result "):
                answer: dict[str, Any] = json.loads(line.removeprefix("result "))
                print(f"{command} {url}: {answer}")
                return answer
        self.stderr.flush()
        raise AssertionError(f"the batch job ended (exit {self.proc.wait()}):\n"
                             f"{Path(self.stderr.name).read_text()[-6000:]}")

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            pass
        harness._wait_group(self.proc.pid, timeout_s=30)  # its JVM exits after it
        harness._kill_group(self.proc.pid)
        self.proc.wait()
        self.stderr.close()
        shutil.rmtree(self.workdir)


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[servers.S3Server]:
    with servers.s3_server(tmp_path_factory.mktemp("s3")) as server:
        server.create_bucket(BUCKET)
        yield server


@pytest.fixture(scope="module")
def hdfs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[servers.HdfsServer]:
    with servers.hdfs_server(tmp_path_factory.mktemp("hdfs")) as server:
        yield server


@pytest.fixture(scope="module")
def batch(s3: servers.S3Server, hdfs: servers.HdfsServer,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[BatchJob]:
    job = BatchJob({**s3.spark_conf(BUCKET), **hdfs.spark_conf()},
                   tmp_path_factory.mktemp("batch"))
    yield job
    job.close()


def assert_read_back(answer: dict[str, Any]) -> None:
    assert answer["ok"], answer
    assert (answer["rows"], answer["id_sum"]) == (ROWS, ROWS * (ROWS - 1) // 2), answer


def test_s3_write_read_and_count_puts(s3: servers.S3Server, batch: BatchJob) -> None:
    before = len(s3.requests())
    assert batch.run("write", f"s3a://{BUCKET}/written")["ok"]
    served = s3.requests()[before:]
    keys = s3.keys(BUCKET, "written/")
    parquet = [k for k in keys if k.endswith(".parquet")]
    assert len(parquet) == 2 and "written/_SUCCESS" in keys, keys
    # Every object the write left was PUT or COPYed there (by a rename) through the endpoint,
    # and succeeded; the parquet files are renamed from the task's attempt dir.
    written = {r.path.removeprefix(f"/{BUCKET}/") for r in served if r.method in ("PUT", "COPY")}
    assert set(keys) <= written, (keys, served)
    copied = {r.path.removeprefix(f"/{BUCKET}/") for r in served if r.method == "COPY"}
    assert set(parquet) <= copied, served
    assert all(r.status in (200, 204, 206, 404) for r in served), served
    counts = {m: sum(r.method == m for r in served) for m in sorted({r.method for r in served})}
    print(f"s3a requests of a 2-file parquet write ({len(served)}): {counts}")
    assert_read_back(batch.run("read", f"s3a://{BUCKET}/written"))


def test_s3_refusing_fails_a_read_and_the_next_succeeds(s3: servers.S3Server,
                                                        batch: BatchJob) -> None:
    url = f"s3a://{BUCKET}/refused"
    assert batch.run("write", url)["ok"]
    before = len(s3.requests())
    with s3.refusing():
        started = time.monotonic()
        failed = batch.run("read", url)
        took = time.monotonic() - started
    assert not failed["ok"], failed
    refused = [r for r in s3.requests()[before:] if r.status == 0]
    assert refused, "the failed read sent no request"
    assert took < 60, f"the refused read took {took:.0f} s to fail (retries too long)"
    assert_read_back(batch.run("read", url))


def test_hdfs_write_read(hdfs: servers.HdfsServer, batch: BatchJob) -> None:
    assert hdfs.uri.startswith("hdfs://localhost:")
    assert batch.run("write", f"{hdfs.uri}/written")["ok"]
    assert_read_back(batch.run("read", f"{hdfs.uri}/written"))


def test_hdfs_audit_log_has_each_written_file_created_then_renamed_to_its_name(
        hdfs: servers.HdfsServer, batch: BatchJob) -> None:
    before = len(hdfs.audit_records())
    assert batch.run("write", f"{hdfs.uri}/audited")["ok"]
    records = [r for r in hdfs.audit_records()[before:] if r.allowed]
    print(f"namenode calls of a 2-file parquet write ({len(records)}): "
          f"{Counter(r.cmd for r in records)}")
    created = [(i, r.src) for i, r in enumerate(records)
               if r.cmd == "create" and r.src and r.src.endswith(".parquet")]
    assert len(created) == 2, records
    # The committer writes each file in its task's attempt dir and renames it (or a dir it is
    # in) to its place in the table: follow the renames after its create.
    for i, path in created:
        assert path.startswith("/audited/_temporary/"), path
        for r in records[i + 1:]:
            if r.cmd.startswith("rename") and r.src and r.dst and (
                    path == r.src or path.startswith(r.src + "/")):
                path = r.dst + path[len(r.src):]
        assert path == f"/audited/{path.rsplit('/', 1)[1]}", (path, records)
    assert any(r.cmd == "create" and r.src == "/audited/_SUCCESS" for r in records), records
    assert any(r.cmd == "delete" and r.src == "/audited/_temporary" for r in records), records


def test_hdfs_datanode_down_fails_a_read_and_the_next_succeeds(hdfs: servers.HdfsServer,
                                                               batch: BatchJob) -> None:
    url = f"{hdfs.uri}/datanode-down"
    assert batch.run("write", url)["ok"]
    with hdfs.datanode_down():
        failed = batch.run("read", url)
    assert not failed["ok"], failed
    assert failed["seconds"] < 60, failed
    assert_read_back(batch.run("read", url))


@pytest.mark.parametrize("start", [servers.s3_server, servers.hdfs_server],
                         ids=["s3", "hdfs"])
def test_a_server_leaves_nothing_behind_when_its_block_raises(start: Any,
                                                              tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="the block failed"):
        with start(tmp_path / "server") as server:
            pid = server.pid
            assert harness._group_alive(pid)
            raise RuntimeError("the block failed")
    assert not harness._group_alive(pid)
    assert list((tmp_path / "server").iterdir()) == []
