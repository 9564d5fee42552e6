"""Shared helpers for the page store tests (a plain module, not a conftest)."""

from __future__ import annotations

import functools
import random
from dataclasses import dataclass, field

import pytest

from engine.pages import PageStore


@dataclass
class Model:
    """What the store should hold: live pages' bytes and the free pages."""

    pages: dict[int, bytes] = field(default_factory=dict)
    free: list[int] = field(default_factory=list)  # free-list order, head first
    count: int = 0

    def copy(self) -> Model:
        return Model(dict(self.pages), list(self.free), self.count)


def snapshot(store: PageStore) -> Model:
    """The store's committed state as a Model."""
    free = store.free_pages
    live = [p for p in range(1, store.page_count + 1) if p not in set(free)]
    return Model({p: store.read(p) for p in live}, free, store.page_count)


def random_transaction(
    store: PageStore, model: Model, rng: random.Random, max_ops: int = 4, attempt: list[Model] | None = None
) -> Model:
    """Run one random transaction on ``store`` and apply it to a copy of ``model``.

    ``attempt`` (if given) receives the new model before the commit, so a caller
    whose commit failed knows the state the transaction would have produced.
    """
    ps = store.page_size
    new = model.copy()
    if attempt is not None:
        attempt.append(new)
    with store.transaction() as tx:
        for _ in range(rng.randint(1, max_ops)):
            live = sorted(new.pages)
            choice = rng.random()
            if choice < 0.35 or not live:
                page = tx.allocate()
                if new.free:
                    assert page == new.free.pop(0)
                else:
                    new.count += 1
                    assert page == new.count
                new.pages[page] = bytes(ps)
            elif choice < 0.8:
                page = rng.choice(live)
                if rng.random() < 0.3:  # a whole-page write (the zero-copy path)
                    off, size = 0, ps
                else:
                    off = rng.randrange(ps)
                    size = rng.randint(1, min(ps - off, 700))
                data = bytes(rng.getrandbits(8) for _ in range(size))
                tx.write(page, off, data)
                buf = bytearray(new.pages[page])
                buf[off : off + size] = data
                new.pages[page] = bytes(buf)
            else:
                page = rng.choice(live)
                tx.free(page)
                del new.pages[page]
                new.free.insert(0, page)
    return new


def assert_matches(store: PageStore, model: Model) -> None:
    got = snapshot(store)
    assert got.count == model.count
    assert got.free == model.free
    assert got.pages.keys() == model.pages.keys()
    for page, data in model.pages.items():
        assert got.pages[page] == data, f"page {page} differs"


def use_pure_crc32c(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make engine.pages.crc32c compute with its pure-Python table, as it does when
    google-crc32c is not installed."""
    from engine.pages import crc32c

    monkeypatch.setattr(crc32c, "extend", crc32c.extend_pure)
    monkeypatch.setattr(crc32c, "value", lambda data: crc32c.extend_pure(0, data))
    monkeypatch.setattr(crc32c, "extend_all", lambda crc, pieces: functools.reduce(crc32c.extend_pure, pieces, crc))
