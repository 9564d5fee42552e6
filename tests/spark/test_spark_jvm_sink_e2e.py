"""The engine-log sink in Spark (the JVM connector's LogSink): the files a job writes are
the Python writer's, byte for byte; what it refuses; a killed job leaves none of its rows
visible."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from engine.applog import LogReader
from engine.spark import jvmbuild, logfiles
from engine.spark.manifest import read_manifest
from engine.spark.sink import ShardWriter, cleanup

pytestmark = pytest.mark.skipif(jvmbuild.missing() is not None, reason=str(jvmbuild.missing()))
T0 = 1_700_000_000_000_000_000


def segment_files(directory: str) -> dict[str, bytes]:
    out = {}
    for name in sorted(os.listdir(directory)):
        if name.endswith((".log", ".idx", ".crc")):
            with open(os.path.join(directory, name), "rb") as f:
                out[name] = f.read()
    return out


def rows_of(ds: str) -> list[bytes]:
    """Every record of a sink dataset, read with Python (manifest, then each shard)."""
    out: list[bytes] = []
    for shard in read_manifest(logfiles.resolve(None), ds) or []:
        with LogReader.open(f"{ds}/{shard}") as r:
            out.extend(rec.data for rec in r.scan())
    return out


def test_a_spark_job_writes_the_python_writers_bytes(spark: Any, tmp_path: Path) -> None:
    from pyspark.sql import functions as F

    n = 700
    df = spark.range(0, n, numPartitions=1).select(
        F.concat(F.lit("row-"), F.col("id").cast("string"), F.expr("repeat('x', cast(id % 23 as int))"))
        .cast("binary").alias("data"),
        (F.lit(T0) + F.col("id") * 1000 + F.col("id") / 7).cast("long").alias("time_ns"),
        (F.col("id") % 5).cast("int").alias("flags"))
    out = str(tmp_path / "out")
    df.write.format("engine-log").option("segmentBytes", 4096).option("ttlSeconds", 60).mode("append").save(out)
    (shard,) = read_manifest(logfiles.resolve(None), out) or []
    local = df.collect()
    w = ShardWriter(str(tmp_path / "py"), "j", "s", segment_bytes=4096, ttl_ns=60 * 10**9)
    w.write(pa.array([r["data"] for r in local], pa.binary()), np.array([r["time_ns"] for r in local]),
            np.array([r["flags"] for r in local]))
    w.finish()
    java_files = segment_files(f"{out}/{shard}")
    assert len(java_files) > 9 and java_files == segment_files(str(tmp_path / "py/job-j/s"))
    with LogReader.open(f"{out}/{shard}") as r:
        r.verify()
        assert r.next_index == n
    # Read back through the connector: strings and timestamps are taken too.
    again = spark.read.format("engine-log").load(out).select(F.col("data").cast("string").alias("data"), "time")
    again.write.format("engine-log").mode("overwrite").save(out)
    assert sorted(rows_of(out)) == sorted(r["data"] for r in local)
    assert [n.startswith("job-") for n in os.listdir(out)].count(True) == 1  # the replaced job is gone


@pytest.mark.parametrize("build,words", [
    (lambda df: df.withColumnRenamed("data", "payload"), r"needs a 'data' column .*unexpected: \['payload'\]"),
    (lambda df: df.selectExpr("data", "cast(1 as double) as flags"), "column 'flags' is double, not an integer"),
])
def test_refused_columns(spark: Any, tmp_path: Path, build: Any, words: str) -> None:
    df = build(spark.range(3).selectExpr("cast(cast(id as string) as binary) as data"))
    with pytest.raises(Exception, match=words):
        df.write.format("engine-log").mode("append").save(str(tmp_path / "out"))
    assert not os.path.exists(tmp_path / "out")


def test_refused_options_and_modes(spark: Any, tmp_path: Path) -> None:
    df = spark.range(3).selectExpr("cast(cast(id as string) as binary) as data")
    with pytest.raises(Exception, match=r"unknown option\(s\) segmentbyte; valid options: checkpointLocation, path"):
        df.write.format("engine-log").option("segmentByte", 1).mode("append").save(str(tmp_path / "out"))
    with pytest.raises(Exception, match=r"option segmentBytes='x' is not an integer"):
        df.write.format("engine-log").option("segmentBytes", "x").mode("append").save(str(tmp_path / "out"))
    with pytest.raises(Exception, match=r"the sink writes local \(or mounted\) paths only"):
        df.write.format("engine-log").mode("append").save("hdfs://namenode:8020/out")
    t0 = time.time_ns()
    df.write.format("engine-log").mode("append").save(str(tmp_path / "out"))  # no time column: the clock
    got = spark.read.format("engine-log").load(str(tmp_path / "out")).collect()
    assert len(got) == 3 and all(r["time_ns"] >= t0 for r in got)


KILLED_JOB = r'''
import os, sys, time
from engine.spark.session import build_session
from pyspark.sql import functions as F

out, marker = sys.argv[1], sys.argv[2]
spark = build_session("local[2]", "engine-kill", conf={"spark.sql.adaptive.enabled": "false"})
spark.range(0, 100, numPartitions=2).selectExpr("cast(id as string) as data").write.format("engine-log") \
    .mode("append").save(out)
print("first", flush=True)

@F.udf("binary")
def stall(i):
    if i == 1500:
        open(marker, "w").close()
        time.sleep(600)  # killed here, with the job's shards half written
    return b"x" * 100

spark.range(0, 3000, numPartitions=2).select(stall("id").alias("data")).write.format("engine-log") \
    .option("segmentBytes", 4096).mode("append").save(out)
print("second", flush=True)
'''


def test_a_killed_job_leaves_none_of_its_rows_visible(tmp_path: Path) -> None:
    out, marker = str(tmp_path / "out"), str(tmp_path / "marker")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(Path(__file__).parents[2]),
                                                                   os.environ.get("PYTHONPATH")) if p)}
    proc = subprocess.Popen([sys.executable, "-c", KILLED_JOB, out, marker], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, env=env, start_new_session=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "first"
        for _ in range(6000):
            if os.path.exists(marker) or proc.poll() is not None:
                break
            time.sleep(0.05)
        assert os.path.exists(marker)
        jobs = [n for n in os.listdir(out) if n.startswith("job-")]
        assert len(jobs) == 2  # the second job is writing its shards
        os.killpg(proc.pid, signal.SIGKILL)  # the driver, its JVM and its Python workers
        proc.wait(60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(60)
    assert sorted(rows_of(out), key=int) == [str(i).encode() for i in range(100)]
    with open(f"{out}/_SHARDS.json") as f:
        listed = json.load(f)["shards"]
    assert len(listed) == 2 and len({s.split("/")[0] for s in listed}) == 1
    assert len(cleanup(out)) >= 1  # the killed job's shards, unlisted
    assert [n for n in os.listdir(out) if n.startswith("job-")] == [listed[0].split("/")[0]]
    assert sorted(rows_of(out), key=int) == [str(i).encode() for i in range(100)]
