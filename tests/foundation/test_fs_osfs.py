"""The real file-system implementation and the handle policies of the seam."""

from __future__ import annotations

import errno
import multiprocessing
import os

import pytest

from engine.errors import ClosedError, DiskFullError, EngineError, LockedError, PoisonedError
from engine.fs import OpenMode, OsFileSystem, atomic_write, create_file, make_dirs
from stress.faults import FaultyFS


@pytest.fixture
def fs() -> OsFileSystem:
    return OsFileSystem()


def test_read_write_append_truncate(tmp_path, fs) -> None:  # type: ignore[no-untyped-def]
    path = str(tmp_path / "f")
    with fs.open(path, OpenMode.NEW) as f:
        assert f.append(b"abc") == 0
        assert f.append(b"defg") == 3
        f.write_at(1, b"X")
        assert f.read_all() == b"aXcdefg"
        assert f.read_at(5, 100) == b"fg"
        assert f.read_at(100, 5) == b""
        f.truncate(2)
        assert f.append(b"!") == 2, "append continues at the truncated end"
        f.fsync()
        f.fdatasync()
    assert fs.file_size(path) == 3
    assert fs.listdir(str(tmp_path)) == ["f"]


def test_open_modes(tmp_path, fs) -> None:  # type: ignore[no-untyped-def]
    path = str(tmp_path / "f")
    with pytest.raises(FileNotFoundError):
        fs.open(path, OpenMode.READ)
    fs.open(path, OpenMode.CREATE).close()
    with pytest.raises(FileExistsError):
        fs.open(path, OpenMode.NEW)
    with fs.open(path) as ro:
        with pytest.raises(PermissionError):
            ro.write_at(0, b"x")
        ro.fsync()  # a read-only handle has nothing to sync: allowed, no-op


def test_closed_handle_refuses(tmp_path, fs) -> None:  # type: ignore[no-untyped-def]
    f = fs.open(str(tmp_path / "f"), OpenMode.NEW)
    f.close()
    f.close()  # twice is fine
    with pytest.raises(ClosedError):
        f.read_at(0, 1)
    with pytest.raises(ClosedError):
        f.read_at(0, 0)


