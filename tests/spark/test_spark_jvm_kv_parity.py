"""Byte-level parity of the JVM engine-kv reader (engine.spark.KvSource) and the Python one.

Both read the same golden, damaged and hostile key-value stores and must agree
key for key and error for error (type, file, offset and words).  The JVM side
runs ``engine.spark.KvDump`` (the connector's planner and reader without a Spark
session, several reads per JVM); the Python side is
``engine.spark.kvsource.KVSourceReader`` (``KVReader``) without a session.
Skipped where the connector cannot be built (no JDK).
"""

from __future__ import annotations

import os
import random
import shutil
import struct

import pytest
from dump_parity import Case, DumpParity, poke

from engine.fs import OpenMode, resolve
from engine.kv import KV
from engine.spark import jvmbuild
from engine.spark.kvsource import KV_SCHEMA, KVSourceReader

pytestmark = pytest.mark.skipif(jvmbuild.missing() is not None, reason=str(jvmbuild.missing()))

_PARITY = DumpParity("engine.spark.KvDump", KVSourceReader, KV_SCHEMA)
python_rows, jvm_rows = _PARITY.python_rows, _PARITY.jvm_rows
agree_all, agree = _PARITY.agree_all, _PARITY.agree


def write(path: str, keys: int = 600, page_size: int = 512) -> None:
    """The default tree (keys with values of 1 to 40 bytes, some on overflow pages), a
    named tree, and some deletions."""
    with KV.open(path, page_size=page_size, create=True) as kv:
        with kv.transaction() as tx:
            for i in range(keys):
                tx[b"k%05d" % i] = b"v%d-" % i * (1 + i % 9)
            for i in range(0, keys, 97):
                tx[b"k%05d" % i] = bytes(range(256)) * (1 + i % 5)  # overflow chains
            users = tx.tree("users")
            users[b"user:1"] = b"alice"
            users[b"user:2"] = b"bob"
            users[b"zed"] = b"z"
        with kv.transaction() as tx:
            for i in range(3, keys, 17):
                del tx[b"k%05d" % i]


def copy(src: str, dst: str) -> str:
    for suffix in ("", "-sums", "-journal"):
        if os.path.exists(src + suffix):
            shutil.copy(src + suffix, dst + suffix)
    return dst


def test_golden_store(tmp_path: object) -> None:
    path = f"{tmp_path}/golden.kv"
    with KV.open(path, page_size=512, create=True) as kv, kv.transaction() as tx:
        tx[b"ant"] = b"1"
        tx[b"bee"] = b"x" * 3000
    rows = agree({"path": path})
    assert rows == [f"golden.kv\t\t{b'ant'.hex()}\t{b'1'.hex()}", f"golden.kv\t\t{b'bee'.hex()}\t{(b'x' * 3000).hex()}"]


def test_clean_stores_and_options(tmp_path: object) -> None:
    a = f"{tmp_path}/a.kv"
    write(a, keys=3000)
    b = f"{tmp_path}/b.kv"
    write(b, keys=40, page_size=1024)
    empty = f"{tmp_path}/empty.kv"
    KV.open(empty, create=True).close()
    cases: list[Case] = [
        ({"path": a}, None),
        ({"path": a, "partitions": "1"}, ["key"]),
        ({"path": a, "partitions": "7"}, ["key", "value"]),
        ({"path": a, "partitions": "300"}, ["key"]),
        ({"path": a, "start": "k00100", "stop": "k00200", "partitions": "3"}, None),
        ({"path": a, "prefix": "k015"}, ["store", "tree", "key"]),
        ({"path": a, "prefix": "k02", "start": "k0250", "stop": "k0290"}, ["key"]),
        ({"path": a, "start": "k02990"}, None),
        ({"path": a, "stop": "a"}, None),
        ({"path": a, "start": "m", "stop": "a"}, None),
        ({"path": a, "tree": "users"}, None),
        ({"path": a, "tree": "users", "prefix": "user:"}, None),
        ({"path": a, "tree": "users", "hex": "true", "start": b"zed".hex()}, None),
        ({"path": a, "hex": "yes", "prefix": "6b 30 30 31"}, ["key"]),
        ({"path": a, "hex": "1", "prefix": "ff"}, None),
        ({"path": a, "tree": "missing"}, None),
        ({"path": f"{tmp_path}/*.kv", "partitions": "2"}, ["store", "key"]),
        ({"path": empty}, None),
        ({"path": b, "mode": "PERMISSIVE"}, None),
        ({"path": b, "mode": "dropmalformed"}, ["value"]),
        ({"path": b, "partitions": "0"}, None),
        ({"path": b, "hex": "maybe"}, None),
        ({"path": b, "hex": "true", "start": "zz"}, None),
        ({"path": b, "tree": "t" * 300}, None),
        ({"path": b, "bogus": "1"}, None),
    ]
    rows = agree_all(cases)
    assert len(rows[0]) == 3000 - len(range(3, 3000, 17))
    assert all(r[0].startswith("ERROR ConfigError") for r in rows[-5:])


