"""The queue, event, stream and page sources called directly (partitions + read), no Spark."""

from __future__ import annotations

import os
from typing import Any

import pyarrow as pa
import pytest

from engine.spark.batches import arrow_schema, repeat_string
from engine.spark.schemas import EVENTS_SCHEMA, PAGES_SCHEMA, QUEUE_SCHEMA, STREAMS_SCHEMA
from engine.stores import discover


def collect(reader: Any, schema: Any) -> pa.Table:
    batches = [b for p in reader.partitions() for b in reader.read(p)]
    for b in batches:
        assert b.schema.equals(arrow_schema(schema))  # exactly what Spark checks
    return pa.Table.from_batches(batches, schema=arrow_schema(schema))


def test_repeat_string_builds_a_valid_column() -> None:
    col = repeat_string("héllo", 4)
    col.validate(full=True)
    assert col.to_pylist() == ["héllo"] * 4
    assert repeat_string("x", 0).to_pylist() == []


@pytest.fixture()
def queue_dir(tmp_path: Any) -> Any:
    from engine.queue import Queue

    d = str(tmp_path / "q")
    os.makedirs(d)
    q = Queue.open(d, "jobs", sync="never")
    a = q.reader("a")
    q.reader("b")
    q.put_many([b"j%d" % i for i in range(20)])
    q.put(b"expiring", expire_at=4_000_000_000.0)
    for _ in range(5):
        a.confirm([a.get(timeout=0).id])
    # out of order: confirm item 8 only
    got = [a.get(timeout=0) for _ in range(3)]
    a.confirm([got[2].id])
    a.abort([got[0].id, got[1].id])
    q.checkpoint()
    yield d, q
    q.close()


def test_queue_backlog_per_reader(queue_dir: Any) -> None:
    from engine.spark.queuesource import QueueReader

    d, _ = queue_dir
    t = collect(QueueReader({"path": d}, QUEUE_SCHEMA), QUEUE_SCHEMA)
    by_reader: dict[str, list[int]] = {}
    for r, i in zip(t.column("reader").to_pylist(), t.column("id").to_pylist()):
        by_reader.setdefault(r, []).append(i)
    assert by_reader["b"] == list(range(1, 22))
    assert by_reader["a"] == [6, 7, *range(9, 22)]  # 1-5 and 8 confirmed
    expire = t.column("expire_time").to_pylist()
    assert expire.count(None) == len(expire) - 2  # the one item with an expiry, for both readers
    r2 = QueueReader({"path": d, "reader": "a"}, QUEUE_SCHEMA)
    assert [p.reader for p in r2.partitions()] == ["a"]  # type: ignore[attr-defined]
    r3 = QueueReader({"path": d, "queue": "other"}, QUEUE_SCHEMA)
    assert collect(r3, QUEUE_SCHEMA).num_rows == 0


def test_events_partitions_and_options(tmp_path: Any) -> None:
    from engine.events import EventJournal
    from engine.spark.eventsource import EventsReader

    d = str(tmp_path / "ev")
    os.makedirs(d)
    with EventJournal.open(d, sync="never") as j:
        for k in range(7):
            j.write(f"p{k}", [(s, b"%d:%d" % (k, s)) for s in range(1, 6)])
        j.write("p0", [(6, b"0:6")])
        j.delete_to("p1", 5)  # p1 has no live events left
    r = EventsReader({"path": d, "idsPerPartition": "2"}, EVENTS_SCHEMA)
    parts = r.partitions()
    assert len(parts) == 3  # 6 live ids, 2 per partition
    t = collect(r, EVENTS_SCHEMA)
    assert t.num_rows == 6 * 5 + 1
    r2 = EventsReader({"path": d, "persistenceIds": "p0,p3", "fromSequenceNr": "4", "toSequenceNr": "5"},
                      EVENTS_SCHEMA)
    t2 = collect(r2, EVENTS_SCHEMA)
    assert list(zip(t2.column("persistence_id").to_pylist(), t2.column("sequence_nr").to_pylist())) == [
        ("p0", 4), ("p0", 5), ("p3", 4), ("p3", 5)]
    assert t2.column("payload").to_pylist() == [b"0:4", b"0:5", b"3:4", b"3:5"]


def test_streams_reader_statuses(tmp_path: Any) -> None:
    from engine.spark.streamsource import StreamsReader
    from engine.streams import StreamJournal

    path = str(tmp_path / "j.journal")
    with StreamJournal.open(path, size=1 << 20, create=True) as sj:
        for i in range(4):
            s = sj.open_stream(b"s%d" % i)
            s.write(b"d" * (10 * i + 1))
            s.close()
    r = StreamsReader({"path": str(tmp_path)}, STREAMS_SCHEMA)
    t = collect(r, STREAMS_SCHEMA)
    assert t.column("ident").to_pylist() == ["s0", "s1", "s2", "s3"]
    assert t.column("bytes").to_pylist() == [1, 11, 21, 31]
    assert set(t.column("status").to_pylist()) == {"complete"}
    r2 = StreamsReader({"path": path}, STREAMS_SCHEMA)
    assert collect(r2, STREAMS_SCHEMA).num_rows == 4


