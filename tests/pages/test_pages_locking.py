"""The writer/reader lock protocol (docs/guide/pages.md, "Locks").

A reader's brief shared lock on the journal (its "is a writer alive?" probe while
opening, or a scan) must make a writer *wait*, never fail; a second writer must
fail at once.  The tests hold the reader's lock exactly as ``PageStore.open_reader(...)``
and ``scan_if_idle`` take it (a shared lock on ``<path>-journal``)
and watch ``time.sleep`` to know, without timing, that the writer is waiting.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from engine.errors import LockedError
from engine.fs import FileHandle, OpenMode, resolve
from engine.pages import PageStore, journal_path
from engine.pages import store as store_module
from engine.pages.journal import scan_if_idle


@pytest.fixture
def path(tmp_path: os.PathLike[str]) -> str:
    path = os.path.join(str(tmp_path), "locked.db")
    with PageStore.open(path, page_size=512) as store, store.transaction() as tx:
        tx.write(tx.allocate(), 0, b"before")
    return path


@pytest.fixture
def reader_lock(path: str) -> Iterator[FileHandle]:
    """A shared lock on the journal, as a reader's probe holds it (until released)."""
    handle = resolve(None).open(journal_path(path), OpenMode.READ)
    handle.lock(exclusive=False, blocking=False)
    yield handle
    handle.close()


class SleepWatch:
    """Replaces ``time.sleep``: records which threads waited, optionally runs a hook once."""

    def __init__(self, real: Callable[[float], None]) -> None:
        self.real = real
        self.sleepers: set[str] = set()
        self.waiting = threading.Event()

    def __call__(self, seconds: float) -> None:
        self.sleepers.add(threading.current_thread().name)
        self.waiting.set()
        self.real(seconds)


@pytest.fixture
def watch(monkeypatch: pytest.MonkeyPatch) -> SleepWatch:
    w = SleepWatch(time.sleep)
    monkeypatch.setattr(store_module.time, "sleep", w)
    return w


def _open_in_thread(path: str, **kwargs: object) -> tuple[threading.Thread, dict[str, object]]:
    out: dict[str, object] = {}

    def run() -> None:
        try:
            out["store"] = PageStore.open(path, **kwargs)  # type: ignore[arg-type]
        except BaseException as exc:  # handed to the test thread
            out["error"] = exc

    thread = threading.Thread(target=run, name="first-writer")
    thread.start()
    return thread, out


def _wait_until_waiting_or_done(thread: threading.Thread, watch: SleepWatch) -> None:
    """Block until the writer thread sleeps (it found the journal locked) or ends."""
    while thread.is_alive() and not watch.waiting.wait(0.01):
        pass


def test_writer_waits_for_reader_then_succeeds(path: str, reader_lock: FileHandle, watch: SleepWatch) -> None:
    thread, out = _open_in_thread(path)  # default arguments: the stress suite's writer
    _wait_until_waiting_or_done(thread, watch)
    # The writer must not have given up while the reader held its lock.
    assert "error" not in out, f"writer failed on a reader's transient lock: {out.get('error')!r}"
    assert thread.is_alive() and "first-writer" in watch.sleepers
    reader_lock.unlock()  # the reader's probe ends
    thread.join()
    assert "error" not in out, repr(out.get("error"))
    store = out["store"]
    assert isinstance(store, PageStore)
    try:
        with store.transaction() as tx:
            tx.write(1, 0, b"after!")
        assert store.read(1, 0, 6) == b"after!"
        assert store.verify()
    finally:
        store.close()


def test_second_writer_fails_at_once_while_first_waits(path: str, reader_lock: FileHandle, watch: SleepWatch) -> None:
    thread, out = _open_in_thread(path)
    _wait_until_waiting_or_done(thread, watch)
    assert thread.is_alive(), f"first writer did not wait: {out.get('error')!r}"
    # The first writer holds the writer lock and waits for the reader: a second
    # writer must fail without waiting (it never sleeps), whatever its reader_wait.
    with pytest.raises(LockedError, match="another writer"):
        PageStore.open(path)
    assert watch.sleepers == {"first-writer"}
    reader_lock.unlock()
    thread.join()
    store = out["store"]
    assert isinstance(store, PageStore)
    store.close()


