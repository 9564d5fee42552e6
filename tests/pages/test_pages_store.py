"""Unit tests of PageStore and its transactions (real files in tmp_path)."""

from __future__ import annotations

import os
import random
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.errors import ClosedError, ConfigError, CorruptFileError, LockedError
from engine.fs import make_dirs
from engine.pages import PageError, PageStore, codec, journal_path
from engine.pages.journal import GROW_BYTES, scan
from stress.simfs import SimFS
from tests.pages.pages_helpers import Model, assert_matches, random_transaction, use_pure_crc32c


@pytest.fixture
def path(tmp_path: os.PathLike[str]) -> str:
    return os.path.join(str(tmp_path), "store.db")


def test_create_write_reopen(path: str) -> None:
    with PageStore.open(path, page_size=1024) as store:
        assert store.page_count == 0 and store.free_pages == []
        with store.transaction() as tx:
            a, b = tx.allocate(), tx.allocate()
            tx.write(a, 0, b"hello")
            tx.write(b, 1000, b"x" * 24)
            assert tx.read(a, 0, 5) == b"hello"
        assert (a, b) == (1, 2)
        assert store.read(a, 0, 5) == b"hello"
        assert store.read(b)[1000:] == b"x" * 24
    assert os.path.getsize(path) == 3 * 1024
    with open(journal_path(path), "rb") as f:
        assert f.read(20) == codec.encode_file_header(0, 0)  # reset on close
    with PageStore.open(path) as store:
        assert store.page_size == 1024 and store.page_count == 2
        assert store.read(a, 0, 5) == b"hello"
        assert store.verify()


def test_transaction_image_is_the_transactions_view_uncopied(path: str) -> None:
    """Transaction.image: the whole page as the transaction sees it, without a copy
    of a committed image, and the same typed errors as read()."""
    with PageStore.open(path, page_size=512) as store:
        with store.transaction() as tx:
            a, b = tx.allocate(), tx.allocate()
            tx.write(a, 0, b"committed")
        with store.transaction() as tx:
            committed = store.committed_page(a)
            assert tx.image(a) is committed  # no copy
            tx.write(a, 0, b"changed")
            assert bytes(tx.image(a)[:9]) == b"changeded" and tx.read(a, 0, 7) == b"changed"
            assert bytes(store.committed_page(a)[:9]) == b"committed"
            whole = bytes(512)
            tx.write(b, 0, b"\x01" * 512)
            tx.write(b, 0, whole)
            assert tx.image(b) == whole
            tx.free(b)
            with pytest.raises(PageError, match="is free"):
                tx.image(b)
            with pytest.raises(PageError, match="never allocated"):
                tx.image(9)
        with pytest.raises(ClosedError):
            tx.image(a)


def test_uncommitted_writes_are_private_and_exception_rolls_back(path: str) -> None:
    with PageStore.open(path, page_size=512) as store:
        with store.transaction() as tx:
            page = tx.allocate()
            tx.write(page, 0, b"one")
        with pytest.raises(RuntimeError), store.transaction() as tx:
            tx.write(page, 0, b"two")
            assert tx.read(page, 0, 3) == b"two"
            assert store.read(page, 0, 3) == b"one"
            tx.allocate()
            raise RuntimeError("boom")
        assert store.read(page, 0, 3) == b"one"
        assert store.page_count == 1
        assert tx.state == "rolled back"


def test_free_list_is_lifo_and_reused_pages_are_zeroed(path: str) -> None:
    with PageStore.open(path, page_size=512) as store:
        with store.transaction() as tx:
            pages = [tx.allocate() for _ in range(4)]
            for p in pages:
                tx.write(p, 0, bytes([p]) * 512)
        with store.transaction() as tx:
            tx.free(2)
            tx.free(4)
        assert store.free_pages == [4, 2]
        assert store.live_pages == [1, 3]
        with store.transaction() as tx:
            assert tx.allocate() == 4
            assert tx.read(4) == bytes(512)
        assert store.free_pages == [2]
        assert store.read(4) == bytes(512)
        assert store.verify()
    with PageStore.open(path) as store:
        assert store.free_pages == [2] and store.page_count == 4


