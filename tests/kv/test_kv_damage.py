"""Damaged stores: bit flips at rest and damaged nodes (child pointers out of
range, cycles, keys out of order, garbage) are CorruptFileError with the file
and offset, never a wrong value or a hang.

Flips at rest are caught by the page store's checksums; garbage written through
the page store (checksums valid) by the node's own CRC-32C; well-formed nodes
with bad pointers or keys (valid CRC) by the tree's structural checks."""

from __future__ import annotations

import functools
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.errors import CorruptFileError
from engine.fs import make_dirs
from engine.kv import KV
from engine.kv import node as nodes
from engine.pages import PageStore
from stress.simfs import SimFS

PS = 512


@functools.cache
def _image() -> tuple[dict[str, bytes], set[str], dict[bytes, bytes]]:
    """A closed store of 400 keys (three levels of 512-byte pages, some overflow values)."""
    rng = random.Random(5)
    sim = SimFS()
    make_dirs(sim, "/db")
    model: dict[bytes, bytes] = {}
    with KV.open("/db/kv", page_size=PS, fs=sim) as kv, kv.transaction() as tx:
        for _i in range(400):
            key = b"key%05d" % rng.randrange(10**5)
            value = rng.randbytes(rng.choice([10, 60, 300]))
            tx[key] = value
            model[key] = value
    image = sim.durable_image()
    return dict(image.files), set(image.dirs), model


def _fs(files: dict[str, bytes]) -> SimFS:
    return SimFS.from_image(files, _image()[1])


def _check_never_wrong(fs: SimFS, model: dict[bytes, bytes]) -> None:
    """Every operation returns what the model says or raises CorruptFileError."""
    try:
        kv = KV.open("/db/kv", fs=fs)
    except CorruptFileError as exc:
        assert exc.path.startswith("/db/kv")
        return
    try:
        for op in ("get", "items", "reverse", "verify"):
            try:
                if op == "get":
                    for key, value in model.items():
                        assert kv[key] == value
                elif op == "items":
                    assert list(kv.items()) == sorted(model.items())
                elif op == "reverse":
                    assert list(kv.items(reverse=True)) == sorted(model.items(), reverse=True)
                else:
                    kv.verify()
            except CorruptFileError as exc:
                assert exc.path.startswith("/db/kv") and exc.offset >= 0
    finally:
        kv.close()


def test_the_undamaged_image_is_whole() -> None:
    files, _, model = _image()
    with KV.open("/db/kv", fs=_fs(files)) as kv:
        assert dict(kv.items()) == model
        kv.verify()
        assert kv.stats()["trees"] == {"": {"keys": len(model), "height": 3}}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(0, 10**9), st.integers(0, 7)), min_size=1, max_size=4))
def test_bit_flips_at_rest(flips: list[tuple[int, int]]) -> None:
    files, _, model = _image()
    data = bytearray(files["/db/kv"])
    for at, bit in flips:
        data[at % len(data)] ^= 1 << bit
    _check_never_wrong(_fs({**files, "/db/kv": bytes(data)}), model)


def _rewrite(files: dict[str, bytes], change: object) -> dict[str, bytes]:
    """Apply ``change(store, page_count)`` through the page store (checksums stay valid)."""
    fs = _fs(files)
    with PageStore.open("/db/kv", fs=fs) as store:
        change(store, store.page_count)  # type: ignore[operator]
    image = fs.durable_image()
    return dict(image.files)


def _root_and_first_child(store: PageStore) -> tuple[int, nodes.Branch]:
    _, trees = nodes.decode_meta(store.read(1), store.page_count)
    root = nodes.decode_node(store.read(trees[0].root), store.page_count)
    assert isinstance(root, nodes.Branch)
    return trees[0].root, root


def _set_child(store: PageStore, page: int, branch: nodes.Branch, index: int, child: int) -> None:
    """A well-formed branch (valid CRC) with a bad pointer: only the tree's checks can tell."""
    branch.children[index] = child
    with store.transaction() as tx:
        tx.write(page, 0, nodes.encode_branch(branch, PS))


@pytest.mark.parametrize("target", ["out of range", "the root", "the meta page", "a free page", "a leaf"])
def test_bad_child_pointers(target: str) -> None:
    files, _, model = _image()

    def change(store: PageStore, count: int) -> None:
        root_page, root = _root_and_first_child(store)
        child = {
            "out of range": count + 7,
            "the root": root_page,  # a cycle
            "the meta page": 1,
        }.get(target)
        if target == "a free page":
            with store.transaction() as tx:
                child = tx.allocate()
                tx.free(child)
        if target == "a leaf":  # skips a level
            level1 = nodes.decode_node(store.read(root.children[0]), count)
            assert isinstance(level1, nodes.Branch)
            child = level1.children[0]
        assert child is not None
        _set_child(store, root_page, root, 1, child)

    _check_never_wrong(_fs(_rewrite(files, change)), model)
    fs = _fs(_rewrite(files, change))
    with KV.open("/db/kv", fs=fs) as kv, pytest.raises(CorruptFileError):
        kv.verify()


def test_keys_out_of_order_in_a_leaf_and_across_leaves() -> None:
    files, _, model = _image()

    def swap_in_leaf(store: PageStore, count: int) -> None:
        _, root = _root_and_first_child(store)
        level1 = nodes.decode_node(store.read(root.children[0]), count)
        assert isinstance(level1, nodes.Branch)
        page = level1.children[0]
        leaf = nodes.decode_node(store.read(page), count)
        assert isinstance(leaf, nodes.Leaf)
        leaf.keys[0], leaf.keys[1] = leaf.keys[1], leaf.keys[0]
        with store.transaction() as tx:
            tx.write(page, 0, nodes.encode_leaf(leaf, PS))

    def key_out_of_range(store: PageStore, count: int) -> None:
        _, root = _root_and_first_child(store)
        level1 = nodes.decode_node(store.read(root.children[0]), count)
        assert isinstance(level1, nodes.Branch)
        page = level1.children[0]
        leaf = nodes.decode_node(store.read(page), count)
        assert isinstance(leaf, nodes.Leaf)
        leaf.keys[-1] = b"zzz"  # sorted within the leaf, above the parent's separator
        with store.transaction() as tx:
            tx.write(page, 0, nodes.encode_leaf(leaf, PS))

    for change in (swap_in_leaf, key_out_of_range):
        damaged = _rewrite(files, change)
        _check_never_wrong(_fs(damaged), model)
        with KV.open("/db/kv", fs=_fs(damaged)) as kv, pytest.raises(CorruptFileError):
            kv.verify()


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 10**6), st.binary(min_size=1, max_size=64), st.integers(0, PS - 1))
def test_garbage_in_a_node(pick: int, garbage: bytes, at: int) -> None:
    files, _, model = _image()

    def change(store: PageStore, count: int) -> None:
        live = store.live_pages[1:]  # not the meta page
        page = live[pick % len(live)]
        data = bytearray(store.read(page))
        end = min(PS, at + len(garbage))
        data[at:end] = garbage[: end - at]
        with store.transaction() as tx:
            tx.write(page, 0, bytes(data))

    _check_never_wrong(_fs(_rewrite(files, change)), model)
