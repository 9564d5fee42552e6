"""The queue source's columnar read (``engine.queue.cursor.ColumnCursor`` and
``engine.spark.queuesource.run_to_batch``), the source called directly (no Spark):
the same rows as the queue's own readers, for a queue with several journal files,
expiries, error counts and a reader with out-of-order confirms; partition bounds,
pruning and damage as before.
"""

from __future__ import annotations

import os
from typing import Any

import pyarrow as pa
import pytest

from engine.conventions import datetime_from_ms
from engine.errors import ConfigError, EngineError
from engine.fs import resolve
from engine.spark.batches import CORRUPT_COLUMN, arrow_schema
from engine.spark.options import read_schema
from engine.spark.schemas import QUEUE_SCHEMA

pytest.importorskip("pyspark")


def collect(reader: Any) -> pa.Table:
    batches = [b for p in reader.partitions() for b in reader.read(p)]
    target = arrow_schema(reader.schema)
    for b in batches:
        assert b.schema.equals(target)  # exactly what Spark checks
        b.validate(full=True)
    return pa.Table.from_batches(batches, schema=target)


@pytest.fixture()
def queue_dir(tmp_path: Any) -> str:
    """Queue ``jobs``: 400 items over many journal files (some with an expiry, some
    moved with error counts), readers ``a`` (confirms in and out of order) and ``b``."""
    from engine.queue import Item, Queue

    d = str(tmp_path / "q")
    os.makedirs(d)
    q = Queue.open(d, "jobs", sync="never", journal_size=4096)
    a = q.reader("a")
    q.reader("b")
    q.put_many([b"job-%d" % i * (1 + i % 7) for i in range(200)])
    q.put_many([(b"exp-%d" % i, 4_000_000_000.0 + i) for i in range(100)])
    for k in range(99):
        expire = None if k % 3 else 4_100_000_000_000 + k
        q.put_moved(Item(0, b"moved-%d" % k, 1_700_000_000_000 + k, expire, k % 5 + 1))
    q.put(b"big" * 2000)  # bigger than a journal file
    for _ in range(10):
        a.confirm([a.get(timeout=0).id])
    got = [a.get(timeout=0) for _ in range(300)]
    a.confirm([item.id for item in got[::3]])  # out of order
    a.abort([item.id for item in got[1::3]])
    q.checkpoint()
    q.close()
    assert len([f for f in os.listdir(d) if f.startswith("jobs.")]) > 10
    return d


def _reader_rows(d: str, reader: str) -> list[tuple[Any, ...]]:
    """What the queue's own reader delivers, as rows of the source's schema."""
    from engine.queue import Queue

    r = Queue.open_reader(d, "jobs", reader)
    rows = []
    try:
        while (item := r.get(timeout=0)) is not None:
            expire = None if item.expire_time_ms is None else datetime_from_ms(item.expire_time_ms)
            rows.append(("jobs", reader, item.id, datetime_from_ms(item.add_time_ms), expire, item.error_count,
                         item.data))
    finally:
        r.close()
    return sorted(rows, key=lambda row: row[2])


def _source_rows(d: str, reader: str, **opts: str) -> list[tuple[Any, ...]]:
    from engine.spark.queuesource import QueueReader

    table = collect(QueueReader({"path": d, "reader": reader, **opts}, read_schema(QUEUE_SCHEMA, {})))
    rows = list(zip(*(table.column(c).to_pylist() for c in QUEUE_SCHEMA.fieldNames())))
    return sorted(rows, key=lambda row: row[2])


@pytest.mark.parametrize("per_partition", [None, "1", "700", "5000", str(1 << 30)])
def test_the_source_gives_the_rows_the_queue_readers_give(queue_dir: str, per_partition: str | None) -> None:
    opts = {} if per_partition is None else {"bytesPerPartition": per_partition}
    for reader in ("a", "b"):
        want = _reader_rows(queue_dir, reader)
        assert _source_rows(queue_dir, reader, **opts) == want
    b = _reader_rows(queue_dir, "b")
    assert len(b) == 400 and {row[5] for row in b} == {0, 1, 2, 3, 4, 5}
    assert sum(row[4] is not None for row in b) == 100 + 33
    assert len(_reader_rows(queue_dir, "a")) == 400 - 10 - 100


def test_pending_puts_and_ranges_agree_with_the_readers(queue_dir: str) -> None:
    from engine.spark.queuesource import pending_puts

    fs = resolve(None)
    want = [row[2] for row in _reader_rows(queue_dir, "a")]
    assert [p.xid for p in pending_puts(fs, queue_dir, "jobs", "a")] == want
    for after, upto in ((0, 5), (10, 11), (57, 333), (150, 150), (398, 1000), (None, 200), (300, None)):
        got = [p.xid for p in pending_puts(fs, queue_dir, "jobs", "a", after, upto)]
        assert got == [i for i in want if (after is None or i > after) and (upto is None or i <= upto)]