def test_free_and_reallocate_in_one_transaction(path: str) -> None:
    with PageStore.open(path, page_size=512) as store:
        with store.transaction() as tx:
            p = tx.allocate()
            tx.write(p, 0, b"\xff" * 512)
            tx.free(p)
            assert tx.allocate() == p
            assert tx.read(p) == bytes(512)
            tx.write(p, 3, b"z")
        assert store.free_pages == [] and store.read(p, 3, 1) == b"z"


def test_page_errors_are_typed_with_path_and_offset(path: str) -> None:
    with PageStore.open(path, page_size=512) as store:
        with store.transaction() as tx:
            p = tx.allocate()
            q = tx.allocate()
        with store.transaction() as tx:
            tx.free(q)
        with pytest.raises(PageError, match="never allocated") as info:
            store.read(7)
        assert info.value.path == path and info.value.offset == 7 * 512
        with pytest.raises(PageError, match="is free"):
            store.read(q)
        with pytest.raises(PageError, match="never allocated"):
            store.read(0)
        with pytest.raises(PageError, match="outside"):
            store.read(p, 500, 20)
        with store.transaction() as tx:
            with pytest.raises(PageError, match="past the 512-byte page") as info:
                tx.write(p, 510, b"abc")
            assert info.value.offset == p * 512 + 510
            with pytest.raises(PageError, match="is free"):
                tx.write(q, 0, b"a")
            with pytest.raises(PageError, match="is free"):
                tx.free(q)
            with pytest.raises(PageError, match="never allocated"):
                tx.write(99, 0, b"a")
            with pytest.raises(PageError):
                tx.write(p, -1, b"a")
        assert store.verify()


def test_config_errors(path: str) -> None:
    for bad in (256, 1000, 131072):
        with pytest.raises(ConfigError):
            PageStore.open(path, page_size=bad)
    with pytest.raises(ConfigError, match="apply"):
        PageStore.open(path, apply="sometimes")
    PageStore.open(path, page_size=2048).close()
    with pytest.raises(ConfigError, match="page size is 2048"):
        PageStore.open(path, page_size=4096)
    with pytest.raises(FileNotFoundError):
        PageStore.open(path + ".missing", create=False)


def test_readers_see_the_last_checkpoint_by_default(path: str) -> None:
    store = PageStore.open(path, page_size=512)
    with store.transaction() as tx:
        p = tx.allocate()
        tx.write(p, 0, b"v1")
    store.checkpoint()
    reader = PageStore.open_reader(path)
    with store.transaction() as tx:
        tx.write(p, 0, b"v2")
    assert store.read(p, 0, 2) == b"v2"  # the writer sees its commits
    assert reader.read(p, 0, 2) == b"v1"  # other readers: the last checkpoint, never half of one
    store.checkpoint()
    assert reader.read(p, 0, 2) == b"v2"
    reader.verify()
    store.verify()
    reader.close()
    store.close()


def test_one_writer_many_readers(path: str) -> None:
    store = PageStore.open(path, page_size=512, apply="commit")
    with store.transaction() as tx:
        p = tx.allocate()
        tx.write(p, 0, b"v1")
    with pytest.raises(LockedError):
        PageStore.open(path)
    reader = PageStore.open_reader(path)
    assert reader.read(p, 0, 2) == b"v1"
    with store.transaction() as tx:
        tx.write(p, 0, b"v2")
        q = tx.allocate()
    assert reader.read(p, 0, 2) == b"v2"  # a live writer applies before commit returns
    assert reader.page_count == 2 and reader.read(q) == bytes(512)
    with pytest.raises(ConfigError, match="read-only"), reader.transaction():
        pass
    assert reader.verify()
    store.close()
    reader.close()
    with pytest.raises(ClosedError):
        reader.read(p)
    PageStore.open(path).close()  # the lock went with close()


def test_big_pages_split_modifications(path: str) -> None:
    with PageStore.open(path, page_size=65536, checkpoint_bytes=1 << 30) as store:
        data = bytes(random.Random(1).getrandbits(8) for _ in range(65536))
        with store.transaction() as tx:
            p = tx.allocate()
            tx.write(p, 0, data)
        with open(journal_path(path), "rb") as f:
            raw = f.read()
        state = scan(journal_path(path), raw)
        mods = [op for op in state.txs[0].ops if isinstance(op, codec.Modify)]
        assert [(m.offset, len(m.after)) for m in mods] == [(0, 65535), (65535, 1)]
        assert store.read(p) == data


