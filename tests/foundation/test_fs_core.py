"""The store core (engine/fs/core.py): the open sequence releases what it took
when a step fails, the latch stops writes, the sync driver runs every policy,
close happens once, a dropped store is closed with a ResourceWarning, and a
reader's core refuses writes."""

from __future__ import annotations

import errno
import gc
import os
import threading
import time

import pytest

from engine.errors import ClosedError, ConfigError, DiskFullError, LockedError, PoisonedError
from engine.fs import OpenMode, SyncPolicy, default_fs, probe_lock
from engine.fs.core import StoreCore, SyncDriver
from engine.fs.latch import FailureLatch
from engine.lifetime import ClosedWhenDropped


class Tracked:
    """A resource that records when it is closed."""

    def __init__(self, name: str, log: list[str], fail: bool = False) -> None:
        self.name, self.log, self.fail = name, log, fail

    def close(self) -> None:
        self.log.append(self.name)
        if self.fail:
            raise OSError(errno.EIO, f"closing {self.name}")


def test_a_failed_open_releases_everything_newest_first(tmp_path) -> None:  # type: ignore[no-untyped-def]
    fs = default_fs()
    lock_path = str(tmp_path / ".lock")
    core = StoreCore(fs, str(tmp_path), "toy store")
    log: list[str] = []
    with pytest.raises(RuntimeError, match="recovery found a problem"), core.opening():
        core.lock(lock_path)
        core.keep(Tracked("data", log))
        core.keep(Tracked("meta", log))
        assert probe_lock(fs, lock_path)  # held while opening
        raise RuntimeError("recovery found a problem")
    assert log == ["meta", "data"]
    assert not probe_lock(fs, lock_path)  # the writer lock went too: the next open may take it
    again = StoreCore(fs, str(tmp_path), "toy store")
    with again.opening():
        again.lock(lock_path)
    assert again.begin_close()
    again.finish_close()


def test_the_writer_lock_names_the_store(tmp_path) -> None:  # type: ignore[no-untyped-def]
    fs = default_fs()
    first = StoreCore(fs, str(tmp_path), "toy store")
    with first.opening():
        first.lock(str(tmp_path / ".lock"))
    second = StoreCore(fs, str(tmp_path), "toy store")
    with pytest.raises(LockedError, match="writer lock of the toy store"), second.opening():
        second.lock(str(tmp_path / ".lock"))
    first.begin_close()
    first.finish_close()


def test_close_happens_once_and_raises_the_first_error_after_releasing_all(tmp_path) -> None:  # type: ignore[no-untyped-def]
    core = StoreCore(default_fs(), str(tmp_path), "toy store")
    log: list[str] = []
    with core.opening():
        core.keep(Tracked("a", log))
        core.keep(Tracked("b", log, fail=True))
        core.keep(Tracked("c", log))
    assert core.begin_close()
    with pytest.raises(OSError, match="closing b"):
        core.finish_close()
    assert log == ["c", "b", "a"]  # every one released although b failed
    assert not core.begin_close()  # idempotent
    with pytest.raises(ClosedError, match="toy store is closed"):
        core.check_open()
    with pytest.raises(ClosedError):
        core.check_writable()


def test_forget_stops_keeping_a_replaced_resource(tmp_path) -> None:  # type: ignore[no-untyped-def]
    core = StoreCore(default_fs(), str(tmp_path), "toy store")
    log: list[str] = []
    old = core.keep(Tracked("old", log))
    core.keep(Tracked("new", log))
    core.forget(old)
    core.begin_close()
    core.finish_close()
    assert log == ["new"]


def test_the_latch_stops_writes_with_the_first_failure_typed(tmp_path) -> None:  # type: ignore[no-untyped-def]
    core = StoreCore(default_fs(), str(tmp_path), "toy store")
    core.check_writable()
    first = core.fail(OSError(errno.ENOSPC, "No space left on device"), "/x/data", "write")
    core.fail(OSError(errno.EIO, "later"), "/x/meta", "fsync")  # the first failure is the cause
    assert core.failed and isinstance(first, PoisonedError)
    for _ in range(2):  # each time a fresh copy
        with pytest.raises(PoisonedError) as raised:
            core.check_writable()
        assert raised.value.path == "/x/data" and "No space" in str(raised.value)
    disk = StoreCore(default_fs(), str(tmp_path), "toy store")
    disk.fail(DiskFullError("/x/data", errno.ENOSPC, "write"))
    with pytest.raises(DiskFullError):  # a full disk stays a full disk
        disk.check_writable()


def test_a_reader_core_refuses_writes(tmp_path) -> None:  # type: ignore[no-untyped-def]
    core = StoreCore(default_fs(), str(tmp_path), "toy store", writer=False)
    core.check_open()
    with pytest.raises(ConfigError, match="opened read-only"):
        core.check_writable()
    assert core.policy.mode == "never" and core.report.actions == []


