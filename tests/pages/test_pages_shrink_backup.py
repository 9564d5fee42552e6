"""What the key-value store needed from the page store: ``shrink()``, flushes
and checkpoints put off while readers hold snapshots, ``flush()``, and
``copy_store`` backups."""

from __future__ import annotations

import os

import pytest

from engine.errors import ConfigError, LockedError
from engine.fs import make_dirs
from engine.pages import PageStore
from engine.pages.backup import copy_store
from engine.pages.storefile import free_tail_prefix
from stress.simfs import SimFS


def test_free_tail_prefix() -> None:
    assert free_tail_prefix([], 5) == 0
    assert free_tail_prefix([5, 4], 5) == 2
    assert free_tail_prefix([4, 5, 2], 5) == 2
    assert free_tail_prefix([4, 2, 5], 5) == 0  # 4 heads the list but 5 is not next
    assert free_tail_prefix([3, 5, 4, 1], 5) == 3


def _fill(store: PageStore, n: int) -> list[int]:
    with store.transaction() as tx:
        pages = [tx.allocate() for _ in range(n)]
        for p in pages:
            tx.write(p, 0, bytes([p]) * 100)
    return pages


def test_shrink_cuts_the_free_tail(tmp_path: os.PathLike[str]) -> None:
    path = os.path.join(str(tmp_path), "s.db")
    with PageStore.open(path, page_size=512) as store:
        pages = _fill(store, 10)
        with store.transaction() as tx:
            tx.free(pages[1])  # a free page in the middle stays
            for p in pages[6:]:
                tx.free(p)
        assert store.shrink() == 4
        assert store.page_count == 6 and store.free_pages == [2]
        assert os.path.getsize(path) == 7 * 512
        store.verify()
        assert store.read(6)[:100] == bytes([6]) * 100
        assert store.shrink() == 0
        with store.transaction() as tx:
            assert tx.allocate() == 2
            assert tx.allocate() == 7  # appended at the new end
    with PageStore.open(path) as store:
        assert store.page_count == 7
        store.verify()
        assert not store.recovery.repaired


def test_every_crash_state_of_a_shrink_is_a_whole_store() -> None:
    sim = SimFS()
    make_dirs(sim, "/db")
    store = PageStore.open("/db/p", page_size=512, fs=sim)
    pages = _fill(store, 8)
    with store.transaction() as tx:
        for p in pages[5:]:
            tx.free(p)
    store.checkpoint()
    sim.mark("before")
    assert store.shrink() == 3
    sim.mark("after")
    store.close()
    checked = 0
    for state in sim.crash_states(limit=100, seed=1):
        if "before" not in state.marks:
            continue
        with PageStore.open("/db/p", fs=state.fs()) as again:
            again.verify()
            assert again.page_count in (5, 8)
            assert [again.read(p)[:100] for p in range(1, 6)] == [bytes([p]) * 100 for p in range(1, 6)]
            if "after" in state.marks:
                assert again.page_count == 5
        checked += 1
    assert checked > 3


def test_snapshots_put_flushes_off_never_commits(tmp_path: os.PathLike[str]) -> None:
    path = os.path.join(str(tmp_path), "s.db")
    with PageStore.open(path, page_size=512, apply="commit", reader_wait=0) as store:
        (page,) = _fill(store, 1)
        reader = PageStore.open_reader(path)
        with reader.snapshot():
            with store.transaction() as tx:  # does not wait for the reader
                tx.write(page, 0, b"new")
            assert store.postponed >= 1
            assert reader.read(page)[:3] == bytes([page]) * 3  # the last commit flushed before
            assert not store.flush()  # still held: put off again
            with pytest.raises(LockedError):
                store.checkpoint()  # waits reader_wait (0 here), then refuses
        assert store.flush()
        assert reader.read(page)[:3] == b"new"
        store.checkpoint()
        reader.close()


def test_copy_store(tmp_path: os.PathLike[str]) -> None:
    path = os.path.join(str(tmp_path), "s.db")
    dest = os.path.join(str(tmp_path), "copy.db")
    with PageStore.open(path, page_size=512, apply="commit") as store:
        pages = _fill(store, 5)
        copy_store(store.fs, path, dest)
        with store.transaction() as tx:
            tx.write(pages[0], 0, b"later")
        with pytest.raises(ConfigError):
            copy_store(store.fs, path, dest)
    with PageStore.open(dest) as copy:
        assert copy.page_count == 5 and copy.read(pages[0])[:100] == bytes([pages[0]]) * 100
        copy.verify()
        assert not copy.recovery.repaired