def test_min_partitions_splits_a_small_backlog_at_file_starts(queue_dir: str) -> None:
    from engine.queue.segments import list_segments
    from engine.spark.queuesource import QueueReader

    starts = {s.first_id - 1 for s in list_segments(resolve(None), queue_dir, "jobs") if s.first_id}
    plan = QueueReader({"path": queue_dir, "reader": "b"}, read_schema(QUEUE_SCHEMA, {})).partitions()
    assert len(plan) == 2 and plan[0].upto_id in starts  # type: ignore[attr-defined]
    one = QueueReader({"path": queue_dir, "reader": "b", "minPartitions": "1"}, read_schema(QUEUE_SCHEMA, {}))
    assert len(one.partitions()) == 1
    many = QueueReader({"path": queue_dir, "reader": "b", "minPartitions": "5"}, read_schema(QUEUE_SCHEMA, {}))
    assert len(many.partitions()) >= 5
    assert _source_rows(queue_dir, "b", minPartitions="5") == _reader_rows(queue_dir, "b")
    for bad in ("0", "two"):
        with pytest.raises(ConfigError, match="minPartitions"):
            QueueReader({"path": queue_dir, "minPartitions": bad}, read_schema(QUEUE_SCHEMA, {}))


@pytest.mark.parametrize("mode", ["FAILFAST", "DROPMALFORMED", "PERMISSIVE"])
def test_damage_in_the_middle_of_a_file_is_reported_where_the_readers_report_it(tmp_path: Any, mode: str) -> None:
    """The same error at the same offset as the queue's reader; DROPMALFORMED and
    PERMISSIVE keep every item a CHECK vouched for before the damage."""
    from engine.errors import CorruptFileError
    from engine.queue import Queue
    from engine.spark.queuesource import QueueReader

    d = str(tmp_path)
    q = Queue.open(d, "jobs", sync="always")  # a write (and its CHECK) per put_many
    q.reader("b")
    for k in range(10):
        q.put_many([b"w%d-%d" % (k, i) for i in range(20)])
    q.checkpoint()
    q.close()
    (name,) = [f for f in os.listdir(d) if f.startswith("jobs.") and f.split(".")[1].isdigit()]
    path = os.path.join(d, name)
    at = os.path.getsize(path) // 2  # inside the 5th or 6th write
    with open(path, "r+b") as f:
        f.seek(at)
        byte = f.read(1)[0]
        f.seek(at)
        f.write(bytes([byte ^ 0x20]))
    delivered = []
    with pytest.raises(CorruptFileError) as raised:
        r = Queue.open_reader(d, "jobs", "b")
        try:
            while (item := r.get(timeout=0)) is not None:
                delivered.append(item.id)
        finally:
            r.close()
    # The item reader may drop the items its decoder read together with the damage
    # (its last read of up to 256 KiB): here it delivers none of them.
    assert delivered == list(range(1, len(delivered) + 1)) and len(delivered) <= 100
    schema = read_schema(QUEUE_SCHEMA, {"mode": mode})
    reader = QueueReader({"path": d, "reader": "b", "mode": mode}, schema)
    if mode == "FAILFAST":
        with pytest.raises(CorruptFileError) as failed:
            collect(reader)
        assert (failed.value.path, failed.value.offset) == (raised.value.path, raised.value.offset)
        assert str(failed.value) == str(raised.value)
        return
    table = collect(reader)
    ids = [i for i in table.column("id").to_pylist() if i is not None]
    # Every item of the writes before the damaged one, nothing after it.
    assert ids == list(range(1, len(ids) + 1)) and len(ids) in (80, 100) and ids[: len(delivered)] == delivered
    if mode == "PERMISSIVE":
        notes = [n for n in table.column(CORRUPT_COLUMN).to_pylist() if n]
        assert notes == [f"CorruptFileError: {raised.value}"]


def test_a_libkestrel_file_without_checks_is_read(tmp_path: Any) -> None:
    """A writer file with no CHECK records (written by libkestrel): every whole PUT is read."""
    from engine.queue import codec
    from engine.spark.queuesource import QueueReader

    d = str(tmp_path)
    body = b"".join(codec.encode_put(i, 1_700_000_000_000 + i, b"k%d" % i, 1_800_000_000_000 if i % 2 else None, i % 3)
                    for i in range(1, 50))
    with open(os.path.join(d, "jobs.1"), "wb") as f:
        f.write(codec.WRITER_MAGIC + body)
    with open(os.path.join(d, "jobs.2"), "wb") as f:
        f.write(codec.WRITER_MAGIC + codec.encode_put(50, 1, b"last"))
    table = collect(QueueReader({"path": d, "queue": "jobs"}, read_schema(QUEUE_SCHEMA, {})))
    assert table.column("id").to_pylist() == list(range(1, 51))
    assert table.column("data").to_pylist()[:2] == [b"k1", b"k2"]
    assert table.column("error_count").to_pylist()[:4] == [1, 2, 0, 1]
    assert table.column("expire_time").null_count == 25


def test_a_torn_tail_is_left_out_and_a_foreign_file_is_an_engine_error(queue_dir: str) -> None:
    from engine.spark.queuesource import QueueReader

    newest = max((f for f in os.listdir(queue_dir) if f.startswith("jobs.") and f.split(".")[1].isdigit()),
                 key=lambda f: int(f.split(".")[1]))
    path = os.path.join(queue_dir, newest)
    os.truncate(path, os.path.getsize(path) - 30)  # the last write torn by a crash (no writer now)
    rows = _source_rows(queue_dir, "b")
    assert rows == _reader_rows(queue_dir, "b") and [r[2] for r in rows] == list(range(1, 400))
    with open(path, "r+b") as f:
        f.write(b"\x77")  # not a writer file's magic
    with pytest.raises(EngineError):
        collect(QueueReader({"path": queue_dir, "reader": "b"}, read_schema(QUEUE_SCHEMA, {})))
