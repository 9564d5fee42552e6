"""The JVM engine-queue source (engine.spark.QueueSource) in Spark: the rows the Python
engine-queue source gives, for whole rows, pruned columns, aggregates, a schema given with
.schema(...), partitioning options and damage (PERMISSIVE)."""

from __future__ import annotations

import os
import shutil
from typing import Any

import pytest

from engine.spark import jvmbuild

pytestmark = pytest.mark.skipif(jvmbuild.missing() is not None, reason=str(jvmbuild.missing()))
JVM = "engine.spark.QueueSource"


@pytest.fixture(scope="module")
def queues(tmp_path_factory: pytest.TempPathFactory) -> str:
    from engine.queue import Item, Queue

    d = str(tmp_path_factory.mktemp("jvmq"))
    q = Queue.open(d, "jobs", sync="never", journal_size=2048)
    a = q.reader("a")
    q.reader("b")
    q.put_many([b"job-%d" % i * (1 + i % 4) for i in range(150)])
    for k in range(30):
        q.put_moved(Item(0, b"moved-%d" % k, 1_700_000_000_000 + k, None if k % 2 else 4_100_000_000_000 + k, k % 3))
    got = [a.get(timeout=0) for _ in range(40)]
    a.confirm([item.id for item in got[::2] if item is not None])
    q.checkpoint()
    q.close()
    m = Queue.open(d, "mail", sync="never")
    m.put_many([b"m%d" % i for i in range(7)])
    m.close()
    return d


def rows(df: Any) -> list[tuple[Any, ...]]:
    return sorted(map(tuple, df.collect()), key=repr)


@pytest.mark.parametrize("options", [{}, {"queue": "jobs", "reader": "b"}, {"bytesPerPartition": "1500"}])
def test_same_rows(spark: Any, queues: str, options: dict[str, str]) -> None:
    jvm = spark.read.format(JVM).options(**options).load(queues)
    py = spark.read.format("engine-queue").options(**options).load(queues)
    assert jvm.schema == py.schema
    assert rows(jvm) == rows(py)
    assert rows(jvm.select("id", "data")) == rows(py.select("id", "data"))
    assert rows(jvm.groupBy("queue", "reader").count()) == rows(py.groupBy("queue", "reader").count())
    assert jvm.count() == py.count() > 0


def test_given_schema(spark: Any, queues: str) -> None:
    schema = "id bigint, expire_time timestamp, error_count int"
    jvm = spark.read.format(JVM).schema(schema).load(queues)
    py = spark.read.format("engine-queue").schema(schema).load(queues)
    assert rows(jvm) == rows(py)


def test_permissive_damage(spark: Any, queues: str, tmp_path: Any) -> None:
    d = str(tmp_path / "damaged")
    shutil.copytree(queues, d)
    newest = max((f for f in os.listdir(d) if f.startswith("jobs.") and f[5:].isdigit()), key=lambda f: int(f[5:]))
    with open(os.path.join(d, newest), "r+b") as f:
        f.seek(20)
        byte = f.read(1)
        f.seek(20)
        f.write(bytes([byte[0] ^ 0x40]))
    jvm = spark.read.format(JVM).option("mode", "PERMISSIVE").load(d)
    py = spark.read.format("engine-queue").option("mode", "PERMISSIVE").load(d)
    got = rows(jvm)
    assert got == rows(py)
    assert any(r[-1] and "CorruptFileError" in r[-1] for r in got)
