"""A page reader's record of changed checksum entries (what a cache above it
drops after a writer's commit), and the change count readers look at."""

from __future__ import annotations

import os
import random
from typing import Any

import pytest

from engine.errors import CorruptFileError
from engine.fs.lock import RING
from engine.pages import PageStore
from engine.pages import sums as sums_module
from engine.pages.reader import changed_entries


def _pages_written(store: PageStore, count: int) -> list[int]:
    """``count`` new pages, each holding ``b"page <id>"``, committed and flushed to the store file."""
    with store.transaction() as tx:
        pages = [tx.allocate() for _ in range(count)]
        for p in pages:
            tx.write(p, 0, b"page %d" % p)
    store.flush()
    return pages


@pytest.fixture
def whole(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """One "load" per time a reader loads the checksum file whole (``sums.load_present``)."""
    loads: list[str] = []
    real = sums_module.load_present

    def counted(*args: Any) -> Any:
        loads.append("load")
        return real(*args)

    monkeypatch.setattr(sums_module, "load_present", counted)
    return loads


def test_changed_entries_finds_exactly_the_differing_entries() -> None:
    rng = random.Random(5)
    for _ in range(500):
        n = rng.randrange(0, 400)
        old = rng.randbytes(4 * n)
        new = bytearray(old)
        changed = set(rng.sample(range(n), min(n, rng.randrange(0, 8))))
        for i in changed:
            new[4 * i + rng.randrange(4)] ^= 1 + rng.randrange(255)
        assert changed_entries(old, bytes(new)) == sorted(changed)
        # Only the common length is compared.
        assert changed_entries(old, bytes(new) + b"\1\2\3\4") == sorted(changed)


def test_a_reload_reports_the_pages_a_flush_wrote(tmp_path: os.PathLike[str]) -> None:
    path = os.path.join(str(tmp_path), "s.db")
    with PageStore.open(path, page_size=512, apply="commit") as store:
        pages = _pages_written(store, 20)
        with PageStore.open_reader(path) as reader:
            assert reader.read(pages[3], 0, len(b"page %d" % pages[3])) == b"page %d" % pages[3]
            assert reader.take_changed() is None  # the first load: every page
            count = reader.change_count()
            assert count is not None
            before = count()
            assert reader.read(pages[0]) and reader.take_changed() == set()
            with store.transaction() as tx:
                tx.write(pages[5], 0, b"changed")
                tx.write(pages[9], 100, b"changed too")
            store.flush()
            assert count() > before  # moved by the writer's flush, seen without a lock
            assert reader.read(pages[5], 0, 7) == b"changed"
            assert reader.take_changed() == {pages[5], pages[9]}
            assert reader.take_changed() == set()


def test_a_reload_after_a_flush_reads_only_the_written_entries(tmp_path: os.PathLike[str], whole: list[str]) -> None:
    """The change ring names the pages a flush wrote: the reader reads their
    checksum entries (and checks the pages against them) without loading the
    checksum file whole; past a ring's worth of pages it loads it whole."""
    path = os.path.join(str(tmp_path), "s.db")
    with PageStore.open(path, page_size=512, apply="commit") as store:
        pages = _pages_written(store, RING + 50)
        with PageStore.open_reader(path) as reader:
            for p in pages:
                assert reader.read(p, 0, 10) == (b"page %d" % p).ljust(10, b"\0")
            assert whole == ["load"]
            reader.take_changed()
            for i in range(3):
                with store.transaction() as tx:
                    tx.write(pages[i], 0, b"new %d" % i)
                    tx.write(pages[-1 - i], 0, b"new -%d" % i)
                store.flush()
                assert reader.read(pages[i], 0, 5) == b"new %d" % i
                assert reader.read(pages[-1 - i], 0, 6) == b"new -%d" % i
                assert reader.take_changed() == {pages[i], pages[-1 - i]}
            assert whole == ["load"]  # each reload read two entries, not the file
            assert reader.verify()  # (loads whole, as it always has)
            assert whole == ["load", "load"]
            with store.transaction() as tx:  # more pages than the ring holds
                for p in pages:
                    tx.write(p, 0, b"all %d" % p)
            store.flush()
            assert reader.read(pages[7], 0, 5) == b"all %d" % pages[7]
            assert whole == ["load", "load", "load"]
            assert reader.take_changed() == set(pages)  # found by comparing the entries


def test_no_state_is_taken_without_the_lock_while_a_writer_holds_it(tmp_path: os.PathLike[str]) -> None:
    """take_unlocked (the seqlock) refuses while the change count is odd (an
    exclusive hold under way: pages may be half written), and takes the state
    once the hold has ended; a page it reads is checked against its checksum."""
    from engine.fs import GatedLock, OpenMode, default_fs
    from engine.pages.storefile import gate_path

    path = os.path.join(str(tmp_path), "s.db")
    with PageStore.open(path, page_size=512, apply="commit") as store:
        pages = _pages_written(store, 4)
        with PageStore.open_reader(path) as reader:
            assert reader.read(pages[0], 0, 6) == b"page %d" % pages[0]
            fs = default_fs()
            with fs.open(path, OpenMode.READ) as handle:
                other = GatedLock(fs, handle, gate_path(path), what="test lock")
                other.acquire(exclusive=True, wait=0)
                try:
                    assert reader.take_unlocked(pages[1]) is None  # a hold under way
                finally:
                    other.release()
                    other.close()
            # That hold named no pages ("anything may have changed"): only the
            # locked path reloads; after it, the state is taken without the lock.
            assert reader.take_unlocked(pages[1]) is None
            assert reader.read(pages[1], 0, 6) == b"page %d" % pages[1]
            got = reader.take_unlocked(pages[1])
            assert got is not None and got[2][:6] == b"page %d" % pages[1]
            reader.take_changed()
            with store.transaction() as tx:
                tx.write(pages[1], 0, b"later")
            store.flush()
            got = reader.take_unlocked(pages[1])
            assert got is not None and got[2][:5] == b"later" and reader.take_changed() == {pages[1]}
            with open(path, "r+b") as raw:  # damage behind the writer's back
                raw.seek(pages[2] * 512 + 100)
                raw.write(b"\xff")
            with pytest.raises(CorruptFileError):
                reader.take_unlocked(pages[2])


def test_a_commit_that_grows_the_store_is_taken_without_a_whole_reload(
    tmp_path: os.PathLike[str], whole: list[str]
) -> None:
    """Pages appended by a flush (a key-value split, say) are staged like the
    rewritten ones: their checksum entries read in one span, the state taken
    without the lock and without loading the checksum file whole; the appended
    pages are read checked, and count as changed."""
    path = os.path.join(str(tmp_path), "s.db")
    with PageStore.open(path, page_size=512, apply="commit") as store:
        pages = _pages_written(store, 4)
        with PageStore.open_reader(path) as reader:
            assert reader.read(pages[0], 0, 6) == b"page %d" % pages[0]
            reader.take_changed()
            assert whole == ["load"]
            for round_ in range(3):
                with store.transaction() as tx:
                    tx.write(pages[0], 0, b"round %d" % round_)
                    grown = [tx.allocate() for _ in range(round_ + 1)]
                    for p in grown:
                        tx.write(p, 0, b"grown %d" % p)
                store.flush()
                got = reader.take_unlocked(grown[-1])
                assert got is not None, "a grown store's commit needs the lock"
                assert got[1] == store.page_count and got[2][:12] == (b"grown %d" % grown[-1]).ljust(12, b"\0")
                assert reader.take_changed() == {pages[0], *grown}
                for p in grown:
                    assert reader.read(p, 0, 12) == (b"grown %d" % p).ljust(12, b"\0")
            assert whole == ["load"]  # never the checksum file whole
            with open(path, "r+b") as raw:  # an appended page damaged behind the writer's back
                raw.seek(grown[0] * 512 + 100)
                raw.write(b"\xff")
            with pytest.raises(CorruptFileError):
                reader.read(grown[0])
