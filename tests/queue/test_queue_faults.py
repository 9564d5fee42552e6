"""Fault injection: after a failed fsync the queue refuses writes; reopening is clean."""

from __future__ import annotations

import errno
from typing import Any

import pytest

from engine.errors import EngineError, PoisonedError
from engine.fs import make_dirs
from engine.queue import Queue
from stress.faults import FaultyFS
from stress.simfs import SimFS

NOCKPT: dict[str, Any] = {"checkpoint_interval": 3600.0, "journal_size": 200}


def test_failed_fsync_poisons_until_reopen() -> None:
    sim = SimFS()
    make_dirs(sim, "/db")
    ffs = FaultyFS(sim, kinds=("fsync",))
    q = Queue.open("/db", "q", fs=ffs, **NOCKPT)
    q.put(b"safe")
    ffs.fail_at = ffs.ops + 1
    with pytest.raises(PoisonedError):
        q.put(b"doomed")
    for _ in range(3):
        with pytest.raises(PoisonedError):
            q.put(b"after")
    q.close()  # the failure was reported; closing releases the locks quietly
    q2 = Queue.open("/db", "q", fs=sim, **NOCKPT)
    assert q2.verify() == []
    items = [i.data for i in q2.reader()]
    assert items[0] == b"safe" and b"after" not in items
    q2.close()


def _workload(q: Queue, acked: list[bytes], confirmed: list[bytes]) -> None:
    r = q.reader()
    for i in range(14):
        data = b"w-%d" % i + b"." * 40
        q.put(data)
        acked.append(data)
        if i % 3 == 2:
            item = r.get(0)
            if item is not None:
                r.confirm(item.id)
                confirmed.append(item.data)
        if i % 5 == 4:
            q.checkpoint()
    q.close()


def test_fault_at_every_operation_then_clean_reopen() -> None:
    """SQLite's I/O-error sweep: fail op N for N = 1.. until the workload completes."""
    n = 1
    while True:
        sim = SimFS()
        make_dirs(sim, "/db")
        ffs = FaultyFS(sim, fail_at=n, errno=errno.EIO)
        acked: list[bytes] = []
        confirmed: list[bytes] = []
        failed = False
        try:
            q = Queue.open("/db", "q", fs=ffs, **NOCKPT)
        except (OSError, EngineError):
            failed = True
        else:
            try:
                _workload(q, acked, confirmed)
            except (OSError, EngineError):
                failed = True
                try:
                    q.close()
                except (OSError, EngineError):
                    pass
        # Whatever failed, the files as they now are reopen cleanly and keep every
        # acknowledged put that no reader confirmed.
        q2 = Queue.open("/db", "q", fs=sim, **NOCKPT)
        assert q2.verify() == [], n
        delivered = [i.data for i in q2.reader()]
        assert delivered == sorted(set(delivered), key=delivered.index), n
        assert set(delivered) <= {b"w-%d" % i + b"." * 40 for i in range(14)}
        lost = set(acked) - set(confirmed) - set(delivered)
        assert not lost, (n, sorted(lost))
        q2.close()
        if not failed:
            break
        n += 1
    assert n > 20


def test_buffered_mode_failed_sync_refuses_later_puts() -> None:
    sim = SimFS()
    make_dirs(sim, "/db")
    ffs = FaultyFS(sim, kinds=("fsync",))
    q = Queue.open("/db", "q", fs=ffs, sync=3600.0, **NOCKPT)
    q.put(b"one")
    q.sync()
    q.put(b"two")
    ffs.fail_at = ffs.ops + 1
    with pytest.raises(PoisonedError):
        q.sync()
    with pytest.raises(PoisonedError):
        q.put(b"three")
    q.close()
    q2 = Queue.open("/db", "q", fs=sim, **NOCKPT)
    assert q2.verify() == []
    assert [i.data for i in q2.reader()][:1] == [b"one"]
    q2.close()
