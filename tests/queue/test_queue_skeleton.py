"""The queue on the shared writer skeleton: its locks come from ``engine.fs.lock``,
what open repaired is one ``RecoveryReport`` in ``queue.recovery`` (logged once),
and its format handler reads through the file system it is given."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from engine.errors import LockedError
from engine.formats import detect
from engine.fs import RecoveryReport, make_dirs
from engine.queue import Queue, codec
from engine.queue.attach import lock_writer
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
    with sim.open(path, "w") as h:
        size = h.size()
        h.write_at(size, codec.encode_put(4, 1, b"torn"))  # no CHECK after it: a torn batch
        h.fsync()
    with sim.open("/db/q.read.~~123", "c") as h:
        h.write_at(0, b"partial")
        h.fsync()
    with caplog.at_level(logging.WARNING, logger="engine.queue"):
        q = Queue.open("/db", "q", fs=sim, **NOCKPT)
    report = q.recovery
    assert [(a.kind, a.path, a.count, a.unit) for a in report.actions] == [
        ("removed", "/db/q.read.~~123", 1, "files"),
        ("cut", path, len(codec.encode_put(4, 1, b"torn")), "bytes"),
    ]
    assert report.of("cut")[0].offset == size and q.tail_id == 3
    assert report.to_dict()["repaired"] is True
    assert len(caplog.records) == 1 and "recovered:" in caplog.records[0].getMessage()
    q.close()
    again = Queue.open("/db", "q", fs=sim, **NOCKPT)
    assert not again.recovery.repaired
    again.close()


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


def test_what_attaching_a_remote_reader_clamped_is_in_its_recovery() -> None:
    sim = sim_queue()
    with sim.open("/db/q.read.", "w") as h:
        h.truncate(0)
        h.write_at(0, codec.encode_reader_file(1, [5]))  # done id 5: past the journal tail 3
        h.fsync()
    reader = Queue.open_reader("/db", "q", fs=sim, **NOCKPT)
    (dropped,) = reader.recovery.actions
    assert (dropped.kind, dropped.path, dropped.count, dropped.unit) == ("dropped", "/db/q.read.", 1, "ids")
    assert reader.done_ids == () and reader.dirty  # written back at the next checkpoint
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
    sim = sim_queue()
    first = Queue.open_reader("/db", "q", "w", fs=sim, **NOCKPT)
    with pytest.raises(LockedError) as info:
        Queue.open_reader("/db", "q", "w", fs=sim, **NOCKPT)
    assert info.value.path == "/db/q.rlock.w" and "waited" in str(info.value)
    first.close()
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
