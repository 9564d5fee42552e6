"""Column pruning through a user-given schema, the sources called directly (no Spark).

PySpark (4.3) gives a Python source no column pruning; the schema given with
``spark.read.schema(...)`` is what reaches ``reader(schema)``.  Every source
accepts some of its columns (any order, same types) and builds only those; the
log source answers a schema of IDX columns from the IDX files alone.
"""

from __future__ import annotations

import os
import struct
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from engine.errors import ConfigError, CorruptFileError, EngineError
from engine.spark.batches import CORRUPT_COLUMN, arrow_schema
from engine.spark.options import read_schema, user_schema
from engine.spark.schemas import EVENTS_SCHEMA, LOG_SCHEMA, PAGES_SCHEMA, QUEUE_SCHEMA, STREAMS_SCHEMA

T0 = 10**18


def _schema(*fields: tuple[str, Any]) -> StructType:
    return StructType([StructField(n, t, True) for n, t in fields])


def collect(reader: Any) -> pa.Table:
    batches = [b for p in reader.partitions() for b in reader.read(p)]
    target = arrow_schema(reader.schema)
    for b in batches:
        assert b.schema.equals(target)  # exactly what Spark checks
    return pa.Table.from_batches(batches, schema=target)


def _make_log(path: str, n: int) -> None:
    from engine.applog import AppendLog

    with AppendLog.open(path, sync="never", segment_bytes=4096) as log:
        for i in range(n):
            log.append(b"rec%d" % i, flags=i % 5, time_ns=T0 + i * 10**6)


@pytest.fixture()
def log_dir(tmp_path: Any) -> str:
    path = str(tmp_path / "clicks")
    _make_log(path, 400)  # several segments
    return path


# -- the schema check ----------------------------------------------------------------------
def test_user_schema_accepts_any_subset_in_any_order() -> None:
    full = read_schema(LOG_SCHEMA, {})
    for given in (_schema(("time", TimestampType()), ("index", LongType())), _schema(("data", BinaryType())),
                  full, StructType([StructField("index", LongType(), False)])):
        assert user_schema("engine-log", full, given, {}) is given


@pytest.mark.parametrize(("given", "problem"), [
    (_schema(("nope", LongType())), "no column 'nope'"),
    (_schema(("index", StringType())), "'index' is string, not bigint"),
    (_schema(("time", LongType())), "'time' is bigint, not timestamp"),
    (_schema(("index", LongType()), ("index", LongType())), "'index' twice"),
    (StructType([]), "no column of the source"),
    (_schema((CORRUPT_COLUMN, StringType())), "no column '_corrupt_record'"),
])
def test_user_schema_refuses_anything_else_listing_the_columns(given: StructType, problem: str) -> None:
    with pytest.raises(ConfigError) as err:
        user_schema("engine-log", read_schema(LOG_SCHEMA, {}), given, {})
    text = str(err.value)
    assert problem in text
    assert "index bigint NOT NULL, time timestamp NOT NULL" in text and "data binary NOT NULL" in text


def test_user_schema_nullability_and_permissive_mode() -> None:
    queue = read_schema(QUEUE_SCHEMA, {})
    # expire_time can be null: a given schema cannot make it NOT NULL.
    with pytest.raises(ConfigError, match="'expire_time' can be null"):
        user_schema("engine-queue", queue, StructType([StructField("expire_time", TimestampType(), False)]), {})
    opts = {"mode": "PERMISSIVE"}
    permissive = read_schema(LOG_SCHEMA, opts)
    with pytest.raises(ConfigError, match="mode PERMISSIVE needs the _corrupt_record column"):
        user_schema("engine-log", permissive, _schema(("index", LongType())), opts)
    with pytest.raises(ConfigError, match="'index' can be null"):
        user_schema("engine-log", permissive, StructType([StructField("index", LongType(), False),
                                                          StructField(CORRUPT_COLUMN, StringType())]), opts)
    given = _schema((CORRUPT_COLUMN, StringType()), ("index", LongType()))
    assert user_schema("engine-log", permissive, given, opts) is given


