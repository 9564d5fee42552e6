"""The key-value store's fast paths keep their meaning: lazy leaves stay lazy
(and equal to eager ones), caches and checkpoints have the documented defaults,
a commit journals only what changed, and a descent still checks every node."""

from __future__ import annotations

import os
import random

import pytest

from engine.errors import ConfigError, CorruptFileError
from engine.kv import KV, pager
from engine.kv import node as nodes
from engine.kv.pager import DEFAULT_CACHE_NODES, NodeCache
from engine.kv.store import COMMIT_CHECKPOINT_BYTES
from engine.pages.store import DEFAULT_CACHE_PAGES as PAGES_DEFAULT_CACHE_PAGES
from engine.pages.store import DEFAULT_CHECKPOINT_BYTES


@pytest.fixture
def path(tmp_path: os.PathLike[str]) -> str:
    return os.path.join(str(tmp_path), "store.kv")


def _fill(kv: KV, n: int, seed: int = 1) -> dict[bytes, bytes]:
    rng = random.Random(seed)
    model = {rng.randbytes(16): rng.randbytes(rng.choice([0, 10, 100])) for _ in range(n)}
    kv.update(model.items())
    return model


def test_the_documented_defaults(path: str) -> None:
    with KV.open(path) as kv:
        assert kv._cache.capacity == DEFAULT_CACHE_NODES == 65536
        assert kv.pages.cache.capacity == DEFAULT_CACHE_NODES  # cache_pages follows cache_nodes
        assert kv.pages.apply_each_commit
        assert kv.pages.checkpoint_bytes == kv.pages.checkpoint_max_bytes == COMMIT_CHECKPOINT_BYTES == 16 << 20
    with KV.open(path, cache_nodes=100) as kv:
        assert kv._cache.capacity == kv.pages.cache.capacity == 100
    with KV.open(path, cache_nodes=100, cache_pages=7, checkpoint_bytes=1 << 20) as kv:
        assert kv.pages.cache.capacity == 7
        assert kv.pages.checkpoint_bytes == kv.pages.checkpoint_max_bytes == 1 << 20
    with KV.open(path, apply="checkpoint") as kv:  # the page store's own adaptive policy
        assert kv.pages.checkpoint_bytes == DEFAULT_CHECKPOINT_BYTES
        assert kv.pages.checkpoint_max_bytes > DEFAULT_CHECKPOINT_BYTES
    with KV.open(path, checkpoint_max_bytes=8 << 20) as kv:  # given: the page store's policy
        assert kv.pages.checkpoint_bytes == DEFAULT_CHECKPOINT_BYTES
        assert kv.pages.checkpoint_max_bytes == 8 << 20
    assert PAGES_DEFAULT_CACHE_PAGES == 1024  # the plain page store keeps its own default


@pytest.mark.parametrize("bad", [-1, 1.5, "10"])
def test_cache_nodes_must_be_a_count(path: str, bad: object) -> None:
    with pytest.raises(ConfigError, match="cache_nodes must be an int >= 0"):
        KV.open(path, cache_nodes=bad)
    with pytest.raises(ConfigError, match="cache_nodes must be an int >= 0"):
        KV.open_reader(path, cache_nodes=bad)


def test_commits_of_many_pages_checkpoint_only_at_16_mib(path: str) -> None:
    """A store whose commits already wrote their pages checkpoints rarely."""
    with KV.open(path, page_size=512) as kv:
        _fill(kv, 3000)
        before = kv.pages.checkpoints
        for i in range(5):
            with kv.transaction() as tx:
                for key in list(kv)[i::5]:
                    tx[key] = b"x" * 40
        assert kv.pages.checkpoints == before  # some MiB of journal: no checkpoint yet
        assert kv.stats()["journal_bytes"] > DEFAULT_CHECKPOINT_BYTES // 4


def test_lazy_leaves_stay_lazy_and_read_like_eager_ones(path: str) -> None:
    with KV.open(path, page_size=1024) as kv:
        model = _fill(kv, 500)
    with KV.open(path, page_size=1024) as kv:
        key = sorted(model)[123]
        assert kv[key] == model[key]
        assert list(kv.items()) == sorted(model.items())
        leaves = [n for n in kv._cache._nodes.values() if type(n) is nodes.Leaf]
        assert leaves and all(leaf._vals is None for leaf in leaves)  # gets and scans slice, not keep
        leaf = leaves[0]
        page = leaf._page
        eager = nodes.Leaf(leaf.keys[:], leaf.values(), leaf.size)
        assert [leaf.value_at(i) for i in range(len(leaf.keys))] == eager.vals
        copy = leaf.copy()
        copy.vals[0] = b"changed"
        copy.keys.append(b"\xff" * 20)
        assert leaf._vals is None and leaf._page is page and leaf.values() == eager.vals  # the cached leaf is intact
        assert leaf.vals == eager.vals  # materialized on demand (verify, compact): kept from then on
        assert leaf._vals is not None
        assert leaf.value_at(0) == eager.vals[0] and leaf.values() == eager.vals


