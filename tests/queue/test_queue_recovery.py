"""Recovery edge cases: mid-file damage in the newest writer file, ids burnt by
reader checkpoints after a crash, and retiring files while a reader is created."""

from __future__ import annotations

from typing import Any

import pytest

from engine.errors import CorruptFileError
from engine.fs import lock as lock_module
from engine.fs import make_dirs, set_crashpoint_hook
from engine.queue import Queue, codec, repair
from engine.queue.segments import SEGMENT_HEADER
from stress.simfs import CrashState, SimFS

NOCKPT: dict[str, Any] = {"checkpoint_interval": 3600.0}
REMOTE: dict[str, Any] = {"checkpoint_interval": 3600.0, "poll_interval": 0.001}


def write_file(sim: SimFS, path: str, data: bytes) -> None:
    with sim.open(path, "c") as h:
        h.truncate(0)
        h.write_at(0, data)
        h.fsync()


def five_batches() -> tuple[SimFS, str, list[int]]:
    """A queue whose only writer file holds 5 single-put batches (each + CHECK);
    returns the file and the offset of each PUT."""
    sim = SimFS()
    make_dirs(sim, "/db")
    q = Queue.open("/db", "q", fs=sim, **NOCKPT)
    for i in range(5):
        q.put(b"item-%d" % i)
    (path,) = q.journal_files
    q.close()
    step = codec.put_size(6, False) + 1 + codec.CHECK.size
    return sim, path, [len(SEGMENT_HEADER) + i * step for i in range(5)]


# -- 1. damage in the middle of the newest writer file --------------------------------


def test_bad_data_mid_newest_file_raises_instead_of_cutting() -> None:
    sim, path, offsets = five_batches()
    data = bytearray(sim.snapshot()[path])
    data[offsets[1] + 25] ^= 0xFF  # a data byte of item 2: its CHECK no longer matches
    write_file(sim, path, bytes(data))
    with pytest.raises(CorruptFileError) as info:
        Queue.open("/db", "q", fs=sim, **NOCKPT)
    assert info.value.path == path and info.value.offset == offsets[1]
    assert "repair" in str(info.value)
    # Nothing was cut: the file is as it was.
    assert sim.snapshot()[path] == bytes(data)


def test_bad_header_mid_newest_file_raises_with_record_offset() -> None:
    sim, path, offsets = five_batches()
    data = bytearray(sim.snapshot()[path])
    data[offsets[2]] = 0x87  # a PUT with 7 header words cannot be
    write_file(sim, path, bytes(data))
    with pytest.raises(CorruptFileError) as info:
        Queue.open("/db", "q", fs=sim, **NOCKPT)
    assert info.value.offset == offsets[2]
    q_verify = pytest.raises(CorruptFileError)
    with q_verify:
        from engine.queue.diagnose import verify_queue

        verify_queue(sim, "/db", "q")


def test_repair_cuts_mid_file_damage_and_reports_the_checksummed_items_dropped() -> None:
    sim, path, offsets = five_batches()
    data = bytearray(sim.snapshot()[path])
    data[offsets[1] + 25] ^= 0xFF
    write_file(sim, path, bytes(data))
    report = repair(sim, "/db", "q")
    (cut,) = report.of("cut")
    line = str(cut)
    assert f"offset {offsets[1]}" in line and "3 checksummed item(s) after the damage (ids 3..5)" in line
    q = Queue.open("/db", "q", fs=sim, **NOCKPT)
    assert [i.data for i in q.reader()] == [b"item-0"]
    assert q.put(b"new") == 2
    q.verify()
    q.close()


def test_damage_in_the_last_batch_is_still_a_torn_tail() -> None:
    sim, path, offsets = five_batches()
    data = bytearray(sim.snapshot()[path])
    data[offsets[4] + 25] ^= 0xFF  # the last batch: nothing valid after it
    write_file(sim, path, bytes(data))
    q = Queue.open("/db", "q", fs=sim, **NOCKPT)
    assert q.recovery.total("cut", "bytes") == len(data) - offsets[4]
    assert [i.data for i in q.reader()] == [b"item-%d" % i for i in range(4)]
    q.close()


def test_zeros_after_damage_are_a_torn_tail() -> None:
    sim, path, offsets = five_batches()
    data = bytearray(sim.snapshot()[path])
    data[offsets[3] :] = bytes(len(data) - offsets[3])  # zeros: a torn, preallocated tail
    write_file(sim, path, bytes(data))
    q = Queue.open("/db", "q", fs=sim, **NOCKPT)
    assert q.recovery.total("cut", "bytes") > 0 and q.tail_id == 3
    q.close()