class Counting:
    def __init__(self) -> None:
        self.syncs = 0
        self.flushes = 0
        self.dirty = True

    def sync(self) -> None:
        self.syncs += 1

    def flush(self) -> None:
        self.flushes += 1


def _wait_for(predicate, seconds: float = 10.0) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.005)
    return False


def test_always_has_a_group_commit_and_no_thread() -> None:
    counting = Counting()
    driver = SyncDriver(SyncPolicy.parse("always"), FailureLatch(), "/x", sync=counting.sync, flush=counting.flush)
    assert driver.thread is None and driver.group is not None
    driver.commit()
    assert counting.syncs == 1 and counting.flushes == 0
    driver.stop()


def test_a_period_syncs_in_the_background_while_dirty() -> None:
    counting = Counting()
    driver = SyncDriver(SyncPolicy.parse(0.01), FailureLatch(), "/x", sync=counting.sync, flush=counting.flush,
                        dirty=lambda: counting.dirty)
    assert driver.group is None and driver.thread is not None
    assert _wait_for(lambda: counting.syncs >= 2 and counting.flushes >= 2)
    counting.dirty = False
    time.sleep(0.05)
    synced = counting.syncs
    time.sleep(0.1)
    assert counting.syncs == synced  # nothing dirty: no fsync
    driver.stop()
    assert not driver.thread.is_alive()
    driver.commit()  # not ``always``: nothing to wait for


def test_never_runs_a_thread_only_to_write_what_is_staged() -> None:
    counting = Counting()
    without = SyncDriver(SyncPolicy.parse("never"), FailureLatch(), "/x", sync=counting.sync)
    assert without.thread is None and without.group is None
    staged = SyncDriver(SyncPolicy.parse("never"), FailureLatch(), "/x", sync=counting.sync, flush=counting.flush)
    assert _wait_for(lambda: counting.flushes >= 2)
    staged.stop()
    assert counting.syncs == 0


def test_a_failed_background_sync_trips_the_latch() -> None:
    latch = FailureLatch()

    def failing() -> None:
        raise OSError(errno.EIO, "Input/output error")

    driver = SyncDriver(SyncPolicy.parse(0.01), latch, "/x/data", sync=failing)
    assert _wait_for(lambda: latch.failure is not None)
    with pytest.raises(PoisonedError, match="Input/output error"):
        latch.check()
    assert _wait_for(lambda: driver.thread is not None and not driver.thread.is_alive())
    driver.stop()


def test_start_sync_once_and_close_stops_the_thread(tmp_path) -> None:  # type: ignore[no-untyped-def]
    core = StoreCore(default_fs(), str(tmp_path), "toy store", policy=SyncPolicy.parse(0.01))
    counting = Counting()
    driver = core.start_sync(counting.sync)
    with pytest.raises(RuntimeError):
        core.start_sync(counting.sync)
    assert core.begin_close()
    assert driver.thread is not None and not driver.thread.is_alive()
    core.finish_close()


class Toy(ClosedWhenDropped):
    """A store over the core: writes a line, makes it durable on close."""

    def __init__(self, core: StoreCore, path: str) -> None:
        self._core = core
        self._handle = core.keep(core.fs.open(path, OpenMode.CREATE))

    @classmethod
    def open(cls, directory: str) -> Toy:
        core = StoreCore(default_fs(), directory, "toy store")
        with core.opening():
            core.lock(os.path.join(directory, ".lock"))
            store = cls(core, os.path.join(directory, "data"))
        core.opened(store)
        return store

    def close(self) -> None:
        if not self._core.begin_close():
            return
        try:
            self._handle.write_at(0, b"closed\n")
            self._handle.fsync()
        finally:
            self._core.finish_close()


def test_a_dropped_store_is_closed_with_a_resource_warning(tmp_path) -> None:  # type: ignore[no-untyped-def]
    store = Toy.open(str(tmp_path))
    with pytest.warns(ResourceWarning, match="unclosed toy store"):
        del store
        gc.collect()
    assert (tmp_path / "data").read_bytes() == b"closed\n"
    assert not probe_lock(default_fs(), str(tmp_path / ".lock"))


def test_a_closed_store_gives_no_warning(tmp_path, recwarn) -> None:  # type: ignore[no-untyped-def]
    store = Toy.open(str(tmp_path))
    store.close()
    del store
    gc.collect()
    assert not [w for w in recwarn if issubclass(w.category, ResourceWarning)]


def test_a_keeper_store_is_closed_through_its_keeper(tmp_path) -> None:  # type: ignore[no-untyped-def]
    closed = threading.Event()

    class Owner:
        pass

    owner = Owner()
    core = StoreCore(default_fs(), str(tmp_path), "toy store")
    core.opened(owner, close=closed.set, name="toy store 'jobs'")
    with pytest.warns(ResourceWarning, match="unclosed toy store 'jobs'"):
        del owner
        gc.collect()
    assert closed.is_set()
