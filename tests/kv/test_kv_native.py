"""The node codec's compiled twins (``engine/kv/_native.c``: decode_node,
encode_leaf, encode_branch; and ``engine/kv/_native_descent.c``: find /
leaf_pairs / leaf_items, a get, a scan's leaf and a leaf's entries over page images, against
:mod:`engine.kv.descent`) against their pure-Python references in
:mod:`engine.kv.node` (decode_node, leaf_image, branch_image): the same objects,
the same bytes, the same errors (type, offset, message) on valid, damaged and
hostile pages.

The native module is imported directly (not through ``engine.native.kernel``), so
these comparisons also run under ``ENGINE_PURE_PYTHON=1``; they are skipped only
when the extension is not built.  The tox ``sanitize`` environment runs them under
ASan and UBSan.
"""

from __future__ import annotations

import importlib
import random
import struct
from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from engine.kv import KV, pager
from engine.kv import node as nodes
from engine.kv.descent import find_image, leaf_items_image, leaf_pairs_image
from engine.native import pure_python_forced
from engine.pages import crc32c


def _native() -> ModuleType | None:
    try:
        return importlib.import_module("engine.kv._native")
    except ImportError:
        return None


NATIVE = _native()
needs_native = pytest.mark.skipif(NATIVE is None, reason="engine.kv._native is not built")


def _descent() -> ModuleType | None:
    try:
        return importlib.import_module("engine.kv._native_descent")
    except ImportError:
        return None


DESCENT = _descent()
needs_descent = pytest.mark.skipif(DESCENT is None, reason="engine.kv._native_descent is not built")


def _shape(node: object) -> tuple[Any, ...]:
    """Everything observable about a decoded node (a lazy leaf's page and offsets too)."""
    if type(node) is nodes.Leaf:
        lazy = node._vals is None
        offs = None if node._voffs is None else (node._voffs.typecode, node._voffs.tolist())
        page = node._page
        return ("leaf", node.level, node.keys, node.values(), node.size, lazy, offs, page)
    assert type(node) is nodes.Branch
    return ("branch", node.level, node.keys, node.children, node.size)


def _outcome(fn: Callable[[], Any]) -> tuple[str, Any]:
    try:
        result = fn()
    except nodes.NodeError as exc:
        return ("node error", (exc.offset, exc.expected, exc.found, str(exc)))
    except Exception as exc:  # the twins must raise the same
        return ("error", (type(exc), str(exc)))
    return ("ok", _shape(result) if isinstance(result, (nodes.Leaf, nodes.Branch)) else result)


def _same_decode(data: bytes, page_count: int) -> tuple[str, Any]:
    """Both twins decode ``data`` alike, lazily and eagerly; the eager leaf holds the
    lazy one's values (the same errors either way: eager changes only how a valid
    leaf holds them)."""
    assert NATIVE is not None
    ref = _outcome(lambda: nodes.decode_node(data, page_count))
    got = _outcome(lambda: NATIVE.decode_node(data, page_count))
    assert got == ref, f"decode_node twins differ on {data[:64].hex()}... (page_count {page_count})"
    eager = _outcome(lambda: nodes.decode_node(data, page_count, True))
    got = _outcome(lambda: NATIVE.decode_node(data, page_count, True))
    assert got == eager, f"eager decode_node twins differ on {data[:64].hex()}... (page_count {page_count})"
    if ref[0] != "ok" or ref[1][0] != "leaf":
        assert eager == ref
    else:  # ("leaf", level, keys, values, size, lazy, offsets, page)
        assert eager[1][:5] == ref[1][:5] and eager[1][5:] == (False, None, b"")
    return ref


def _sealed(head: bytes, body: bytes, page_size: int) -> bytes:
    """A page with the 8 header bytes ``head``, next 0, ``body``, a valid CRC over [0, used)."""
    used = struct.unpack_from("<I", head, 4)[0]
    raw = bytearray(page_size)
    raw[:8] = head
    raw[20 : 20 + len(body)] = body[: page_size - 20]
    crc = nodes.page_crc(raw, nodes.CRC_AT, min(max(used, 12), page_size))
    raw[8:12] = struct.pack("<I", crc)
    return bytes(raw)


