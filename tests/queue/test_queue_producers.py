"""Many producers on one queue: handles in one process, threads, real processes.

What must hold whatever the interleaving: ids unique and increasing in the
journal, every put's payload under its id, rotation and retirement across
producers, one fsync covering every producer's bytes written before it, and a
producer killed in the middle of its write (or of a rotation) repaired by the
next one to take the append lock.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from engine.errors import EngineError, FullError
from engine.queue import Queue, codec, limits, shared
from engine.queue.segments import create_segment

ROOT = str(Path(__file__).resolve().parents[2])
NOCKPT: dict[str, Any] = {"checkpoint_interval": 3600.0}


def drain(directory: str, name: str = "q") -> list[tuple[int, bytes]]:
    """Every item of the default reader, in order (opened as a reader elsewhere)."""
    with Queue.open(directory, name, **NOCKPT) as q:
        r = q.reader()
        got = []
        while (item := r.get(timeout=0)) is not None:
            got.append((item.id, item.data))
            r.confirm(item.id)
        assert q.verify() is not None
    return got


def test_two_handles_and_threads_put_with_unique_increasing_ids(tmp_path: Path) -> None:
    d = str(tmp_path)
    handles = [Queue.open(d, "q", sync=sync, journal_size=2048, **NOCKPT) for sync in ("always", 0.01)]
    acked: dict[int, bytes] = {}
    guard = threading.Lock()

    def work(q: Queue, tag: str) -> None:
        mine = []
        for i in range(60):
            data = f"{tag}-{i}".encode()
            xid = q.put(data) if i % 5 else q.put_many([data, data + b"+"])[0]
            mine.append(xid)
            with guard:
                acked[xid] = data
        assert mine == sorted(mine)  # one producer's ids increase

    threads = [threading.Thread(target=work, args=(q, f"{n}{t}")) for n, q in enumerate(handles) for t in "ab"]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for q in handles:
        q.close()
    got = drain(d)
    ids = [xid for xid, _ in got]
    assert ids == list(range(1, len(ids) + 1))  # unique, increasing, no hole
    assert len(ids) == 240 + 48
    assert all(dict(got)[xid] == data for xid, data in acked.items())


def test_rotation_and_retirement_with_two_producers(tmp_path: Path) -> None:
    d = str(tmp_path)
    a = Queue.open(d, "q", journal_size=256, **NOCKPT)
    b = Queue.open(d, "q", journal_size=256, **NOCKPT)
    r = a.reader()
    for i in range(40):
        (a if i % 3 else b).put(b"item-%02d" % i)
    assert len(b.journal_files) > 3  # b saw a's rotations
    got = []
    while (item := r.get(timeout=0)) is not None:
        got.append(item.data)
        r.confirm(item.id)
    assert got == [b"item-%02d" % i for i in range(40)]
    a.checkpoint()  # retires what the reader passed, whoever created the files
    b.checkpoint()
    b.put(b"after")
    assert b.tail_id == a.tail_id == 41
    last = r.get(timeout=1)
    assert last is not None and last.data == b"after"
    r.confirm(last.id)
    a.close()
    b.close()
    assert drain(d) == []


def test_one_fsync_covers_another_producers_bytes(tmp_path: Path) -> None:
    """A producer whose bytes another process's fsync covered returns without its own
    (once it knows another producer writes: its append lock reads the state record)."""
    d = str(tmp_path)
    buffered = Queue.open(d, "q", sync="never", **NOCKPT)
    durable = Queue.open(d, "q", sync="always", **NOCKPT)
    syncs = []
    real = buffered._writer._handle.fdatasync

    def counted() -> None:
        syncs.append(1)
        real()

    buffered._writer._handle.fdatasync = counted  # type: ignore[method-assign]
    durable.put(b"first")  # another producer has written ...
    buffered.put(b"staged")
    buffered.flush()  # ... which this append sees; in the file, not durable
    durable.put(b"durable")  # its fsync covers the bytes before its own
    buffered.sync()
    assert syncs == []  # covered: no fsync of its own
    buffered.put(b"more")
    buffered.sync()
    assert syncs == [1]
    buffered.close()
    durable.close()
    assert [data for _, data in drain(d)] == [b"first", b"staged", b"durable", b"more"]


def test_a_producer_killed_in_its_write_is_repaired_by_the_next(tmp_path: Path) -> None:
    """Simulated: a producer holds the append lock, writes half a batch, dies (its
    lock goes with it; the record still says "held").  The next put cuts the
    torn bytes and goes on."""
    d = str(tmp_path)
    a = Queue.open(d, "q", **NOCKPT)
    b = Queue.open(d, "q", **NOCKPT)
    a.put(b"one")
    w = b._writer
    with w._lock:
        w._acquire()
        torn = codec.encode_put(2, 0, b"torn")[:-2]
        w._handle.write_at(w._written_end, torn)
        w._state.close()  # dies: its locks go; it never publishes
    assert a.put(b"two") == 2  # the torn id 2 was never acknowledged: given again
    assert [(w.kind, w.unit) for w in a.recovery.actions] == [("cut", "bytes")]
    a.close()
    b._presence.release()
    assert drain(d) == [(1, b"one"), (2, b"two")]


def test_a_producer_killed_in_a_rotation_is_repaired_by_the_next(tmp_path: Path) -> None:
    d = str(tmp_path)
    a = Queue.open(d, "q", **NOCKPT)
    b = Queue.open(d, "q", **NOCKPT)
    a.put(b"one")
    w = b._writer
    with w._lock:
        w._acquire()
        segment = create_segment(b.fs, d, "q", w._segments, b.now_ms())
        w._state.close()  # dies after creating the next file, before saying so
    assert a.put(b"two") == 2
    assert a.journal_files[-1] == segment.path  # the new file is the writer file now
    a.close()
    b._presence.release()
    assert drain(d) == [(1, b"one"), (2, b"two")]


def test_the_first_producer_recovers_and_later_ones_do_not(tmp_path: Path) -> None:
    d = str(tmp_path)
    with Queue.open(d, "q", **NOCKPT) as q:
        q.put(b"x")
    newest = sorted(p for p in os.listdir(d) if p[2:].isdigit())[-1]
    with open(os.path.join(d, newest), "ab") as f:
        f.write(b"\x86\x01")  # a torn tail, as a crash leaves
    first = Queue.open(d, "q", **NOCKPT)
    assert [a.kind for a in first.recovery.actions] == ["cut"]
    second = Queue.open(d, "q", **NOCKPT)
    assert second.recovery.actions == [] and second.tail_id == 1
    assert second.put(b"y") == 2 and first.tail_id == 2
    first.close()
    second.close()


PRODUCER = """
    import sys
    from engine.queue import Queue
    directory, tag, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    with Queue.open(directory, "q", sync="always", journal_size=4096, checkpoint_interval=0.05) as q:
        for i in range(count):
            xid = q.put(f"{tag}-{i}".encode())
            print(xid, f"{tag}-{i}", flush=True)
