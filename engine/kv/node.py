"""The key-value store's page layouts: meta page, B+tree nodes, overflow pages.

Pure bytes in, bytes out (no I/O, no ``os``): :mod:`engine.kv.tree` reads and
writes pages through the page store and calls these.  The grammar, with a worked
hex example, is in ``docs/formats/kv.md``.  Every page is one page store page;
little-endian throughout.

Decoders check everything a damaged page could get wrong (kinds, levels, counts,
lengths, key order, child and overflow page ids) and raise :class:`NodeError`
with the offset *inside the page*; the tree layer turns it into a
``CorruptFileError`` naming the store file and the absolute offset.
"""

from __future__ import annotations

import operator
import struct
from array import array
from dataclasses import dataclass
from itertools import accumulate, pairwise

from engine.pages import crc32c

# -- meta page (page 1) -----------------------------------------------------------------
#: The meta page's magic: tells a key-value store from a plain page store.
META_MAGIC = b"ENGKVDB1"
META_VERSION = 1
# magic 8s | u16 version | u16 tree count | u32 CRC-32C | u64 txid
META_HEAD = struct.Struct("<8sHHIQ")
assert META_HEAD.size == 24
#: Offset of the commit counter in the meta page.
TXID_OFFSET = 16
# per tree: u64 root page | u64 key count | u8 height | u8 reserved | u16 name length, then the name
TREE_ENTRY = struct.Struct("<QQBBH")
assert TREE_ENTRY.size == 20
TXID = struct.Struct("<Q")

# -- nodes and overflow pages -------------------------------------------------------------
LEAF = 0x4C  # "L"
BRANCH = 0x42  # "B"
OVERFLOW = 0x4F  # "O"
# u8 kind | u8 level (0 = leaf) | u16 count | u32 used bytes (header included) | u32 CRC-32C
# | u64 next (overflow pages; 0 in nodes)
NODE_HEAD = struct.Struct("<BBHIIQ")
assert NODE_HEAD.size == 20
HEAD = NODE_HEAD.size
_PREFIX = struct.Struct("<BBHI")  # the header's first 8 bytes, before the CRC
assert _PREFIX.size == 8
_CRC = struct.Struct("<I")
#: Where a page's CRC-32C sits (nodes and overflow pages: offset 8; the meta page: 12).
CRC_AT = 8
META_CRC_AT = 12


def page_crc(data: bytes | bytearray | memoryview, crc_at: int, end: int) -> int:
    """CRC-32C of ``data[:end]`` without the four CRC bytes at ``crc_at``."""
    if type(data) is bytes:  # (bytes slices go to the CRC functions as they are: no view, no copy)
        return crc32c.extend_bytes(crc32c.value_bytes(data[:crc_at]), data[crc_at + 4 : end])
    view = memoryview(data)
    return crc32c.extend(crc32c.value(view[:crc_at]), view[crc_at + 4 : end])


def _seal(prefix: bytes, rest: bytes, page_size: int) -> bytes:
    """``prefix`` (the bytes before the CRC), the CRC, ``rest``, zero padding."""
    crc = crc32c.extend(crc32c.value(prefix), rest)
    return prefix + _CRC.pack(crc) + rest + bytes(page_size - len(prefix) - 4 - len(rest))


# An overflow reference, in a leaf's value area instead of the value: u64 first page | u32 length
OVERFLOW_REF = struct.Struct("<QI")
assert OVERFLOW_REF.size == 12
#: A leaf entry's value length meaning "the value is on overflow pages".
OVERFLOW_MARK = 0xFFFF
#: The deepest tree decoders accept (a 2-way tree of 2**48 pages is far shallower).
MAX_HEIGHT = 48
#: Largest value stored on overflow pages (the reference holds a u32 length).
MAX_VALUE = 0xFFFFFFFF
#: Largest page (the page store's bound): every length in a node then fits a u16
#: once the node fits its page, and no inline value is OVERFLOW_MARK bytes long.
MAX_PAGE = 65536