def test_closed_handle_never_reads_a_reused_descriptor(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The OS handle serves read_at with its raw read (one frame): once closed,
    its descriptor is -1, so a file opened later on the same number is not read."""
    fs = OsFileSystem()
    first = fs.open(str(tmp_path / "a"), OpenMode.NEW)
    first.write_at(0, b"first")
    first.close()
    second = fs.open(str(tmp_path / "b"), OpenMode.NEW)
    second.write_at(0, b"second")
    with pytest.raises(ClosedError):
        first.read_at(0, 6)
    assert second.read_at(0, 6) == b"second"
    second.close()


def test_exclusive_lock_conflicts_within_process(tmp_path, fs) -> None:  # type: ignore[no-untyped-def]
    path = str(tmp_path / "lock")
    a = fs.open(path, OpenMode.CREATE)
    b = fs.open(path, OpenMode.CREATE)
    a.lock(exclusive=True)
    with pytest.raises(LockedError):
        b.lock(exclusive=True)
    with pytest.raises(LockedError):
        b.lock(exclusive=False)
    a.close()  # closing releases
    b.lock(exclusive=True)
    b.close()


def test_shared_locks_coexist(tmp_path, fs) -> None:  # type: ignore[no-untyped-def]
    path = str(tmp_path / "lock")
    a = fs.open(path, OpenMode.CREATE)
    b = fs.open(path, OpenMode.CREATE)
    a.lock(exclusive=False)
    b.lock(exclusive=False)
    c = fs.open(path, OpenMode.CREATE)
    with pytest.raises(LockedError):
        c.lock(exclusive=True)
    for h in (a, b, c):
        h.close()


def _hold_lock(path: str, ready, release) -> None:  # type: ignore[no-untyped-def]
    handle = OsFileSystem().open(path, OpenMode.CREATE)
    handle.lock(exclusive=True)
    ready.set()
    release.wait(10)
    handle.close()


def test_lock_conflicts_across_processes(tmp_path, fs) -> None:  # type: ignore[no-untyped-def]
    path = str(tmp_path / "lock")
    ctx = multiprocessing.get_context("spawn")
    ready, release = ctx.Event(), ctx.Event()
    child = ctx.Process(target=_hold_lock, args=(path, ready, release))
    child.start()
    try:
        assert ready.wait(30)
        with fs.open(path, OpenMode.CREATE) as mine:
            with pytest.raises(LockedError):
                mine.lock(exclusive=True)
            release.set()
            child.join(30)
            mine.lock(exclusive=True)
    finally:
        release.set()
        child.join(30)


def test_failed_fsync_poisons_handle(tmp_path, fs) -> None:  # type: ignore[no-untyped-def]
    faulty = FaultyFS(fs, fail_at=2, errno=errno.EIO)  # op 1: create, op 2: the fsync
    path = str(tmp_path / "f")
    handle = faulty.open(path, OpenMode.CREATE)
    handle.write_at(0, b"x") if False else None
    with pytest.raises(PoisonedError):
        handle.fsync()
    with pytest.raises(PoisonedError):
        handle.append(b"more")
    with pytest.raises(PoisonedError):
        handle.fsync()
    assert handle.poisoned
    handle.close()
    # A fresh handle (a reopen) works again.
    with faulty.open(path, OpenMode.WRITE) as again:
        again.append(b"ok")
        again.fsync()


def test_failed_write_raises_oserror_then_poisons(tmp_path, fs) -> None:  # type: ignore[no-untyped-def]
    faulty = FaultyFS(fs, fail_at=2, errno=errno.EIO)
    handle = faulty.open(str(tmp_path / "f"), OpenMode.CREATE)
    with pytest.raises(OSError) as info:
        handle.append(b"data")
    assert info.value.errno == errno.EIO and not isinstance(info.value, PoisonedError)
    with pytest.raises(PoisonedError, match="earlier write failed"):
        handle.append(b"data")
    handle.close()


@pytest.mark.parametrize("op", ["append", "write_at", "write_parts_at", "write_many_at", "truncate", "fsync",
                                "write_durable_at"])
@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EDQUOT])
def test_disk_full_is_one_typed_error(tmp_path, fs, op, code) -> None:  # type: ignore[no-untyped-def]
    """ENOSPC/EDQUOT from any mutating operation is DiskFullError: an EngineError,
    a PoisonedError and an OSError, saying which operation failed; later writes and
    syncs raise it again until the file is reopened."""
    # op 1: the create; for the sync case op 2 is a write that succeeds
    faulty = FaultyFS(fs, fail_at=3 if op == "fsync" else 2, errno=code)
    path = str(tmp_path / "f")
    handle = faulty.open(path, OpenMode.CREATE)
    calls = {
        "append": lambda: handle.append(b"data"),
        "write_at": lambda: handle.write_at(0, b"data"),
        "write_parts_at": lambda: handle.write_parts_at(0, [b"da", b"ta"]),
        "write_many_at": lambda: handle.write_many_at([(0, b"d"), (9, b"a")]),
        "truncate": lambda: handle.truncate(10),
        "fsync": handle.fsync,
        "write_durable_at": lambda: handle.write_durable_at(0, [b"data"]),
    }
    if op == "fsync":
        handle.write_at(0, b"x")
    with pytest.raises(DiskFullError) as info:
        calls[op]()
    err = info.value
    assert isinstance(err, EngineError) and isinstance(err, OSError) and isinstance(err, PoisonedError)
    assert err.errno == code and err.path == path
    assert "no space left" in str(err) and path in str(err)
    with pytest.raises(DiskFullError):
        handle.append(b"more")
    with pytest.raises(DiskFullError):
        handle.fsync()
    handle.close()
    with faulty.open(path, OpenMode.WRITE) as again:  # a reopen (space freed) works
        faulty.fail_at = None
        again.write_at(0, b"ok")
        again.fsync()


def test_poisoned_error_says_which_operation_failed(tmp_path, fs) -> None:  # type: ignore[no-untyped-def]
    faulty = FaultyFS(fs, fail_at=3, errno=errno.EIO)
    handle = faulty.open(str(tmp_path / "f"), OpenMode.CREATE)
    handle.write_at(0, b"x")
    with pytest.raises(PoisonedError, match="earlier fsync failed") as info:
        handle.fsync()
    assert info.value.operation == "fsync"
    with pytest.raises(PoisonedError, match="earlier fsync failed"):
        handle.write_at(0, b"y")
    handle.close()


def test_block_size(tmp_path, fs) -> None:  # type: ignore[no-untyped-def]
    size = fs.block_size(str(tmp_path))
    assert size >= os.sysconf("SC_PAGE_SIZE") and size % 512 == 0
    assert fs.block_size(str(tmp_path)) == max(os.sysconf("SC_PAGE_SIZE"), os.stat(tmp_path).st_blksize)


def test_persistent_faults_and_counting(tmp_path, fs) -> None:  # type: ignore[no-untyped-def]
    faulty = FaultyFS(fs, fail_at=3, persistent=True)
    make_dirs(faulty, str(tmp_path / "a"))  # op 1: mkdir, op 2: fsync_dir
    with pytest.raises(OSError):
        faulty.mkdir(str(tmp_path / "b"))
    with pytest.raises(OSError):
        faulty.fsync_dir(str(tmp_path))
    assert faulty.faults == 2 and faulty.ops == 4


def test_atomic_write_and_create_file(tmp_path, fs) -> None:  # type: ignore[no-untyped-def]
    path = str(tmp_path / "sub" / "dir" / "cfg")
    make_dirs(fs, os.path.dirname(path))
    atomic_write(fs, path, b"one")
    atomic_write(fs, path, b"two")
    assert fs.open(path).read_all() == b"two"
    assert not fs.exists(path + ".tmp")
    with create_file(fs, str(tmp_path / "new"), b"hdr") as h:
        assert h.read_all() == b"hdr"
    with pytest.raises(FileExistsError):
        create_file(fs, str(tmp_path / "new"))


@pytest.mark.parametrize("dsync", [True, False])
def test_write_durable_at(tmp_path, fs, monkeypatch, dsync) -> None:  # type: ignore[no-untyped-def]
    """Several buffers written back to back and synced; the same with a kernel
    without RWF_DSYNC (write + fdatasync)."""
    from engine.fs import osfs

    if not dsync:
        monkeypatch.setattr(osfs, "_RWF_DSYNC", None)
    path = str(tmp_path / "f")
    with fs.open(path, OpenMode.NEW) as f:
        f.write_at(0, b"0123456789")
        f.write_durable_at(4, [b"ab", bytearray(b"cd"), memoryview(b"efghij")])
        assert f.read_all() == b"0123abcdefghij"
        assert f.append(b"!") == 14, "append continues after a durable write"


def test_write_durable_at_falls_back_when_refused(tmp_path, fs, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from engine.fs import osfs

    if osfs._RWF_DSYNC is None:
        pytest.skip("no RWF_DSYNC here")

    def refuse(*args: object) -> int:
        raise OSError(errno.EOPNOTSUPP, "not supported")

    monkeypatch.setattr(osfs, "_RWF_DSYNC", osfs._RWF_DSYNC)  # restored after the test
    monkeypatch.setattr(osfs.os, "pwritev", refuse)
    path = str(tmp_path / "f")
    with fs.open(path, OpenMode.NEW) as f:
        f.write_durable_at(0, [b"abc", b"def"])
        assert f.read_all() == b"abcdef"
    assert osfs._RWF_DSYNC is None  # remembered: no second try


def test_failed_durable_write_poisons(tmp_path, fs) -> None:  # type: ignore[no-untyped-def]
    faulty = FaultyFS(fs, fail_at=2, errno=errno.EIO)  # op 1: create, op 2: the write
    handle = faulty.open(str(tmp_path / "f"), OpenMode.CREATE)
    with pytest.raises(PoisonedError):
        handle.write_durable_at(0, [b"x"])
    assert handle.poisoned
    with pytest.raises(PoisonedError):
        handle.write_at(0, b"y")
    handle.close()


def test_durable_write_error_poisons_without_retry(tmp_path, fs, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from engine.fs import osfs

    if osfs._RWF_DSYNC is None:
        pytest.skip("no RWF_DSYNC here")
    calls = []

    def fail(*args: object) -> int:
        calls.append(args)
        raise OSError(errno.EIO, "I/O error")

    with fs.open(str(tmp_path / "f"), OpenMode.NEW) as f:
        monkeypatch.setattr(osfs.os, "pwritev", fail)
        with pytest.raises(PoisonedError):
            f.write_durable_at(0, [b"abc"])
        assert f.poisoned and len(calls) == 1
        with pytest.raises(PoisonedError):
            f.write_durable_at(0, [b"abc"])
        assert len(calls) == 1  # a poisoned handle does not write again


def test_write_parts_at(tmp_path, fs) -> None:  # type: ignore[no-untyped-def]
    """Buffers of any kind written back to back, more of them than one pwritev
    takes; the tracked end of an appending handle moves past them."""
    from engine.fs import osfs

    parts: list[bytes | bytearray | memoryview] = []
    for i in range(osfs._IOV_MAX + 5):
        kind = i % 3
        piece = bytes([i % 251]) * (1 + i % 7)
        parts.append(piece if kind == 0 else bytearray(piece) if kind == 1 else memoryview(piece))
    path = str(tmp_path / "f")
    with fs.open(path, OpenMode.NEW) as f:
        f.write_at(0, b"head")
        f.write_parts_at(4, parts)
        assert f.read_all() == b"head" + b"".join(parts)
        assert f.append(b"!") == 4 + sum(len(p) for p in parts)


def test_write_parts_at_short_writes_are_completed(tmp_path, fs, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from engine.fs import osfs

    real = os.pwritev

    def short(fd: int, buffers: list[bytes], offset: int, *flags: int) -> int:
        return real(fd, [bytes(buffers[0])[:1]], offset, *flags)  # one byte only

    path = str(tmp_path / "f")
    with fs.open(path, OpenMode.NEW) as f:
        monkeypatch.setattr(osfs.os, "pwritev", short)
        f.write_parts_at(0, [b"abc", b"def"])
        monkeypatch.setattr(osfs.os, "pwritev", real)
        assert f.read_all() == b"abcdef"


def test_failed_parts_write_poisons(tmp_path, fs) -> None:  # type: ignore[no-untyped-def]
    faulty = FaultyFS(fs, fail_at=2, errno=errno.EIO)  # op 1: create, op 2: the write
    handle = faulty.open(str(tmp_path / "f"), OpenMode.CREATE)
    with pytest.raises(OSError):
        handle.write_parts_at(0, [b"x", b"y"])
    assert handle.poisoned
    handle.close()


def test_write_many_at(tmp_path, fs) -> None:  # type: ignore[no-untyped-def]
    path = str(tmp_path / "f")
    with fs.open(path, OpenMode.NEW) as f:
        f.write_at(0, b"." * 10)
        f.write_many_at([(1, b"a"), (5, b"bc"), (9, b"de"), (1, b"A")])  # in order: the last wins
        assert f.read_all() == b".A...bc..de"
        assert f.append(b"!") == 11
        f.write_many_at([])


def test_failed_write_many_poisons_after_the_writes_before(tmp_path, fs) -> None:  # type: ignore[no-untyped-def]
    faulty = FaultyFS(fs, fail_at=3, errno=errno.EIO)  # op 1: create, ops 2, 3: the writes
    handle = faulty.open(str(tmp_path / "f"), OpenMode.CREATE)
    with pytest.raises(OSError):
        handle.write_many_at([(0, b"x"), (4, b"y"), (8, b"z")])
    assert handle.poisoned
    handle.close()
    with fs.open(str(tmp_path / "f"), OpenMode.READ) as f:
        assert f.read_all() == b"x"


@pytest.mark.parametrize("op", ["open", "mkdir", "rename", "fsync_dir"])
def test_disk_full_in_file_system_operations_is_typed(tmp_path, fs, op) -> None:  # type: ignore[no-untyped-def]
    """Creating a file or directory, a rename and a directory sync on a full disk
    raise DiskFullError too (every FileSystem implementation, once, in the base)."""
    (tmp_path / "src").write_bytes(b"x")
    faulty = FaultyFS(fs, fail_at=1, errno=errno.ENOSPC, kinds=("write", "mkdir", "rename", "fsync_dir"))
    calls = {
        "open": lambda: faulty.open(str(tmp_path / "new"), OpenMode.NEW),
        "mkdir": lambda: faulty.mkdir(str(tmp_path / "d")),
        "rename": lambda: faulty.rename(str(tmp_path / "src"), str(tmp_path / "dst")),
        "fsync_dir": lambda: faulty.fsync_dir(str(tmp_path)),
    }
    with pytest.raises(DiskFullError) as info:
        calls[op]()
    assert info.value.errno == errno.ENOSPC and isinstance(info.value, OSError)


def test_group_commit_keeps_the_disk_full_type_for_every_waiter() -> None:
    from engine.fs import GroupCommit

    def sync() -> None:
        raise OSError(errno.ENOSPC, "no space")

    group = GroupCommit(lambda: (_ for _ in ()).throw(DiskFullError("/q", errno.ENOSPC, "fsync")), name="/q")
    with pytest.raises(DiskFullError):
        group.sync_now()
    with pytest.raises(DiskFullError, match="/q"):
        group.sync_now()
    other = GroupCommit(sync, name="/p")
    with pytest.raises(PoisonedError):
        other.sync_now()


def test_lock_holders_names_the_process_holding_a_lock(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import subprocess
    import sys

    from engine.fs import OsFileSystem

    fs = OsFileSystem()
    path = str(tmp_path / "held")
    open(path, "w").close()
    if sys.platform != "linux":
        assert fs.lock_holders(path) is None
        return
    assert fs.lock_holders(path) == []
    script = (
        "import fcntl, sys; f = open(sys.argv[1]); fcntl.flock(f, fcntl.LOCK_EX); "
        "print('locked', flush=True); sys.stdin.readline()"
    )
    child = subprocess.Popen([sys.executable, "-c", script, path], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "locked"
        assert fs.lock_holders(path) == [child.pid]
    finally:
        assert child.stdin is not None
        child.stdin.close()
        child.wait(timeout=30)
    assert fs.lock_holders(path) == []
    assert fs.lock_holders(str(tmp_path / "missing")) == []


def test_range_locks_are_per_handle_and_per_byte(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """One-byte range locks (the queue's competing consumers claim items with
    them): two handles conflict on the same byte, not on others; shared locks
    share; unlocking or closing releases; a probe takes nothing."""
    fs = OsFileSystem()
    path = str(tmp_path / "claims")
    a = fs.open(path, OpenMode.CREATE)
    b = fs.open(path, OpenMode.CREATE)
    if not a.supports_range_locks:
        pytest.skip("no OFD range locks on this system")
    assert a.lock_range(7)
    assert not b.lock_range(7)
    assert b.range_locked(7) and not a.range_locked(8)
    assert b.lock_range(8)  # another byte, another lock
    a.unlock_range(7)
    assert not b.range_locked(7)
    assert b.lock_range(7)
    assert a.lock_range(3, exclusive=False) and b.lock_range(3, exclusive=False)
    assert a.range_locked(3) and not a.range_locked(3, exclusive=False)
    b.close()  # closing releases every lock of the handle
    assert a.lock_range(7) and a.lock_range(8)
    holders = fs.lock_holders(path)
    assert holders is None or all(pid > 0 for pid in holders)
    a.close()
    with pytest.raises(ClosedError):
        a.lock_range(1)


def test_flock_through_the_seam_conflicts_between_handles(tmp_path) -> None:  # type: ignore[no-untyped-def]
    fs = OsFileSystem()
    path = str(tmp_path / "lock")
    a = fs.open(path, OpenMode.CREATE)
    b = fs.open(path, OpenMode.CREATE)
    a.lock(exclusive=False)
    b.lock(exclusive=False)  # shared locks share
    with pytest.raises(LockedError):
        b.lock(exclusive=True)  # (b's own shared lock stays: flock converts or refuses)
    a.unlock()
    b.lock(exclusive=True)
    a.close()
    b.close()
