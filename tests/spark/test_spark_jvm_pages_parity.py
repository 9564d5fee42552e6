"""Byte-level parity of the JVM engine-pages reader (engine.spark.PagesSource) and the Python one.

Both read the same golden, damaged and hostile page stores and must agree page
for page and error for error (type, file, offset and words).  The JVM side runs
``engine.spark.PagesDump`` (the connector's planner and reader without a Spark
session, several reads per JVM); the Python side is
``engine.spark.pagesource.PagesReader`` (``PageStore.open_reader``) without a
session.  Skipped where the connector cannot be built (no JDK).
"""

from __future__ import annotations

import os
import random
import shutil
import struct
import zlib

import pytest
from dump_parity import Case, DumpParity, poke, truncate

from engine.fs import resolve
from engine.pages import PageStore
from engine.spark import jvmbuild
from engine.spark.pagesource import PagesReader
from engine.spark.schemas import PAGES_SCHEMA

pytestmark = pytest.mark.skipif(jvmbuild.missing() is not None, reason=str(jvmbuild.missing()))

_PARITY = DumpParity("engine.spark.PagesDump", PagesReader, PAGES_SCHEMA)
python_rows, jvm_rows = _PARITY.python_rows, _PARITY.jvm_rows
agree_all, agree = _PARITY.agree_all, _PARITY.agree


def write(path: str, pages: int = 12, page_size: int = 512, free: tuple[int, ...] = (3, 6, 9)) -> None:
    """A store of ``pages`` pages, each starting with its number, ``free`` freed one commit at a time."""
    with PageStore.open(path, page_size=page_size, create=True) as ps:
        with ps.transaction() as tx:
            for i in range(pages):
                p = tx.allocate()
                tx.write(p, 0, b"P%d-" % p * (1 + i % 7))
        for p in free:
            with ps.transaction() as tx:
                tx.free(p)


def copy(src: str, dst: str) -> str:
    for suffix in ("", "-sums", "-journal"):
        if os.path.exists(src + suffix):
            shutil.copy(src + suffix, dst + suffix)
    return dst


def header_with(path: str, **fields: int) -> None:
    """Rewrite header fields (version, page_size, count, head, flags) with a valid CRC."""
    with open(path, "rb") as f:
        raw = bytearray(f.read(40))
    magic, version, reserved, ps, count, head, flags = struct.unpack_from("<8sHHIQQI", raw)
    values = {"version": version, "page_size": ps, "count": count, "head": head, "flags": flags, **fields}
    body = struct.pack("<8sHHIQQI", magic, values["version"], reserved, values["page_size"], values["count"],
                       values["head"], values["flags"])
    poke(path, 0, body + struct.pack("<I", zlib.crc32(body)))


def test_golden_store(tmp_path: object) -> None:
    path = f"{tmp_path}/golden.db"
    write(path, pages=4, free=(2,))
    rows = agree({"path": path}, ["store", "page", "offset", "free"])
    assert rows == ["golden.db\t1\t512\tFalse", "golden.db\t2\t1024\tTrue", "golden.db\t3\t1536\tFalse",
                    "golden.db\t4\t2048\tFalse"]
    full = agree({"path": path})
    assert full[1].endswith("\tTrue\t") and full[0].split("\t")[-1].startswith(b"P1-".hex())


def test_clean_stores_and_options(tmp_path: object) -> None:
    a, b = f"{tmp_path}/a.db", f"{tmp_path}/b.db"
    write(a, pages=2500, free=(3, 1500, 2048))
    write(b, pages=7, page_size=1024, free=())
    empty = f"{tmp_path}/empty.db"
    PageStore.open(empty, create=True).close()
    cases: list[Case] = [
        ({"path": a}, ["page", "free"]),
        ({"path": a, "pagesPerPartition": "1000"}, ["page", "offset", "free"]),
        ({"path": b}, None),
        ({"path": f"{tmp_path}/*.db", "pagesPerPartition": "3"}, ["store", "page"]),
        ({"path": empty}, None),
        ({"path": b, "mode": "PERMISSIVE"}, ["page"]),
        ({"path": b, "mode": "dropmalformed"}, ["data"]),
        ({"path": b, "pagesPerPartition": "0"}, None),
        ({"path": b, "pagesPerPartition": "x"}, None),
        ({"path": b, "mode": "LOUD"}, None),
        ({"path": b, "pagesperpartitions": "3"}, None),
        ({"path": f"{tmp_path}/nothing*.db"}, None),
        ({"path": f"{tmp_path}/missing.db"}, None),
    ]
    rows = agree_all(cases)
    assert len(rows[0]) == 2500 and len(rows[2]) == 7 and rows[4] == []
    assert all(r[0].startswith("ERROR ConfigError") for r in rows[-6:])