class NodeError(ValueError):
    """A page that is not a valid node; ``offset`` is inside the page."""

    def __init__(self, offset: int, expected: str, found: str | None = None) -> None:
        self.offset = offset
        self.expected = expected
        self.found = found
        super().__init__(f"at {offset}: expected {expected}" + (f", found {found}" if found is not None else ""))


@dataclass(frozen=True, slots=True)
class Overflow:
    """A value kept on a chain of overflow pages: its first page and length."""

    page: int
    length: int


Value = bytes | Overflow


class Leaf:
    """A decoded leaf: sorted keys and their values (inline bytes or Overflow).

    Nodes in a cache are never changed; a transaction takes the nodes it changes
    out of the cache first (``engine.kv.store.KV.own_node``).
    ``size`` is the encoded size in bytes, kept up to date by the tree code.
    A leaf decoded from a page slices its values out of the page only when they
    are first asked for (:meth:`value_at` slices just one): a get needs one.
    Until then it keeps the page (``_page``, the same bytes object as the page
    store's cache holds) and where each value starts in it (``_voffs``,
    ``count + 1`` offsets as a compact ``array('I')``): its keys and the page
    are most of its memory.
    """

    __slots__ = ("_page", "_vals", "_voffs", "keys", "size")
    level = 0

    def __init__(
        self, keys: list[bytes], vals: list[Value] | None, size: int, page: bytes = b"", voffs: array[int] | None = None
    ) -> None:
        self.keys = keys
        self._vals = vals
        self.size = size
        self._page = page
        self._voffs = voffs

    @property
    def vals(self) -> list[Value]:
        vals = self._vals
        if vals is None:
            page, offs = self._page, self._voffs
            assert offs is not None
            vals = self._vals = [page[a:b] for a, b in pairwise(offs)]
        return vals

    @vals.setter
    def vals(self, vals: list[Value]) -> None:
        self._vals = vals

    @property
    def lazy(self) -> bool:
        """True while the values are still only in the page (none sliced out yet)."""
        return self._vals is None

    def values(self) -> list[Value]:
        """Every value, in a new list; unlike :attr:`vals`, a lazy leaf stays lazy
        (a range scan reads cached leaves without making them hold their values twice)."""
        vals = self._vals
        if vals is None:
            page, offs = self._page, self._voffs
            assert offs is not None
            return [page[a:b] for a, b in pairwise(offs)]
        return vals[:]

    def overflows(self) -> list[Overflow]:
        """The values kept on overflow pages (a lazy leaf has none: it is lazy only then)."""
        vals = self._vals
        return [] if vals is None else [v for v in vals if type(v) is Overflow]

    def value_at(self, i: int) -> Value:
        vals = self._vals
        if vals is None:
            offs = self._voffs
            assert offs is not None
            return self._page[offs[i] : offs[i + 1]]
        return vals[i]

    def copy(self) -> Leaf:
        return Leaf(self.keys[:], self.values(), self.size)

    def own(self, vals: list[Value]) -> None:
        """Hold ``vals`` (this leaf's values, sliced out of its page) from now on and
        drop the page: a lazy leaf made a transaction's own, to change in place."""
        self._vals = vals
        self._page = b""
        self._voffs = None


class Branch:
    """A decoded branch: ``len(keys) + 1`` children; child ``i`` holds the keys
    ``k`` with ``keys[i - 1] <= k < keys[i]``."""

    __slots__ = ("children", "keys", "level", "size")

    def __init__(self, level: int, keys: list[bytes], children: list[int], size: int) -> None:
        self.level = level
        self.keys = keys
        self.children = children
        self.size = size

    def copy(self) -> Branch:
        return Branch(self.level, self.keys[:], self.children[:], self.size)


Node = Leaf | Branch


