"""A full disk (ENOSPC) is reported as DiskFullError, never wrapped or hidden.

Creating a preallocated journal, committing, wrapping and recovering on a full
disk: wherever the ENOSPC hits a file write or sync, the caller gets
:class:`~engine.errors.DiskFullError` (an OSError with errno ENOSPC), and every
later call on the journal gets it again (not a bare PoisonedError).
"""

from __future__ import annotations

import errno

import pytest

from engine.errors import DiskFullError
from engine.fs import make_dirs
from engine.streams import StreamJournal
from stress.faults import FaultyFS, OpKind
from stress.simfs import SimFS

PAGE = 512
#: The handle operations a full disk fails (directory operations do not need space).
SPACE = (OpKind.WRITE, OpKind.TRUNCATE, OpKind.FSYNC)


def _workload(fs: FaultyFS) -> None:
    journal = StreamJournal.open("/db/j", size=16 * PAGE, page_size=PAGE, sync_delay=0, fs=fs)
    try:
        for i in range(12):  # wraps a 16-page journal
            with journal.open_stream(f"s{i}") as st:
                st.write(bytes(700))
    finally:
        journal.close()


def _ops() -> int:
    sim = SimFS()
    make_dirs(sim, "/db")
    counter = FaultyFS(sim, kinds=SPACE)
    _workload(counter)
    return counter.ops


@pytest.mark.parametrize("persistent", [False, True])
def test_enospc_anywhere_is_disk_full_error(persistent: bool) -> None:
    total = _ops()
    assert total > 20
    for fail_at in range(1, total + 1):
        sim = SimFS()
        make_dirs(sim, "/db")
        fs = FaultyFS(sim, fail_at=fail_at, errno=errno.ENOSPC, persistent=persistent, kinds=SPACE)
        with pytest.raises(DiskFullError) as info:
            _workload(fs)
        assert info.value.errno == errno.ENOSPC, fail_at


def test_later_calls_repeat_disk_full_error() -> None:
    sim = SimFS()
    make_dirs(sim, "/db")
    fs = FaultyFS(sim, errno=errno.ENOSPC, persistent=True, kinds=SPACE)
    journal = StreamJournal.open("/db/j", size=16 * PAGE, page_size=PAGE, sync_delay=0, fs=fs)
    fs.fail_at = fs.ops + 1
    stream = journal.open_stream("a")
    stream.write(b"x" * 100)
    with pytest.raises(DiskFullError):
        stream.close()
    for _ in range(2):
        with pytest.raises(DiskFullError):
            journal.open_stream("b")
        with pytest.raises(DiskFullError):
            journal.sync()
    journal.close()


def test_creating_a_preallocated_journal_on_a_full_disk() -> None:
    sim = SimFS()
    make_dirs(sim, "/db")
    fs = FaultyFS(sim, fail_at=3, errno=errno.ENOSPC, persistent=True, kinds=SPACE)
    with pytest.raises(DiskFullError) as info:
        StreamJournal.open("/db/j", size=64 * PAGE, page_size=PAGE, fs=fs)
    assert isinstance(info.value, OSError) and info.value.errno == errno.ENOSPC
    assert not sim.exists("/db/j")  # built under a temporary name: nothing half-made in place
