"""A real Spark standalone cluster: a master and a worker started with pyspark's
``spark-class`` (loopback only, bounded time, stopped by their PIDs), then
``engine pipeline`` with a *relative* data directory, which reads every store
through its source on the cluster (one read per source), in its own driver
process (a process holds one SparkContext; the test session has a local one).

What a cluster needs (docs/pipeline.md): the same paths everywhere (here: one
machine), engine importable by the executors' Python (here: installed in the
venv, so nothing is shipped), and that Python named by ``PYSPARK_PYTHON``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

START_TIMEOUT = 60.0
RUN_TIMEOUT = 180.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _spark_class() -> str:
    import pyspark

    return os.path.join(os.path.dirname(pyspark.__file__), "bin", "spark-class")


def _env(tmp: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(SPARK_LOCAL_IP="127.0.0.1", SPARK_LOG_DIR=str(tmp / "logs"), SPARK_WORKER_DIR=str(tmp / "work"),
               PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    env.pop("PYTHONPATH", None)  # the executors import the installed engine, not the test's source path
    return env


def _wait_for_port(port: int, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"exited early: {log.read_text()[-2000:]}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"no listener on {port} after {START_TIMEOUT} s: {log.read_text()[-2000:]}")


def _wait_for_worker(log: Path, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"worker exited early: {log.read_text()[-2000:]}")
        if "Successfully registered with master" in log.read_text(errors="replace"):
            return
        time.sleep(0.2)
    raise RuntimeError(f"the worker did not register: {log.read_text()[-2000:]}")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(15)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: Any) -> Iterator[tuple[str, Path]]:
    if shutil.which("java") is None:
        pytest.skip("no java")
    tmp = tmp_path_factory.mktemp("cluster")
    env = _env(tmp)
    port, ui, wui = _free_port(), _free_port(), _free_port()
    procs: list[subprocess.Popen[bytes]] = []
    try:
        mlog = tmp / "master.out"
        with open(mlog, "wb") as out:
            procs.append(subprocess.Popen(
                [_spark_class(), "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                 "--port", str(port), "--webui-port", str(ui)], stdout=out, stderr=subprocess.STDOUT, env=env))
        _wait_for_port(port, procs[0], mlog)
        url = f"spark://127.0.0.1:{port}"
        wlog = tmp / "worker.out"
        with open(wlog, "wb") as out:
            procs.append(subprocess.Popen(
                [_spark_class(), "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1", "--cores", "2",
                 "--memory", "1g", "--webui-port", str(wui), "--work-dir", str(tmp / "work"), url],
                stdout=out, stderr=subprocess.STDOUT, env=env))
        _wait_for_worker(wlog, procs[1])
        yield url, tmp
    finally:
        for proc in reversed(procs):
            _stop(proc)


def test_pipeline_and_every_source_on_a_standalone_cluster(cluster: tuple[str, Path], tmp_path: Path) -> None:
    from engine.spark.demo import make_demo_data

    url, ctmp = cluster
    make_demo_data(str(tmp_path / "data"), scale=300)
    env = _env(ctmp)
    (tmp_path / "tmp").mkdir()
    env["TMPDIR"] = str(tmp_path / "tmp")
    # A relative DATA directory: the executors run elsewhere (in their work directory).
    run = subprocess.run(
        [sys.executable, "-m", "engine", "pipeline", "data", "--out", "out", "--master", url, "--no-chart",
         "--json"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    # --json: standard output is one JSON document (progress went to stderr).
    lines = run.stdout.splitlines()
    assert len(lines) == 1, run.stdout[-3000:]
    report = json.loads(lines[0])
    assert report["errors"] == [] and report["chart"] is None
    assert report["parquet"] == str(tmp_path / "out" / "summary.parquet")
    # The pipeline read every store through its source on the cluster's executor.
    summary = pq.read_table(str(tmp_path / "out" / "summary.parquet")).to_pylist()
    assert len(report["rows"]) == len(summary)
    kinds = {r["kind"] for r in summary}
    assert kinds == {"log", "queue", "streams", "events", "pages", "kv"}, run.stdout[-3000:]
    assert all((r["records"] or r["backlog"] or r["events"] or r["pages"] or 0) > 0
               for r in summary if r["kind"] != "queue")
    assert not list((tmp_path / "tmp").iterdir())  # nothing shipped (engine is installed), nothing left behind


SINK_ON_CLUSTER = r'''
import sys
from engine.spark.session import build_session

spark = build_session(sys.argv[1], "engine-sink-on-cluster")
df = spark.range(0, 1000, numPartitions=4).selectExpr("cast(id as string) as data", "id * 1000 as time_ns")
df.write.format("engine-log").mode("append").save("ds")
df.write.format("engine-log").mode("append").save("ds")
back = spark.read.format("engine-log").load("ds")
print(back.count(), back.select("log").distinct().count(), back.where("index < 10").count())
spark.stop()
'''


def test_the_engine_log_sink_on_a_standalone_cluster(cluster: tuple[str, Path], tmp_path: Path) -> None:
    """The JVM sink's tasks run on the executor and write a *relative* dataset path,
    made absolute on the driver; the executor needs the connector jar only (shipped
    by spark.jars), so the driver runs this tree (PYTHONPATH) whatever is installed."""
    from engine.spark.sink import verify_dataset

    url, ctmp = cluster
    env = dict(_env(ctmp), PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    run = subprocess.run([sys.executable, "-c", SINK_ON_CLUSTER, url], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=RUN_TIMEOUT)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert run.stdout.split() == ["2000", "8", "80"]  # two jobs of four tasks, one shard each
    notes = verify_dataset(str(tmp_path / "ds"))
    assert sum("250 records" in n for n in notes) == 8