def max_entry(page_size: int) -> int:
    """Largest encoded entry (leaf: 4 + key + inline value; branch: 10 + key).

    A quarter page, so that a split leaves two halves of at least 3/8 page and a
    node under 1/4 page can always merge with or borrow from a sibling."""
    return page_size // 4


def max_key(page_size: int) -> int:
    """Longest key: its entry fits :func:`max_entry` even with an overflow reference."""
    return page_size // 4 - 32


def vsize(value: Value) -> int:
    """Bytes a value takes in a leaf's value area."""
    return len(value) if type(value) is bytes else OVERFLOW_REF.size


def leaf_size(keys: list[bytes], vals: list[Value]) -> int:
    return HEAD + 4 * len(keys) + sum(map(len, keys)) + sum(map(vsize, vals))


def branch_size(keys: list[bytes]) -> int:
    return HEAD + 10 * len(keys) + 8 + sum(map(len, keys))


# -- encoding -------------------------------------------------------------------------------
def leaf_image(keys: list[bytes], vals: list[Value], page_size: int) -> bytes:
    """A leaf page: header, ``count`` x u16 key length, ``count`` x u16 value
    length (OVERFLOW_MARK: a 12-byte overflow reference instead of the value),
    the keys, then the values, zero padding.  ValueError if it does not fit the
    page (checked first, so every length packs as a u16).  The reference of the
    compiled twin ``engine.kv._native.encode_leaf`` (same bytes, same errors;
    :mod:`engine.kv.pager` picks one)."""
    n = len(keys)
    if len(vals) != n:
        raise ValueError("encode_leaf: as many values as keys")
    if page_size > MAX_PAGE:
        raise ValueError(f"a page is at most {MAX_PAGE} bytes, not {page_size}")
    parts: list[bytes]
    try:
        # The common case, every value inline: no Python loop over the entries.
        vlens = list(map(len, vals))  # type: ignore[arg-type]
        parts = vals  # type: ignore[assignment]
    except TypeError:  # an Overflow among them
        vlens = [len(v) if type(v) is bytes else OVERFLOW_MARK for v in vals]  # type: ignore[arg-type]
        parts = [v if type(v) is bytes else OVERFLOW_REF.pack(v.page, v.length) for v in vals]  # type: ignore[union-attr]
    klens = list(map(len, keys))
    used = HEAD + 4 * n + sum(klens) + sum(map(len, parts))
    if used > page_size:
        raise ValueError(f"leaf of {used} bytes does not fit a {page_size}-byte page")
    body = struct.pack(f"<{2 * n}H", *klens, *vlens) + b"".join(keys) + b"".join(parts)
    return _seal(_PREFIX.pack(LEAF, 0, n, used), bytes(8) + body, page_size)


def branch_image(level: int, keys: list[bytes], children: list[int], page_size: int) -> bytes:
    """A branch page: header, ``count`` x u16 key length, ``count + 1`` x u64
    child page, then the keys, zero padding (ValueError if it does not fit).
    The reference of ``engine.kv._native.encode_branch``."""
    n = len(keys)
    if len(children) != n + 1:
        raise ValueError("encode_branch: one child more than keys")
    if page_size > MAX_PAGE:
        raise ValueError(f"a page is at most {MAX_PAGE} bytes, not {page_size}")
    klens = list(map(len, keys))
    used = HEAD + 10 * n + 8 + sum(klens)
    if used > page_size:
        raise ValueError(f"branch of {used} bytes does not fit a {page_size}-byte page")
    body = struct.pack(f"<{n}H{n + 1}Q", *klens, *children) + b"".join(keys)
    return _seal(_PREFIX.pack(BRANCH, level, n, used), bytes(8) + body, page_size)


def encode_leaf(node: Leaf, page_size: int) -> bytes:
    """The page image of a leaf (see :func:`leaf_image`)."""
    return leaf_image(node.keys, node.vals, page_size)


def encode_branch(node: Branch, page_size: int) -> bytes:
    """The page image of a branch (see :func:`branch_image`)."""
    return branch_image(node.level, node.keys, node.children, page_size)