def test_every_reader_checks_its_schema(tmp_path: Any) -> None:
    from engine.spark.eventsource import EventsReader
    from engine.spark.logsource import LogReader
    from engine.spark.pagesource import PagesReader
    from engine.spark.queuesource import QueueReader
    from engine.spark.streamsource import StreamsReader

    bad = _schema(("nope", LongType()))
    path = str(tmp_path)
    for cls in (LogReader, QueueReader, EventsReader, StreamsReader, PagesReader):
        with pytest.raises(ConfigError, match="no column 'nope'"):
            cls({"path": path}, bad)


# -- the log source ------------------------------------------------------------------------
def _log_reader(path: str, schema: StructType, **opts: str) -> Any:
    from engine.spark.logsource import LogReader

    return LogReader({"path": path, "recordsPerPartition": "70", "batchRecords": "32", **opts}, schema)


PRUNED = [
    _schema(("index", LongType()), ("time", TimestampType())),  # IDX only
    _schema(("time_ns", LongType()), ("segment", LongType()), ("log", StringType())),  # IDX only
    _schema(("flags", LongType()), ("index", LongType())),  # the LOG, no payload column
    _schema(("data", BinaryType()), ("time", TimestampType())),
]


@pytest.mark.parametrize("schema", PRUNED, ids=["index-time", "idx-others", "flags", "data"])
def test_log_pruned_reads_equal_the_full_read(log_dir: str, schema: StructType) -> None:
    full = collect(_log_reader(log_dir, read_schema(LOG_SCHEMA, {})))
    got = collect(_log_reader(log_dir, schema))
    assert got.num_rows == 400
    assert got.to_pydict() == full.select(schema.fieldNames()).to_pydict()