def _damage(path: str, what: str) -> None:
    ps = 512
    if what == "page":
        poke(path, 5 * ps + 7, b"\xff")
    elif what == "free-link":
        poke(path, 9 * ps, bytes(8))  # the head's link zeroed: the list cut short
    elif what == "free-link-out":
        poke(path, 9 * ps, struct.pack("<Q", 99 * ps))
    elif what == "free-link-odd":
        os.remove(path + "-sums")
        poke(path, 6 * ps, struct.pack("<Q", 6 * ps + 3))
    elif what == "free-cycle":
        os.remove(path + "-sums")
        poke(path, 6 * ps, struct.pack("<Q", 9 * ps))
    elif what == "magic":
        poke(path, 0, b"ENGPAGEZ")
    elif what == "header-crc":
        poke(path, 20, b"\x01")
    elif what == "version":
        header_with(path, version=7)
    elif what == "page-size":
        header_with(path, page_size=1000)
    elif what == "head":
        header_with(path, head=77 * ps)
    elif what == "count":
        header_with(path, count=40)
    elif what == "flushing":
        header_with(path, flags=1)
    elif what == "journal-live":
        os.remove(path + "-journal")
        header_with(path, flags=2)
    elif what == "journal-magic":
        poke(path + "-journal", 0, b"JRNX")
    elif what == "journal-short":
        truncate(path + "-journal", 3)
    elif what == "journal-pending":
        poke(path + "-journal", 4, struct.pack("<Q", 20))
    elif what == "journal-dir":
        os.remove(path + "-journal")
        os.mkdir(path + "-journal")
    elif what == "journal-dangling":
        os.remove(path + "-journal")
        os.symlink(path + "-gone", path + "-journal")
    elif what == "sums-magic":
        poke(path + "-sums", 0, b"ENGSUMS9")
    elif what == "sums-size":
        truncate(path + "-sums", 10)
    elif what == "sums-entry":
        poke(path + "-sums", 16 + 4 * 7, b"\x00\x00")
    elif what == "sums-free-entry":
        poke(path + "-sums", 16 + 4 * 8, b"\x00\x00")  # page 9's (free)
    elif what == "sums-short":
        truncate(path + "-sums", 16 + 4 * 5)  # pages 6.. have no entry: not checked
    elif what == "no-sums":
        os.remove(path + "-sums")
    elif what == "store-short":
        truncate(path, 11 * ps + 100)
    elif what == "store-tiny":
        truncate(path, 30)
    elif what == "sums-v1":
        # An ENGSUMS1 (zlib CRC-32) file of an earlier version, written by hand.
        with open(path, "rb") as f:
            raw = f.read()
        body = struct.pack("<8sI", b"ENGSUMS1", ps)
        entries = b"".join(struct.pack("<I", zlib.crc32(raw[p * ps:(p + 1) * ps])) for p in range(1, 13))
        with open(path + "-sums", "wb") as f:
            f.write(body + struct.pack("<I", zlib.crc32(body)) + entries)
        poke(path, 2 * ps + 9, b"\x01")


DAMAGE = ["page", "free-link", "free-link-out", "free-link-odd", "free-cycle", "magic", "header-crc", "version",
          "page-size", "head", "count", "flushing", "journal-live", "journal-magic", "journal-short",
          "journal-pending", "journal-dir", "journal-dangling", "sums-magic", "sums-size", "sums-entry",
          "sums-free-entry", "sums-short", "no-sums", "store-short", "store-tiny", "sums-v1"]


