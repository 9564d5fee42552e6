"""The JVM engine-queue streaming source (engine.spark.QueueStream) in Spark, and the queue
reader process behind it (engine.spark.queuebridge): micro-batches bounded by
maxRecordsPerTrigger / maxBytesPerTrigger, Trigger.AvailableNow, a restart that skips what was
processed, a crashed batch replayed from the files, failOnDataLoss, the reader process ended
with the query, and its failures as one line."""

from __future__ import annotations

import io
import os
from typing import Any

import pytest

from engine.fs import resolve
from engine.spark import jvmbuild
from engine.spark.queuebridge import Bridge, main, ranges, serve
from engine.spark.queuesource import pending_puts

needs_jar = pytest.mark.skipif(jvmbuild.missing() is not None, reason=str(jvmbuild.missing()))


def _queue(d: str, items: list[bytes], **config: Any) -> Any:
    """A queue 'jobs' with reader 'spark' (its consumer then closed: Spark's takes it)."""
    from engine.queue import Queue

    os.makedirs(d, exist_ok=True)
    q = Queue.open(d, "jobs", sync="never", **config)
    q.reader("spark").close()
    if items:
        q.put_many(items)
    q.sync()
    return q


def _run(spark: Any, d: str, chk: str, schema: str | None = None, during: Any = None,
         **opts: Any) -> list[tuple[int, list[Any]]]:
    """One Trigger.AvailableNow run: (batch id, its rows) per micro-batch (rows: ids, or tuples
    of the given schema's columns); ``during()`` is called in each batch."""
    reader = spark.readStream.format("engine-queue").option("queue", "jobs").option("reader", "spark")
    if schema is not None:
        reader = reader.schema(schema)
    for k, v in opts.items():
        reader = reader.option(k, v)
    batches: list[tuple[int, list[Any]]] = []

    def each(df: Any, batch_id: int) -> None:
        rows = df.collect()
        got = [tuple(r) for r in rows] if schema is not None else sorted(r["id"] for r in rows)
        batches.append((batch_id, got))
        if during is not None:
            during()

    query = reader.load(d).writeStream.foreachBatch(each).option("checkpointLocation", chk) \
        .trigger(availableNow=True).start()
    try:
        query.awaitTermination(180)
    finally:
        query.stop()
    return batches


def _pending(d: str) -> list[int]:
    return [p.xid for p in pending_puts(resolve(None), d, "jobs", "spark")]


