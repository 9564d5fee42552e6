"""Bugs the stress suite found (docs/reliability.md), each pinned by a test.

1. One flipped bit in a reader checkpoint (a READ_DONE or READ_HEAD id made huge)
   made open walk every id up to it (a hang: damage seed 1568562756, bit 5 of byte
   21 of ``jobs.read.``).  Ids further past the tail than a crash can lose are now
   damage (CorruptFileError naming the reader file and the id's offset); ids within
   that window are burnt as before, but skipped as one range, never id by id.
2. A failed fsync while rotating to a new writer file (the new file's create fsync)
   left the queue with a closed handle: the next put raised ClosedError instead of
   PoisonedError (io seed 3690051644: EIO at operation 24, once).
"""

from __future__ import annotations

import errno
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from engine.errors import CorruptFileError, EngineError, PoisonedError
from engine.fs import make_dirs
from engine.queue import Queue, codec, repair
from engine.queue.checkpoint import crash_window
from engine.queue.segments import SEGMENT_HEADER
from stress.faults import FaultyFS
from stress.simfs import SimFS

NOCKPT: dict[str, Any] = {"checkpoint_interval": 3600.0}
READER = "/db/jobs.read."


class _Hung(Exception):
    pass


@contextmanager
def no_hang(seconds: int = 20) -> Iterator[None]:
    """Turn a hang (the bug) into a failure instead of a stuck test run.

    Not a timed assertion: the fixed code answers in milliseconds; the alarm only
    fires on the unbounded walk the bug did.
    """

    def on_alarm(signum: int, frame: Any) -> None:
        raise _Hung(f"still running after {seconds} s: walking ids one by one?")

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def write_file(sim: SimFS, path: str, data: bytes) -> None:
    with sim.open(path, "c") as h:
        h.truncate(0)
        h.write_at(0, data)
        h.fsync()


def queue_with_out_of_order_confirm(*, checksummed: bool = False, **config: Any) -> SimFS:
    """Items 1..5 put; the reader confirmed 1 and 3: head 1, READ_DONE [3].

    The reader file is left in the previous version's layout (no CHECK records,
    as libkestrel writes it too) unless ``checksummed``: the id-window rules below
    are what guards such files, whose damage no checksum can catch.
    """
    sim = SimFS()
    make_dirs(sim, "/db")
    q = Queue.open("/db", "jobs", fs=sim, **NOCKPT, **config)
    q.put_many([b"item-%d" % i for i in range(1, 6)])
    r = q.reader()
    first, second, third = r.get(0), r.get(0), r.get(0)
    assert first is not None and second is not None and third is not None
    r.confirm([first.id, third.id])  # item 2 stays open: not confirmed, not journaled
    q.close()
    if not checksummed:
        write_file(sim, READER, codec.READER_MAGIC + codec.encode_read_head(1) + codec.encode_read_done([3]))
    return sim


def flip(sim: SimFS, path: str, byte: int, bit: int) -> None:
    with sim.open(path) as h:
        data = bytearray(h.read_all())
    data[byte] ^= 1 << bit
    write_file(sim, path, bytes(data))


def test_reader_file_layout_the_flip_hits() -> None:
    """The hand-checked bytes: magic, READ_HEAD 1, READ_DONE of 8 bytes holding 3."""
    sim = queue_with_out_of_order_confirm()
    with sim.open(READER) as h:
        data = h.read_all()
    assert data.hex(" ") == (
        "26 3c 26 03"  # reader magic
        " 02 01 00 00 00 00 00 00 00"  # READ_HEAD, head 1
        " 91 08 00 00 00"  # READ_DONE, 8 bytes of ids
        " 03 00 00 00 00 00 00 00"  # id 3 (offset 18..25)
    )


def test_flipped_done_id_is_a_corrupt_reader_file_not_a_hang() -> None:
    sim = queue_with_out_of_order_confirm()
    flip(sim, READER, 21, 5)  # id 3 -> 3 + 2**29, the stress suite's damage
    with no_hang(), pytest.raises(CorruptFileError) as info:
        Queue.open("/db", "jobs", fs=sim, **NOCKPT)
    assert info.value.path == READER and info.value.offset == 18
    assert "engine queue repair" in str(info.value)