def encode_node(node: Node, page_size: int) -> bytes:
    return encode_leaf(node, page_size) if type(node) is Leaf else encode_branch(node, page_size)  # type: ignore[arg-type]


def encode_overflow(data: bytes, next_page: int, page_size: int) -> bytes:
    """An overflow page: header (used = header + data length, next = the next page or 0), then data."""
    assert len(data) <= page_size - HEAD
    return _seal(_PREFIX.pack(OVERFLOW, 0, 0, HEAD + len(data)), struct.pack("<Q", next_page) + data, page_size)


# -- decoding -------------------------------------------------------------------------------
_U16S: dict[int, struct.Struct] = {}


def _u16s(n: int) -> struct.Struct:
    """``n`` little-endian u16 (compiled once per count)."""
    found = _U16S.get(n)
    if found is None:
        found = _U16S[n] = struct.Struct(f"<{n}H")
    return found


def _ascending(keys: list[bytes]) -> bool:
    return all(map(operator.lt, keys, keys[1:]))


def decode_node(data: bytes, page_count: int, eager: bool = False) -> Node:
    """A leaf or branch page (``bytes``); NodeError if anything in it is inconsistent.

    ``page_count`` bounds child and overflow page ids (2..page_count: page 1 is
    the meta page).  A leaf without overflow values is lazy (its values sliced
    from the page when asked for) unless ``eager``: then its values come sliced
    at once, as a leaf with overflow values always has them (what a transaction
    that will change the leaf needs; a get needs one value).  The reference of
    the compiled twin ``engine.kv._native.decode_node`` (same objects, same
    errors; :mod:`engine.kv.pager` picks one)."""
    ps = len(data)
    if ps < HEAD:
        raise NodeError(0, f"a page of at least {HEAD} bytes", str(ps))
    kind, level, n, used, crc, nxt = NODE_HEAD.unpack_from(data)
    if used > ps or used < HEAD or nxt:
        raise NodeError(4, f"a node's used size in {HEAD}..{ps} and no next page", f"{used}, next {nxt}")
    if page_crc(data, CRC_AT, used) != crc:
        raise NodeError(CRC_AT, "a node matching its CRC-32C", f"{crc:#010x} (damaged)")
    if kind == LEAF:
        if level:
            raise NodeError(1, "level 0 in a leaf", str(level))
        end = HEAD + 4 * n
        if end > used:
            raise NodeError(2, "an entry count that fits the page", str(n))
        lens = _u16s(2 * n).unpack_from(data, HEAD)
        klens = lens[:n]
        marks = lens[n:]
        vlens = [OVERFLOW_REF.size if v == OVERFLOW_MARK else v for v in marks] if OVERFLOW_MARK in marks else marks
        koffs = list(accumulate(klens, initial=end))
        voffs = list(accumulate(vlens, initial=koffs[-1]))
        if voffs[-1] != used:
            raise NodeError(4, f"entries that end at the used size {used}", str(voffs[-1]))
        keys = [data[a:b] for a, b in pairwise(koffs)]
        if not _ascending(keys):
            raise NodeError(end, "keys in strictly ascending order")
        if vlens is marks and not eager:  # no overflow value: values are sliced when asked for
            return Leaf(keys, None, used, data, array("I", voffs))
        vals: list[Value] = [data[a:b] for a, b in pairwise(voffs)]
        for i, mark in enumerate(marks if vlens is not marks else ()):
            if mark == OVERFLOW_MARK:
                first, length = OVERFLOW_REF.unpack_from(data, voffs[i])
                if not 2 <= first <= page_count:
                    raise NodeError(voffs[i], f"an overflow page in 2..{page_count}", str(first))
                vals[i] = Overflow(first, length)
        return Leaf(keys, vals, used)
    if kind == BRANCH:
        if not 1 <= level <= MAX_HEIGHT:
            raise NodeError(1, f"a branch level in 1..{MAX_HEIGHT}", str(level))
        end = HEAD + 10 * n + 8
        if end > used:
            raise NodeError(2, "a key count that fits the page", str(n))
        fields = struct.unpack_from(f"<{n}H{n + 1}Q", data, HEAD)
        klens, children = fields[:n], list(fields[n:])
        koffs = list(accumulate(klens, initial=end))
        if koffs[-1] != used:
            raise NodeError(4, f"keys that end at the used size {used}", str(koffs[-1]))
        keys = [data[a:b] for a, b in pairwise(koffs)]
        if not _ascending(keys):
            raise NodeError(end, "separator keys in strictly ascending order")
        if min(children) < 2 or max(children) > page_count:
            bad = next(c for c in children if not 2 <= c <= page_count)
            at = HEAD + 2 * n + 8 * children.index(bad)
            raise NodeError(at, f"a child page in 2..{page_count}", str(bad))
        return Branch(level, keys, children, used)
    raise NodeError(0, "a leaf (0x4c) or branch (0x42) page", f"0x{kind:02x}")


