"""Unit tests of the queue API: puts, reads, fanout, limits, files, locks, repair."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import pytest

from engine.errors import ConfigError, CorruptFileError, FormatError, FullError
from engine.fs import make_dirs
from engine.queue import Queue, codec, repair
from engine.queue.segments import SEGMENT_HEADER
from stress.simfs import SimFS

NOCKPT: dict[str, Any] = {"checkpoint_interval": 3600.0}


class Clock:
    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def sim_queue(**opts: object) -> tuple[SimFS, Queue]:
    sim = SimFS()
    make_dirs(sim, "/db")
    return sim, Queue.open("/db", "q", fs=sim, **{**NOCKPT, **opts})


def test_put_get_confirm_and_item_fields() -> None:
    clock = Clock()
    sim = SimFS()
    make_dirs(sim, "/db")
    q = Queue.open("/db", "q", fs=sim, clock=clock, **NOCKPT)
    assert q.put(b"one") == 1
    assert q.put(b"two", expire_at=clock.now + 60) == 2
    r = q.reader()
    a = r.get(timeout=0)
    assert a is not None and (a.id, a.data, a.add_time_ms, a.expire_time_ms, a.error_count) == (
        1,
        b"one",
        1_000_000_000,
        None,
        0,
    )
    b = r.get(timeout=0)
    assert b is not None and b.expire_time_ms == 1_000_060_000
    assert r.get(timeout=0) is None
    assert r.confirm([a.id, b.id]) == 2
    assert len(r) == 0 and r.head == 2
    q.close()


def test_abort_comes_back_first_with_error_count() -> None:
    _, q = sim_queue()
    q.put_many([b"a", b"b", b"c"])
    r = q.reader()
    a, b = r.get(0), r.get(0)
    assert a and b
    r.abort([b.id, a.id])
    again = [r.get(0), r.get(0), r.get(0)]
    assert [(i.id, i.error_count) for i in again if i] == [(1, 1), (2, 1), (3, 0)]
    q.close()


def test_out_of_order_confirm_is_journaled_as_read_done() -> None:
    sim, q = sim_queue()
    q.put_many([b"1", b"2", b"3", b"4"])
    r = q.reader()
    items = [r.get(0) for _ in range(4)]
    r.confirm([items[1].id, items[3].id])  # type: ignore[union-attr]
    q.checkpoint()
    data = sim.snapshot()["/db/q.read."]
    records = bytes.fromhex("02 0000000000000000 91 10000000 0200000000000000 0400000000000000".replace(" ", ""))
    # magic, the empty CHECK (this engine's: "CHECKs follow"), the records, their CHECK
    assert data == codec.READER_MAGIC + bytes(9).replace(b"\x00", b"\x22", 1) + records + codec.encode_check(records)
    r.confirm(items[0].id)  # type: ignore[union-attr]
    assert r.head == 2 and r.done_ids == (4,)
    q.close()
    q = Queue.open("/db", "q", fs=sim, **NOCKPT)
    r = q.reader()
    item = r.get(0)
    assert item is not None and item.id == 3  # 1, 2, 4 were confirmed; 3 was open: redelivered
    assert r.get(0) is None
    q.close()


def test_read_context_and_iteration() -> None:
    _, q = sim_queue()
    q.put_many([b"a", b"b", b"c"])
    r = q.reader()
    with r.read(0) as item:
        assert item is not None and item.data == b"a"
    with pytest.raises(RuntimeError):
        with r.read(0) as item:
            raise RuntimeError("boom")
    seen = []
    for item in r:
        seen.append((item.data, item.error_count))
    assert seen == [(b"b", 1), (b"c", 0)]
    assert len(r) == 0
    with r.read(0) as nothing:
        assert nothing is None
    q.close()


def test_fanout_takeover_and_new_reader_at_tail() -> None:
    _, q = sim_queue()
    q.put_many([b"1", b"2"])
    a = q.reader("a")  # takes over the default reader's backlog
    q.put(b"3")
    b = q.reader("b")  # starts at the tail
    q.put(b"4")
    assert [i.data for i in a] == [b"1", b"2", b"3", b"4"]
    assert [i.data for i in b] == [b"4"]
    assert q.reader_names() == ["a", "b"]
    # The journal holds one copy of each item however many readers there are.
    # header + one batch of two PUTs and its CHECK + two single PUTs with theirs
    assert q.journal_bytes() == len(SEGMENT_HEADER) + (2 * codec.put_size(1, False) + 9) + 2 * (
        codec.put_size(1, False) + 9
    )
    q.close()


def test_rotation_and_deletion_when_drained() -> None:
    sim, q = sim_queue(journal_size=200)
    for i in range(30):
        q.put(b"x" * 40 + bytes([i]))
    assert len(q.journal_files) > 5
    r = q.reader()
    got = [item.data[-1] for item in r]
    assert got == list(range(30))
    q.checkpoint()
    assert len(q.journal_files) == 1  # only the newest is kept
    assert [f for f in sim.listdir("/db") if f.startswith("q.1")] == [q.journal_files[0].rsplit("/", 1)[1]]
    q.close()


def test_archive_dir_keeps_retired_files() -> None:
    sim, q = sim_queue(journal_size=200, archive_dir="/db/archive")
    for _ in range(10):
        q.put(b"y" * 60)
    r = q.reader()
    list(r)
    q.checkpoint()
    archived = sim.listdir("/db/archive")
    assert archived and all(name.startswith("q.") for name in archived)
    q.close()


def test_slow_reader_holds_files_and_remove_reader_releases_them() -> None:
    _, q = sim_queue(journal_size=200)
    fast, slow = q.reader("fast"), q.reader("slow")
    for _ in range(20):
        q.put(b"z" * 60)
    list(fast)
    q.checkpoint()
    assert len(q.journal_files) > 3  # "slow" still needs them
    assert slow.peek() is not None
    q.remove_reader("slow")
    assert len(q.journal_files) == 1
    assert q.reader_names() == ["fast"]
    q.close()


def test_a_second_producer_puts_and_a_second_consumer_competes(tmp_path: Path) -> None:
    q = Queue.open(str(tmp_path), "jobs", **NOCKPT)
    other = Queue.open(str(tmp_path), "jobs", **NOCKPT)  # many producers, one process or several
    assert [q.put(b"a"), other.put(b"b"), q.put(b"c")] == [1, 2, 3]
    assert q.tail_id == other.tail_id == 3
    other.close()
    q.put_many([b"more-%d" % i for i in range(100)])
    mine = q.reader("r")
    first = mine.get(timeout=0)  # (alone: it claims the run of items it decoded)
    with Queue.open_reader(str(tmp_path), "jobs", "r") as again:  # a second consumer of the name
        assert again.get(timeout=0) is None  # every item is claimed by mine...
        mine.checkpoint()  # ... until its next checkpoint round gives back what it has not delivered
        second = again.get(timeout=1)  # (it looks again at items held elsewhere every poll_interval)
        assert first is not None and second is not None and first.id != second.id  # each its own
        again.confirm(second.id)
    mine.confirm(first.id)
    q.close()
    q2 = Queue.open(str(tmp_path), "jobs")
    q2.close()


def test_blocking_get_wakes_on_put_from_another_thread() -> None:
    _, q = sim_queue()
    r = q.reader()
    got: list[bytes] = []
    started = threading.Event()

    def consume() -> None:
        started.set()
        item = r.get(timeout=30)
        if item is not None:
            got.append(item.data)

    t = threading.Thread(target=consume)
    t.start()
    started.wait()
    q.put(b"wake")
    t.join(30)
    assert got == [b"wake"]
    assert r.get(timeout=0.01) is None  # a timeout returns None
    q.close()


def test_reader_in_another_process_style_tails_the_writer(tmp_path: Path) -> None:
    q = Queue.open(str(tmp_path), "jobs", **NOCKPT)
    q.put(b"first")
    remote = Queue.open_reader(str(tmp_path), "jobs", "", poll_interval=0.001, checkpoint_interval=3600)
    item = remote.get(timeout=10)
    assert item is not None and item.data == b"first"
    remote.confirm(item.id)
    got: list[bytes] = []
    t = threading.Thread(target=lambda: got.append(remote.get(timeout=30).data))  # type: ignore[union-attr]
    t.start()
    q.put(b"second")
    t.join(30)
    assert got == [b"second"]
    remote.close()
    # The writer sees the remote reader's checkpoint and frees nothing it needs.
    q.close()
    q = Queue.open(str(tmp_path), "jobs", **NOCKPT)
    r = q.reader()
    item = r.get(0)
    assert item is not None and item.data == b"second"  # opened, never confirmed
    q.close()


def test_expiry_drop_and_move() -> None:
    clock = Clock()
    sim = SimFS()
    make_dirs(sim, "/db")
    q = Queue.open("/db", "q", fs=sim, clock=clock, expired="q_expired", max_age=100, **NOCKPT)
    q.put(b"short", expire_at=clock.now + 5)
    q.put(b"old")
    clock.now += 50
    q.put(b"fresh")
    clock.now += 60  # "short" expired by its time, "old" by max_age
    r = q.reader()
    assert [i.data for i in r] == [b"fresh"]
    assert r.expired_count == 2
    q.close()
    moved = Queue.open("/db", "q_expired", fs=sim, **NOCKPT)
    assert [i.data for i in moved.reader()] == [b"short", b"old"]
    moved.close()


def test_max_items_full_and_discard_old() -> None:
    _, q = sim_queue(max_items=2)
    q.reader()
    q.put(b"1")
    q.put(b"2")
    with pytest.raises(FullError):
        q.put(b"3")
    q.close()
    _, q = sim_queue(max_items=2, discard_old_when_full=True)
    r = q.reader()
    for i in range(5):
        q.put(b"%d" % i)
    assert [i.data for i in r] == [b"3", b"4"]
    assert r.discarded_count == 3
    q.close()


def test_max_size_counts_journal_bytes() -> None:
    _, q = sim_queue(max_size=300)
    q.reader()
    for _ in range(3):
        q.put(b"a" * 50)
    with pytest.raises(FullError):
        for _ in range(10):
            q.put(b"a" * 50)
    q.close()


def test_item_too_big_and_bad_config() -> None:
    _, q = sim_queue(max_item_size=10)
    with pytest.raises(ConfigError):
        q.put(b"x" * 11)
    q.close()
    with pytest.raises(ConfigError):
        sim_queue(sync="sometimes")
    with pytest.raises(ConfigError):
        sim_queue(no_such_knob=1)


def test_error_queue_after_max_aborts() -> None:
    sim, q = sim_queue(max_errors=2, error_queue="q_errors")
    q.put(b"poison")
    r = q.reader()
    for _ in range(2):
        item = r.get(0)
        assert item is not None
        r.abort(item.id)
    assert r.get(0) is None and r.error_punted_count == 1
    q.close()
    errors = Queue.open("/db", "q_errors", fs=sim, **NOCKPT)
    item = errors.reader().get(0)
    assert item is not None and (item.data, item.error_count) == (b"poison", 2)
    errors.close()


def test_open_read_timeout_aborts_stuck_reads() -> None:
    _, q = sim_queue(open_read_timeout=0.01)
    q.put(b"a")
    r = q.reader()
    first = r.get(0)
    assert first is not None
    item = r.get(timeout=5)  # waits past the deadline; the stuck read comes back
    assert item is not None and item.id == first.id and item.error_count == 1
    q.close()


def test_sync_modes_deliver_everything(tmp_path: Path) -> None:
    for sync in ("never", 0.01, "always"):
        d = str(tmp_path / str(sync))
        q = Queue.open(d, "q", sync=sync, **NOCKPT)
        ids = q.put_many([b"%d" % i for i in range(50)])
        r = q.reader()
        assert [i.id for i in r] == ids
        q.close()


def test_put_many_across_rotation() -> None:
    _, q = sim_queue(journal_size=150)
    ids = q.put_many([b"p" * 40 for _ in range(12)])
    assert ids == list(range(1, 13)) and len(q.journal_files) > 3
    assert [i.id for i in q.reader()] == ids
    q.verify()
    q.close()


def test_corrupt_reader_file_raises_and_repair_reports(tmp_path: Path) -> None:
    d = str(tmp_path)
    q = Queue.open(d, "q", **NOCKPT)
    q.put_many([b"a", b"b"])
    q.close()
    path = os.path.join(d, "q.read.")
    with open(path, "r+b") as f:  # a READ_DONE whose length is not a multiple of 8
        f.seek(13)
        f.write(b"\x91\x05\x00\x00\x00")
    with pytest.raises(CorruptFileError) as info:
        Queue.open(d, "q")
    assert info.value.path == path and info.value.offset == 13
    report = repair(__import__("engine.fs", fromlist=["default_fs"]).default_fs(), d, "q")
    (reset,) = report.of("reset")
    assert reset.unit == "heads" and "delivered again" in reset.detail
    q = Queue.open(d, "q", **NOCKPT)
    assert [i.data for i in q.reader()] == [b"a", b"b"]
    q.close()


def test_foreign_file_is_format_error(tmp_path: Path) -> None:
    (tmp_path / "q.123").write_bytes(b"JRNL" + bytes(16))
    with pytest.raises(FormatError) as info:
        Queue.open(str(tmp_path), "q")
    assert info.value.offset == 0


def test_corrupt_middle_record_raises_with_offset_and_open_stays_lazy() -> None:
    sim, q = sim_queue(journal_size=200)
    for i in range(12):
        q.put(b"m" * 50 + bytes([i]))
    files = q.journal_files
    q.close()
    # Damage a record in the middle of the oldest file: a PUT with 7 header words.
    victim = files[0]
    data = bytearray(sim.snapshot()[victim])
    second = len(SEGMENT_HEADER) + codec.put_size(51, False) + 9
    data[second] = 0x87
    with sim.open(victim, "w") as h:
        h.write_at(0, bytes(data))
        h.fsync()
    q = Queue.open("/db", "q", fs=sim, **NOCKPT)  # open does not read old files whole
    r = q.reader()
    assert r.get(0) is not None
    with pytest.raises(CorruptFileError) as info:
        r.get(0)
    assert info.value.path == victim and info.value.offset == second
    with pytest.raises(CorruptFileError):
        q.verify()
    q.close()
    report = repair(sim, "/db", "q")
    assert report.of("cut") and "lost ids" in report.of("cut")[0].detail


def test_reads_a_libkestrel_file_without_check_records() -> None:
    sim = SimFS()
    make_dirs(sim, "/db")
    writer = codec.WRITER_MAGIC + b"".join(codec.encode_put(i, 1000 + i, b"k%d" % i) for i in range(5, 10))
    writer += bytes.fromhex("31 00000000")  # an unknown command, skipped
    writer += codec.encode_put(10, 1010, b"k10", expire_time=9_999_999_999_999)
    reader = codec.encode_reader_file(5, [7])
    for path, blob in (("/db/old.1321401903634", writer), ("/db/old.read.", reader)):
        with sim.open(path, "c") as h:
            h.write_at(0, blob)
            h.fsync()
    q = Queue.open("/db", "old", fs=sim, **NOCKPT)
    assert q.tail_id == 10
    assert [i.id for i in q.reader()] == [6, 8, 9, 10]
    assert q.put(b"new") == 11
    q.close()


def test_stray_temp_files_are_removed_on_open() -> None:
    sim, q = sim_queue()
    q.close()
    with sim.open("/db/q.read.~~123", "c") as h:
        h.write_at(0, b"partial")
    q = Queue.open("/db", "q", fs=sim, **NOCKPT)
    assert "q.read.~~123" not in sim.listdir("/db")
    q.close()


def test_stats_and_verify() -> None:
    _, q = sim_queue()
    q.put_many([b"a", b"b", b"c"])
    r = q.reader()
    r.get(0)
    stats = q.stats()
    readers = stats["readers"]
    assert isinstance(readers, list)
    (entry,) = readers
    assert entry["items"] == 3 and entry["open_reads"] == 1 and entry["oldest_age_s"] is not None
    assert entry["backlog_bytes"] == 3  # payload bytes not yet confirmed (the open read counts)
    assert q.verify() == []
    q.close()


def test_repaired_gap_does_not_block_the_head() -> None:
    sim, q = sim_queue(journal_size=200)
    for i in range(12):
        q.put(b"g" * 50 + bytes([i]))
    files = q.journal_files
    q.close()
    data = bytearray(sim.snapshot()[files[0]])
    data[len(SEGMENT_HEADER)] = 0x87  # the first record of the oldest file is damaged
    with sim.open(files[0], "w") as h:
        h.write_at(0, bytes(data))
        h.fsync()
    report = repair(sim, "/db", "q")
    assert report.of("cut")
    q = Queue.open("/db", "q", fs=sim, **NOCKPT)
    r = q.reader()
    got = [item.id for item in r]
    assert got and got[0] > 1 and got == sorted(got)
    assert r.head == q.tail_id and len(r) == 0  # the hole did not block the head
    q.checkpoint()
    assert len(q.journal_files) == 1
    q.close()


def test_tailing_reader_waits_for_a_partly_written_record(tmp_path: Path) -> None:
    d = str(tmp_path)
    q = Queue.open(d, "jobs", **NOCKPT)
    q.put(b"whole")
    newest = q.journal_files[-1]
    q.close()
    remote = Queue.open_reader(d, "jobs", "", poll_interval=0.001, checkpoint_interval=3600)
    first = remote.get(0)
    assert first is not None and first.data == b"whole"
    record = codec.encode_put(2, 1, b"half-written item")
    with open(newest, "ab") as f:  # another process is in the middle of this write
        f.write(record[:20])
    assert remote.get(timeout=0.01) is None
    with open(newest, "ab") as f:
        f.write(record[20:])
    # Whole, but no CHECK vouches for it yet (the writer appends it in the same
    # write): not delivered.
    assert remote.get(timeout=0.01) is None
    with open(newest, "ab") as f:
        f.write(codec.encode_check(record))
    item = remote.get(timeout=10)
    assert item is not None and item.data == b"half-written item"
    remote.close()


def test_open_reads_survive_reopen_as_redeliveries() -> None:
    sim, q = sim_queue()
    q.put_many([b"a", b"b", b"c"])
    r = q.reader()
    a, b = r.get(0), r.get(0)
    assert a and b
    r.confirm(b.id)  # out of order; "a" stays open
    q.close()
    q = Queue.open("/db", "q", fs=sim, **NOCKPT)
    assert [i.data for i in q.reader()] == [b"a", b"c"]
    q.close()
