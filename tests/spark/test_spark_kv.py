"""``engine-kv``: key-range and prefix pushdown through options, partitions at
separator keys, damage handling; direct (no JVM) and one query through Spark."""

from __future__ import annotations

import os
from typing import Any

import pyarrow as pa
import pytest

from engine.errors import ConfigError, CorruptFileError
from engine.kv import KV
from engine.spark.batches import arrow_schema
from engine.spark.kvsource import KV_SCHEMA, KVSourceReader, key_bounds
from engine.spark.options import read_schema


def _collect(reader: Any, schema: Any = KV_SCHEMA) -> pa.Table:
    batches = [b for p in reader.partitions() for b in reader.read(p)]
    for b in batches:
        assert b.schema.equals(arrow_schema(schema))
    return pa.Table.from_batches(batches, schema=arrow_schema(schema))


@pytest.fixture
def store(tmp_path: Any) -> str:
    path = os.path.join(str(tmp_path), "s.kv")
    with KV.open(path, page_size=512) as kv, kv.transaction() as tx:
        for i in range(2000):
            tx[b"k%05d" % i] = b"v%d" % i
        users = tx.tree("users")
        users[b"user:1"] = b"alice"
        users[b"user:2"] = b"bob"
        users[b"zed"] = b"z"
    return path


def test_whole_tree_in_order_across_partitions(store: str) -> None:
    reader = KVSourceReader({"path": store, "partitions": "5"}, KV_SCHEMA)
    parts = reader.partitions()
    assert len(parts) == 5  # cut at separators, no leaf read
    t = _collect(reader)
    assert t.column("key").to_pylist() == [b"k%05d" % i for i in range(2000)]
    assert t.column("value").to_pylist()[7] == b"v7"
    assert set(t.column("store").to_pylist()) == {"s.kv"} and set(t.column("tree").to_pylist()) == {""}


def test_range_and_prefix_pushdown(store: str) -> None:
    t = _collect(KVSourceReader({"path": store, "start": "k00100", "stop": "k00200"}, KV_SCHEMA))
    assert t.column("key").to_pylist() == [b"k%05d" % i for i in range(100, 200)]
    t = _collect(KVSourceReader({"path": store, "prefix": "k0150"}, KV_SCHEMA))
    assert t.num_rows == 10
    t = _collect(KVSourceReader({"path": store, "tree": "users", "prefix": "user:"}, KV_SCHEMA))
    assert t.column("value").to_pylist() == [b"alice", b"bob"]
    t = _collect(KVSourceReader({"path": store, "tree": "users", "hex": "true", "start": b"zed".hex()}, KV_SCHEMA))
    assert t.column("key").to_pylist() == [b"zed"]
    assert _collect(KVSourceReader({"path": store, "tree": "missing"}, KV_SCHEMA)).num_rows == 0
    assert key_bounds({"prefix": "ab", "stop": "aa"}) == (b"ab", b"aa")  # empty: no partitions
    assert KVSourceReader({"path": store, "prefix": "ab", "stop": "aa"}, KV_SCHEMA).partitions() == []
    with pytest.raises(ConfigError):
        KVSourceReader({"path": store, "bogus": "1"}, KV_SCHEMA)


def test_damage_modes(store: str) -> None:
    with KV.open_reader(store) as kv:
        leaf = kv._trees[b""].root + 3
    with open(store, "r+b") as f:  # flip a bit in it: the page checksum fails
        f.seek(leaf * 512 + 30)
        byte = f.read(1)
        f.seek(leaf * 512 + 30)
        f.write(bytes([byte[0] ^ 1]))
    with pytest.raises(CorruptFileError):
        _collect(KVSourceReader({"path": store, "partitions": "1"}, KV_SCHEMA))
    schema = read_schema(KV_SCHEMA, {"mode": "PERMISSIVE"})
    t = _collect(KVSourceReader({"path": store, "partitions": "1", "mode": "PERMISSIVE"}, schema), schema)
    assert t.column("_corrupt_record").to_pylist()[-1] is not None


@pytest.mark.slow
def test_through_spark(spark: Any, store: str) -> None:
    # engine-kv is the JVM connector's (engine.spark.KvSource), on the session's class path
    df = spark.read.format("engine-kv").option("prefix", "k019").load(store)
    assert df.count() == 100
    assert sorted(r.key for r in df.select("key").collect())[0] == bytearray(b"k01900")