def test_journal_is_reset_at_checkpoints(path: str) -> None:
    with PageStore.open(path, page_size=512, checkpoint_bytes=4000) as store:
        with store.transaction() as tx:
            p = tx.allocate()
        sizes = []
        for i in range(50):
            with store.transaction() as tx:
                tx.write(p, 0, bytes([i]) * 300)
            sizes.append(store.journal_size)
        assert max(sizes) < 4000 + 1000
        assert store.checkpoints >= 5
        store.checkpoint()
        with open(journal_path(path), "rb") as f:
            raw = f.read()
        assert raw[:20] == codec.encode_file_header(0, 0)
        assert len(raw) == GROW_BYTES  # the space is reused, not grown past the first extension
        assert scan(journal_path(path), raw).txs == []


def test_default_checkpoint_policy_settings(path: str) -> None:
    with PageStore.open(path) as store:
        assert (store.checkpoint_bytes, store.checkpoint_max_bytes) == (4 << 20, 64 << 20)
    with PageStore.open(path, checkpoint_bytes=1000) as store:  # a fixed threshold, as before
        assert (store.checkpoint_bytes, store.checkpoint_max_bytes) == (1000, 1000)
    with PageStore.open(path, checkpoint_bytes=1000, checkpoint_max_bytes=500) as store:
        assert store.checkpoint_max_bytes == 1000  # never below the minimum
    with pytest.raises(ConfigError):
        PageStore.open(path, checkpoint_max_bytes=-1)


def test_adaptive_checkpoint_small_transactions_checkpoint_at_the_minimum(path: str) -> None:
    """One page rewritten: a checkpoint writes one page, so it comes at the minimum."""
    with PageStore.open(path, page_size=512, checkpoint_bytes=4000, checkpoint_max_bytes=1 << 20) as store:
        with store.transaction() as tx:
            p = tx.allocate()
        sizes = []
        for i in range(60):
            with store.transaction() as tx:
                tx.write(p, 0, bytes([i]) * 512)
            sizes.append(store.journal_size)
        assert max(sizes) < 4000 + 1100 and store.checkpoints >= 5