def test_libkestrel_file_keeps_the_old_rule_mid_file_damage_is_cut() -> None:
    sim = SimFS()
    make_dirs(sim, "/db")
    records = [codec.encode_put(i, 1000 + i, b"k%d" % i) for i in range(1, 6)]
    data = bytearray(codec.WRITER_MAGIC + b"".join(records))
    bad = codec.MAGIC_SIZE + len(records[0]) * 2
    data[bad] = 0x87
    write_file(sim, "/db/old.1321401903634", bytes(data))
    write_file(sim, "/db/old.read.", codec.encode_reader_file(0, []))
    q = Queue.open("/db", "old", fs=sim, **NOCKPT)
    assert q.tail_id == 2 and q.recovery.total("cut", "bytes") == len(data) - bad
    q.close()


# -- 2. ids burnt by reader checkpoints ------------------------------------------------


def crash_after_remote_confirm_of_unsynced_put() -> CrashState:
    """A remote reader confirms (and checkpoints) item 2 while the put is still
    before its fsync; the machine crashes then: item 2's bytes are lost, the reader
    file that says "2 is done" survives."""
    sim = SimFS()
    make_dirs(sim, "/db")
    q = Queue.open("/db", "q", fs=sim, sync="always", **NOCKPT)
    q.put(b"one")
    remote = Queue.open_reader("/db", "q", "", fs=sim, **REMOTE)
    first = remote.get(0)
    assert first is not None and first.id == 1
    remote.confirm(1)
    images: list[CrashState] = []

    def hook(name: str) -> None:
        if name == "queue.put.before-fsync" and not images:
            item = remote.get(0)
            assert item is not None and item.data == b"two"  # written, not yet synced
            remote.confirm(item.id)
            remote.checkpoint()
            images.append(sim.durable_image())

    previous = set_crashpoint_hook(hook)
    try:
        q.put(b"two")
    finally:
        set_crashpoint_hook(previous)
    remote.close()
    q.close()
    (image,) = images
    return image


def test_new_put_after_crash_does_not_reuse_an_id_a_reader_confirmed() -> None:
    image = crash_after_remote_confirm_of_unsynced_put()
    fs2 = image.fs()
    q = Queue.open("/db", "q", fs=fs2, sync="always", **NOCKPT)
    tail_at_open, burnt = q.tail_id, [(a.count, a.unit, a.detail) for a in q.recovery.of("reset")]
    new_id = q.put(b"acknowledged after the crash")
    q.verify()
    q.close()
    remote = Queue.open_reader("/db", "q", "", fs=fs2, **REMOTE)
    item = remote.get(0)
    # Before the fix the new put got id 2, which the reader's checkpoint says is done.
    assert item is not None and item.data == b"acknowledged after the crash", image.describe()
    remote.confirm(item.id)
    assert remote.get(0) is None
    remote.close()
    assert (tail_at_open, new_id) == (2, 3)
    assert burnt == [(1, "ids", "ids 2..2 lost before they were durable: burnt (the next id is 3)")]
    q = Queue.open("/db", "q", fs=fs2, **NOCKPT)
    q.verify()
    q.close()


def test_burnt_ids_are_skipped_by_a_reader_behind_them() -> None:
    image = crash_after_remote_confirm_of_unsynced_put()
    fs2 = image.fs()
    # A second reader file, still at head 0, as if it never read anything.
    write_file(fs2, "/db/q.read.slow", codec.encode_reader_file(0, []))
    q = Queue.open("/db", "q", fs=fs2, **NOCKPT)
    q.put(b"three")
    slow = q.reader("slow")
    assert len(slow) == 2  # "one" and "three": the burnt id 2 is not pending
    assert [i.data for i in slow] == [b"one", b"three"]
    assert len(slow) == 0 and slow.head == 3
    q.verify()
    q.close()


def test_burnt_done_ids_count_too() -> None:
    sim = SimFS()
    make_dirs(sim, "/db")
    q = Queue.open("/db", "q", fs=sim, **NOCKPT)
    q.put_many([b"a", b"b"])
    q.close()
    # A checkpoint that confirmed id 7 out of order (ids 3..7 lost in a crash).
    write_file(sim, "/db/q.read.", codec.encode_reader_file(1, [7]))
    q = Queue.open("/db", "q", fs=sim, **NOCKPT)
    assert q.put(b"c") == 8
    assert [i.data for i in q.reader()] == [b"b", b"c"]
    q.verify()
    q.close()


