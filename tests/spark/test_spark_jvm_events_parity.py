"""Byte-level parity of the JVM engine-events reader (engine.spark.EventsSource) and the Python one.

Both read the same golden, damaged and hostile event journals and must agree
event for event and error for error (type, file, offset and words).  The JVM
side runs ``engine.spark.EventsDump`` (the connector's planner and reader
without a Spark session, several reads per JVM); the Python side is
``engine.spark.eventsource.EventsReader`` (replay through
``engine.events.EventReader``) without a session.  Skipped where the connector
cannot be built (no JDK).
"""

from __future__ import annotations

import os
import random
import shutil

import pytest
from dump_parity import Case, DumpParity, poke, truncate

from engine.events import EventJournal
from engine.fs import OpenMode, resolve
from engine.spark import jvmbuild
from engine.spark.eventsource import EventsReader
from engine.spark.schemas import EVENTS_SCHEMA

pytestmark = pytest.mark.skipif(jvmbuild.missing() is not None, reason=str(jvmbuild.missing()))

_PARITY = DumpParity("engine.spark.EventsDump", EventsReader, EVENTS_SCHEMA)
python_rows, jvm_rows = _PARITY.python_rows, _PARITY.jvm_rows
agree_all, agree = _PARITY.agree_all, _PARITY.agree


def write(d: str, ids: int = 5, events: int = 12, *, batch: int = 3, size: int = 7) -> None:
    """Ids whose batches interleave in ``data``; then some deletions."""
    with EventJournal.open(d, sync="never") as j:
        for start in range(1, events + 1, batch):
            for k in range(ids):
                stop = min(events, start + batch - 1)
                j.write(f"id-{k}", [(s, bytes([65 + (k + s) % 26]) * (size + s % 5)) for s in range(start, stop + 1)])
        if ids > 2:
            j.delete_to("id-1", 4)
            j.delete_to("id-2", events)


def test_golden_journal(tmp_path: object) -> None:
    d = f"{tmp_path}/golden"
    with EventJournal.open(d, sync="never") as j:
        j.write("order-1", [(1, b"created"), (2, b"paid")])
        j.write("order-2", [(1, b"created")])
        j.write("order-1", [(3, b"shipped")])
    rows = agree({"path": d})
    assert rows == ["golden\torder-1\t1\t" + b"created".hex(), "golden\torder-1\t2\t" + b"paid".hex(),
                    "golden\torder-1\t3\t" + b"shipped".hex(), "golden\torder-2\t1\t" + b"created".hex()]


def test_clean_journals_and_options(tmp_path: object) -> None:
    d = f"{tmp_path}/many"
    write(d, ids=9, events=20)
    e = f"{tmp_path}/other"
    write(e, ids=2, events=5)
    cases: list[Case] = [
        ({"path": d}, None),
        ({"path": d, "idsPerPartition": "2"}, None),
        ({"path": d, "persistenceIds": "id-3, id-1,nope"}, None),
        ({"path": d, "fromSequenceNr": "6", "toSequenceNr": "15"}, None),
        ({"path": d, "fromSequenceNr": "18"}, ["persistence_id", "sequence_nr"]),
        ({"path": d, "toSequenceNr": "0"}, None),
        ({"path": d, "fromSequenceNr": "9", "toSequenceNr": "3"}, None),
        ({"path": d}, ["payload"]),
        ({"path": f"{tmp_path}/*"}, None),
        ({"path": d, "mode": "PERMISSIVE"}, ["sequence_nr"]),
        ({"path": d, "minPartitions": "3"}, None),
        ({"path": d, "eventsPerPartition": "25", "mode": "PERMISSIVE"}, None),
        ({"path": d, "idsPerPartition": "0"}, None),
        ({"path": d, "fromSequenceNr": "x"}, None),
        ({"path": d, "bogus": "1"}, None),
    ]
    rows = agree_all(cases)
    assert len(rows[0]) == 9 * 20 - 4 - 20
    assert all(r[0].startswith("ERROR ConfigError") for r in rows[-3:])


def test_more_events_than_one_batch(tmp_path: object) -> None:
    """Batches of 8192 events: damage after the first leaves it read (as the Python reader)."""
    d = f"{tmp_path}/big"
    with EventJournal.open(d, sync="never") as j:
        for start in range(1, 10001, 1000):
            j.write("big", [(s, b"%d" % s) for s in range(start, start + 1000)])
    assert len(agree({"path": d}, ["sequence_nr"])) == 10000
    data = f"{d}/data"
    poke(data, resolve(None).file_size(data) - 30, b"\xff")  # in the last batch
    got = agree_all([({"path": d, "mode": m}, ["sequence_nr"]) for m in ("FAILFAST", "DROPMALFORMED", "PERMISSIVE")])
    assert len(got[1]) == 8192


def _damaged_copy(src: str, dst: str) -> str:
    shutil.copytree(src, dst)
    return dst


@pytest.mark.parametrize("what", ["payload", "header", "link", "meta-id", "meta-fields", "meta-size",
                                  "meta-magic", "data-magic", "data-short", "torn-tail", "dsums-entry",
                                  "dsums-magic", "msums-entry", "msums-magic", "no-data", "no-sums"])