def test_adaptive_checkpoint_waits_while_the_store_writes_would_be_large(path: str) -> None:
    """Distinct pages: the journal grows until the pages to write are at most 1/8
    of it, or until the maximum; cycling over the same pages, that absorbs rewrites."""
    ps = 512
    with PageStore.open(path, page_size=ps, checkpoint_bytes=4000, checkpoint_max_bytes=200_000) as store:
        with store.transaction() as tx:
            pages = [tx.allocate() for _ in range(40)]
        store.checkpoint()
        grown = 0
        for i in range(200):  # 10 pages per transaction, cycling over 40 pages
            before = store.checkpoints
            with store.transaction() as tx:
                for k in range(10):
                    tx.write(pages[(i * 10 + k) % 40], 0, bytes([i & 0xFF, k]) * (ps // 2))
            size = store.journal_size
            if store.checkpoints == before:
                grown = max(grown, size)
                # no checkpoint yet: below the minimum, or too many pages to write
                assert size < 4000 or 40 * ps * 8 > size
            else:
                assert size == codec.FILE_HEADER_SIZE
        # 40 distinct pages (20 KB) need a journal of 160 KB before the checkpoint
        assert 40 * ps * 8 - 11_000 <= grown < 200_000
        assert store.checkpoints >= 3
        store.verify()
    with PageStore.open(path) as store:
        assert store.read(pages[0]) == bytes([196, 0]) * (ps // 2)  # its last write: i = 196, k = 0


def test_writer_seals_transactions_with_crc32c(path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with PageStore.open(path, page_size=512) as store:
        with store.transaction() as tx:
            tx.write(tx.allocate(), 0, b"abc")
        with open(journal_path(path), "rb") as f:
            raw = f.read()
        tx0 = scan(journal_path(path), raw).txs[0]
        assert tx0.crc_checked and raw[tx0.end - 21 : tx0.end - 12] == bytes.fromhex("ff10000000") + b"C32L"
        assert tx0.salt == int.from_bytes(raw[tx0.end - 12 : tx0.end - 4], "little")
        # Without google-crc32c: the same form, the same CRC (the pure-Python CRC-32C).
        use_pure_crc32c(monkeypatch)
        with store.transaction() as tx:
            tx.write(1, 0, b"xyz")
        with open(journal_path(path), "rb") as f:
            raw = f.read()
        state = scan(journal_path(path), raw)
        tx1 = state.txs[1]
        assert tx1.crc_checked and raw[tx1.end - 21 : tx1.end - 12] == bytes.fromhex("ff10000000") + b"C32L"
        assert tx1.salt == tx0.salt and state.linked == 1
    monkeypatch.undo()


def test_journal_shrinks_after_a_giant_transaction(path: str) -> None:
    with PageStore.open(path, page_size=4096, checkpoint_bytes=1000) as store:
        with store.transaction() as tx:
            for _ in range(300):  # 1.2 MB of zero pages: more than keep_bytes (1 MiB)
                tx.write(tx.allocate(), 0, b"x" * 4096)
        assert os.path.getsize(journal_path(path)) == 20


def test_cache_is_bounded_lru(path: str) -> None:
    with PageStore.open(path, page_size=512, cache_pages=3) as store:
        with store.transaction() as tx:
            pages = [tx.allocate() for _ in range(10)]
        store.checkpoint()  # written to the file: from now on reads go through the cache
        for p in pages:
            store.read(p)
        assert len(store.cache) == 3
        hits = store.cache.hits
        store.read(pages[-1])
        assert store.cache.hits == hits + 1
        store.read(pages[0])
        assert store.cache.misses >= 11


def test_page_cache_bulk_put_and_discard_keep_lru_order() -> None:
    from engine.pages.cache import PageCache

    cache = PageCache(4)
    for page in (1, 2, 3):
        cache.put(page, bytes([page]))
    cache.put_many({2: b"two", 5: b"five", 6: b"six"})  # 2 moves to the recent end
    assert [p for p, _ in cache.items()] == [3, 2, 5, 6]  # 1, the oldest, evicted
    assert cache.get(2) == b"two"
    cache.discard_many({3: b"", 9: b""})  # 9 was never cached
    cache.discard_many([6])
    assert [p for p, _ in cache.items()] == [5, 2]
    PageCache(0).put_many({1: b"x"})  # a cache of no pages keeps none
    assert len(PageCache(0)) == 0


def test_checkpoint_writes_whole_pages_in_runs_and_ranges_once(path: str) -> None:
    """Whole pages rewritten since the last checkpoint go out as one vectored write
    per run of consecutive pages (a page alone as a plain write, in one batch with
    the others); other pages' journaled ranges as merged writes;
    a range of a page that is also rewritten whole is not written twice."""
    ps = 512
    with PageStore.open(path, page_size=ps) as store:
        with store.transaction() as tx:
            pages = [tx.allocate() for _ in range(8)]  # pages 1..8
        store.checkpoint()
        writes: list[tuple[int, int]] = []
        handle = store._files._handle
        real = handle.write_parts_at

        def record(offset: int, parts: list[bytes]) -> None:
            writes.append((offset, sum(len(p) for p in parts)))
            real(offset, parts)

        real_many = handle.write_many_at

        def record_many(pairs: Sequence[tuple[int, bytes]]) -> None:
            writes.extend((offset, len(data)) for offset, data in pairs if offset)  # not the header
            real_many(pairs)

        handle.write_parts_at = record  # type: ignore[method-assign]
        handle.write_many_at = record_many  # type: ignore[method-assign, assignment]
        with store.transaction() as tx:
            for page in (2, 3, 4, 7):
                tx.write(page, 0, bytes([page]) * ps)  # whole pages
            tx.write(5, 10, b"partial")  # a range next to the run 2-4
        with store.transaction() as tx:
            tx.write(3, 100, b"again")  # inside a page already rewritten whole
            tx.write(5, 17, b"-more")  # touches the range before it: merged
        store.checkpoint()
        assert sorted(writes) == [(2 * ps, 3 * ps), (5 * ps + 10, 12), (7 * ps, ps)]
        store.verify()
    with PageStore.open(path) as store:
        three = bytearray(bytes([3]) * ps)
        three[100:105] = b"again"
        assert store.read(3) == bytes(three)
        assert store.read(5)[10:22] == b"partial-more"
        assert [store.read(p) for p in (2, 4, 7)] == [bytes([p]) * ps for p in (2, 4, 7)]
        assert pages == list(range(1, 9))


def test_store_survives_many_random_transactions_on_disk(path: str) -> None:
    rng = random.Random(5)
    model = Model()
    with PageStore.open(path, page_size=512, checkpoint_bytes=20000, cache_pages=8) as store:
        for _ in range(60):
            model = random_transaction(store, model, rng, max_ops=8)
        assert_matches(store, model)
        store.verify()
    with PageStore.open(path) as store:
        assert_matches(store, model)


_op = st.one_of(
    st.tuples(st.just("alloc")),
    st.tuples(st.just("write"), st.integers(0, 50), st.integers(0, 511), st.binary(min_size=1, max_size=64)),
    st.tuples(st.just("free"), st.integers(0, 50)),
    st.tuples(st.just("abort")),
)


@settings(max_examples=40, deadline=None)
@given(txs=st.lists(st.lists(_op, min_size=1, max_size=6), min_size=1, max_size=8))
def test_property_matches_model_across_reopen(txs: list[list[tuple[object, ...]]]) -> None:
    sim = SimFS()
    make_dirs(sim, "/d")
    model: dict[int, bytearray] = {}
    free: list[int] = []
    count = 0
    store = PageStore.open("/d/s", page_size=512, checkpoint_bytes=3000, fs=sim)
    for ops in txs:
        m, f, c = {k: bytearray(v) for k, v in model.items()}, list(free), count
        try:
            with store.transaction() as tx:
                for op in ops:
                    if op[0] == "alloc":
                        page = tx.allocate()
                        if f:
                            assert page == f.pop(0)
                        else:
                            c += 1
                            assert page == c
                        m[page] = bytearray(512)
                    elif op[0] == "write" and m:
                        page = sorted(m)[int(op[1]) % len(m)]  # type: ignore[call-overload]
                        off, data = int(op[2]), bytes(op[3])  # type: ignore[call-overload]
                        data = data[: 512 - off]
                        tx.write(page, off, data)
                        m[page][off : off + len(data)] = data
                    elif op[0] == "free" and m:
                        page = sorted(m)[int(op[1]) % len(m)]  # type: ignore[call-overload]
                        tx.free(page)
                        del m[page]
                        f.insert(0, page)
                    elif op[0] == "abort":
                        raise KeyError("abort")
        except KeyError:
            continue
        model, free, count = m, f, c
    store.close()
    store = PageStore.open("/d/s", fs=sim)
    assert store.page_count == count and store.free_pages == free
    for page, data in model.items():
        assert store.read(page) == bytes(data)
    store.verify()
    store.close()


def test_threads_take_turns(path: str) -> None:
    """Transactions from several threads are serialized: counters never lose updates."""
    import threading

    with PageStore.open(path, page_size=512) as store:
        with store.transaction() as tx:
            page = tx.allocate()

        def bump(times: int) -> None:
            for _ in range(times):
                with store.transaction() as tx:
                    value = int.from_bytes(tx.read(page, 0, 8), "little")
                    tx.write(page, 0, (value + 1).to_bytes(8, "little"))

        threads = [threading.Thread(target=bump, args=(25,)) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert int.from_bytes(store.read(page, 0, 8), "little") == 100
        with store.snapshot() as snap:
            assert snap.read(page, 0, 8) == (100).to_bytes(8, "little")
        store.verify()


def test_transaction_object_rules(path: str) -> None:
    with PageStore.open(path, page_size=512) as store:
        tx = store.transaction()
        with pytest.raises(ClosedError, match="with block"):
            tx.allocate()
        with tx:
            page = tx.allocate()
            tx.commit()
            with pytest.raises(ClosedError, match="already committed"):
                tx.write(page, 0, b"late")
        with pytest.raises(ClosedError, match="entered once"), tx:
            pass
        assert store.page_count == 1


def test_whole_page_writes_then_edits_in_one_transaction(path: str) -> None:
    """Whole-page writes keep the caller's bytes as the image (no copy): later
    edits in the same transaction, reads, frees and a caller's mutation of a
    bytearray it passed must all behave as with copies; the journal's before
    images must still undo them."""
    ps = 512
    with PageStore.open(path, page_size=ps) as store:
        with store.transaction() as tx:
            a, b, c = tx.allocate(), tx.allocate(), tx.allocate()
            tx.write(a, 0, b"A" * ps)
        src = bytearray(b"B" * ps)
        with store.transaction() as tx:
            tx.write(a, 0, b"a" * ps)  # whole page over a committed one
            tx.write(a, 10, b"xy")  # then edited in place
            tx.write(b, 0, src)
            src[:] = b"Z" * ps  # the caller changes its buffer: no effect
            tx.write(c, 0, b"C" * ps)
            tx.free(c)
            assert tx.read(a, 8, 6) == b"aaxyaa"
            assert tx.read(b) == b"B" * ps
        assert store.read(a) == b"a" * 10 + b"xy" + b"a" * (ps - 12)
        assert store.read(b) == b"B" * ps
        assert store.free_pages == [c]
        with pytest.raises(RuntimeError):
            with store.transaction() as tx:
                tx.write(a, 0, b"q" * ps)
                assert tx.read(a) == b"q" * ps
                raise RuntimeError("roll back")
        assert store.read(a)[:12] == b"a" * 10 + b"xy"
        # The journal holds the whole-page MODIFY with the committed image as before image.
        with store.transaction() as tx:
            tx.write(b, 0, b"D" * ps)
        with open(journal_path(path), "rb") as f:
            state = scan(journal_path(path), f.read())
        (mod,) = [op for op in state.txs[-1].ops if isinstance(op, codec.Modify)]
        assert (mod.page_offset, mod.offset, bytes(mod.before), bytes(mod.after)) == (b * ps, 0, b"B" * ps, b"D" * ps)
    with PageStore.open(path) as store:
        assert store.read(b) == b"D" * ps and store.free_pages == [c]
        store.verify()


def test_verify_checks_the_linked_chain_against_the_writer(path: str) -> None:
    """The default writer leaves the header's last at the first transaction; verify()
    follows the chain and finds exactly the transactions the writer committed, and
    reports a damaged one (here: the last, whose bytes no crash would have torn)."""
    with PageStore.open(path, page_size=512, checkpoint_bytes=1 << 20) as store:
        with store.transaction() as tx:
            page = tx.allocate()
        for i in range(3):
            with store.transaction() as tx:
                tx.write(page, 0, bytes([i + 1]) * 16)
        with open(journal_path(path), "rb") as f:
            raw = f.read()
        state = scan(journal_path(path), raw)
        assert state.header.last == 20 and state.linked == 3 and len(state.txs) == 4
        store.verify()
        with open(journal_path(path), "r+b") as f:
            f.seek(state.txs[-1].end - 1)
            f.write(bytes([raw[state.txs[-1].end - 1] ^ 0xFF]))
        with pytest.raises(CorruptFileError, match="writer's transactions"):
            store.verify()


def test_an_automatic_checkpoints_reset_is_made_durable_by_close() -> None:
    """A checkpoint a commit triggered leaves the journal's reset unsynced (the next
    commit's write covers it); with no next commit, close() syncs it."""
    sim = SimFS()
    make_dirs(sim, "/db")
    store = PageStore.open("/db/p", page_size=512, checkpoint_bytes=0, fs=sim)
    with store.transaction() as tx:
        tx.write(tx.allocate(), 0, b"abc")  # checkpoint_bytes=0: a checkpoint after every commit
    assert store.checkpoints == 1
    assert sim.snapshot()["/db/p-journal"][:20] == codec.encode_file_header(0, 0)
    assert sim.durable_image().files["/db/p-journal"][:20] != codec.encode_file_header(0, 0)
    store.close()
    assert sim.durable_image().files["/db/p-journal"][:20] == codec.encode_file_header(0, 0)


def test_commits_write_inside_the_journal_file(path: str) -> None:
    """A commit's durable write lands inside the journal file: the file is
    extended ahead of the commits by whole ``GROW_BYTES`` steps, so its size
    changes once per step, not on every commit (a size change makes the commit's
    sync write the inode as well)."""
    sizes = []
    with PageStore.open(path, page_size=512, checkpoint_bytes=1 << 30) as store:
        with store.transaction() as tx:
            p = tx.allocate()
        for i in range(400):
            with store.transaction() as tx:
                tx.write(p, 0, bytes([i % 251 + 1]) * 100)
            sizes.append(os.path.getsize(journal_path(path)))
        assert store.journal_size > GROW_BYTES  # crossed at least one extension
    assert all(size % GROW_BYTES == 0 for size in sizes)
    assert 2 <= len(set(sizes)) <= 3  # 400 commits of ~250 bytes: two or three steps