def test_damage(tmp_path: object) -> None:
    src = f"{tmp_path}/src.db"
    write(src)
    cases: list[Case] = []
    for what in DAMAGE:
        path = copy(src, f"{tmp_path}/{what}.db")
        _damage(path, what)
        for mode in ("FAILFAST", "DROPMALFORMED", "PERMISSIVE"):
            cases.append(({"path": path, "mode": mode, "pagesPerPartition": "5"}, None))
        cases.append(({"path": path}, ["page", "free"]))
    got = agree_all(cases)
    by = dict(zip(DAMAGE, [got[4 * k] for k in range(len(DAMAGE))], strict=True))
    for clean in ("sums-short", "no-sums"):
        assert not any("Error" in r for r in by[clean]), clean
    for what in DAMAGE:
        if what not in ("sums-short", "no-sums"):
            assert any("Error" in r for r in by[what]), what


def test_more_pages_than_one_batch(tmp_path: object) -> None:
    """Batches of 1024 pages: damage in the third leaves the first two read (as the Python reader)."""
    path = f"{tmp_path}/big.db"
    write(path, pages=2600, free=(5, 2000))
    poke(path, 2100 * 512 + 3, b"\xee")
    got = agree_all([({"path": path, "mode": m}, ["page"]) for m in ("FAILFAST", "DROPMALFORMED", "PERMISSIVE")])
    assert len(got[1]) == 2048


def test_random_byte_damage(tmp_path: object) -> None:
    """Single bytes overwritten anywhere in the store, its sums and its journal: same pages, same errors."""
    src = f"{tmp_path}/src.db"
    write(src)
    rng = random.Random(30)
    cases: list[Case] = []
    for n in range(60):
        path = copy(src, f"{tmp_path}/d{n}.db")
        name = path + rng.choice(["", "", "", "", "-sums", "-journal"])
        at = rng.randrange(resolve(None).file_size(name))
        poke(name, at, bytes([rng.randrange(256)]))
        if n % 4 == 0:
            os.remove(path + "-sums")  # reach the free list's own checks too
        mode = ("FAILFAST", "DROPMALFORMED", "PERMISSIVE")[n % 3]
        cases.append(({"path": path, "mode": mode, "pagesPerPartition": str(1 + n % 6)}, None))
    agree_all(cases)


def test_random_zeroed_ranges_and_truncation(tmp_path: object) -> None:
    src = f"{tmp_path}/src.db"
    write(src)
    rng = random.Random(31)
    cases: list[Case] = []
    size = resolve(None).file_size(src)
    for n, at in enumerate(range(0, size, 256)):
        path = copy(src, f"{tmp_path}/z{n}.db")
        poke(path, at, bytes(64))
        cases.append(({"path": path, "pagesPerPartition": "4"}, ["page", "free", "data"]))
    for n in range(12):
        path = copy(src, f"{tmp_path}/t{n}.db")
        name = path + rng.choice(["", "-sums", "-journal"])
        truncate(name, rng.randrange(resolve(None).file_size(name)))
        cases.append(({"path": path, "mode": "PERMISSIVE"}, None))
    agree_all(cases)


def test_a_page_count_beyond_any_file_is_damage(tmp_path: object) -> None:
    """A header (with a valid CRC) naming 2**63 + 5 pages: the JVM planner makes one part, which
    reports the store-size damage as its mode says (the Python reader's planner would cut the
    range into 2**63 / 4096 partitions first, so it is not asked)."""
    path = f"{tmp_path}/huge.db"
    write(path)
    header_with(path, count=2**63 + 5)
    need = (2**63 + 6) * 512
    got = jvm_rows([({"path": path}, None), ({"path": path, "mode": "PERMISSIVE"}, ["page"]),
                    ({"path": path, "mode": "DROPMALFORMED"}, None)])
    size = resolve(None).file_size(path)
    assert got[0] == [f"ERROR CorruptFileError: {path} at offset {size}: expected {need} bytes for "
                      f"{2**63 + 5} pages, found {size}"]
    assert len(got[1]) == 1 and got[1][0].startswith("None\tCorruptFileError: ") and got[2] == []

