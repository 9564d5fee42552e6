"""The page store on the store core: ``sync=``, the reader's one shape and
options, the failure latch, close once.

See ``engine/fs/core.py`` and ``docs/guide/pages.md`` ("Options").
"""

from __future__ import annotations

import datetime as dt
import errno
from pathlib import Path

import pytest

from engine.errors import ClosedError, ConfigError, LockedError, PoisonedError
from engine.fs import GatedLock, OpenMode, make_dirs
from engine.pages import PageReader, PageStore
from engine.pages.storefile import gate_path
from stress.faults import FaultyFS
from stress.simfs import SimFS


def test_sync_always_is_the_default_and_accepted(tmp_path: Path) -> None:
    path = str(tmp_path / "s.db")
    with PageStore.open(path, sync="always") as store:
        assert str(store.sync) == "always"
        with store.transaction() as tx:
            tx.write(tx.allocate(), 0, b"durable")
    with PageStore.open(path) as store:
        assert str(store.sync) == "always" and store.read(1)[:7] == b"durable"


@pytest.mark.parametrize("sync", ["never", 0.05, dt.timedelta(milliseconds=50)])
def test_sync_other_than_always_is_refused_and_says_why(tmp_path: Path, sync: object) -> None:
    path = tmp_path / "s.db"
    with pytest.raises(ConfigError, match="commits durably always") as info:
        PageStore.open(path, sync=sync)
    assert "sync must be 'always'" in str(info.value) and "journal" in str(info.value)
    assert not path.exists()  # refused before anything was created


def test_readers_open_one_way_with_the_event_reader_s_options(tmp_path: Path) -> None:
    path = str(tmp_path / "s.db")
    with PageStore.open(path, page_size=512, apply="commit") as store:
        with store.transaction() as tx:
            tx.write(tx.allocate(), 0, b"abc")
        with PageReader.open(path, fs=store.fs) as reader, PageStore.open_reader(path, page_size=512) as other:
            assert reader.read(1, 0, 3) == other.read(1, 0, 3) == b"abc"
            assert not reader.recovery.repaired
            with pytest.raises(ConfigError, match="read-only"):
                reader.transaction()
        with pytest.raises(ConfigError, match="page size is 512"):
            PageStore.open_reader(path, page_size=4096)
    with pytest.raises(TypeError):
        PageStore.open(path, readonly=True)  # type: ignore[call-arg]  # one shape: open_reader
    reader.close()  # closing twice is fine
    with pytest.raises(ClosedError):
        reader.read(1)


def test_a_reader_s_lock_wait_bounds_its_wait_for_the_writer_s_page_writes(tmp_path: Path) -> None:
    path = str(tmp_path / "s.db")
    with PageStore.open(path, page_size=512, apply="commit") as store:
        with store.transaction() as tx:
            tx.write(tx.allocate(), 0, b"abc")
        fs = store.fs
        reader = PageStore.open_reader(path, lock_wait=0)
        assert reader.lock_wait == 0
        handle = fs.open(path, OpenMode.READ)
        writing = GatedLock(fs, handle, gate_path(path), what="store file lock")
        writing.acquire(exclusive=True, wait=0)  # as the writer holds it while writing pages
        try:
            with pytest.raises(LockedError):
                reader.read(1)
        finally:
            writing.close()
            handle.close()
        assert reader.read(1, 0, 3) == b"abc"
        reader.close()
    with pytest.raises(ConfigError):
        PageStore.open_reader(path, lock_wait=-1)


def test_a_failed_commit_trips_the_core_s_latch_until_a_reopen() -> None:
    sim = SimFS()
    make_dirs(sim, "/db")
    PageStore.open("/db/s", page_size=512, fs=sim).close()
    faulty = FaultyFS(sim, errno=errno.EIO, persistent=True)
    store = PageStore.open("/db/s", fs=faulty)
    with store.transaction() as tx:
        tx.write(tx.allocate(), 0, b"kept")
    faulty.fail_at = faulty.ops + 1
    with pytest.raises(PoisonedError, match="injected EIO"):
        with store.transaction() as tx:
            tx.write(tx.allocate(), 0, b"lost")
    for write in (store.transaction().__enter__, store.checkpoint, store.flush, store.shrink):
        with pytest.raises(PoisonedError):
            write()
    assert store.read(1)[:4] == b"kept"  # reads of what is committed still work
    store.close()  # failed: closes without writing, releases the files
    store.close()  # once
    with PageStore.open("/db/s", fs=sim) as reopened:
        assert reopened.page_count == 1 and reopened.read(1)[:4] == b"kept"