def test_flipped_head_near_two_to_the_sixty_is_corrupt_too() -> None:
    sim = queue_with_out_of_order_confirm()
    flip(sim, READER, 12, 4)  # head 1 -> 1 + 2**60
    with no_hang(), pytest.raises(CorruptFileError) as info:
        Queue.open("/db", "jobs", fs=sim, **NOCKPT)
    assert info.value.path == READER and info.value.offset == 5
    # The writer did not skip 2**60 ids: nothing was written at all.
    with no_hang(), pytest.raises(CorruptFileError):
        Queue.open_reader("/db", "jobs", "", fs=sim, **NOCKPT)


def test_remote_reader_refuses_the_damaged_file_as_well() -> None:
    sim = queue_with_out_of_order_confirm()
    flip(sim, READER, 25, 6)  # id 3 -> 3 + 2**62
    with no_hang(), pytest.raises(CorruptFileError) as info:
        Queue.open_reader("/db", "jobs", "", fs=sim, **NOCKPT)
    assert info.value.path == READER and info.value.offset == 18


def test_repair_drops_the_damaged_done_id_keeps_the_head_and_the_backlog() -> None:
    sim = queue_with_out_of_order_confirm()
    flip(sim, READER, 21, 5)
    report = repair(sim, "/db", "jobs")
    (dropped,) = report.of("dropped")
    assert (dropped.path, dropped.count, dropped.unit) == (READER, 1, "ids") and "head 1 kept" in dropped.detail, report
    with no_hang():
        q = Queue.open("/db", "jobs", fs=sim, **NOCKPT)
    # Id 3's confirmation was the damaged one: it is delivered again (at-least-once).
    assert [i.data for i in q.reader()] == [b"item-2", b"item-3", b"item-4", b"item-5"]
    assert q.verify() == [] and q.put(b"next") == 6
    q.close()


def test_repair_resets_a_damaged_head_to_redeliver_never_to_skip() -> None:
    sim = queue_with_out_of_order_confirm()
    flip(sim, READER, 12, 4)
    report = repair(sim, "/db", "jobs")
    (reset,) = report.of("reset")
    assert "head 1152921504606846977 is past the journal tail 5" in reset.detail, report
    q = Queue.open("/db", "jobs", fs=sim, **NOCKPT)
    assert [i.data for i in q.reader()] == [b"item-%d" % i for i in range(1, 6)]
    q.close()


def test_ids_within_the_crash_window_are_burnt_as_one_range() -> None:
    """A checkpoint mentioning an id far past the tail, but within what a crash of a
    16 MiB file could lose: the writer burns the ids (the previous rule), and the
    reader skips them as a range: no 600 000 ids in its done set or its file."""
    sim = queue_with_out_of_order_confirm()
    far = 5 + 600_000
    assert far - 5 < crash_window(16 * 1024 * 1024)
    write_file(sim, READER, codec.encode_reader_file(1, [3, far]))
    with no_hang():
        q = Queue.open("/db", "jobs", fs=sim, **NOCKPT)
        (burnt,) = q.recovery.of("reset")
        assert (burnt.path, burnt.count, burnt.unit) == (READER, far - 5, "ids") and f"ids 6..{far}" in burnt.detail
        assert q.put(b"after") == far + 1
        r = q.reader()
        assert len(r) == 4  # items 2, 4, 5 and "after": the burnt range is not pending
        assert len(r.done_ids) <= 1
        got = []
        for item in r:
            got.append(item.data)
            r.confirm(item.id)
        assert got == [b"item-2", b"item-4", b"item-5", b"after"]
        assert r.head == far + 1 and len(r) == 0
        q.checkpoint()
        with sim.open(READER) as h:
            assert len(h.read_all()) < 64  # head + an empty READ_DONE
        assert q.verify() == []
        q.close()


def test_ids_just_past_the_window_are_damage() -> None:
    sim = queue_with_out_of_order_confirm(journal_size=1024)
    window = crash_window(1024)
    write_file(sim, READER, codec.encode_reader_file(1, [3, 5 + window]))
    q = Queue.open("/db", "jobs", fs=sim, journal_size=1024, **NOCKPT)  # at the edge: a crash's loss
    q.close()
    write_file(sim, READER, codec.encode_reader_file(1, [3, q.tail_id + window + 1]))
    with pytest.raises(CorruptFileError):
        Queue.open("/db", "jobs", fs=sim, journal_size=1024, **NOCKPT)


# -- 2. a failed fsync during rotation ------------------------------------------------