def test_log_index_columns_are_read_from_the_idx_alone(log_dir: str) -> None:
    """Every .log file replaced by garbage of the same size after planning: an
    index/time read still answers (it reads no LOG byte, and the LOG's .crc
    checksums cover only records), a read needing the LOG fails."""
    idx_only = _log_reader(log_dir, PRUNED[0])
    parts = idx_only.partitions()
    with_log = _log_reader(log_dir, PRUNED[2])
    log_parts = with_log.partitions()
    for name in os.listdir(log_dir):
        if name.endswith(".log"):
            path = os.path.join(log_dir, name)
            size = os.path.getsize(path)
            with open(path, "wb") as f:
                f.write(b"\xee" * size)
    rows = [b for p in parts for b in idx_only.read(p)]
    table = pa.Table.from_batches(rows)
    assert table.column("index").to_pylist() == list(range(400))
    assert [t.value for t in table.column("time")] == [(T0 + i * 10**6) // 1000 for i in range(400)]
    with pytest.raises(CorruptFileError):
        for p in log_parts:
            list(with_log.read(p))


def _segment(log_dir: str) -> tuple[str, int]:
    idx = sorted(n for n in os.listdir(log_dir) if n.endswith(".idx"))[0]
    return os.path.join(log_dir, idx), 16  # the first entry's offset


@pytest.mark.parametrize(("field", "value", "what"), [
    (8, struct.pack("<Q", 99), "index entry for record"),  # entry 3's index
    (16, struct.pack("<q", 5), "a log offset >="),  # entry 3's offset behind entry 2's
    (16, struct.pack("<q", 1 << 40), "a log offset"),  # far past the log's end
    (0, struct.pack("<q", 0), "times never go back"),  # entry 3's time before entry 2's
])
@pytest.mark.parametrize("mode", ["FAILFAST", "DROPMALFORMED", "PERMISSIVE"])
def test_log_index_reads_check_the_entries(log_dir: str, field: int, value: bytes, what: str, mode: str) -> None:
    idx_path, base = _segment(log_dir)
    with open(idx_path, "r+b") as f:
        f.seek(base + 24 * 3 + field)
        f.write(value)
    schema = PRUNED[0] if mode != "PERMISSIVE" else _schema(("index", LongType()), (CORRUPT_COLUMN, StringType()))
    reader = _log_reader(log_dir, schema, mode=mode)
    if mode == "FAILFAST":
        with pytest.raises(CorruptFileError, match=what) as err:
            collect(reader)
        assert idx_path in str(err.value)
        return
    table = collect(reader)
    # The damaged entry's run (32 entries) is where the partition's read stops.
    assert 0 < table.num_rows < 400
    if mode == "PERMISSIVE":
        notes = [n for n in table.column(CORRUPT_COLUMN).to_pylist() if n]
        assert len(notes) == 1 and idx_path in notes[0] and what in notes[0]


def test_log_pruned_reads_with_positions(log_dir: str) -> None:
    opts = {"startingOffsets": '{"clicks": 50}', "endingOffsets": '{"clicks": 333}'}
    got = collect(_log_reader(log_dir, PRUNED[0], **opts))
    assert got.column("index").to_pylist() == list(range(50, 333))
    by_time = collect(_log_reader(log_dir, PRUNED[0], startingTimestamp=str((T0 + 120 * 10**6) // 10**6)))
    assert by_time.column("index").to_pylist() == list(range(120, 400))


def test_log_pruned_reads_follow_the_mode_on_a_damaged_record(log_dir: str) -> None:
    seg = sorted(n for n in os.listdir(log_dir) if n.endswith(".log"))[0]
    path = os.path.join(log_dir, seg)
    with open(path, "r+b") as f:
        raw = f.read()
        at = raw.index(b"rec7")
        f.seek(at + 1)
        f.write(b"f")  # b"rec7" -> b"rfc7": same size, fails its checksum
    flags = _schema(("index", LongType()), ("flags", LongType()))
    with pytest.raises(CorruptFileError, match="checksum"):
        collect(_log_reader(log_dir, flags))
    dropped = collect(_log_reader(log_dir, flags, mode="DROPMALFORMED"))
    assert 7 not in dropped.column("index").to_pylist() and dropped.num_rows == 399
    kept = collect(_log_reader(log_dir, _schema(("flags", LongType()), (CORRUPT_COLUMN, StringType())),
                               mode="PERMISSIVE"))
    notes = kept.column(CORRUPT_COLUMN).to_pylist()
    assert kept.num_rows == 400 and [i for i, n in enumerate(notes) if n] == [7]
    # The IDX columns alone do not read the record, so they do not see it (documented).
    assert collect(_log_reader(log_dir, PRUNED[0])).num_rows == 400


# -- the other sources ---------------------------------------------------------------------
@pytest.fixture()
def queue_dir(tmp_path: Any) -> str:
    from engine.queue import Queue

    d = str(tmp_path / "q")
    os.makedirs(d)
    q = Queue.open(d, "jobs", sync="never", journal_size=4096)  # many journal files
    a = q.reader("a")
    q.reader("b")
    q.put_many([b"j%d" % i * 10 for i in range(300)])
    q.put(b"expiring", expire_at=4_000_000_000.0)
    for _ in range(5):
        a.confirm([a.get(timeout=0).id])
    got = [a.get(timeout=0) for _ in range(3)]
    a.confirm([got[2].id])  # out of order
    a.abort([got[0].id, got[1].id])
    q.checkpoint()
    q.close()
    return d


def _queue_rows(d: str, schema: StructType, **opts: str) -> list[tuple[Any, ...]]:
    from engine.spark.queuesource import QueueReader

    table = collect(QueueReader({"path": d, **opts}, schema))
    return sorted(zip(*(table.column(c).to_pylist() for c in schema.fieldNames())), key=repr)


def test_queue_partitions_split_the_backlog_and_prune(queue_dir: str) -> None:
    from engine.spark.queuesource import QueueReader

    full = read_schema(QUEUE_SCHEMA, {})
    whole = _queue_rows(queue_dir, full, bytesPerPartition=str(1 << 30))
    split = QueueReader({"path": queue_dir, "bytesPerPartition": "1000"}, full)
    assert len(split.partitions()) > 2 * 4  # two readers, several ranges each
    assert _queue_rows(queue_dir, full, bytesPerPartition="1000") == whole
    per_reader = {r: sum(1 for row in whole if row[1] == r) for r in ("a", "b")}
    assert per_reader == {"a": 301 - 6, "b": 301}
    names = full.fieldNames()
    for cols in (["id"], ["data", "reader"], ["expire_time", "error_count", "add_time"]):
        schema = StructType([full[c] for c in cols])
        want = sorted((tuple(row[names.index(c)] for c in cols) for row in whole), key=repr)
        assert _queue_rows(queue_dir, schema, bytesPerPartition="1000") == want


def _subsets(schema: StructType) -> list[StructType]:
    names = schema.fieldNames()
    return [StructType([schema[n]]) for n in names] + [StructType([schema[n] for n in reversed(names[1:])])]


def test_events_streams_pages_and_kv_prune(tmp_path: Any) -> None:
    from engine.events import EventJournal
    from engine.kv import KV
    from engine.pages import PageStore
    from engine.spark.eventsource import EventsReader
    from engine.spark.kvsource import KV_SCHEMA, KVSourceReader
    from engine.spark.pagesource import PagesReader
    from engine.spark.streamsource import StreamsReader
    from engine.streams import StreamJournal

    ev = str(tmp_path / "ev")
    os.makedirs(ev)
    with EventJournal.open(ev, sync="never") as j:
        for k in range(3):
            j.write(f"id-{k}", [(s, b"e%d" % s) for s in range(1, 6)])
    journal = str(tmp_path / "s.journal")
    with StreamJournal.open(journal, size=1 << 20, create=True) as sj:
        for i in range(4):
            st = sj.open_stream(b"s%d" % i)
            st.write(b"x" * (i + 1))
            st.abort() if i == 2 else st.close()
    pages = str(tmp_path / "p.db")
    with PageStore.open(pages, page_size=512, create=True) as ps:
        for i in range(5):
            with ps.transaction() as tx:
                tx.write(tx.allocate(), 0, b"page%d" % i)
    kv = str(tmp_path / "s.kv")
    with KV.open(kv, create=True) as store, store.transaction() as tx:
        for i in range(50):
            tx.put(b"k%03d" % i, b"v%d" % i)
    for cls, path, schema in ((EventsReader, ev, EVENTS_SCHEMA), (StreamsReader, journal, STREAMS_SCHEMA),
                              (PagesReader, pages, PAGES_SCHEMA), (KVSourceReader, kv, KV_SCHEMA)):
        full = collect(cls({"path": path}, schema))
        assert full.num_rows > 0
        for sub in _subsets(schema):
            got = collect(cls({"path": path}, sub))
            assert sorted(zip(*got.to_pydict().values())) == sorted(zip(*full.select(sub.fieldNames())
                                                                          .to_pydict().values())), cls
    # An event journal read in PERMISSIVE mode with a pruned schema keeps _corrupt_record.
    sub = StructType([EVENTS_SCHEMA["sequence_nr"], StructField(CORRUPT_COLUMN, StringType())])
    got = collect(EventsReader({"path": ev, "mode": "PERMISSIVE"}, _nullable(sub)))
    assert got.num_rows == 15 and set(got.column(CORRUPT_COLUMN).to_pylist()) == {None}


def _nullable(schema: StructType) -> StructType:
    return StructType([StructField(f.name, f.dataType, True) for f in schema.fields])


def test_int_column_types_are_checked_exactly() -> None:
    queue = read_schema(QUEUE_SCHEMA, {})
    with pytest.raises(ConfigError, match="'error_count' is bigint, not int"):
        user_schema("engine-queue", queue, _schema(("error_count", LongType())), {})
    assert user_schema("engine-queue", queue, _schema(("error_count", IntegerType())), {})


def test_queue_damage_in_a_journal_file_is_left_to_the_mode(queue_dir: str) -> None:
    """Planning reads each journal file's first id to split the backlog; a file
    damaged there does not fail the planning: the reads meet it and ``mode`` says
    what it does."""
    from engine.spark.queuesource import QueueReader

    files = sorted((f for f in os.listdir(queue_dir) if f.startswith("jobs.") and f.split(".")[1].isdigit()),
                   key=lambda f: int(f.split(".")[1]))
    assert len(files) > 2
    with open(os.path.join(queue_dir, files[1]), "r+b") as f:
        f.write(b"\xff" * 16)  # the magic and the first record
    with pytest.raises(EngineError):
        collect(QueueReader({"path": queue_dir, "reader": "b"}, read_schema(QUEUE_SCHEMA, {})))
    kept = collect(QueueReader({"path": queue_dir, "reader": "b", "mode": "PERMISSIVE"},
                               read_schema(QUEUE_SCHEMA, {"mode": "PERMISSIVE"})))
    notes = [n for n in kept.column(CORRUPT_COLUMN).to_pylist() if n]
    assert notes and files[1] in notes[0]