def _bridges(d: str) -> list[int]:
    """PIDs of queue reader processes serving directory ``d``."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                args = f.read().split(b"\0")
        except OSError:
            continue
        if b"engine.spark.queuebridge" in args and d.encode() in args:
            found.append(int(pid))
    return found


@needs_jar
def test_micro_batches_follow_max_records_and_a_restart_skips_what_was_processed(spark: Any, tmp_path: Any) -> None:
    d, chk = str(tmp_path / "q"), str(tmp_path / "chk")
    q = _queue(d, [b"j%d" % i for i in range(21)])
    batches = _run(spark, d, chk, maxRecordsPerTrigger=8)
    assert [ids for _b, ids in batches] == [list(range(1, 9)), list(range(9, 17)), list(range(17, 22))]
    assert set(_pending(d)) <= set(range(17, 22))  # confirmed once Spark committed their batch
    assert _bridges(d) == []  # the reader process ended with the query
    q.put_many([b"late-%d" % i for i in range(4)])
    q.sync()
    again = _run(spark, d, chk, maxRecordsPerTrigger=8)
    assert [ids for _b, ids in again] == [list(range(22, 26))]  # nothing delivered twice
    q.close()


@needs_jar
def test_available_now_stops_at_what_was_there_when_the_query_started(spark: Any, tmp_path: Any) -> None:
    d, chk = str(tmp_path / "q"), str(tmp_path / "chk")
    q = _queue(d, [b"j%d" % i for i in range(12)])

    def put_more() -> None:
        q.put_many([b"new"] * 5)
        q.sync()

    batches = _run(spark, d, chk, during=put_more, maxRecordsPerTrigger=5)
    assert [ids for _b, ids in batches] == [[1, 2, 3, 4, 5], [6, 7, 8, 9, 10], [11, 12]]
    assert [ids for _b, ids in _run(spark, d, chk, maxRecordsPerTrigger=100)] == [list(range(13, 28))]
    q.close()


@needs_jar
def test_max_bytes_per_trigger_bounds_a_batch_by_data_bytes(spark: Any, tmp_path: Any) -> None:
    d, chk = str(tmp_path / "q"), str(tmp_path / "chk")
    q = _queue(d, [b"x" * 10 for _ in range(10)] + [b"y" * 100])
    batches = _run(spark, d, chk, maxBytesPerTrigger=35)
    # Three 10-byte items fit 35 bytes; an item bigger than the bound goes alone.
    assert [ids for _b, ids in batches] == [[1, 2, 3], [4, 5, 6], [7, 8, 9], [10], [11]]
    q.close()


@needs_jar
def test_a_given_schema_projects_the_rows_and_a_bad_one_fails(spark: Any, tmp_path: Any) -> None:
    d, chk = str(tmp_path / "q"), str(tmp_path / "chk")
    q = _queue(d, [b"j%d" % i for i in range(5)])
    batches = _run(spark, d, chk, schema="data binary, id long", maxRecordsPerTrigger=3)
    assert [rows for _b, rows in batches] == [[(bytearray(b"j%d" % i), i + 1) for i in range(3)],
                                              [(bytearray(b"j%d" % i), i + 1) for i in range(3, 5)]]
    # (The table also takes writes, so its schema answers a write's input; a
    # read's schema is checked when the query plans its scan, as engine-log's.)
    with pytest.raises(Exception, match="no column 'nope'"):
        _run(spark, d, chk + "1", schema="nope long")
    with pytest.raises(Exception, match="needs option\\('queue', NAME\\) naming one queue"):
        _run(spark, d, chk + "2", queue="jobs,other")
    q.close()


@needs_jar
def test_an_expired_item_the_reader_drops_is_in_no_batch(spark: Any, tmp_path: Any) -> None:
    from engine.queue import Item

    d, chk = str(tmp_path / "q"), str(tmp_path / "chk")
    q = _queue(d, [b"a", b"b"])
    q.put_moved(Item(0, b"expired", 1_700_000_000_000, 1_700_000_000_001, 0))  # pending, expired in 2023
    q.put_many([b"c", b"d"])
    q.sync()
    assert _pending(d) == [1, 2, 3, 4, 5]
    batches = _run(spark, d, chk)
    # The reader drops the expired item (not handed out), and the batch read from the files leaves it out.
    assert [ids for _b, ids in batches] == [[1, 2, 4, 5]]
    q.close()


@needs_jar
def test_consumers_of_one_reader_get_distinct_items(spark: Any, tmp_path: Any) -> None:
    from engine.queue import Queue

    d, chk = str(tmp_path / "q"), str(tmp_path / "chk")
    q = _queue(d, [b"j%d" % i for i in range(12)])
    other = Queue.open_reader(d, "jobs", "spark")  # another consumer, holding 1..4 unconfirmed
    # A third one present meanwhile: the other claims one item at a time, none ahead (a consumer
    # alone claims a run ahead, which a newcomer waits for: nothing to take at first).
    third = Queue.open_reader(d, "jobs", "spark")
    held = [other.get(timeout=0) for _ in range(4)]
    third.close()
    assert [i.id for i in held if i is not None] == [1, 2, 3, 4]
    batches = _run(spark, d, chk, maxRecordsPerTrigger=5)
    # Only what the stream's reader handed out, not the other consumer's pending items.
    assert [ids for _b, ids in batches] == [list(range(5, 10)), [10, 11, 12]]
    other.close()
    q.close()


def _drop_last_commit(chk: str) -> int:
    """As if the driver died after running its last batch, before recording it done."""
    last = max(int(n) for n in os.listdir(os.path.join(chk, "commits")) if n.isdigit())
    os.remove(os.path.join(chk, "commits", str(last)))
    os.remove(os.path.join(chk, "commits", f".{last}.crc"))
    return last


@needs_jar
def test_a_batch_cut_short_by_a_crash_is_replayed_from_the_files(spark: Any, tmp_path: Any) -> None:
    d, chk = str(tmp_path / "q"), str(tmp_path / "chk")
    q = _queue(d, [b"j%d" % i for i in range(30)])
    first = _run(spark, d, chk, maxRecordsPerTrigger=10)
    assert [ids for _b, ids in first] == [list(range(1, 11)), list(range(11, 21)), list(range(21, 31))]
    last = _drop_last_commit(chk)
    q.put_many([b"late-%d" % i for i in range(3)])
    q.sync()
    again = _run(spark, d, chk, maxRecordsPerTrigger=10)
    # The uncommitted batch again, with the same ids (read from the files), then the new items.
    assert again == [(last, list(range(21, 31))), (last + 1, [31, 32, 33])]
    q.close()


def _consume_everything_elsewhere(q: Any, d: str) -> None:
    """Another consumer of reader 'spark' takes and confirms every item; the writer retires the files."""
    from engine.queue import Queue

    other = Queue.open_reader(d, "jobs", "spark")
    while (item := other.get(timeout=0)) is not None:
        other.confirm([item.id])
    other.close()
    q.retire_files()


@needs_jar
@pytest.mark.parametrize("fail", [True, False])
def test_a_replayed_batch_whose_items_are_gone(spark: Any, tmp_path: Any, fail: bool) -> None:
    d, chk = str(tmp_path / "q"), str(tmp_path / "chk")
    q = _queue(d, [b"j%d" % i * 20 for i in range(30)], journal_size=1024)
    assert len(_run(spark, d, chk, maxRecordsPerTrigger=10)) == 3
    _drop_last_commit(chk)
    q.put_many([b"late-%d" % i * 20 for i in range(30)])  # the batch's items are no longer in the newest file
    q.sync()
    _consume_everything_elsewhere(q, d)
    if fail:
        with pytest.raises(Exception, match=r"items 21\.\.30 of the micro-batch replayed after a restart .* are gone "
                                            r"from the journal: the journal's oldest file .*jobs\.\d+ starts at id"):
            _run(spark, d, chk, maxRecordsPerTrigger=10)
    else:
        again = _run(spark, d, chk, maxRecordsPerTrigger=10, failOnDataLoss="false")
        assert [ids for _b, ids in again if ids] == []  # logged and gone on without them
    q.close()


@needs_jar
def test_a_reader_process_failure_is_one_line_naming_the_cause(spark: Any, tmp_path: Any) -> None:
    d, chk = str(tmp_path / "q"), str(tmp_path / "chk")
    q = _queue(d, [b"a"])
    with pytest.raises(Exception, match=r"engine-queue stream of queue 'jobs', reader 'no/such' in .*: ConfigError: "):
        _run(spark, d, chk, reader="no/such")
    assert _bridges(d) == []
    q.close()


# -- the reader process, without Spark -----------------------------------------------------------
def test_ranges() -> None:
    assert ranges([]) == "-"
    assert ranges([5, 1, 2, 3, 7, 8]) == "1-3,5-5,7-8"


def test_bridge_takes_confirms_and_skips(tmp_path: Any) -> None:
    from engine.queue import Queue

    d = str(tmp_path / "q")
    q = _queue(d, [b"j%d" % i for i in range(20)])
    b = Bridge(Queue.open_reader(d, "jobs", "spark"))
    assert b.get(8, -1, 0, -1) == "ok 8 8 1-8"
    assert b.get(100, 5, 8, -1) == "ok 2 10 9-10"  # two 2-byte items, not a third
    assert b.get(100, -1, 10, 12) == "ok 2 12 11-12"  # capped (Trigger.AvailableNow's end)
    assert b.confirm(8) == "ok"  # confirmed and checkpointed
    assert _pending(d)[0] == 9
    b.reader.close()
    # A new reader resuming after id 16 (processed by a previous run) skips and confirms 9..16.
    b2 = Bridge(Queue.open_reader(d, "jobs", "spark"))
    assert b2.get(100, -1, 16, -1) == "ok 4 20 17-20"
    assert b2.get(100, -1, 20, -1) == "ok 0 20 -"
    replies = io.StringIO()
    serve(b2, io.StringIO("confirm 20\nclose\n"), replies)
    assert replies.getvalue() == "ok\nok\n"
    assert _pending(d) == []
    q.close()


def test_bridge_failures_are_one_line(tmp_path: Any, capsys: Any) -> None:
    assert main([str(tmp_path / "missing"), "jobs", "spark"]) == 1
    out = capsys.readouterr().out
    assert out.startswith("error ") and out.count("\n") == 1
    assert main(["only-one"]) == 1
    assert "usage: python -m engine.spark.queuebridge" in capsys.readouterr().out
