"""A full disk (ENOSPC) is reported as DiskFullError, never wrapped or hidden.

Creating a preallocated journal, committing, wrapping and recovering on a full
disk: wherever the ENOSPC hits a file write or sync, the caller gets
:class:`~engine.errors.DiskFullError` (an OSError with errno ENOSPC), and every
later call on the journal gets it again (not a bare PoisonedError).
"""

from __future__ import annotations

import errno

import pytest

from engine.errors import ConfigError, DiskFullError
from engine.fs import make_dirs
from engine.streams import StreamJournal
from engine.streams.opening import check_geometry
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


class _SmallDisk(SimFS):
    """A simulated file system that says how little room it has left."""

    def free_bytes(self, path: str) -> int | None:
        return 64 * PAGE


def test_a_journal_larger_than_the_free_space_is_refused_before_a_byte_is_written() -> None:
    """A new journal is preallocated with zeros: ``--size 99999999999999999999``
    (or any size above the free space) wrote until the disk was full, and the
    half-built ``.creating`` file stayed there."""
    sim = _SmallDisk()
    make_dirs(sim, "/db")
    refused = r"/db/j: a journal of 65536 bytes does not fit: 32768 bytes are free"
    with pytest.raises(DiskFullError, match=refused) as info:
        StreamJournal.open("/db/j", size=128 * PAGE, page_size=PAGE, fs=sim)
    assert info.value.errno == 28 and info.value.path == "/db/j"  # the disk's refusal, typed as one
    # (Checked on the pure function: were the check lost, an open would preallocate 10**20 bytes.)
    with pytest.raises(ConfigError, match="at most 9223372036854775807 bytes"):
        check_geometry(PAGE, 99999999999999999999, "/db/j")
    assert sim.listdir("/db") == []
    # Not preallocated (a sparse file), it takes its blocks as it is written: allowed.
    StreamJournal.open("/db/j", size=128 * PAGE, page_size=PAGE, fs=sim, preallocate=False).close()


def test_a_creation_that_meets_a_full_disk_leaves_nothing() -> None:
    """Wherever the ENOSPC hits while a new journal is built, its half-built
    ``.creating`` file is removed (the lock file is the writer lock's, as after
    any open)."""
    failed = 0
    for fail_at in range(1, 100):
        sim = SimFS()
        make_dirs(sim, "/db")
        fs = FaultyFS(sim, fail_at=fail_at, errno=errno.ENOSPC, persistent=True, kinds=SPACE)
        try:
            StreamJournal.open("/db/j", size=16 * PAGE, page_size=PAGE, fs=fs).close()
        except DiskFullError:
            failed += 1
            assert [name for name in sim.listdir("/db") if name != "j.lock"] == [], fail_at
        else:
            break
    assert failed >= 3