"""


def test_producer_processes_put_into_one_queue(tmp_path: Path) -> None:
    d = str(tmp_path)
    q = Queue.open(d, "q", sync="always", journal_size=4096, checkpoint_interval=0.05)
    r = q.reader()
    children = [
        subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(PRODUCER), d, f"p{n}", "150"],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for n in range(4)
    ]
    got: dict[int, bytes] = {}
    order = []
    while len(got) < 600:
        item = r.get(timeout=30)
        assert item is not None, "an item did not arrive"
        got[item.id] = item.data
        order.append(item.id)
        r.confirm(item.id)
    acked = {}
    for child in children:
        out, err = child.communicate(timeout=120)
        assert child.returncode == 0, err
        for line in out.splitlines():
            xid, data = line.split()
            acked[int(xid)] = data.encode()
    assert order == sorted(order) == list(range(1, 601))
    assert got == acked
    for n in range(4):  # each producer's items in its own order
        mine = [xid for xid, data in sorted(acked.items()) if data.startswith(f"p{n}-".encode())]
        assert [acked[x] for x in mine] == [f"p{n}-{i}".encode() for i in range(150)]
    q.checkpoint()
    assert len(q.journal_files) <= 2  # the reader passed them: retired
    q.verify()
    q.close()


def test_limits_count_readers_open_in_other_producers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """max_items / max_size hold for a reader open elsewhere (here: another
    producer's handle), from its checkpoint file plus what was put since."""
    monkeypatch.setattr(limits, "REFRESH", 0.0)
    d = str(tmp_path)
    consumer_side = Queue.open(d, "q", **NOCKPT)
    r = consumer_side.reader("r")
    producer = Queue.open(d, "q", max_items=3, **NOCKPT)
    for i in range(3):
        producer.put(b"%d" % i)
    with pytest.raises(FullError, match=r"reader 'r'.*not open in this process"):
        producer.put(b"one too many")
    for _ in range(2):
        item = r.get(timeout=1)
        assert item is not None
        r.confirm(item.id)
    with pytest.raises(FullError):
        producer.put(b"still full: the confirms are not checkpointed yet")
    r.checkpoint()
    producer.put(b"3")
    producer.put(b"4")
    with pytest.raises(FullError):
        producer.put(b"5")
    producer.close()
    sized = Queue.open(d, "q", max_size=200, **NOCKPT)
    with pytest.raises(FullError, match="reader 'r'"):
        sized.put(b"x" * 200)
    sized.close()
    consumer_side.close()


def test_the_append_lock_is_kept_between_writes_until_a_knock_and_never_across_an_fsync(tmp_path: Path) -> None:
    """One rule, whoever else is there: a producer keeps the append lock from one
    write to the next while nobody asks for it (no system call per write to take
    it again), lets it go after a write once another producer knocked, and never
    holds it across an fsync (others write while it runs)."""
    d = str(tmp_path)
    a = Queue.open(d, "q", sync="always", **NOCKPT)
    w = a._writer
    try:

        def write_one(data: bytes) -> None:  # a put's steps, without waiting for the fsync
            with w._lock:
                if not w._held:
                    w._acquire()
                w._stage_records([codec.encode_put(w.tail + 1, a.now_ms(), data)], w.tail + 1)
                w._write_staged()
                w._release_if_knocked()

        a.put(b"one")
        assert not w._held  # its fsync's leader let the lock go first
        write_one(b"two")
        write_one(b"three")
        assert w._held  # nobody knocked: kept from one write to the next
        other = shared.SharedState(a.fs, d, "q")
        try:
            other.knock()
        finally:
            other.close()
        assert w._held  # looked at after the next write
        write_one(b"four")
        assert not w._held  # knocked: the lock goes, the record published
        view = w._state.read()
        assert view is not None and view.tail == 4 and view.end == w._written_end and not view.held
        a.sync()
    finally:
        a.close()
    assert [data for _, data in drain(d)] == [b"one", b"two", b"three", b"four"]


def test_a_second_producer_gets_in_while_a_lone_one_keeps_putting(tmp_path: Path) -> None:
    """Threads of a lone sync="always" producer put without pause (its fsyncs
    slowed so that puts land during each one); a second producer opens and puts
    all the same, long before the first stops."""
    d = str(tmp_path)
    a = Queue.open(d, "q", sync="always", **NOCKPT)
    real = a._writer._handle.fdatasync

    def slow() -> None:
        time.sleep(0.002)
        real()

    a._writer._handle.fdatasync = slow  # type: ignore[method-assign]
    stop = threading.Event()
    acked: list[int] = []
    guard = threading.Lock()

    def work(tag: int) -> None:
        i = 0
        while not stop.is_set():
            xid = a.put(b"a%d-%d" % (tag, i))
            with guard:
                acked.append(xid)
            i += 1

    # Daemons, and the second producer in a thread of its own: a deadlock between
    # the two (once: the second one waited for the first's fsync holding the append
    # lock a thread of the first needed) fails the test instead of hanging the run.
    threads = [threading.Thread(target=work, args=(k,), daemon=True) for k in range(4)]
    for t in threads:
        t.start()
    watchdog = threading.Timer(20, stop.set)  # were the lock never yielded: stop, and fail below
    watchdog.start()
    b_ids: list[int] = []

    def second() -> None:
        with Queue.open(d, "q", sync="always", **NOCKPT) as b:
            b_ids.extend(b.put(b"b-%d" % i) for i in range(5))

    try:
        while len(acked) < 50:  # the first producer is busy
            time.sleep(0.001)
        started = time.monotonic()
        opener = threading.Thread(target=second, daemon=True)
        opener.start()
        opener.join(60)
        assert not opener.is_alive(), "the second producer never got in: deadlocked with the first"
        waited = time.monotonic() - started
        busy_meanwhile = not stop.is_set()
    finally:
        watchdog.cancel()
        stop.set()
        for t in threads:
            t.join(60)
        if not any(t.is_alive() for t in threads):
            a.close()
    assert busy_meanwhile and waited < 20  # got in while the first kept putting
    got = drain(d)
    ids = [xid for xid, _ in got]
    assert ids == list(range(1, len(ids) + 1))
    assert set(acked) | set(b_ids) == set(ids)
    assert [data for xid, data in got if xid in b_ids] == [b"b-%d" % i for i in range(5)]


def _counting_fsyncs(q: Queue) -> list[int]:
    """Count ``q``'s fsyncs of its writer file (a list that grows by one each)."""
    calls: list[int] = []
    real = q._writer._handle.fdatasync

    def counted() -> None:
        calls.append(1)
        real()

    q._writer._handle.fdatasync = counted  # type: ignore[method-assign]
    return calls


def _two_producers(d: str) -> tuple[Queue, Queue]:
    """Two producers of queue "q", each having put."""
    a = Queue.open(d, "q", sync="always", **NOCKPT)
    b = Queue.open(d, "q", sync="always", **NOCKPT)
    b.put(b"b")
    a.put(b"a")
    return a, b


def test_a_follower_sleeps_until_the_leaders_fsync_covers_it(tmp_path: Path) -> None:
    """Group commit across processes: while another producer leads (holds
    ``<q>.sync``), a put with sync="always" sleeps; once the leader publishes that
    its fsync covered the put's bytes and wakes the sleepers, the put returns
    without an fsync of its own."""
    d = str(tmp_path)
    a, b = _two_producers(d)
    try:
        fsyncs = _counting_fsyncs(a)
        assert b._writer._state.lead()  # b leads, as if in its fsync
        returned = threading.Event()
        t = threading.Thread(target=lambda: (a.put(b"waits"), returned.set()))
        t.start()
        time.sleep(0.2)  # several FOLLOW_PERIODs: the leader is alive (holds the lock)
        assert not returned.is_set() and fsyncs == []
        b._writer._state.write_synced(a.written_position)  # the leader's fsync covered a's bytes
        b._writer._state.end_lead()
        assert returned.wait(10.0)
        t.join()
        assert fsyncs == []  # covered: no fsync of its own
    finally:
        a.close()
        b.close()
    # The last producer to close zeros the record and the group commit's words
    # (the durable facts, after them, stay).
    with open(os.path.join(d, "q.state"), "rb") as f:
        assert not f.read(128).strip(b"\0")
    with open(os.path.join(d, "q.sync"), "rb") as f:
        assert not f.read().strip(b"\0")
    assert [data for _, data in drain(d)] == [b"b", b"a", b"waits"]


def test_a_leader_killed_in_its_fsync_holds_nobody_up(tmp_path: Path) -> None:
    """A leader killed in its fsync leaves ``busy`` set in ``<q>.sync``'s words
    and wakes nobody, but the kernel drops its lock: a producer sleeping behind
    it looks again within a FOLLOW_PERIOD, leads, and fsyncs for itself."""
    d = str(tmp_path)
    a, b = _two_producers(d)
    try:
        fsyncs = _counting_fsyncs(a)
        state = b._writer._state
        assert state.lead()  # b leads ...
        returned = threading.Event()
        t = threading.Thread(target=lambda: (a.put(b"after"), returned.set()))
        t.start()
        time.sleep(0.1)
        assert not returned.is_set()  # a sleeps behind it
        state._sync.unlock()  # ... and dies: its lock goes, busy stays set, no wake
        assert state._group.get(1) == 1
        assert returned.wait(10.0)
        t.join()
        assert fsyncs == [1]
        assert state._group.get(1) == 0  # a's lead cleared it
    finally:
        a.close()
        b.close()
    assert [data for _, data in drain(d)] == [b"b", b"a", b"after"]


def test_a_failed_fsync_ends_the_lead(tmp_path: Path) -> None:
    """The leader's fsync fails: its put raises, and the lock and ``busy`` go all
    the same, so the other producers go on (and fsync for themselves)."""
    d = str(tmp_path)
    a, b = _two_producers(d)
    try:

        def broken() -> None:
            raise OSError(5, "Input/output error")

        a._writer._handle.fdatasync = broken  # type: ignore[method-assign]
        with pytest.raises(EngineError):
            a.put(b"lost")
        state = b._writer._state
        assert state._group.get(1) == 0
        assert state.lead()  # the lock is free
        state.end_lead()
        b.put(b"goes on")
    finally:
        a.close()
        b.close()


def test_no_durable_put_leaves_the_append_lock_held(tmp_path: Path) -> None:
    """A thread whose put another thread's fsync covered returned holding the
    append lock (taken after the leader let it go, before the leader counted the
    bytes written); with sync="always" nothing would let it go, and a second
    producer opening then waited for ever (a hang .ci/run saw).  After every round
    of concurrent durable puts the lock is free: another open file description
    gets it at once."""
    d = str(tmp_path)
    with Queue.open(d, "q", sync="always", **NOCKPT) as q:
        real = q._writer._handle.fdatasync

        def slow() -> None:  # fsyncs long enough for the other threads to write meanwhile
            time.sleep(0.002)
            real()

        q._writer._handle.fdatasync = slow  # type: ignore[method-assign]

        def work(tag: bytes) -> None:
            for i in range(10):
                q.put(b"%s-%d" % (tag, i))

        for round_ in range(30):
            threads = [threading.Thread(target=work, args=(b"%d-%d" % (round_, k),)) for k in range(4)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            with open(os.path.join(d, "q.state"), "rb") as probe:
                fcntl.flock(probe.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)  # BlockingIOError if still held
                fcntl.flock(probe.fileno(), fcntl.LOCK_UN)