def _leaf_pages(path: str) -> tuple[int, list[int]]:
    """(page size, the pages holding leaves) of a store's default tree."""
    with open(path, "rb") as f:
        raw = f.read()
    ps = struct.unpack_from("<I", raw, 12)[0]
    leaves = [p for p in range(2, len(raw) // ps) if raw[p * ps] == 0x4C]
    return ps, leaves


DAMAGE = ["leaf-byte", "leaf-byte-nosums", "branch-byte", "meta-magic", "meta-crc", "meta-version", "overflow-byte",
          "page-sums", "no-sums", "free-link", "truncated"]


def _damage(path: str, what: str) -> None:
    ps, leaves = _leaf_pages(path)
    with open(path, "rb") as f:
        raw = f.read()
    if what.endswith("nosums"):
        os.remove(path + "-sums")
    if what.startswith("leaf-byte"):
        poke(path, leaves[len(leaves) // 2] * ps + 40, b"\xee")
    elif what == "branch-byte":
        branch = next(p for p in range(2, len(raw) // ps) if raw[p * ps] == 0x42)
        poke(path, branch * ps + 22, b"\x07")
    elif what == "meta-magic":
        poke(path, ps, b"ENGKVDB9")
    elif what == "meta-crc":
        os.remove(path + "-sums")
        poke(path, ps + 16, b"\x09")
    elif what == "meta-version":
        os.remove(path + "-sums")
        poke(path, ps + 8, b"\x02")
    elif what == "overflow-byte":
        os.remove(path + "-sums")
        ovf = next(p for p in range(2, len(raw) // ps) if raw[p * ps] == 0x4F)
        poke(path, ovf * ps + 30, b"\x01")
    elif what == "page-sums":
        poke(path + "-sums", 16 + 4 * (leaves[0] - 1), b"\x00\x00\x00\x00")
    elif what == "no-sums":
        os.remove(path + "-sums")
    elif what == "free-link":
        os.remove(path + "-sums")
        poke(path, 24, struct.pack("<Q", 3 * ps + 1))
    elif what == "truncated":
        resolve(None).open(path, OpenMode.WRITE).truncate(len(raw) - ps)


def test_damage(tmp_path: object) -> None:
    src = f"{tmp_path}/src.kv"
    write(src)
    cases: list[Case] = []
    for what in DAMAGE:
        path = copy(src, f"{tmp_path}/{what}.kv")
        _damage(path, what)
        for mode in ("FAILFAST", "DROPMALFORMED", "PERMISSIVE"):
            cases.append(({"path": path, "mode": mode, "partitions": "3"}, None))
        cases.append(({"path": path, "start": "k00300"}, ["key"]))
    got = agree_all(cases)
    by = dict(zip(DAMAGE, [got[4 * k] for k in range(len(DAMAGE))], strict=True))
    assert not any("Error" in r for r in by["no-sums"])
    for what in DAMAGE:
        if what != "no-sums":
            assert any("Error" in r for r in by[what]), what


def test_more_keys_than_one_batch(tmp_path: object) -> None:
    path = f"{tmp_path}/big.kv"
    with KV.open(path, page_size=4096, create=True) as kv, kv.transaction() as tx:
        for i in range(10000):
            tx[b"%08d" % i] = b"v"
    ps, leaves = _leaf_pages(path)
    assert len(agree({"path": path, "partitions": "1"}, ["key"])) == 10000
    poke(path, leaves[-1] * ps + 50, b"\x00\x00")
    agree_all([({"path": path, "mode": m, "partitions": "1"}, ["key"]) for m in ("FAILFAST", "DROPMALFORMED",
                                                                                "PERMISSIVE")])


def test_random_byte_damage(tmp_path: object) -> None:
    """Single bytes overwritten anywhere in the store and its sums: same keys, same errors
    (every other copy without its sums file, so the tree's own checks are reached)."""
    src = f"{tmp_path}/src.kv"
    write(src, keys=400)
    rng = random.Random(33)
    cases: list[Case] = []
    for n in range(60):
        path = copy(src, f"{tmp_path}/d{n}.kv")
        name = path + rng.choice(["", "", "", "", "-sums"])
        at = rng.randrange(resolve(None).file_size(name))
        poke(name, at, bytes([rng.randrange(256)]))
        if n % 2 == 0 and os.path.exists(path + "-sums"):
            os.remove(path + "-sums")
        mode = ("FAILFAST", "DROPMALFORMED", "PERMISSIVE")[n % 3]
        cases.append(({"path": path, "mode": mode, "partitions": str(1 + n % 5)}, None))
    agree_all(cases)
