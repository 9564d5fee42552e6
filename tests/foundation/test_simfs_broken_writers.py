"""The crash simulator must be able to fail: three classic durability bugs are
caught, and the correct versions of the same writers pass every crash state.

Each writer replaces or publishes a record and then calls ``sim.mark(...)`` (the
acknowledgement).  The invariant: in every crash state, an acknowledged record is
readable and intact.
"""

from __future__ import annotations

import struct

import pytest

from engine.fs import FileSystem, OpenMode, atomic_write, make_dirs
from stress.simfs import SimFS

OLD = b"old-config" * 60  # 600 bytes: long enough to be torn at 512
NEW = b"NEW-CONFIG" * 60


def rename_without_file_fsync(fs: FileSystem) -> None:
    """Broken: the temp file's data is not synced before the rename."""
    with fs.open("/db/config.tmp", OpenMode.CREATE) as tmp:
        tmp.write_at(0, NEW)
    fs.rename("/db/config.tmp", "/db/config")
    fs.fsync_dir("/db")


def rename_with_fsyncs(fs: FileSystem) -> None:
    """Correct: temp, fsync, rename, fsync the directory."""
    atomic_write(fs, "/db/config", NEW)


def check_replace(state_fs: FileSystem, acked: bool) -> str | None:
    data = state_fs.open("/db/config").read_all() if state_fs.exists("/db/config") else None
    if acked and data != NEW:
        return f"acknowledged replace lost: config is {data[:12] if data else data!r}"
    if data not in (OLD, NEW):
        return f"config holds neither version: {data[:12] if data else data!r}"
    return None


def create_without_dir_fsync(fs: FileSystem) -> None:
    """Broken: the new file is synced, but its directory entry never is."""
    with fs.open("/db/segment-2", OpenMode.NEW) as f:
        f.write_at(0, NEW)
        f.fsync()


def create_with_dir_fsync(fs: FileSystem) -> None:
    with fs.open("/db/segment-2", OpenMode.NEW) as f:
        f.write_at(0, NEW)
        f.fsync()
    fs.fsync_dir("/db")


def rename_without_dir_fsync(fs: FileSystem) -> None:
    """Broken: data synced and renamed, but the rename is not made durable."""
    with fs.open("/db/segment-2.tmp", OpenMode.NEW) as f:
        f.write_at(0, NEW)
        f.fsync()
    fs.rename("/db/segment-2.tmp", "/db/segment-2")


def check_created(state_fs: FileSystem, acked: bool) -> str | None:
    exists = state_fs.exists("/db/segment-2")
    if acked and not exists:
        return "acknowledged file is missing"
    if acked and state_fs.open("/db/segment-2").read_all() != NEW:
        return "acknowledged file has wrong contents"
    return None


def pointer_before_data(fs: FileSystem) -> None:
    """Broken: the pointer is written and synced before the data it points to."""
    with fs.open("/db/data", OpenMode.WRITE) as data, fs.open("/db/pointer", OpenMode.WRITE) as ptr:
        offset = data.append(NEW)
        ptr.write_at(0, struct.pack("<QQ", offset, len(NEW)))
        ptr.fsync()
        data.fsync()


def data_before_pointer(fs: FileSystem) -> None:
    with fs.open("/db/data", OpenMode.WRITE) as data, fs.open("/db/pointer", OpenMode.WRITE) as ptr:
        offset = data.append(NEW)
        data.fsync()
        ptr.write_at(0, struct.pack("<QQ", offset, len(NEW)))
        ptr.fsync()


def check_pointer(state_fs: FileSystem, acked: bool) -> str | None:
    offset, length = struct.unpack("<QQ", state_fs.open("/db/pointer").read_all())
    record = state_fs.open("/db/data").read_at(offset, length)
    expected = NEW if (offset, length) != (0, len(OLD)) else OLD
    if record != expected:
        return f"pointer ({offset}, {length}) leads to wrong bytes {record[:12]!r}"
    if acked and expected != NEW:
        return "acknowledged pointer update lost"
    return None


def _setup(fs: FileSystem) -> None:
    make_dirs(fs, "/db")
    atomic_write(fs, "/db/config", OLD)
    with fs.open("/db/data", OpenMode.NEW) as data:
        data.write_at(0, OLD)
        data.fsync()
    atomic_write(fs, "/db/pointer", struct.pack("<QQ", 0, len(OLD)))


def explore(writer, checker) -> tuple[int, list[str]]:  # type: ignore[no-untyped-def]
    sim = SimFS()
    _setup(sim)
    start = len(sim.trace)
    writer(sim)
    sim.mark("acknowledged")
    violations = []
    states = 0
    for state in sim.crash_states(limit=5000, seed=7):
        if state.index < start:
            continue  # crashes during setup are not this test's subject
        states += 1
        problem = checker(state.fs(), acked=bool(state.marks))
        if problem:
            violations.append(f"{problem} [{state.describe()}]")
    assert sim.last_stats is not None and sim.last_stats.exhaustive
    print(f"{writer.__name__}: {states} crash states after setup; {sim.last_stats}")
    return states, violations


@pytest.mark.parametrize(
    ("broken", "checker"),
    [
        (rename_without_file_fsync, check_replace),
        (create_without_dir_fsync, check_created),
        (rename_without_dir_fsync, check_created),
        (pointer_before_data, check_pointer),
    ],
)
def test_broken_writer_is_caught(broken, checker) -> None:  # type: ignore[no-untyped-def]
    states, violations = explore(broken, checker)
    assert states > 1
    assert violations, f"{broken.__name__} passed every crash state: the simulator missed the bug"


@pytest.mark.parametrize(
    ("correct", "checker"),
    [
        (rename_with_fsyncs, check_replace),
        (create_with_dir_fsync, check_created),
        (data_before_pointer, check_pointer),
    ],
)
def test_correct_writer_passes(correct, checker) -> None:  # type: ignore[no-untyped-def]
    states, violations = explore(correct, checker)
    assert states > 1
    assert violations == []