def _puts_until_failure(sim: SimFS, fail_at: int) -> tuple[list[bytes], bool]:
    """Six puts of 100..300 bytes into 1 KiB files with fsync number ``fail_at``
    failing once.  After the failure every later put must raise PoisonedError."""
    ffs = FaultyFS(sim, fail_at=fail_at, errno=errno.EIO, kinds=("fsync",))
    acked: list[bytes] = []
    try:
        q = Queue.open("/db", "jobs", fs=ffs, sync="always", journal_size=1024, **NOCKPT)
    except (OSError, EngineError):
        return acked, True  # the fault hit the creation: nothing to write to
    failed = False
    for i in range(6):
        data = b"p%d" % i * (50 + 20 * i)
        try:
            q.put(data)
        except (OSError, EngineError):
            failed = True
            for later in range(3):
                with pytest.raises(PoisonedError):
                    q.put(b"later-%d" % later)
            with pytest.raises(PoisonedError):
                q.put_many([b"x", b"y"])
            break
        acked.append(data)
    try:
        q.close()
    except (OSError, EngineError):
        pass
    return acked, failed


def test_failed_create_fsync_during_rotation_poisons_the_queue() -> None:
    """The exact case: the rotation fsynced and closed the old file, then the new
    file's creation fsync failed; the next put used to raise ClosedError."""
    sim = SimFS()
    make_dirs(sim, "/db")
    q = Queue.open("/db", "jobs", fs=sim, journal_size=200, **NOCKPT)
    q.put(b"a" * 100)
    q.close()
    ffs = FaultyFS(sim, kinds=("fsync",))
    q = Queue.open("/db", "jobs", fs=ffs, journal_size=200, **NOCKPT)
    # Next put rotates: fsync #1 = the old file, fsync #2 = the new file's magic.
    ffs.fail_at = ffs.ops + 2
    with pytest.raises((OSError, EngineError)):
        q.put(b"b" * 100)
    with pytest.raises(PoisonedError):
        q.put(b"c")
    with pytest.raises(PoisonedError):
        q.put_many([b"d"])
    q.close()
    q2 = Queue.open("/db", "jobs", fs=sim, journal_size=200, **NOCKPT)
    assert q2.verify() == []
    assert [i.data for i in q2.reader()] == [b"a" * 100]
    assert q2.put(b"e") == 2
    q2.close()


def test_every_fsync_failure_poisons_until_reopen_and_reopen_is_clean() -> None:
    n = 1
    while True:
        sim = SimFS()
        make_dirs(sim, "/db")
        acked, failed = _puts_until_failure(sim, n)
        q = Queue.open("/db", "jobs", fs=sim, journal_size=1024, **NOCKPT)
        assert q.verify() == [], n
        delivered = [i.data for i in q.reader()]
        assert delivered[: len(acked)] == acked, n
        assert len(delivered) <= len(acked) + 1, n  # at most the put in flight too
        q.close()
        if not failed:
            break
        n += 1
    assert n > 6  # rotations happened: each makes two fsyncs


def test_verify_reports_the_damaged_reader_file_like_open() -> None:
    from engine.queue import verify_queue

    sim = queue_with_out_of_order_confirm()
    flip(sim, READER, 21, 5)
    with no_hang(), pytest.raises(CorruptFileError) as info:
        verify_queue(sim, "/db", "jobs")
    assert info.value.path == READER and info.value.offset == 18


def test_a_hole_between_writer_files_is_reported_when_a_reader_skips_it(caplog: pytest.LogCaptureFixture) -> None:
    """An older writer file cut at a batch boundary reads as a clean, shorter file;
    the ids it lost are a hole the reader skips, with a warning (not silently)."""
    sim = SimFS()
    make_dirs(sim, "/db")
    q = Queue.open("/db", "jobs", fs=sim, journal_size=200, **NOCKPT)
    for i in range(6):
        q.put(b"x%d" % i * 30)
    files = q.journal_files
    q.close()
    assert len(files) >= 3
    first = files[0]
    with sim.open(first) as h:
        data = h.read_all()
    step = codec.put_size(60, False) + 1 + codec.CHECK.size
    assert len(data) > len(SEGMENT_HEADER) + step  # at least two batches in it
    write_file(sim, first, data[: len(SEGMENT_HEADER) + step])  # keep the first batch only
    q = Queue.open("/db", "jobs", fs=sim, journal_size=200, **NOCKPT)
    r = q.reader()
    with caplog.at_level("WARNING", logger="engine.queue"):
        got = [item.id for item in r]
    assert got[0] == 1 and got[1] > 2
    assert r.skipped_holes == [(2, got[1] - 1)]
    assert any("not in the journal" in rec.getMessage() for rec in caplog.records)
    q.close()