def test_crash_states_remote_reader_of_unsynced_data_never_hides_a_new_put() -> None:
    """Every crash image of a workload where a reader in "another process" confirms
    and checkpoints items that were written but not yet fsynced: after reopening,
    a new acknowledged put is delivered to that reader."""
    sim = SimFS()
    make_dirs(sim, "/db")
    q = Queue.open("/db", "q", fs=sim, sync="never", journal_size=300, **NOCKPT)
    remote = Queue.open_reader("/db", "q", "", fs=sim, **REMOTE)
    for step in range(12):
        q.put(b"w%d" % step)
        q.flush()  # in the file, not durable
        item = remote.get(0)
        assert item is not None
        remote.confirm(item.id)
        if step % 3 == 1:
            remote.checkpoint()
        if step % 5 == 4:
            q.sync()
    remote.close()
    q.close()
    count = 0
    for state in sim.crash_states(limit=300, seed=3):
        fs2 = state.fs()
        q2 = Queue.open("/db", "q", fs=fs2, sync="always", **NOCKPT)
        probe_id = q2.put(b"probe")
        q2.verify()
        q2.close()
        r = Queue.open_reader("/db", "q", "", fs=fs2, **REMOTE)
        got = [i.data for i in r]
        r.close()
        assert b"probe" in got, f"new put {probe_id} hidden: {state.describe()}"
        count += 1
    assert count > 50


# -- 3. retiring writer files while a reader is being created -------------------------


class ListHookFS(SimFS):
    """A SimFS that runs ``after_listdir`` once, right after the next listdir
    returns: the moment another process acts between two steps of the writer."""

    def __init__(self) -> None:
        super().__init__()
        self.after_listdir: Any = None

    def listdir(self, path: str) -> list[str]:
        out = super().listdir(path)
        hook, self.after_listdir = self.after_listdir, None
        if hook is not None:
            hook()
        return out


def backlog_queue(sim: SimFS) -> Queue:
    make_dirs(sim, "/db")
    q = Queue.open("/db", "q", fs=sim, journal_size=150, **NOCKPT)
    q.put_many([b"b" * 40 for _ in range(10)])
    assert len(q.journal_files) >= 4
    return q


def test_takeover_of_the_default_reader_during_retire_keeps_the_backlog() -> None:
    sim = ListHookFS()
    q = backlog_queue(sim)
    taken: list[Any] = []
    # Another process opens the first named reader (it takes over the default
    # reader's file and backlog) just after the writer listed the reader files.
    sim.after_listdir = lambda: taken.append(Queue.open_reader("/db", "q", "named", fs=sim, **REMOTE))
    q.retire_files()
    (named,) = taken
    got = [item.id for item in named]
    assert got == list(range(1, 11)), "the default reader's backlog was retired under the new reader"
    named.close()
    q.checkpoint()  # everything confirmed: now the files go
    assert len(q.journal_files) == 1
    q.close()


def test_no_file_is_retired_while_a_reader_holds_its_lock_without_a_file() -> None:
    sim = SimFS()
    q = backlog_queue(sim)
    r = q.reader()
    assert len(list(r)) == 10
    r.checkpoint()
    # Another process is creating reader "late": it holds its lock and has not yet
    # decided where it starts nor written its file.
    lock = sim.open("/db/q.rlock.late", "c")
    lock.lock(exclusive=True, blocking=False)
    files = q.journal_files
    assert q.retire_files() == []
    assert q.journal_files == files
    lock.close()
    # A stale lock file (nobody holds it) does not block retirement.
    assert q.retire_files() == files[:-1]
    q.close()


def test_reader_open_waits_out_the_writers_lock_probe(monkeypatch: pytest.MonkeyPatch) -> None:
    sim = SimFS()
    q = backlog_queue(sim)
    probe = sim.open("/db/q.rlock.x", "c")
    probe.lock(exclusive=True, blocking=False)
    sleeps: list[float] = []

    def sleep(seconds: float) -> None:  # the reader waits: the probe ends meanwhile
        sleeps.append(seconds)
        probe.close()

    monkeypatch.setattr(lock_module.time, "sleep", sleep)  # the wait of engine.fs.lock
    r = q.reader("x")
    assert sleeps and [i.id for i in r] == list(range(1, 11))  # it took over the default
    q.close()
