"""The JVM engine-kv connector (engine.spark.KvSource) in Spark: the rows the Python reference
reader (engine.spark.kvsource.KVSourceReader) gives, whatever the filters pushed, with key
comparisons answered by the connector itself (the scan's range)."""

from __future__ import annotations

import re
import shutil
from typing import Any

import pytest
from source_parity import SourceParity, plan, scan_rows

from engine.fs import OpenMode, resolve
from engine.kv import KV
from engine.spark import jvmbuild
from engine.spark.kvsource import KV_SCHEMA, KVSourceReader

pytestmark = pytest.mark.skipif(jvmbuild.missing() is not None, reason=str(jvmbuild.missing()))
JVM = "engine.spark.KvSource"
_SPARK = SourceParity(JVM, KVSourceReader, KV_SCHEMA, "kv")
same = _SPARK.same


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = str(tmp_path_factory.mktemp("jvmkv")) + "/store.kv"
    with KV.open(path, page_size=512, create=True) as kv, kv.transaction() as tx:
        for i in range(3000):
            tx[b"k%05d" % i] = b"v%d" % i * (1 + i % 4)
        tx[b"k00777"] = b"o" * 2000  # on overflow pages
        users = tx.tree("users")
        for name in ("ann", "bob", "cy"):
            users[b"user:" + name.encode()] = name.encode() * 3
    return path


@pytest.mark.parametrize("where", [
    "true", "key >= X'6B3030313030' and key < X'6B3030323030'", "key = X'6B3030373737'", "key > X'6B3032393938'",
    "key <= X'6B3030303032'", "X'6B3030303035' > key", "key < X'00'", "key = X'6B30303737' or key = X'6B3030303031'",
    "value = X'7631'", "length(value) > 100",
])
def test_filters(spark: Any, store: str, where: str) -> None:
    same(spark, store, f"select * from {{t}} where {where}")
    same(spark, store, f"select key from {{t}} where {where}", partitions="3")


@pytest.mark.parametrize("options", [
    {}, {"partitions": "1"}, {"partitions": "9"}, {"start": "k01000", "stop": "k01500"}, {"prefix": "k029"},
    {"tree": "users"}, {"tree": "users", "prefix": "user:b"}, {"tree": "nope"},
])
def test_options_and_aggregates(spark: Any, store: str, options: dict[str, str]) -> None:
    same(spark, store, "select count(*), min(key), max(key), sum(length(value)) from {t}", **options)
    same(spark, store, "select store, tree, count(*) from {t} group by store, tree", **options)


def test_pushed_filters_are_trusted(spark: Any, store: str) -> None:
    df = spark.read.format(JVM).load(store).where("key >= X'6B3031303030' and key < X'6B3031303130'")
    text = plan(df)
    assert "pushed filters: [" in text and "key" in text
    assert not re.search(r"\bFilter\b", text), text  # Spark does not filter again
    assert df.count() == 10
    partial = spark.read.format(JVM).load(store).where("key = X'6B3030303031' or value = X'7632'")
    assert re.search(r"\bFilter\b", plan(partial))  # not answered by the connector: Spark filters
    assert partial.count() == 1


def test_pruning_statistics_and_partitions(spark: Any, store: str) -> None:
    df = spark.read.format(JVM).load(store).select("key")
    assert "engine-kv [key]" in plan(df)
    assert scan_rows(spark, df) == 3000
    assert spark.read.format(JVM).load(store).rdd.getNumPartitions() == 4
    assert spark.read.format(JVM).option("partitions", "1").load(store).rdd.getNumPartitions() == 1
    rows = spark.read.format(JVM).option("partitions", "1").load(store).collect()
    assert [r["key"] for r in rows] == sorted(r["key"] for r in rows)  # key order in a partition


def test_damage_follows_the_mode(spark: Any, store: str, tmp_path: Any) -> None:
    path = str(tmp_path / "damaged.kv")
    for suffix in ("", "-sums"):
        shutil.copy(store + suffix, path + suffix)
    with open(path, "rb") as f:
        raw = f.read()
    leaf = [p for p in range(2, len(raw) // 512) if raw[p * 512] == 0x4C][40]
    with resolve(None).open(path, OpenMode.WRITE) as h:
        h.write_at(leaf * 512 + 60, b"\xff")  # a leaf fails its checksum
    for mode in ("DROPMALFORMED", "PERMISSIVE"):
        same(spark, path, "select * from {t}", mode=mode)
        # (a key filter would narrow the scan, so its partitions and what damage takes with it differ)
        same(spark, path, "select key from {t} where length(value) > 3", mode=mode, partitions="2")
    rows = spark.read.format(JVM).option("mode", "PERMISSIVE").load(path).where("_corrupt_record is not null").collect()
    assert len(rows) == 1 and "matching its checksum" in rows[0]["_corrupt_record"]
    with pytest.raises(Exception, match="matching its checksum"):
        spark.read.format(JVM).load(path).collect()