def test_a_leaf_decoded_from_the_page_cache_shares_its_bytes(path: str) -> None:
    with KV.open(path) as kv:
        model = _fill(kv, 50)
    with KV.open(path) as kv:
        key = next(iter(model))
        assert kv[key] == model[key]
        root = kv._trees[b""].root
        leaf = kv._cache._nodes[root]
        assert type(leaf) is nodes.Leaf and leaf._page is kv.pages.cache.get(root)


def test_a_commit_journals_only_what_changed(path: str) -> None:
    with KV.open(path) as kv:
        model = _fill(kv, 200)
        key = sorted(model)[50]
        size = kv.stats()["journal_bytes"]
        kv[key] = model[key]  # an equal value: only the meta page's commit counter changes
        equal = kv.stats()["journal_bytes"] - size
        assert equal < 200
        size = kv.stats()["journal_bytes"]
        kv[key] = bytes(255 - b for b in model[key])  # same length, other bytes
        changed = kv.stats()["journal_bytes"] - size
        assert 0 < changed < 1000 + 4 * len(model[key])  # a span, not two 4 KiB page images
        assert kv[key] == bytes(255 - b for b in model[key])
        size = kv.stats()["journal_bytes"]
        kv[b"\x00new key"] = b"v"  # an insert shifts the arrays: the node whole
        assert kv.stats()["journal_bytes"] - size > 2 * kv.page_size
        assert kv.verify()


def test_the_descent_checks_levels_and_ranges_on_every_path(path: str) -> None:
    """find (gets) and descend (puts) check each node's level: a child pointer
    to an ancestor is CorruptFileError, not a loop."""
    with KV.open(path, page_size=512) as kv:
        model = _fill(kv, 400)
        info = kv._trees[b""]
        assert info.height >= 3
        root = kv.node(info.root)
        assert type(root) is nodes.Branch
        bad = nodes.Branch(root.level, root.keys[:], [info.root] * len(root.children), root.size)
        # a damaged root as if decoded and verified: every child is the root
        kv._cache.put(info.root, bad, pager.encode_node(bad, kv.page_size))
        key = next(iter(model))
        with pytest.raises(CorruptFileError, match="level"):
            kv[key]
        with pytest.raises(CorruptFileError, match="level"):
            kv[key] = b"x"
        kv._cache.clear()
        assert kv[key] == model[key]


def test_the_node_cache_drops_its_oldest_eighth() -> None:
    cache = NodeCache(16)
    leaf = nodes.Leaf([], [], nodes.HEAD)
    for page in range(2, 19):
        cache.put(page, leaf, b"")
    assert len(cache) == 14  # past 16: down to 7/8 of it, the oldest first
    assert cache.get(4) is None and cache.get(5) is leaf and cache.get(18) is leaf
    assert sorted(cache.images) == list(range(5, 19))  # images go with their nodes
    cache.update({19: leaf, 20: leaf, 21: leaf}, [5], {19: b"", 20: b"", 21: b""})
    assert len(cache) == 16 and cache.get(5) is None and 5 not in cache.images
    cache.update({22: leaf}, [], {22: b""})
    assert len(cache) == 14 and cache.get(8) is None and cache.get(9) is leaf
    assert sorted(cache.images) == sorted(cache._nodes)
    cache.clear()
    assert cache.get(18) is None and not cache.images  # the bound get follows the same dict
    none = NodeCache(0)
    none.put(2, leaf, b"")
    assert len(none) == 0


def test_an_insert_writes_the_meta_page_once(path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The meta head and the default tree's entry right after it are one write (one
    journal op and one flush range, ~25k instructions per commit less than two)."""
    from engine.pages.transaction import Transaction

    writes: list[tuple[int, int, int]] = []
    real = Transaction.write

    def counting(self: Transaction, page: int, offset: int, data: bytes | bytearray | memoryview) -> None:
        writes.append((page, offset, len(data)))
        real(self, page, offset, data)

    with KV.open(path) as kv:
        model = _fill(kv, 50)
        monkeypatch.setattr(Transaction, "write", counting)
        kv[b"\x00new key"] = b"v"  # the count in the tree's entry changes
        monkeypatch.undo()
        span = nodes.META_HEAD.size + nodes.TREE_ENTRY.size - nodes.META_CRC_AT  # head's CRC to the entry's end
        assert [w for w in writes if w[0] == 1] == [(1, nodes.META_CRC_AT, span)]
        model[b"\x00new key"] = b"v"
        assert dict(kv.items()) == model
        assert kv.verify()
    with KV.open(path) as kv:
        assert dict(kv.items()) == model