def decode_overflow(data: bytes, page_count: int) -> tuple[bytes, int]:
    """An overflow page's data and next page (0 = last)."""
    kind, level, n, used, crc, nxt = NODE_HEAD.unpack_from(data)
    if kind != OVERFLOW or level or n:
        raise NodeError(0, "an overflow page (0x4f)", f"0x{kind:02x}")
    if not HEAD <= used <= len(data):
        raise NodeError(4, f"an overflow page's used size in {HEAD}..{len(data)}", str(used))
    if page_crc(data, CRC_AT, used) != crc:
        raise NodeError(CRC_AT, "an overflow page matching its CRC-32C", f"{crc:#010x} (damaged)")
    if nxt and not 2 <= nxt <= page_count:
        raise NodeError(12, f"a next overflow page in 2..{page_count}", str(nxt))
    return data[HEAD:used], nxt


# -- the meta page --------------------------------------------------------------------------
@dataclass(slots=True)
class TreeInfo:
    """One named tree: its root page, key count and height (1 = the root is a leaf)."""

    name: bytes
    root: int
    count: int
    height: int

    def copy(self) -> TreeInfo:
        return TreeInfo(self.name, self.root, self.count, self.height)


def diff_span(old: bytes, new: bytes, lo: int) -> tuple[int, int]:
    """``(start, end)``: the bytes from ``lo`` on where ``new`` differs from ``old``,
    ``start`` the first differing index and ``end`` just past the last one
    (``(len, len)`` when none differs): what a commit journals of a node whose
    values were overwritten in place.  TypeError unless both are ``bytes`` and
    ``lo`` an int, ValueError unless they are of one length and ``0 <= lo <= len``.
    The reference of the compiled twin ``engine.kv._native.diff_span``."""
    if type(old) is not bytes or type(new) is not bytes:
        raise TypeError("diff_span: old and new must be bytes")
    if not isinstance(lo, int):
        raise TypeError("diff_span: lo must be an int")
    size = len(new)
    if len(old) != size:
        raise ValueError("diff_span: old and new must be of one length")
    if not 0 <= lo <= size:
        raise ValueError("diff_span: lo must be inside the bytes")
    start = _common_prefix(old, new, lo, size)
    if start == size:
        return size, size
    return start, _common_suffix(old, new, start, size)


