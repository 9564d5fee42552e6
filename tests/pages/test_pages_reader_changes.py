"""A page reader's record of changed checksum entries (what a cache above it
drops after a writer's commit), and the change count readers look at."""

from __future__ import annotations

import os
import random

from engine.pages import PageStore
from engine.pages.reader import changed_entries


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
        with store.transaction() as tx:
            pages = [tx.allocate() for _ in range(20)]
            for p in pages:
                tx.write(p, 0, b"page %d" % p)
        store.flush()
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
