"""A get as one function of page images: the descent from a tree's root to the
value under a key, over the node pages a store has already read and verified.

:func:`find_image` is the reference of the compiled ``engine.kv._native.find``
(same results, same errors, for every input: valid, damaged or hostile; see
``tests/kv/test_kv_native.py``).  Both are pure functions of bytes: no I/O, no
callback.  ``images`` maps page ids to page images that passed
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

Result: the inline value (``bytes``), ``None`` (no such key), an ``int`` (the
first page on the way not in ``images``), or ``(first_page, length)`` of a value
on overflow pages.  Errors: :class:`~engine.kv.node.NodeError` whose ``offset``
is absolute in the store file (``page * len(image) + offset in the page``).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Mapping
from itertools import accumulate

from engine.kv.node import BRANCH, HEAD, LEAF, MAX_HEIGHT, OVERFLOW_MARK, OVERFLOW_REF, NodeError

Found = bytes | None | int | tuple[int, int]
#: The most pages a descent accepts: page id x page size stays below 2**63.
MAX_PAGE_COUNT = 1 << 46


def find_image(images: Mapping[int, bytes], root: int, height: int, key: bytes, page_count: int) -> Found:
    """The value under ``key`` in the tree at ``root`` of ``height`` levels (see the module)."""
    if not 1 <= height <= MAX_HEIGHT:
        raise ValueError(f"a tree height in 1..{MAX_HEIGHT}, not {height}")
    if not 0 <= page_count <= MAX_PAGE_COUNT:
        raise ValueError(f"a page count in 0..{MAX_PAGE_COUNT}, not {page_count}")
    if not 2 <= root <= page_count:
        raise ValueError(f"a root page in 2..{page_count}, not {root}")
    page = root
    lo: bytes | None = None
    hi: bytes | None = None
    level = height - 1
    while True:
        data = images.get(page)
        if data is None:
            return page
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
        end = HEAD + (4 * n if not level else 10 * n + 8)
        if end > used:
            raise NodeError(base + 2, "an entry count that fits the page", str(n))
        klens = [int.from_bytes(data[HEAD + 2 * i : HEAD + 2 * i + 2], "little") for i in range(n)]
        koffs = list(accumulate(klens, initial=end))
        keys = [data[a : a + ln] for a, ln in zip(koffs, klens)]
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
        if not level:
            i = bisect_left(keys, key)
            if i == n or keys[i] != key:
                return None
            if vlens[i] != OVERFLOW_MARK:
                return data[voffs[i] : voffs[i + 1]]
            first, length = OVERFLOW_REF.unpack_from(data, voffs[i])
            if not 2 <= first <= page_count:
                raise NodeError(base + voffs[i], f"an overflow page in 2..{page_count}", str(first))
            return first, length
        i = bisect_right(keys, key)
        if i:
            lo = keys[i - 1]
        if i < n:
            hi = keys[i]
        at = HEAD + 2 * n + 8 * i
        child = int.from_bytes(data[at : at + 8], "little")
        if not 2 <= child <= page_count:
            raise NodeError(base + at, f"a child page in 2..{page_count}", str(child))
        page = child
        level -= 1


__all__ = ["MAX_PAGE_COUNT", "Found", "find_image"]