def test_damage(tmp_path: object, what: str) -> None:
    d = f"{tmp_path}/j"
    write(d, ids=4, events=9)
    data, meta = f"{d}/data", f"{d}/meta"
    size = resolve(None).file_size(data)
    if what == "payload":
        poke(data, 8 + 24 + 2, b"\x00")
    elif what == "header":
        os.remove(f"{d}/data.crc")  # the walker's own checks, not the checksum's
        poke(data, 8 + 4, (999).to_bytes(4, "big"))
    elif what == "link":
        os.remove(f"{d}/data.crc")
        poke(data, 8 + 12, (size + 100).to_bytes(4, "big"))
    elif what == "meta-id":
        poke(meta, 8 + 26, b"X")
    elif what == "meta-fields":
        poke(meta, 8 + 10, (7).to_bytes(8, "big"))
    elif what == "meta-size":
        poke(meta, 8, (20).to_bytes(2, "big"))
    elif what == "meta-magic":
        poke(meta, 0, b"XPFM")
    elif what == "data-magic":
        poke(data, 0, b"AKF\x00")
    elif what == "data-short":
        truncate(data, size - 40)
    elif what == "torn-tail":
        with resolve(None).open(data, OpenMode.WRITE) as h:
            h.write_at(size, b"\x00\x00\x00\x30garbage" * 4)
    elif what == "dsums-entry":
        poke(f"{d}/data.crc", 12 + 12 * 2, (size + 999).to_bytes(4, "big"))
    elif what == "dsums-magic":
        poke(f"{d}/data.crc", 0, b"EJDX")
    elif what == "msums-entry":
        poke(f"{d}/meta.crc", 8 + 12 + 3, b"\x09")
    elif what == "msums-magic":
        poke(f"{d}/meta.crc", 5, b"\x02")
    elif what == "no-data":
        os.remove(data)
    elif what == "no-sums":
        os.remove(f"{d}/data.crc")
        os.remove(f"{d}/meta.crc")
    modes = ("FAILFAST", "DROPMALFORMED", "PERMISSIVE")
    got = agree_all([({"path": d, "mode": m, "idsPerPartition": "2"}, None) for m in modes]
                    + [({"path": d, "fromSequenceNr": "7"}, ["sequence_nr"])])
    if what in ("torn-tail", "no-sums", "dsums-entry"):
        # A reader skips what lies past the committed end, and takes data.crc entries up to
        # the first that ends past it (a live writer may have synced more since): no error.
        assert not any(r.startswith("ERROR") for r in got[0])
    else:
        assert any("Error" in r for rows in got for r in rows)


def test_random_byte_damage(tmp_path: object) -> None:
    """Single bytes overwritten anywhere in the four files: same events, same errors."""
    src = f"{tmp_path}/src"
    write(src, ids=5, events=10)
    rng = random.Random(30)
    cases: list[Case] = []
    for n in range(48):
        d = _damaged_copy(src, f"{tmp_path}/d{n}")
        name = rng.choice(["data", "data", "data", "meta", "data.crc", "meta.crc"])
        path = f"{d}/{name}"
        size = resolve(None).file_size(path)
        at = rng.randrange(size)
        poke(path, at, bytes([rng.randrange(256)]))
        if n % 3 == 0:
            os.remove(f"{d}/data.crc")  # reach the walker's link checks too
        mode = ("FAILFAST", "DROPMALFORMED", "PERMISSIVE")[n % 3]
        cases.append(({"path": d, "mode": mode, "fromSequenceNr": str(1 + n % 4)}, None))
    agree_all(cases)


def test_random_truncation(tmp_path: object) -> None:
    src = f"{tmp_path}/src"
    write(src, ids=3, events=8)
    rng = random.Random(31)
    cases: list[Case] = []
    for n in range(16):
        d = _damaged_copy(src, f"{tmp_path}/t{n}")
        name = rng.choice(["data", "meta", "data.crc", "meta.crc"])
        truncate(f"{d}/{name}", rng.randrange(resolve(None).file_size(f"{d}/{name}")))
        cases.append(({"path": d}, None))
    agree_all(cases)


def test_hostile_ids(tmp_path: object) -> None:
    """Ids that are not UTF-8, repeated ids, ids needing Python's repr escapes."""
    d = f"{tmp_path}/ids"
    with EventJournal.open(d, sync="never") as j:
        j.write("it's", [(1, b"a")])
        j.write("tab\there", [(1, b"b")])
        j.write("caf\u00e9", [(1, b"c")])
    meta = f"{d}/meta"
    with open(meta, "rb") as f:
        raw = f.read()
    cases: list[Case] = [({"path": d}, None)]
    for n, (find, put) in enumerate([(b"caf\xc3\xa9", b"caf\xc3\x28"), (b"caf\xc3\xa9", b"caf\xe9\xff"),
                                     (b"caf\xc3\xa9", b"cafe\xe2"), (b"tab\there", b"it's\x00\x00\x00\x00")]):
        e = _damaged_copy(d, f"{tmp_path}/h{n}")
        with open(f"{e}/meta", "wb") as f:
            f.write(raw.replace(find, put))
        cases.append(({"path": e}, None))
    # A meta.crc checksum mismatch names the id with Python's repr.
    e = _damaged_copy(d, f"{tmp_path}/sum")
    poke(f"{e}/meta.crc", 8 + 12 * 1 + 11, b"\x00")
    cases.append(({"path": e}, None))
    got = agree_all(cases)
    assert len(got[0]) == 3 and all(rows[-1].startswith("ERROR CorruptFileError") for rows in got[1:])