def _common_prefix(a: bytes, b: bytes, lo: int, hi: int) -> int:
    """The first index in [lo, hi) where ``a`` and ``b`` differ (``hi`` if none):
    a binary search of ``bytes`` slice comparisons (memcmp; a memoryview's
    comparison goes item by item, 100x slower), not a loop over bytes."""
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[lo:mid] == b[lo:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _common_suffix(a: bytes, b: bytes, lo: int, hi: int) -> int:
    """The smallest index ``e`` in [lo, hi] with ``a[e:hi] == b[e:hi]``: where the
    bytes after the last difference start (a binary search of suffix comparisons;
    no reversed copies)."""
    end = hi
    while lo < hi:
        mid = (lo + hi) // 2
        if a[mid:end] == b[mid:end]:
            hi = mid
        else:
            lo = mid + 1
    return lo


def encode_meta(txid: int, trees: list[TreeInfo], page_size: int) -> bytes:
    """The meta page: header (magic, version, tree count, txid), then the trees in order."""
    used = encode_meta_used(txid, trees)
    if len(used) > page_size:
        raise ValueError(f"{len(trees)} tree names do not fit the {page_size}-byte meta page")
    return used + bytes(page_size - len(used))


def encode_meta_used(txid: int, trees: list[TreeInfo]) -> bytes:
    """The meta page's bytes up to the end of its entries (CRC included), no
    padding: what a commit that changes entries in place slices its writes from."""
    head = META_HEAD.pack(META_MAGIC, META_VERSION, len(trees), 0, txid)
    if len(trees) == 1:  # the usual store: the default tree only
        (t,) = trees
        rest = head[16:] + TREE_ENTRY.pack(t.root, t.count, t.height, 0, len(t.name)) + t.name
    else:
        rest = head[16:] + b"".join(TREE_ENTRY.pack(t.root, t.count, t.height, 0, len(t.name)) + t.name for t in trees)
    prefix = head[:META_CRC_AT]
    return prefix + _CRC.pack(crc32c.extend(crc32c.value(prefix), rest)) + rest


def meta_end(trees: list[TreeInfo]) -> int:
    """Where the meta page's entries end (its CRC covers the bytes before, but its own)."""
    return META_HEAD.size + sum(TREE_ENTRY.size + len(t.name) for t in trees)


def tree_entry_offsets(trees: list[TreeInfo]) -> list[int]:
    """Where each tree's entry starts in the meta page."""
    offs, at = [], META_HEAD.size
    for t in trees:
        offs.append(at)
        at += TREE_ENTRY.size + len(t.name)
    return offs


def meta_crc(page: bytes | bytearray, trees: list[TreeInfo]) -> bytes:
    """The CRC field of a meta page image (to write after changing entries in place)."""
    return _CRC.pack(page_crc(page, META_CRC_AT, meta_end(trees)))


def is_meta(data: bytes) -> bool:
    return data[:8] == META_MAGIC


def decode_meta(data: bytes, page_count: int) -> tuple[int, list[TreeInfo]]:
    """The commit counter and the trees; NodeError on anything inconsistent."""
    magic, version, n, crc, txid = META_HEAD.unpack_from(data)
    if magic != META_MAGIC:
        raise NodeError(0, "the key-value meta magic ENGKVDB1", magic.hex(" "))
    if version != META_VERSION:
        raise NodeError(8, f"meta version {META_VERSION}", str(version))
    trees: list[TreeInfo] = []
    at = META_HEAD.size
    names: set[bytes] = set()
    for _ in range(n):
        if at + TREE_ENTRY.size > len(data):
            raise NodeError(at, "a tree entry inside the page")
        root, count, height, _r, nlen = TREE_ENTRY.unpack_from(data, at)
        name = data[at + TREE_ENTRY.size : at + TREE_ENTRY.size + nlen]
        if len(name) != nlen or name in names:
            raise NodeError(at + 18, "a tree name inside the page, each name once", name.hex())
        if not 2 <= root <= page_count:
            raise NodeError(at, f"a root page in 2..{page_count}", str(root))
        if not 1 <= height <= MAX_HEIGHT:
            raise NodeError(at + 16, f"a tree height in 1..{MAX_HEIGHT}", str(height))
        names.add(name)
        trees.append(TreeInfo(name, root, count, height))
        at += TREE_ENTRY.size + nlen
    if page_crc(data, META_CRC_AT, at) != crc:
        raise NodeError(META_CRC_AT, "a meta page matching its CRC-32C", f"{crc:#010x} (damaged)")
    return txid, trees
