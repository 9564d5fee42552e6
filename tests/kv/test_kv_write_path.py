"""The node a transaction changes (``KV.own_node``): the committed node itself,
taken out of the writer's cache (no copy), a lazy leaf's values from its cached,
verified page image in one compiled call (``pager.leaf_items`` over that page).
It must hold exactly the committed entries; while the transaction changes it,
nothing else sees the change (a read through the writer decodes the committed
page afresh), a rollback leaves the committed state whole, and a damaged cached
image is a CorruptFileError, never a wrong node."""

from __future__ import annotations

import os
import random

import pytest

from engine.errors import CorruptFileError
from engine.kv import KV
from engine.kv.node import Leaf, Overflow


def _store(tmp_path: os.PathLike[str]) -> str:
    path = os.path.join(str(tmp_path), "s.kv")
    rng = random.Random(5)
    with KV.open(path, page_size=1024) as kv, kv.transaction() as tx:
        for i in range(600):
            # a few values over a quarter page go to overflow pages
            tx[rng.randbytes(12)] = rng.randbytes(400 if i % 50 == 0 else rng.randrange(0, 60))
    return path


def _leaves(kv: KV) -> list[tuple[int, Leaf]]:
    """(page, cached leaf) of every leaf, each read through the committed tree."""
    for _ in kv.items():  # every leaf decoded from its page and cached
        pass
    out = []
    for page in range(2, kv.pages.page_count + 1):
        node = kv.cached(page)
        if type(node) is Leaf:
            out.append((page, node))
    return out


def test_an_owned_lazy_leaf_holds_its_committed_entries_and_leaves_the_cache(tmp_path: os.PathLike[str]) -> None:
    path = _store(tmp_path)
    with KV.open(path) as kv:
        before = dict(kv.items())
        leaves = _leaves(kv)
        assert leaves and any(leaf.lazy for _, leaf in leaves)
        overflow = False
        for page, leaf in leaves:
            keys, vals = leaf.keys[:], leaf.values()
            owned = kv.own_node(page)
            assert type(owned) is Leaf and not owned.lazy
            assert owned.keys == keys and owned.vals == vals and owned.size == leaf.size
            # overflow values come as references, not (page, length) tuples
            overflow = overflow or any(type(v) is Overflow for v in owned.vals)
            assert kv.cached(page) is None  # out of the cache: changing it changes nothing committed
            owned.keys.insert(0, b"")
            owned.vals.insert(0, b"x")
        assert overflow
        assert dict(kv.items()) == before  # every leaf decoded afresh from its committed page


def test_reads_through_the_writer_inside_a_transaction_see_the_committed_state(tmp_path: os.PathLike[str]) -> None:
    path = _store(tmp_path)
    rng = random.Random(11)
    with KV.open(path) as kv:
        before = dict(kv.items())  # every node cached: the transaction owns cached nodes
        tx = kv.transaction()
        with tx:
            for _ in range(300):  # enough to split leaves and change branches
                tx[rng.randbytes(12)] = rng.randbytes(40)
            for key in list(before)[::7]:
                tx[key] = b"changed"
            # the same thread (the writer's lock is reentrant) reads the committed state
            assert dict(kv.items()) == before
            assert all(kv[key] == before[key] for key in list(before)[::7])
            tx.rollback()
        assert dict(kv.items()) == before
        assert kv.verify()[-1]
    with KV.open(path) as kv:
        assert dict(kv.items()) == before


def test_a_failed_transaction_leaves_the_cached_committed_nodes_whole(tmp_path: os.PathLike[str]) -> None:
    path = _store(tmp_path)
    rng = random.Random(12)
    with KV.open(path) as kv:
        before = dict(kv.items())
        with pytest.raises(RuntimeError), kv.transaction() as tx:
            for _ in range(300):
                tx[rng.randbytes(12)] = rng.randbytes(40)
            raise RuntimeError("abandoned")
        assert dict(kv.items()) == before
        assert kv.verify()[-1]


def test_puts_into_lazy_leaves_keep_every_other_entry(tmp_path: os.PathLike[str]) -> None:
    path = _store(tmp_path)
    with KV.open(path) as kv:
        before = dict(kv.items())
    rng = random.Random(9)
    with KV.open(path) as kv:  # reopened: every leaf decoded lazily from its page
        with kv.transaction() as tx:
            for _ in range(200):
                key, value = rng.randbytes(12), rng.randbytes(rng.randrange(0, 80))
                tx[key] = value
                before[key] = value
        assert dict(kv.items()) == before
        assert kv.verify()[-1]
    with KV.open(path) as kv:
        assert dict(kv.items()) == before


def test_a_damaged_cached_image_is_corruption_not_a_wrong_node(tmp_path: os.PathLike[str]) -> None:
    path = _store(tmp_path)
    with KV.open(path) as kv:
        page = next(p for p, n in _leaves(kv) if n.lazy)
        images = kv._cache.images
        image = bytearray(images[page])
        image[2:4] = (0xFFFF).to_bytes(2, "little")  # an entry count past the page
        images[page] = bytes(image)
        with pytest.raises(CorruptFileError):
            kv.own_node(page)


def test_a_put_into_a_leaf_not_at_hand_decodes_it_once_with_its_values(
    tmp_path: os.PathLike[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A transaction reads a leaf not cached with its values (``KV.node_to_change``,
    an eager decode), so making it its own needs no second pass over the page
    (``leaf_items``); the commit holds exactly the puts."""
    from engine.kv import store as store_module

    path = _store(tmp_path)
    calls: list[int] = []
    real = store_module.leaf_items

    def counted(*args: object) -> object:
        calls.append(1)
        return real(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(store_module, "leaf_items", counted)
    with KV.open(path) as kv:
        before = dict(kv.items())
        kv.drop_cache()  # every node now read from its page again
        rng = random.Random(9)
        new = {rng.randbytes(12): rng.randbytes(30) for _ in range(40)}
        with kv.transaction() as tx:
            for key, value in new.items():
                tx[key] = value
            reads = [kv.cached(p) for p in range(2, kv.pages.page_count + 1)]
            # the leaves the transaction read but did not change are cached with their values
            assert all(n.lazy is False for n in reads if type(n) is Leaf)
        assert calls == []
        assert dict(kv.items()) == {**before, **new}
        kv.verify()  # raises on any damage
