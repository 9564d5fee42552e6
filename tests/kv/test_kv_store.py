"""The key-value store's API against a dict model: puts, deletes, scans,
transactions, named trees, large values, readers, snapshots, backup, compaction."""

from __future__ import annotations

import os
import random

import pytest

from engine.errors import ClosedError, ConfigError, FormatError, LockedError
from engine.kv import KV, KVReader, KVTransaction
from engine.pages import PageStore


@pytest.fixture
def path(tmp_path: os.PathLike[str]) -> str:
    return os.path.join(str(tmp_path), "store.kv")


def _random_ops(kv: KV, model: dict[bytes, bytes], rng: random.Random, n: int) -> None:
    """``n`` random puts and deletes: a third as commits of their own, the rest in
    transactions of 20 (fewer syncs: the test stays fast)."""
    for i in range(0, n, 20):
        if i % 60 == 0:
            _ops(kv, model, rng, 20)
        else:
            with kv.transaction() as tx:
                _ops(tx, model, rng, 20)


def _ops(kv: KV | KVTransaction, model: dict[bytes, bytes], rng: random.Random, n: int) -> None:
    for _ in range(n):
        if model and rng.random() < 0.35:
            key = rng.choice(sorted(model))
            del kv[key]
            del model[key]
        else:
            key = rng.randbytes(rng.randint(0, 24))
            value = rng.randbytes(rng.choice([0, 3, 40, 120, 700, 3000]))
            kv[key] = value
            model[key] = value


