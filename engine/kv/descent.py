"""Descents as functions of page images: a get (:func:`find_image`), one leaf
of a scan (:func:`leaf_pairs_image`) and one leaf's entries
(:func:`leaf_items_image`), over the node pages a store has already read and
verified.

These are the references of the compiled ``engine.kv._native_descent.find``,
``leaf_pairs`` and ``leaf_items`` (same results, same errors, for every input: valid, damaged or
hostile; see ``tests/kv/test_kv_native.py`` and ``stress/fuzz.py``'s
``kv_find``).  All are pure functions of bytes: no I/O, no callback.
``images`` maps page ids to page images that passed
:func:`engine.kv.node.decode_node` when they were read (their CRC-32C and key
order checked once, then kept: ``engine.kv.pager.NodeCache``), or that the
writer encoded itself.  A page not in ``images`` ends the descent with its id,
and the caller reads it (the decoded path, which verifies it and keeps its
image) instead.

Every page on the way is checked again for what the descent relies on, so that
no image, whatever its bytes, makes it read outside the page or loop: the kind
and level its parent gives it, the used size inside the page, the entry count
and every length inside the used size, the keys inside the separator range its
parent gives it, child and overflow page ids in ``2..page_count``.  Levels
strictly decrease, so a descent takes at most ``height`` pages.

A value is ``bytes`` (inline) or ``(first_page, length)`` (on overflow pages).
Errors: :class:`~engine.kv.node.NodeError` whose ``offset`` is absolute in the
store file (``page * len(image) + offset in the page``).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Mapping
from dataclasses import dataclass
from itertools import accumulate

from engine.kv.node import BRANCH, HEAD, LEAF, MAX_HEIGHT, OVERFLOW_MARK, OVERFLOW_REF, NodeError

#: A value as a descent gives it: inline bytes, or (first overflow page, length).
FoundValue = bytes | tuple[int, int]
#: What :func:`find_image` returns: a value, None (no such key), or a page id not at hand.
Found = FoundValue | None | int
#: What :func:`leaf_items_image` returns: (keys, values, lo, hi), or a page id not at hand.
LeafItems = tuple[list[bytes], list[FoundValue], bytes | None, bytes | None] | int
#: What :func:`leaf_pairs_image` returns: (pairs, lo, hi, overflow), or a page id not at hand.
LeafPairs = tuple[list[tuple[bytes, FoundValue]], bytes | None, bytes | None, bool] | int
#: The most pages a descent accepts: page id x page size stays below 2**63.
MAX_PAGE_COUNT = 1 << 46


@dataclass(slots=True)
class _Page:
    """A checked page: its image, absolute offset, keys (and a leaf's value lengths and offsets)."""

    data: bytes
    base: int
    keys: list[bytes]
    vlens: list[int]
    voffs: list[int]


def _start(root: int, height: int, page_count: int) -> None:
    if not 1 <= height <= MAX_HEIGHT:
        raise ValueError(f"a tree height in 1..{MAX_HEIGHT}, not {height}")
    if not 0 <= page_count <= MAX_PAGE_COUNT:
        raise ValueError(f"a page count in 0..{MAX_PAGE_COUNT}, not {page_count}")
    if not 2 <= root <= page_count:
        raise ValueError(f"a root page in 2..{page_count}, not {root}")


def _page(images: Mapping[int, bytes], page: int, level: int, lo: bytes | None, hi: bytes | None) -> _Page | None:
    """The image of ``page``, checked as a node of ``level`` with keys in [lo, hi); None if not at hand."""
    data = images.get(page)
    if data is None:
        return None
    if type(data) is not bytes:
        raise TypeError("find: page images must be bytes")
    ps = len(data)
    base = page * ps
    if ps < HEAD:
        raise NodeError(base, f"a page of at least {HEAD} bytes", str(ps))
    if data[0] != (BRANCH if level else LEAF) or data[1] != level:
        raise NodeError(base + 1, f"a node of level {level} (its parent's level - 1)", f"{data[0]:#04x} {data[1]}")
    n = data[2] | data[3] << 8
    used = int.from_bytes(data[4:8], "little")
    if used > ps or used < HEAD:
        raise NodeError(base + 4, f"a node's used size in {HEAD}..{ps}", str(used))
    end = HEAD + (10 * n + 8 if level else 4 * n)
    if end > used:
        raise NodeError(base + 2, "an entry count that fits the page", str(n))
    klens = [int.from_bytes(data[HEAD + 2 * i : HEAD + 2 * i + 2], "little") for i in range(n)]
    koffs = list(accumulate(klens, initial=end))
    keys = [data[a : a + ln] for a, ln in zip(koffs, klens)]
    vlens: list[int] = []
    voffs: list[int] = []
    if level:
        if koffs[-1] != used:
            raise NodeError(base + 4, f"keys that end at the used size {used}", str(koffs[-1]))
    else:
        vlens = [int.from_bytes(data[HEAD + 2 * (n + i) : HEAD + 2 * (n + i) + 2], "little") for i in range(n)]
        voffs = list(accumulate((OVERFLOW_REF.size if v == OVERFLOW_MARK else v for v in vlens), initial=koffs[-1]))
        if voffs[-1] != used:
            raise NodeError(base + 4, f"entries that end at the used size {used}", str(voffs[-1]))
    if n and ((lo is not None and keys[0] < lo) or (hi is not None and keys[-1] >= hi)):
        raise NodeError(base + HEAD, "keys inside the range its parent's separators give")
    return _Page(data, base, keys, vlens, voffs)


def _child(node: _Page, i: int, page_count: int) -> int:
    n = len(node.keys)
    at = HEAD + 2 * n + 8 * i
    child = int.from_bytes(node.data[at : at + 8], "little")
    if not 2 <= child <= page_count:
        raise NodeError(node.base + at, f"a child page in 2..{page_count}", str(child))
    return child


def _value(leaf: _Page, i: int, page_count: int) -> FoundValue:
    at = leaf.voffs[i]
    if leaf.vlens[i] != OVERFLOW_MARK:
        return leaf.data[at : leaf.voffs[i + 1]]
    first, length = OVERFLOW_REF.unpack_from(leaf.data, at)
    if not 2 <= first <= page_count:
        raise NodeError(leaf.base + at, f"an overflow page in 2..{page_count}", str(first))
    return first, length


def find_image(images: Mapping[int, bytes], root: int, height: int, key: bytes, page_count: int) -> Found:
    """The value under ``key`` in the tree at ``root`` of ``height`` levels, None if
    there is none, or the first page on the way not in ``images``."""
    _start(root, height, page_count)
    page = root
    lo: bytes | None = None
    hi: bytes | None = None
    for level in range(height - 1, -1, -1):
        node = _page(images, page, level, lo, hi)
        if node is None:
            return page
        keys = node.keys
        if not level:
            i = bisect_left(keys, key)
            if i == len(keys) or keys[i] != key:
                return None
            return _value(node, i, page_count)
        i = bisect_right(keys, key)
        if i:
            lo = keys[i - 1]
        if i < len(keys):
            hi = keys[i]
        page = _child(node, i, page_count)
    raise AssertionError("unreachable: level 0 returns")


def _leaf(
    images: Mapping[int, bytes], root: int, height: int, seek: bytes | None, before: bool, page_count: int
) -> tuple[_Page, bytes | None, bytes | None] | int:
    """The checked leaf holding ``seek`` (as :func:`leaf_items_image` finds it) and
    the separator range [lo, hi) its parents give it, or the first page not at hand."""
    _start(root, height, page_count)
    page = root
    lo: bytes | None = None
    hi: bytes | None = None
    for level in range(height - 1, -1, -1):
        node = _page(images, page, level, lo, hi)
        if node is None:
            return page
        keys = node.keys
        if not level:
            return node, lo, hi
        if seek is None:
            i = len(keys) if before else 0
        else:
            i = bisect_left(keys, seek) if before else bisect_right(keys, seek)
        if i:
            lo = keys[i - 1]
        if i < len(keys):
            hi = keys[i]
        page = _child(node, i, page_count)
    raise AssertionError("unreachable: level 0 returns")


def leaf_items_image(
    images: Mapping[int, bytes], root: int, height: int, seek: bytes | None, before: bool, page_count: int
) -> LeafItems:
    """(keys, values, lo, hi) of the leaf holding ``seek`` (``before``: the leaf of
    the keys just below ``seek``; ``seek`` None: the first, or with ``before`` the
    last, leaf) and the separator range [lo, hi) its parents give it; or the first
    page on the way not in ``images``.  The compiled twin serves a transaction's
    copy of a leaf (``engine.kv.store``)."""
    got = _leaf(images, root, height, seek, before, page_count)
    if isinstance(got, int):
        return got
    node, lo, hi = got
    keys = node.keys
    return keys, [_value(node, i, page_count) for i in range(len(keys))], lo, hi


def leaf_pairs_image(
    images: Mapping[int, bytes],
    root: int,
    height: int,
    lower: bytes | None,
    upper: bytes | None,
    reverse: bool,
    page_count: int,
) -> LeafPairs:
    """One leaf of a scan of the keys in [lower, upper) (None: open): (pairs, lo,
    hi, overflow), or the first page on the way not in ``images``.

    The leaf is the one holding ``lower`` (None: the first leaf) or, ``reverse``,
    the one holding the keys just below ``upper`` (None: the last leaf); ``pairs``
    its (key, value) for the keys in [lower, upper), in key order or ``reverse``
    (values checked in key order either way, so the first bad one raises);
    [lo, hi) the separator range its parents give it; ``overflow`` whether any
    value is an overflow reference ``(first_page, length)``.  A scan is a chain
    of these lists (:func:`engine.kv.tree.scan`): no Python code runs per key."""
    got = _leaf(images, root, height, upper if reverse else lower, reverse, page_count)
    if isinstance(got, int):
        return got
    node, lo, hi = got
    keys = node.keys
    i = 0 if lower is None else bisect_left(keys, lower)
    end = len(keys) if upper is None else bisect_left(keys, upper)
    pairs = [(keys[j], _value(node, j, page_count)) for j in range(i, end)]
    if reverse:
        pairs.reverse()
    return pairs, lo, hi, any(type(v) is tuple for _, v in pairs)


__all__ = [
    "MAX_PAGE_COUNT",
    "Found",
    "FoundValue",
    "LeafItems",
    "LeafPairs",
    "find_image",
    "leaf_items_image",
    "leaf_pairs_image",
]
