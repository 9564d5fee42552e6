"""The writer's copy of a committed node for change (``KV.copy_node``): a lazy
leaf's entries come from its cached, verified page image in one compiled call
(``pager.leaf_items`` over that page), any other node is copied as it is.  The
copy must hold exactly the committed entries, in fresh lists (changing it never
changes the cached node), and a damaged cached image is a CorruptFileError, never
a wrong copy."""

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


def test_a_lazy_leafs_copy_holds_its_committed_entries_in_fresh_lists(tmp_path: os.PathLike[str]) -> None:
    path = _store(tmp_path)
    with KV.open(path) as kv:
        leaves = _leaves(kv)
        assert leaves and any(leaf.lazy for _, leaf in leaves)
        for page, leaf in leaves:
            keys, vals = leaf.keys[:], leaf.values()
            copy = kv.copy_node(page, leaf)
            assert type(copy) is Leaf
            assert copy.keys == keys and copy.vals == vals and copy.size == leaf.size
            assert copy.keys is not leaf.keys
            copy.keys.insert(0, b"")
            copy.vals.insert(0, b"x")
            assert leaf.keys == keys and leaf.values() == vals  # the cached node is untouched
        # overflow values survive the copy as references, not (page, length) tuples
        assert any(type(v) is Overflow for _, leaf in leaves for v in kv.copy_node(_, leaf).vals)  # type: ignore[union-attr]


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


def test_a_damaged_cached_image_is_corruption_not_a_wrong_copy(tmp_path: os.PathLike[str]) -> None:
    path = _store(tmp_path)
    with KV.open(path) as kv:
        page, leaf = next((p, n) for p, n in _leaves(kv) if n.lazy)
        images = kv._cache.images
        image = bytearray(images[page])
        image[2:4] = (0xFFFF).to_bytes(2, "little")  # an entry count past the page
        images[page] = bytes(image)
        with pytest.raises(CorruptFileError):
            kv.copy_node(page, leaf)