keys_st = st.lists(st.binary(max_size=24), max_size=40, unique=True).map(sorted)
value_st = st.one_of(
    st.binary(max_size=60),
    st.builds(nodes.Overflow, st.integers(0, 2**64 - 1), st.integers(0, 2**32 - 1)),
)


@needs_native
@settings(max_examples=300, deadline=None)
@given(keys=keys_st, data=st.data(), page_size=st.sampled_from([512, 1024, 4096]), page_count=st.integers(-3, 2**40))
def test_leaves_encode_and_decode_alike(
    keys: list[bytes], data: st.DataObject, page_size: int, page_count: int
) -> None:
    assert NATIVE is not None
    vals = data.draw(st.lists(value_st, min_size=len(keys), max_size=len(keys)))
    ref = _outcome(lambda: nodes.leaf_image(keys, vals, page_size))
    assert _outcome(lambda: NATIVE.encode_leaf(keys, vals, page_size)) == ref
    if ref[0] == "ok":
        _same_decode(ref[1], page_count)
        flip = data.draw(st.integers(0, 8 * page_size - 1))
        damaged = bytearray(ref[1])
        damaged[flip // 8] ^= 1 << (flip % 8)
        _same_decode(_sealed(bytes(damaged[:8]), bytes(damaged[20:]), page_size), page_count)


@needs_native
@settings(max_examples=300, deadline=None)
@given(
    keys=keys_st,
    data=st.data(),
    level=st.integers(0, 60),
    page_size=st.sampled_from([512, 1024, 4096]),
    page_count=st.integers(-3, 2**40),
)
def test_branches_encode_and_decode_alike(
    keys: list[bytes], data: st.DataObject, level: int, page_size: int, page_count: int
) -> None:
    assert NATIVE is not None
    children = data.draw(st.lists(st.integers(0, 2**64 - 1), min_size=len(keys) + 1, max_size=len(keys) + 1))
    ref = _outcome(lambda: nodes.branch_image(level, keys, children, page_size))
    assert _outcome(lambda: NATIVE.encode_branch(level, keys, children, page_size)) == ref
    if ref[0] == "ok":
        _same_decode(ref[1], page_count)
        flip = data.draw(st.integers(0, 8 * page_size - 1))
        damaged = bytearray(ref[1])
        damaged[flip // 8] ^= 1 << (flip % 8)
        _same_decode(_sealed(bytes(damaged[:8]), bytes(damaged[20:]), page_size), page_count)


@needs_native
@settings(max_examples=300, deadline=None)
@given(keys=keys_st, data=st.data(), flips=st.lists(st.integers(0, 4095), min_size=1, max_size=4))
def test_damaged_pages_fail_alike(keys: list[bytes], data: st.DataObject, flips: list[int]) -> None:
    """Bit flips, truncations and extensions of valid pages: the same NodeError."""
    vals = data.draw(st.lists(st.binary(max_size=40), min_size=len(keys), max_size=len(keys)))
    page = bytearray(nodes.leaf_image(keys, vals, 1024))
    for at in flips:
        page[at % len(page)] ^= 1 << (at % 8)
    _same_decode(bytes(page), 50)
    # the same damage under a valid CRC (written through the page store): the structural checks
    _same_decode(_sealed(bytes(page[:8]), bytes(page[20:]), len(page)), 50)
    cut = data.draw(st.integers(0, len(page)))
    _same_decode(bytes(page[:cut]), 50)
    _same_decode(bytes(page) + b"\x01" * data.draw(st.integers(0, 8)), 50)


@needs_native
@settings(max_examples=600, deadline=None)
@given(
    kind=st.sampled_from([nodes.LEAF, nodes.BRANCH, nodes.OVERFLOW, 0, 0xFF]),
    level=st.integers(0, 255),
    count=st.one_of(st.integers(0, 40), st.integers(0, 0xFFFF)),
    used=st.one_of(st.integers(0, 600), st.integers(0, 2**32 - 1)),
    body=st.binary(max_size=600),
    page_size=st.sampled_from([20, 64, 512]),
    page_count=st.integers(-3, 2**63 - 1),
)
@example(kind=nodes.LEAF, level=0, count=1, used=26, body=b"\x01\x00\xff\xff", page_size=512, page_count=9)
@example(kind=nodes.BRANCH, level=1, count=0, used=28, body=b"\x01" + bytes(7), page_size=512, page_count=9)
def test_hostile_pages_with_valid_crcs_fail_alike(
    kind: int, level: int, count: int, used: int, body: bytes, page_size: int, page_count: int
) -> None:
    """Headers and bodies made up, sealed with a valid CRC so that every check past it is reached."""
    head = struct.pack("<BBHI", kind, level, count, used)
    _same_decode(_sealed(head, body, page_size), page_count)


@needs_native
@settings(max_examples=200, deadline=None)
@given(data=st.binary(max_size=700), page_count=st.integers(-3, 100))
def test_garbage_fails_alike(data: bytes, page_count: int) -> None:
    _same_decode(data, page_count)


@needs_native
def test_the_issues_damaged_nodes_fail_alike() -> None:
    """A child pointer out of range, a cycle's level, keys out of order, an
    overflow reference out of range: NodeError the same way from both."""
    keys = [b"a", b"m", b"t"]
    branch = nodes.branch_image(1, keys, [3, 4, 5, 99], 512)
    assert _same_decode(branch, 50)[1][0] == nodes.HEAD + 2 * 3 + 8 * 3  # the fourth child's u64
    unordered = nodes.branch_image(1, [b"m", b"a"], [3, 4, 5], 512)
    assert "ascending" in _same_decode(unordered, 50)[1][1]
    leaf = nodes.leaf_image([b"b", b"a"], [b"1", b"2"], 512)
    assert "ascending" in _same_decode(leaf, 50)[1][1]
    ovf = nodes.leaf_image([b"k"], [nodes.Overflow(77, 5000)], 512)
    assert "overflow page" in _same_decode(ovf, 50)[1][1]
    level_up = nodes.branch_image(49, [b"k"], [3, 4], 512)
    assert "level" in _same_decode(level_up, 50)[1][1]


@needs_native
@settings(max_examples=200, deadline=None)
@given(data=st.binary(max_size=300))
def test_crc32c_matches_the_page_stores(data: bytes) -> None:
    assert NATIVE is not None
    assert NATIVE.crc32c(data) == NATIVE.crc32c(data, False) == crc32c.value(data) == crc32c.extend_pure(0, data)


@needs_native
@needs_native
def test_eager_must_be_a_bool_and_is_optional() -> None:
    vals: list[nodes.Value] = [b"1", b"22"]
    page = nodes.leaf_image([b"a", b"b"], vals, 512)
    for decode in (nodes.decode_node, NATIVE.decode_node):  # type: ignore[union-attr]
        lazy, eager, plain = decode(page, 5), decode(page, 5, True), decode(page, 5, False)
        assert type(lazy) is type(eager) is type(plain) is nodes.Leaf
        assert lazy.lazy and plain.lazy and not eager.lazy and eager.vals == lazy.values() == vals
    with pytest.raises(TypeError):
        NATIVE.decode_node(page, 5, 1)  # type: ignore[union-attr]
    with pytest.raises(TypeError):
        NATIVE.decode_node(page, 5, True, True)  # type: ignore[union-attr]


def test_wrong_argument_types_are_type_errors() -> None:
    assert NATIVE is not None
    with pytest.raises(TypeError):
        NATIVE.decode_node(bytearray(512), 5)
    with pytest.raises(TypeError):
        NATIVE.decode_node(bytes(512), 5.0)
    with pytest.raises(TypeError):
        NATIVE.encode_leaf([b"a"], [1], 512)
    with pytest.raises(TypeError):
        NATIVE.encode_branch(1, ["a"], [2, 3], 512)
    with pytest.raises(ValueError, match="as many values as keys"):
        NATIVE.encode_leaf([b"a"], [], 512)


@needs_native
@pytest.mark.parametrize("page_size", [65536, 65537, 1 << 20])
def test_lengths_past_a_u16_fail_alike(page_size: int) -> None:
    """Past the largest page a length could exceed its u16 field: refused by both, alike."""
    assert NATIVE is not None
    keys, vals = [b"k" * 70000], [b"v"]
    ref = _outcome(lambda: nodes.leaf_image(keys, vals, page_size))
    assert ref[0] == "error" and ref == _outcome(lambda: NATIVE.encode_leaf(keys, vals, page_size))
    ref = _outcome(lambda: nodes.branch_image(1, keys, [2, 3], page_size))
    assert ref[0] == "error" and ref == _outcome(lambda: NATIVE.encode_branch(1, keys, [2, 3], page_size))


def test_the_store_uses_the_kernel_unless_pure_python_is_forced() -> None:
    """engine.kv.pager picks the twins once, at import (engine.native, the kernel registry)."""
    if pure_python_forced() or NATIVE is None:
        assert pager.decode_node is nodes.decode_node
        assert pager.leaf_image is nodes.leaf_image
        assert pager.branch_image is nodes.branch_image
    else:
        assert pager.decode_node is NATIVE.decode_node
        assert pager.leaf_image is NATIVE.encode_leaf
        assert pager.branch_image is NATIVE.encode_branch
    if pure_python_forced() or DESCENT is None:
        assert pager.find is find_image and pager.leaf_items is leaf_items_image
        assert pager.leaf_pairs is leaf_pairs_image
    else:
        assert pager.find is DESCENT.find and pager.leaf_items is DESCENT.leaf_items
        assert pager.leaf_pairs is DESCENT.leaf_pairs


@needs_native
def test_a_store_written_with_one_twin_reads_with_the_other(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Whole stores: pages encoded by the reference decode with the kernel, and back."""
    rng = random.Random(3)
    model = {rng.randbytes(rng.randrange(1, 30)): rng.randbytes(rng.choice([0, 5, 90, 400])) for _ in range(800)}
    assert NATIVE is not None
    for writer, reader in (("py", "c"), ("c", "py")):
        path = tmp_path / f"{writer}.kv"
        twins = {
            "py": (nodes.leaf_image, nodes.branch_image, nodes.decode_node),
            "c": (NATIVE.encode_leaf, NATIVE.encode_branch, NATIVE.decode_node),
        }
        for which in (writer, reader):
            leaf, branch, decode = twins[which]
            monkeypatch.setattr(pager, "leaf_image", leaf)
            monkeypatch.setattr(pager, "branch_image", branch)
            monkeypatch.setattr(pager, "decode_node", decode)
            with KV.open(path, page_size=512, cache_nodes=0) as kv:
                if which == writer:
                    kv.update(model.items())
                else:
                    assert dict(kv.items()) == model
                    assert kv.verify()


# -- find: a get over page images (engine.kv.descent.find_image and its twin) ----------------
def _images_of(tmp_path: Any, count: int, page_size: int = 512) -> tuple[dict[int, bytes], Any, int, list[bytes]]:
    """The verified page images of a store of ``count`` keys (some on overflow pages),
    its default tree and page count, and its keys."""
    rng = random.Random(count)
    with KV.open(str(tmp_path / f"f{count}.kv"), page_size=page_size) as kv:
        with kv.transaction() as tx:
            for i in range(count):
                tx[rng.randbytes(rng.randrange(1, 24))] = rng.randbytes(200 if i % 17 == 0 else rng.randrange(0, 40))
        kv._cache.clear()
        keys = [k for k, _ in kv.items()]  # every node read and verified: its image kept
        return dict(kv._cache.images), kv._trees[b""], kv.pages.page_count, keys


def _same_find(images: dict[int, bytes], root: int, height: int, key: bytes, page_count: int) -> tuple[str, Any]:
    """find's twins agree on ``key``, and leaf_items' on it as a seek (and on no seek), both ways."""
    assert DESCENT is not None
    ref = _outcome(lambda: find_image(images, root, height, key, page_count))
    got = _outcome(lambda: DESCENT.find(images, root, height, key, page_count))
    assert got == ref, f"find twins differ for key {key.hex()}"
    for seek in (key, None):
        for before in (False, True):
            leaf_ref = _outcome(lambda: leaf_items_image(images, root, height, seek, before, page_count))  # noqa: B023
            leaf_got = _outcome(lambda: DESCENT.leaf_items(images, root, height, seek, before, page_count))  # noqa: B023
            assert leaf_got == leaf_ref, f"leaf_items twins differ for seek {seek!r}, before={before}"
    for lower, upper in ((key, None), (None, key), (key, key + b"\xff\xff"), (None, None), (key + b"\x00", key)):
        for reverse in (False, True):
            args = (images, root, height, lower, upper, reverse, page_count)
            pairs_ref = _outcome(lambda: leaf_pairs_image(*args))  # noqa: B023
            pairs_got = _outcome(lambda: DESCENT.leaf_pairs(*args))  # noqa: B023
            assert pairs_got == pairs_ref, f"leaf_pairs twins differ for [{lower!r}, {upper!r}), reverse={reverse}"
    return ref


@needs_descent
def test_find_twins_agree_on_a_whole_store(tmp_path: Any) -> None:
    images, tree, page_count, keys = _images_of(tmp_path, 600)
    assert tree.height >= 3
    with KV.open(str(tmp_path / "f600.kv")) as kv:
        for key in keys[::7]:
            kind, found = _same_find(images, tree.root, tree.height, key, page_count)
            assert kind == "ok"
            value = kv[key]
            assert found == value or (type(found) is tuple and len(value) == found[1] and len(value) == 200)
    for key in (b"", b"\xff" * 30, keys[3] + b"\x00"):
        assert _same_find(images, tree.root, tree.height, key, page_count) == ("ok", None)
    partial = dict(images)
    del partial[tree.root]
    assert _same_find(partial, tree.root, tree.height, keys[0], page_count) == ("ok", tree.root)
    # a whole scan, leaf by leaf, gives every key in order
    assert DESCENT is not None
    seen: list[bytes] = []
    seek: bytes | None = None
    while True:
        kind, (leaf_keys, _vals, _lo, hi) = _outcome(
            lambda: DESCENT.leaf_items(images, tree.root, tree.height, seek, False, page_count)  # noqa: B023
        )
        seen += leaf_keys
        if hi is None:
            break
        seek = hi
    assert seen == keys
    # and a scan of leaf_pairs, both ways, gives every key in order, overflow values flagged
    twins: tuple[Callable[..., Any], ...] = (DESCENT.leaf_pairs, leaf_pairs_image)
    for native in twins:
        forward: list[bytes] = []
        lower: bytes | None = None
        while True:
            pairs, _lo, hi, overflow = native(images, tree.root, tree.height, lower, None, False, page_count)
            forward += [k for k, _ in pairs]
            assert overflow == any(type(v) is tuple for _, v in pairs)
            if hi is None:
                break
            lower = hi
        assert forward == keys
        backward: list[bytes] = []
        upper: bytes | None = None
        while True:
            pairs, lo, _hi, _overflow = native(images, tree.root, tree.height, None, upper, True, page_count)
            backward += [k for k, _ in pairs]
            if lo is None:
                break
            upper = lo
        assert backward == keys[::-1]


@needs_descent
@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_find_twins_agree_on_damaged_images(tmp_path_factory: pytest.TempPathFactory, data: st.DataObject) -> None:
    global _DAMAGE_BASE
    if _DAMAGE_BASE is None:
        _DAMAGE_BASE = _images_of(tmp_path_factory.mktemp("find"), 300)
    images, tree, page_count, keys = _DAMAGE_BASE
    damaged = dict(images)
    pages = sorted(damaged)
    for _ in range(data.draw(st.integers(1, 4))):
        page = data.draw(st.sampled_from(pages))
        raw = bytearray(damaged[page])
        if raw:
            raw[data.draw(st.integers(0, len(raw) - 1))] = data.draw(st.integers(0, 255))
        if data.draw(st.booleans()):
            raw = raw[: data.draw(st.integers(0, len(raw)))]  # short images too
        damaged[page] = bytes(raw)
    for key in data.draw(st.lists(st.sampled_from(keys) | st.binary(max_size=24), min_size=1, max_size=8)):
        _same_find(damaged, tree.root, tree.height, key, data.draw(st.sampled_from([page_count, 2, 3, 1 << 46])))


_DAMAGE_BASE: tuple[dict[int, bytes], Any, int, list[bytes]] | None = None


@needs_descent
@settings(max_examples=600, deadline=None)
@given(
    kind=st.sampled_from([nodes.LEAF, nodes.BRANCH, 0, 0x4F]),
    level=st.integers(0, 3),
    count=st.integers(0, 40),
    used=st.integers(0, 600),
    body=st.binary(max_size=600),
    height=st.integers(1, 3),
    key=st.binary(max_size=8),
    page_count=st.integers(2, 12),
    size=st.sampled_from([10, 20, 512]),
)
def test_find_twins_agree_on_hostile_images(
    kind: int, level: int, count: int, used: int, body: bytes, height: int, key: bytes, page_count: int, size: int
) -> None:
    """Pages whose bytes say anything (every page the same hostile image: a descent
    that follows its children meets it again, one level down)."""
    raw = bytearray(size)
    head = struct.pack("<BBHI", kind, level, count, used)
    raw[: min(8, size)] = head[: min(8, size)]
    raw[20:] = body[: max(0, size - 20)].ljust(max(0, size - 20), b"\x00")
    image = bytes(raw[:size])
    images = {p: image for p in range(2, page_count + 1)}
    _same_find(images, 2, height, key, page_count)


@needs_descent
def test_find_refuses_what_is_not_a_page_map() -> None:
    assert DESCENT is not None
    cases: list[tuple[Any, ...]] = [
        ({2: bytearray(512)}, 2, 1, b"k", 9),
        ({}, 2, 0, b"k", 9),
        ({}, 1, 1, b"k", 9),
        ({}, 2, 49, b"k", 9),
    ]
    for args in cases:
        ref = _outcome(lambda: find_image(*args))  # noqa: B023
        got = _outcome(lambda: DESCENT.find(*args))  # noqa: B023
        assert ref[0] == got[0] == "error" and ref[1][0] is got[1][0], (args, ref, got)
    with pytest.raises(TypeError):
        DESCENT.find([], 2, 1, b"k", 9)
    with pytest.raises(TypeError):
        DESCENT.leaf_items({}, 2, 1, "k", False, 9)
    with pytest.raises(TypeError):
        DESCENT.leaf_items({}, 2, 1, b"k", 0, 9)
    with pytest.raises(TypeError):
        DESCENT.leaf_pairs({}, 2, 1, b"k", "k", False, 9)
    with pytest.raises(TypeError):
        DESCENT.leaf_pairs({}, 2, 1, None, None, 1, 9)
    for args in (({}, 2, 0, None, None, False, 9), ({}, 1, 1, None, None, False, 9)):
        ref = _outcome(lambda: leaf_pairs_image(*args))  # noqa: B023
        got = _outcome(lambda: DESCENT.leaf_pairs(*args))  # noqa: B023
        assert ref[0] == got[0] == "error" and ref[1][0] is got[1][0], (args, ref, got)
