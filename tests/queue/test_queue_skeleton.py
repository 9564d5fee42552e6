"""The queue on the shared writer skeleton: its locks come from ``engine.fs.lock``,
what open repaired is one ``RecoveryReport`` in ``queue.recovery`` (logged once),
and its format handler reads through the file system it is given."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from engine.detection import detect
from engine.errors import LockedError
from engine.fs import RecoveryReport, make_dirs
from engine.queue import Queue, codec
from engine.queue.attach import lock_reader, lock_writer
from engine.queue.handler import HANDLER
from stress.simfs import SimFS

NOCKPT: dict[str, Any] = {"checkpoint_interval": 3600.0}


def sim_queue(items: int = 3) -> SimFS:
    sim = SimFS()
    make_dirs(sim, "/db")
    with Queue.open("/db", "q", fs=sim, **NOCKPT) as q:
        for i in range(items):
            q.put(b"item-%d" % i)
    return sim


def test_a_clean_open_reports_and_logs_nothing(caplog: pytest.LogCaptureFixture) -> None:
    sim = sim_queue()
    with caplog.at_level(logging.WARNING, logger="engine.queue"):
        q = Queue.open("/db", "q", fs=sim, **NOCKPT)
    assert isinstance(q.recovery, RecoveryReport) and not q.recovery.repaired
    assert q.recovery.summary() == "clean" and not caplog.records
    assert not hasattr(q, "torn_tail_bytes") and not hasattr(q, "recovery_notes")
    q.close()


def test_every_repair_of_one_open_is_in_the_report_and_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    sim = sim_queue()
    (path,) = [f"/db/{f}" for f in sim.listdir("/db") if f[2:].isdigit()]
    torn = codec.encode_put(4, 1, b"torn")[:-2]  # the file ends inside it: a torn write
    with sim.open(path, "w") as h:
        size = h.size()
        h.write_at(size, torn)
        h.fsync()
    with sim.open("/db/q.read.~~123", "c") as h:
        h.write_at(0, b"partial")
        h.fsync()
    with caplog.at_level(logging.WARNING, logger="engine.queue"):
        q = Queue.open("/db", "q", fs=sim, **NOCKPT)
    report = q.recovery
    assert [(a.kind, a.path, a.count, a.unit) for a in report.actions] == [
        ("removed", "/db/q.read.~~123", 1, "files"),
        ("cut", path, len(torn), "bytes"),
    ]
    assert report.of("cut")[0].offset == size and q.tail_id == 3
    assert report.to_dict()["repaired"] is True
    assert len(caplog.records) == 1 and "recovered:" in caplog.records[0].getMessage()
    q.close()
    again = Queue.open("/db", "q", fs=sim, **NOCKPT)
    assert not again.recovery.repaired
    again.close()


def test_whole_records_with_no_check_after_them_are_kept_and_reported() -> None:
    """Whole PUTs after the last CHECK, ending the file (libkestrel appended them;
    or a write of ours whose CHECK a crash took, never acknowledged): kept under a
    CHECK of their own, said as ``rebuilt``, and delivered."""
    sim = sim_queue()
    (path,) = [f"/db/{f}" for f in sim.listdir("/db") if f[2:].isdigit()]
    extra = codec.encode_put(4, 1, b"four") + codec.encode_put(5, 1, b"five")
    with sim.open(path, "w") as h:
        size = h.size()
        h.write_at(size, extra)
        h.fsync()
    q = Queue.open("/db", "q", fs=sim, **NOCKPT)
    (kept,) = q.recovery.actions
    assert (kept.kind, kept.path, kept.count, kept.unit, kept.offset) == ("rebuilt", path, 2, "records", size)
    assert q.tail_id == 5 and q.put(b"six") == 6
    assert [i.data for i in q.reader()][-3:] == [b"four", b"five", b"six"]
    q.verify()
    q.close()


def test_a_half_created_writer_file_is_rebuilt_and_reported() -> None:
    sim = sim_queue()
    with sim.open("/db/q.9999999999999", "n") as h:
        h.write_at(0, codec.WRITER_MAGIC[:2])
        h.fsync()
    q = Queue.open("/db", "q", fs=sim, **NOCKPT)
    (rebuilt,) = q.recovery.of("rebuilt")
    assert (rebuilt.path, rebuilt.offset) == ("/db/q.9999999999999", 0)
    assert q.put(b"next") == 4
    q.close()


def test_ids_burnt_at_open_are_a_reset_in_the_report() -> None:
    sim = sim_queue()
    with sim.open("/db/q.read.", "w") as h:
        h.truncate(0)
        h.write_at(0, codec.encode_reader_file(0, [5]))  # 5: past the tail 3, a crash's loss
        h.fsync()
    q = Queue.open("/db", "q", fs=sim, **NOCKPT)
    (burnt,) = q.recovery.actions
    assert (burnt.kind, burnt.path, burnt.count, burnt.unit) == ("reset", "/db/q.read.", 2, "ids")
    assert [i.id for i in q.reader()] == [1, 2, 3]  # the reader counts 4..5 done
    assert q.put(b"next") == 6
    q.close()


def test_what_attaching_a_remote_reader_changed_is_in_its_recovery() -> None:
    sim = sim_queue()
    Queue.open_reader("/db", "q", "w", fs=sim, **NOCKPT).close()  # reader w exists, at the tail
    sim.unlink("/db/q.read.w")  # its checkpoint deleted: it starts again at the start
    reader = Queue.open_reader("/db", "q", "w", fs=sim, **NOCKPT)
    (reset,) = reader.recovery.actions
    assert (reset.kind, reset.path, reset.count, reset.unit) == ("reset", "/db/q.read.w", 1, "readers")
    assert reader.head == 0 and reader.dirty and len(reader) == 3  # every item delivered again
    reader.close()


def test_the_writer_lock_error_names_the_lock_file() -> None:
    """Producers share ``q.lock``; ``engine queue repair`` holds it alone, and a
    producer opening meanwhile is told which lock."""
    sim = sim_queue()
    Queue.open("/db", "q", fs=sim, **NOCKPT).close()
    repairing = lock_writer(sim, "/db", "q")
    with pytest.raises(LockedError) as info:
        Queue.open("/db", "q", fs=sim, **NOCKPT)
    assert info.value.path == "/db/q.lock" and "writer lock of queue 'q'" in str(info.value)
    repairing.release()
    q = Queue.open("/db", "q", fs=sim, **NOCKPT)
    with pytest.raises(LockedError):
        lock_writer(sim, "/db", "q")  # and repair waits for every producer to close
    q.close()
    Queue.open("/db", "q", fs=sim, **NOCKPT).close()  # released on close


def test_a_reader_lock_error_names_the_reader_lock_file() -> None:
    """Any number of consumers share a reader name; ``engine queue repair`` (or the
    writer's probe, for a moment) holds its lock alone, and a consumer opening
    meanwhile is told which lock."""
    sim = sim_queue()
    first = Queue.open_reader("/db", "q", "w", fs=sim, **NOCKPT)
    second = Queue.open_reader("/db", "q", "w", fs=sim, **NOCKPT)  # a second consumer of the name
    second.close()
    first.close()
    repairing = lock_reader(sim, "/db", "q", "w")
    with pytest.raises(LockedError) as info:
        Queue.open_reader("/db", "q", "w", fs=sim, **NOCKPT)
    assert info.value.path == "/db/q.rlock.w" and "lock of reader 'w'" in str(info.value)
    repairing.release()
    Queue.open_reader("/db", "q", "w", fs=sim, **NOCKPT).close()


def test_the_handler_reads_through_the_file_system_it_is_given() -> None:
    sim = sim_queue()  # nothing of it exists on the real disk
    assert detect("/db", fs=sim) is HANDLER
    summary = HANDLER.summarize(sim, "/db")
    assert summary["kind"] == "queue directory" and "tail id 3" in str(summary["queue q"])
    assert HANDLER.verify(sim, "/db") == []
    (path,) = [f"/db/{f}" for f in sim.listdir("/db") if f[2:].isdigit()]
    with sim.open(path) as h:
        head = h.read_at(0, 64)
    assert HANDLER.sniff(sim, path, head, False)
    assert HANDLER.summarize(sim, path)["items"] == 3
    assert HANDLER.summarize(sim, "/db/q.read.")["kind"] == "reader checkpoint"