def test_dict_api_against_a_model(path: str) -> None:
    rng = random.Random(7)
    model: dict[bytes, bytes] = {}
    with KV.open(path, page_size=512) as kv:
        _random_ops(kv, model, rng, 1500)
        kv.verify()
        assert len(kv) == len(model)
        assert list(kv) == sorted(model)
        assert list(kv.items()) == sorted(model.items())
        assert list(kv.items(reverse=True)) == sorted(model.items(), reverse=True)
        keys = sorted(model)
        lo, hi = keys[len(keys) // 4], keys[3 * len(keys) // 4]
        assert list(kv.items(lo, hi)) == [(k, model[k]) for k in keys if lo <= k < hi]
        assert list(kv.items(lo, hi, reverse=True)) == [(k, model[k]) for k in reversed(keys) if lo <= k < hi]
        assert list(kv.items(start=hi)) == [(k, model[k]) for k in keys if k >= hi]
        assert list(kv.items(stop=lo, reverse=True)) == [(k, model[k]) for k in reversed(keys) if k < lo]
        for key in keys[:50]:
            assert kv[key] == model[key] and key in kv and kv.get(key) == model[key]
        assert kv.get(b"\xff" * 40) is None and b"\xff" * 40 not in kv
        with pytest.raises(KeyError):
            kv[b"\xff" * 40]
        with pytest.raises(KeyError):
            del kv[b"\xff" * 40]
    with KV.open(path) as kv:
        assert dict(kv.items()) == model
        kv.verify()


def test_prefix_scans(path: str) -> None:
    with KV.open(path, page_size=512) as kv:
        with kv.transaction() as tx:
            for i in range(300):
                tx[b"user:%04d" % i] = b"u%d" % i
                tx[b"item:%04d" % i] = b"i%d" % i
            tx[b"\xff\xff"] = b"top"
            tx[b"\xff\xff\x00"] = b"top2"
        users = list(kv.prefix(b"user:"))
        assert [k for k, _ in users] == [b"user:%04d" % i for i in range(300)]
        assert [k for k, _ in kv.prefix(b"user:01", reverse=True)] == [b"user:%04d" % i for i in range(199, 99, -1)]
        assert list(kv.prefix(b"\xff\xff")) == [(b"\xff\xff", b"top"), (b"\xff\xff\x00", b"top2")]
        assert len(list(kv.prefix(b""))) == 602


def test_transaction_commits_all_or_nothing(path: str) -> None:
    with KV.open(path, page_size=512) as kv:
        kv[b"a"] = b"1"
        with pytest.raises(RuntimeError), kv.transaction() as tx:
            for i in range(500):
                tx[b"k%d" % i] = bytes(100)
            del tx[b"a"]
            assert b"a" not in tx and len(tx) == 500  # the transaction sees its own changes
            raise RuntimeError("roll back")
        assert dict(kv.items()) == {b"a": b"1"}
        kv.verify()
        txid = kv.txid
        with kv.transaction() as tx:
            for i in range(500):
                tx[b"k%d" % i] = bytes(100)
            tx.tree("other")[b"x"] = b"y"
        assert kv.txid == txid + 1  # one commit
        assert len(kv) == 501 and kv.tree("other")[b"x"] == b"y"
        kv.verify()


def test_named_trees_are_separate(path: str) -> None:
    with KV.open(path) as kv:
        users, orders = kv.tree("users"), kv.tree(b"orders")
        users[b"1"] = b"alice"
        orders[b"1"] = b"order"
        kv[b"1"] = b"default"
        assert (users[b"1"], orders[b"1"], kv[b"1"]) == (b"alice", b"order", b"default")
        assert sorted(kv.trees()) == ["", "orders", "users"]
        assert kv.drop_tree("orders")
        assert sorted(kv.trees()) == ["", "users"]
        with pytest.raises(KeyError):
            kv.tree("orders", create=False)
        kv.verify()
    with KV.open_reader(path) as reader:
        assert reader.tree("users")[b"1"] == b"alice"
        with pytest.raises(KeyError):
            reader.tree("orders")


def test_large_values_use_overflow_pages(path: str) -> None:
    big = os.urandom(100_000)
    with KV.open(path, page_size=1024) as kv:
        kv[b"big"] = big
        kv[b"small"] = b"s"
        assert kv[b"big"] == big
        kv.verify()
        pages = kv.pages.page_count
        kv[b"big"] = big[:5000]  # the old chain is freed
        assert kv[b"big"] == big[:5000]
        assert len(kv.pages.free_pages) > 80 and kv.pages.page_count == pages
        kv.verify()
    with KV.open_reader(path) as reader:
        assert reader[b"big"] == big[:5000]


def test_bad_arguments_are_typed_errors(path: str) -> None:
    with KV.open(path, page_size=512) as kv:
        with pytest.raises(TypeError):
            kv["text"] = b"x"  # type: ignore[index]
        with pytest.raises(TypeError):
            kv[b"k"] = "text"  # type: ignore[assignment]
        with pytest.raises(ConfigError):
            kv[b"k" * (kv.max_key + 1)] = b"x"
        kv[bytearray(b"ba")] = memoryview(b"mv")  # type: ignore[index,assignment]
        assert kv[b"ba"] == b"mv"
        with pytest.raises(LockedError):
            KV.open(path)
    with pytest.raises(ClosedError):
        kv[b"x"]
    with KV.open_reader(path) as reader, pytest.raises(ConfigError):
        reader[b"x"] = b"y"


def test_a_plain_page_store_is_not_a_kv_store(path: str) -> None:
    with PageStore.open(path) as store, store.transaction() as tx:
        tx.allocate()
    with pytest.raises(FormatError):
        KV.open(path)


def test_reader_sees_commits_and_snapshots_hold_still(path: str) -> None:
    with KV.open(path, page_size=512) as kv:
        kv[b"a"] = b"1"
        reader = KV.open_reader(path)
        assert isinstance(reader, KVReader)
        assert reader[b"a"] == b"1"
        kv[b"a"] = b"2"
        assert reader[b"a"] == b"2"  # the writer applies each commit to the file
        with reader.snapshot() as snap:
            for i in range(200):
                kv[b"k%03d" % i] = b"v"  # commits go on while the snapshot is held
            assert snap[b"a"] == b"2" and len(snap) == 1 and list(snap.items()) == [(b"a", b"2")]
        assert len(reader) == 1  # the pages put off reach the file with the next commit
        kv[b"z"] = b"last"
        assert reader[b"z"] == b"last" and len(reader) == 202
        reader.verify()
        reader.close()
        with kv.snapshot() as snap:
            kv[b"after"] = b"x"
            assert b"after" not in snap and snap[b"z"] == b"last"


def test_backup_is_a_consistent_copy(path: str) -> None:
    dest = path + ".backup"
    with KV.open(path, page_size=512) as kv:
        model = {b"k%04d" % i: os.urandom(50) for i in range(2000)}
        kv.update(model)
        kv.backup(dest)
        kv[b"later"] = b"x"
        with pytest.raises(ConfigError):
            kv.backup(dest)
    with KV.open(dest) as copy:
        assert dict(copy.items()) == model
        copy.verify()
        assert not copy.recovery.repaired


def test_compact_returns_space(path: str) -> None:
    rng = random.Random(3)
    with KV.open(path, page_size=512) as kv:
        with kv.transaction() as tx:
            for _i in range(3000):
                tx[b"%06d" % rng.randrange(10**6)] = rng.randbytes(rng.choice([50, 900]))
        keys = list(kv)
        with kv.transaction() as tx:
            for key in keys[: len(keys) * 3 // 4]:
                del tx[key]
        model = dict(kv.items())
        before = os.path.getsize(path)
        freed = kv.compact()
        assert freed > 0 and os.path.getsize(path) == before - freed
        assert kv.pages.free_pages == []
        kv.verify()
        assert dict(kv.items()) == model
        kv[b"new"] = b"x"  # the store grows again from its new end
        kv.verify()
    with KV.open(path) as kv:
        assert len(kv) == len(model) + 1
        kv.verify()
        assert kv.compact() == 0  # nothing left to return


def test_deletes_merge_and_the_tree_shrinks_back(path: str) -> None:
    rng = random.Random(11)
    keys = [b"%08d" % i for i in range(3000)]
    with KV.open(path, page_size=512) as kv:
        kv.update((k, b"v" * rng.choice([1, 40, 100])) for k in keys)
        assert kv.stats()["trees"][""]["height"] >= 3  # type: ignore[index]
        rng.shuffle(keys)
        for n in range(0, len(keys), 250):
            with kv.transaction() as tx:
                for key in keys[n : n + 250]:
                    del tx[key]
            kv.verify()  # fill bounds, levels, order, page accounting after every step
        assert len(kv) == 0 and kv.stats()["trees"][""] == {"keys": 0, "height": 1}
        kv.compact()
        assert kv.pages.page_count == 2  # the meta page and the empty root


def test_a_commit_that_fails_before_the_journal_leaves_nothing(path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from engine.kv import pager

    with KV.open(path, page_size=512) as kv:
        kv[b"a"] = b"1"
        real = pager.leaf_image

        def broken(keys: object, vals: object, page_size: int) -> bytes:
            raise RuntimeError("encoder failed")

        monkeypatch.setattr(pager, "leaf_image", broken)  # what a commit encodes a leaf with
        with pytest.raises(RuntimeError), kv.transaction() as tx:
            tx[b"b"] = b"2"
        monkeypatch.setattr(pager, "leaf_image", real)
        assert dict(kv.items()) == {b"a": b"1"}
        kv[b"c"] = b"3"
        kv.verify()
    with KV.open(path) as kv:
        assert dict(kv.items()) == {b"a": b"1", b"c": b"3"}


def test_meta_bytes_a_commit_slices_are_the_meta_page_s() -> None:
    """``encode_meta_used`` (what a commit that changes tree entries in place
    writes from) is the meta page up to its entries' end, CRC included."""
    from engine.kv import node as nodes

    for trees in (
        [nodes.TreeInfo(b"", 7, 1234, 3)],
        [nodes.TreeInfo(b"", 2, 0, 1), nodes.TreeInfo(b"users", 9, 5, 2), nodes.TreeInfo(b"x" * 40, 3, 1, 1)],
    ):
        page = nodes.encode_meta(42, trees, 4096)
        used = nodes.encode_meta_used(42, trees)
        assert len(used) == nodes.meta_end(trees)
        assert page == used + bytes(4096 - len(used))
        assert page[nodes.META_CRC_AT : nodes.META_CRC_AT + 4] == nodes.meta_crc(page, trees)
    with pytest.raises(ValueError):
        nodes.encode_meta(1, [nodes.TreeInfo(b"n" * 200, 1, 0, 1)] * 30, 4096)


def test_many_single_put_commits_reopen(path: str) -> None:
    """Single-put commits (each flushed to the store file: the meta page's entry
    and CRC, the leaf's changed bytes) read back in the writer, a reader and
    after reopening."""
    rng = random.Random(5)
    model: dict[bytes, bytes] = {}
    with KV.open(path, create=True) as kv:
        with kv.transaction() as tx:
            for i in range(300):
                key = b"k%05d" % i
                model[key] = tx[key] = b"v" * 30
        for _ in range(200):
            key = b"k%05d" % rng.randrange(300)
            model[key] = kv[key] = rng.randbytes(rng.choice((30, 30, 31, 90)))
        with KVReader.open(path) as reader:
            assert dict(reader.items()) == model
        assert dict(kv.items()) == model
    with KV.open(path) as kv:
        assert dict(kv.items()) == model
        kv.verify()  # raises CorruptFileError on any damage


def test_a_finished_transaction_is_freed_without_the_garbage_collector(path: str) -> None:
    """A transaction is the backend of its own default tree (``tx[key]``): bound to
    itself it is a reference cycle, and one per durable put made the cyclic
    collector a fifth of a commit's CPU.  Once over, reference counting frees it;
    its own tree API then raises ClosedError as the transaction would."""
    import gc
    import weakref

    with KV.open(path) as kv:
        kv[b"a"] = b"1"
        gc.disable()
        try:
            with kv.transaction() as tx:
                tx[b"b"] = b"2"
            gone = weakref.ref(tx)
            del tx
            assert gone() is None
            with kv.transaction() as tx:
                tx[b"c"] = b"3"
            with pytest.raises(ClosedError, match="transaction is committed"):
                tx[b"d"] = b"4"
            with pytest.raises(ClosedError, match="transaction is committed"):
                tx[b"a"]
            with pytest.raises(KeyError, match="leave"), kv.transaction() as tx:
                tx[b"e"] = b"5"
                raise KeyError("leave")
        finally:
            gc.enable()
        with pytest.raises(ClosedError, match="transaction is rolled back"):
            tx.get(b"a")
        assert dict(kv.items()) == {b"a": b"1", b"b": b"2", b"c": b"3"}
