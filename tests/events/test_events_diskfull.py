"""A full disk (ENOSPC) is reported as DiskFullError, never wrapped or hidden.

Wherever ENOSPC hits -- creating the journal's files (and its checksum side
files), a batch, a new id, ``delete_to``, the meta rewrite, ``close`` -- the
caller gets :class:`~engine.errors.DiskFullError` (an OSError with errno ENOSPC),
later writes get it again, and what was acknowledged before reads back after
space is freed.
"""

from __future__ import annotations

import errno

import pytest

from engine.errors import DiskFullError
from engine.events import EventJournal
from engine.fs import make_dirs
from stress.faults import FaultyFS, OpKind
from stress.simfs import SimFS

#: The operations a full disk fails: file writes (creating a file among them),
#: truncation, syncs, and a rename's new directory entry.
SPACE = (OpKind.WRITE, OpKind.TRUNCATE, OpKind.FSYNC, OpKind.RENAME)


def _workload(fs: FaultyFS, acked: list[tuple[str, int]]) -> None:
    journal = EventJournal.open("/db", fs=fs, preallocate=1024)
    try:
        for i in range(40):
            pid = f"id{i % 3}"
            seq = journal.highest_sequence_nr(pid) + 1
            journal.write(pid, [(seq, bytes([i]) * (10 + 37 * (i % 5))), (seq + 1, b"x")])
            acked.append((pid, seq + 1))
            if i == 20:
                journal.delete_to("id1", 2)
    finally:
        journal.close()


def _ops() -> int:
    sim = SimFS()
    make_dirs(sim, "/db")
    counter = FaultyFS(sim, kinds=SPACE)
    _workload(counter, [])
    return counter.ops


@pytest.mark.parametrize("persistent", [False, True])
def test_enospc_anywhere_is_disk_full_error(persistent: bool) -> None:
    total = _ops()
    assert total > 50
    for fail_at in range(1, total + 1, 1 if persistent else 3):
        sim = SimFS()
        make_dirs(sim, "/db")
        fs = FaultyFS(sim, fail_at=fail_at, errno=errno.ENOSPC, persistent=persistent, kinds=SPACE)
        acked: list[tuple[str, int]] = []
        with pytest.raises(DiskFullError) as info:
            _workload(fs, acked)
        assert info.value.errno == errno.ENOSPC, fail_at
        # Space freed: everything acknowledged is there.
        with EventJournal.open("/db", fs=sim) as journal:
            for pid, seq in acked:
                assert journal.highest_sequence_nr(pid) >= seq, (fail_at, pid, seq)
            journal.verify()


def test_later_writes_repeat_disk_full_error() -> None:
    sim = SimFS()
    make_dirs(sim, "/db")
    fs = FaultyFS(sim, errno=errno.ENOSPC, persistent=True, kinds=SPACE)
    journal = EventJournal.open("/db", fs=fs, preallocate=0)
    journal.write("a", [(1, b"x")])
    fs.fail_at = fs.ops + 1
    with pytest.raises(DiskFullError):
        journal.write("a", [(2, b"y" * 600)])
    for _ in range(2):
        with pytest.raises(DiskFullError):
            journal.write("a", [(2, b"z")])
        with pytest.raises(DiskFullError):
            journal.delete_to("a", 1)
    journal.close()