def test_second_writer_fails_at_once_while_first_is_open(path: str, watch: SleepWatch) -> None:
    with PageStore.open(path) as store:
        with pytest.raises(LockedError, match="another writer"):
            PageStore.open(path, reader_wait=3600)
        assert not watch.sleepers  # failed at once, no wait
        # The first writer is unharmed.
        with store.transaction() as tx:
            tx.write(1, 0, b"still!")
    with PageStore.open_reader(path) as reader:
        assert reader.read(1, 0, 6) == b"still!"


def test_reader_that_never_lets_go_bounds_the_wait(path: str, reader_lock: FileHandle, watch: SleepWatch) -> None:
    with pytest.raises(LockedError, match="readers held a shared lock"):
        PageStore.open(path, reader_wait=0.05)
    assert watch.sleepers  # it did wait before giving up
    # The failed open released the writer lock: once the reader is gone, a writer opens.
    reader_lock.unlock()
    with PageStore.open(path, reader_wait=0) as store:
        assert store.read(1, 0, 6) == b"before"


def test_readers_still_see_the_live_writer(path: str) -> None:
    """The probe's meaning is unchanged: the writer holds the journal for its lifetime."""
    with PageStore.open(path) as store:
        assert scan_if_idle(resolve(None), journal_path(path)) is None  # a writer is live
        with PageStore.open_reader(path) as reader:
            assert reader.read(1, 0, 6) == b"before"
        assert store.verify()
    assert scan_if_idle(resolve(None), journal_path(path)) is not None  # closed: idle


def test_lock_file_only_for_writers(tmp_path: os.PathLike[str]) -> None:
    missing = os.path.join(str(tmp_path), "missing.db")
    with pytest.raises(FileNotFoundError):
        PageStore.open(missing, create=False)
    assert os.listdir(str(tmp_path)) == []  # a refused open leaves no lock file behind
    with PageStore.open(missing):
        pass
    assert sorted(os.listdir(str(tmp_path))) == [
        "missing.db",
        "missing.db-gate",
        "missing.db-journal",
        "missing.db-lock",
        "missing.db-sums",
    ]
    assert os.path.getsize(missing + "-lock") == 0
    assert os.path.getsize(missing + "-gate") == 4096  # the store file's change count and ring (GatedLock)


def test_overlapping_snapshots_never_starve_a_checkpoint(path: str) -> None:
    """Two readers whose snapshots overlap keep the store file share-locked at every
    instant; the writer's checkpoint still gets in, because once it waits at the
    gate new snapshots queue behind it and the running ones drain."""
    stop = threading.Event()
    overlap = threading.Barrier(2)
    snapshots = [0, 0]

    def read_forever(slot: int) -> None:
        with PageStore.open_reader(path) as reader:
            while not stop.is_set():
                with reader.snapshot():
                    assert reader.read(1, 0, 6) in (b"before", b"after!")
                    snapshots[slot] += 1
                    if snapshots[slot] == 1:
                        overlap.wait(5)  # both inside a snapshot at once, at least once
                    time.sleep(0.002)

    threads = [threading.Thread(target=read_forever, args=(i,)) for i in range(2)]
    with PageStore.open(path) as store:
        store.reader_wait = 5.0
        for thread in threads:
            thread.start()
        try:
            while min(snapshots) < 3:
                time.sleep(0.001)
            with store.transaction() as tx:
                tx.write(1, 0, b"after!")
            store.checkpoint()  # LockedError after 5 s if the readers starved it
        finally:
            stop.set()
            for thread in threads:
                thread.join()
    with PageStore.open_reader(path) as reader:
        assert reader.read(1, 0, 6) == b"after!"