def test_pages_reader(tmp_path: Any) -> None:
    from engine.pages import PageStore
    from engine.spark.pagesource import PagesReader

    path = str(tmp_path / "p.db")
    with PageStore.open(path, page_size=512, create=True) as ps:
        pages = []
        for i in range(10):
            with ps.transaction() as tx:
                p = tx.allocate()
                tx.write(p, 0, b"P%d" % i)
                pages.append(p)
        with ps.transaction() as tx:
            tx.free(pages[4])
    r = PagesReader({"path": path, "pagesPerPartition": "3"}, PAGES_SCHEMA)
    assert len(r.partitions()) == 4
    t = collect(r, PAGES_SCHEMA)
    assert t.column("page").to_pylist() == list(range(1, 11))
    assert t.column("offset").to_pylist() == [512 * p for p in range(1, 11)]
    assert t.column("free").to_pylist().count(True) == 1
    free = t.column("free").to_pylist().index(True)
    assert t.column("data").to_pylist()[free] == b""


def test_discover_finds_every_kind(tmp_path: Any) -> None:
    from engine.applog import AppendLog
    from engine.events import EventJournal
    from engine.pages import PageStore
    from engine.queue import Queue
    from engine.streams import StreamJournal

    root = tmp_path / "data"
    with AppendLog.open(str(root / "a" / "log1"), sync="never") as log:
        log.append(b"x")
    os.makedirs(root / "q")
    Queue.open(str(root / "q"), "jobs", sync="never").close()
    os.makedirs(root / "s")
    StreamJournal.open(str(root / "s" / "x.journal"), size=1 << 16, create=True).close()
    os.makedirs(root / "e" / "ev")
    EventJournal.open(str(root / "e" / "ev"), sync="never").close()
    PageStore.open(str(root / "p.db"), create=True).close()
    f = discover(str(root))
    assert [os.path.relpath(p, root) for p in f.logs] == ["a/log1"]
    assert [os.path.relpath(p, root) for p in f.queues] == ["q"]
    assert [os.path.relpath(p, root) for p in f.streams] == ["s/x.journal"]
    assert [os.path.relpath(p, root) for p in f.events] == ["e/ev"]
    assert [os.path.relpath(p, root) for p in f.pages] == ["p.db"]
    assert f.total == 5


def _pages_store(path: str) -> None:
    from engine.pages import PageStore

    with PageStore.open(path, page_size=512, create=True) as ps:
        with ps.transaction() as tx:
            for i in range(10):
                p = tx.allocate()
                tx.write(p, 0, b"P%d" % i)
        for p in (3, 6, 9):  # a free list of three pages, each link in the page before
            with ps.transaction() as tx:
                tx.free(p)


def _pages_rows(path: str, **options: str) -> list[dict[str, Any]]:
    from engine.spark.pagesource import PagesReader

    r = PagesReader({"path": path, **options}, PAGES_SCHEMA)
    return [row for p in r.partitions() for b in r.read(p) for row in b.to_pylist()]


def test_pages_reader_checks_the_free_list_pages(tmp_path: Any) -> None:
    """The stress run (seed 2026112417): zeros over the head of the free list's
    first page cut the list short, so the free pages after it were read back as
    live pages, with no error, while PageStore.open and open_reader raise
    CorruptFileError (their verify checks every page's sum).  The source checks
    the free pages' sums too, and ``mode`` decides what the damage does."""
    from engine.errors import CorruptFileError
    from engine.pages import PageStore
    from engine.spark.schemas import PAGES_SCHEMA as SCHEMA

    path = str(tmp_path / "p.db")
    _pages_store(path)
    clean = _pages_rows(path)
    assert [r["page"] for r in clean if r["free"]] == [3, 6, 9]
    with PageStore.open_reader(path) as reader:
        head = reader.free_pages[0]
    with open(path, "r+b") as f:
        f.seek(head * 512)
        f.write(bytes(64))
    with pytest.raises(CorruptFileError) as err:
        _pages_rows(path)
    assert err.value.path == path and err.value.offset == head * 512
    with pytest.raises(CorruptFileError), PageStore.open_reader(path) as reader:
        reader.verify()  # what the store says about it
    assert _pages_rows(path, mode="DROPMALFORMED") == []
    from engine.spark.options import read_schema
    from engine.spark.pagesource import PagesReader

    # What the source declares in PERMISSIVE mode: every column nullable, plus _corrupt_record.
    permissive = read_schema(SCHEMA, {"mode": "PERMISSIVE"})

    r = PagesReader({"path": path, "mode": "PERMISSIVE"}, permissive)
    rows = [row for p in r.partitions() for b in r.read(p) for row in b.to_pylist()]
    assert len(rows) == 1 and "CorruptFileError" in rows[0]["_corrupt_record"]
    assert f"offset {head * 512}" in rows[0]["_corrupt_record"]


def test_pages_reader_never_reads_zeroed_bytes_back_silently(tmp_path: Any) -> None:
    """Every 64-byte range of the store file zeroed (the stress run's damage):
    the partition reader returns exactly the clean rows or raises an EngineError."""
    from engine.errors import EngineError

    path = str(tmp_path / "p.db")
    _pages_store(path)
    with open(path, "rb") as f:
        original = f.read()
    clean = _pages_rows(path)
    for at in range(0, len(original), 64):
        with open(path, "wb") as f:
            f.write(original[:at] + bytes(64) + original[at + 64:])
        try:
            got = _pages_rows(path, pagesPerPartition="4")
        except EngineError:
            continue
        assert got == clean, f"zeros at {at}"
