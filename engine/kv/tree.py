"""B+tree algorithms over decoded nodes: lookup, range scans, insert and delete
with splits, merges and redistribution.

The functions see pages only through two small interfaces: :class:`Source`
(read a decoded node or an overflow value: the writer's committed state, a
transaction's state, or a reader's snapshot) and :class:`Writer` (a transaction:
copy a node for change, allocate and free pages, store values).  Node layout and
sizes are :mod:`engine.kv.node`'s.

Invariants kept (and checked by ``engine.kv.maint.verify_trees``): every leaf at level 0 and
every branch one level above its children, so all leaves are ``height`` levels
down; keys strictly ascending in a node and inside the separator range the
parent gives; every node at most a page; every node but the root at least a
quarter page (and a non-root branch with at least one separator).  A node that
grows past a page splits in two halves by bytes (each at least 3/8 page, since
an entry is at most 1/4 page); one that drops under a quarter page merges with a
sibling when both fit one page, else the two share their entries evenly.

Descents check levels and key ranges, so a damaged tree (a child pointer to an
ancestor, a key out of order) is a CorruptFileError, never a loop or a wrong
answer: levels strictly decrease on the way down.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable, Iterator
from itertools import accumulate, chain, repeat
from operator import add
from typing import Protocol

from engine.errors import CorruptFileError
from engine.kv.node import (
    HEAD,
    OVERFLOW_REF,
    Branch,
    Leaf,
    Node,
    Overflow,
    TreeInfo,
    Value,
    branch_size,
    leaf_size,
    vsize,
)


class Source(Protocol):
    """Read access to one consistent state of the store."""

    path: str
    page_size: int
    #: The decoded node at ``page`` if it is at hand (no I/O, no decoding), else
    #: None: descents try it before :meth:`node` (a dict's ``get``: no Python frame).
    cached: Callable[[int], Node | None]

    def node(self, page: int) -> Node:
        """The decoded node at ``page`` (CorruptFileError if it is not one)."""
        ...

    def value(self, value: Value) -> bytes:
        """An inline value as it is, an overflow value read from its chain."""
        ...

    def page_reader(self) -> tuple[Callable[[int], bytes], int]:
        """(read a page's raw bytes, page count) of this state (for checks and compaction)."""
        ...


class Writer(Source, Protocol):
    """A transaction's write access."""

    def mutable(self, page: int) -> Node:
        """The transaction's own node at ``page``, to change in place (no one else sees it)."""
        ...

    def new_page(self, node: Node) -> int:
        """Allocate a page for ``node`` (a node of this transaction from now on)."""
        ...

    def free_page(self, page: int) -> None: ...

    def store_value(self, value: bytes, inline: bool) -> Value:
        """``value`` itself if ``inline``, else written to overflow pages."""
        ...

    def free_value(self, value: Value) -> None:
        """Free an overflow value's pages (nothing for an inline value)."""
        ...


def corrupt(src: Source, page: int, at: int, expected: str, found: str | None = None) -> CorruptFileError:
    return CorruptFileError(src.path, page * src.page_size + at, expected, found)


def checked(src: Source, page: int, level: int, lo: bytes | None, hi: bytes | None) -> Node:
    """The node at ``page``, which the parent says is at ``level`` with keys in [lo, hi)."""
    node = src.node(page)
    if node.level != level:
        raise corrupt(src, page, 1, f"a node of level {level} (its parent's level - 1)", str(node.level))
    keys = node.keys
    if keys and ((lo is not None and keys[0] < lo) or (hi is not None and keys[-1] >= hi)):
        raise corrupt(src, page, HEAD, "keys inside the range its parent's separators give")
    return node


def descend(
    src: Source, tree: TreeInfo, key: bytes, path: list[tuple[int, int]] | None = None
) -> tuple[Leaf, int]:
    """The leaf whose key range holds ``key``, and its page; every node on the way
    is checked against its level and the separator range its parent gives it
    (:func:`checked`, written out).  ``path``, when given, receives the branches
    passed as (page, child index)."""
    cached = src.cached  # (src.node only for a node not at hand: no bound method per call)
    page = tree.root
    lo: bytes | None = None
    hi: bytes | None = None
    level = tree.height - 1
    # The branches, then the leaf in code of its own: each attribute read then
    # meets one class, which the interpreter specializes (a read that meets a
    # Branch and a Leaf in turn, or a Leaf's class attribute ``level``, takes the
    # generic lookup instead).
    while level:
        node = cached(page)
        if node is None:
            node = src.node(page)
        if node.level != level:  # (a Leaf's is 0)
            raise corrupt(src, page, 1, f"a node of level {level} (its parent's level - 1)", str(node.level))
        keys = node.keys
        if keys and ((lo is not None and keys[0] < lo) or (hi is not None and keys[-1] >= hi)):
            raise corrupt(src, page, HEAD, "keys inside the range its parent's separators give")
        i = bisect_right(keys, key)
        if i:
            lo = keys[i - 1]
        if i < len(keys):
            hi = keys[i]
        if path is not None:
            path.append((page, i))
        page = node.children[i]  # type: ignore[union-attr]
        level -= 1
    leaf = cached(page)
    if leaf is None:
        leaf = src.node(page)
    if type(leaf) is not Leaf:
        raise corrupt(src, page, 1, "a node of level 0 (its parent's level - 1)", str(leaf.level))
    keys = leaf.keys
    if keys and ((lo is not None and keys[0] < lo) or (hi is not None and keys[-1] >= hi)):
        raise corrupt(src, page, HEAD, "keys inside the range its parent's separators give")
    return leaf, page


def find(src: Source, tree: TreeInfo, key: bytes) -> Value | None:
    """The value stored under ``key`` (None if there is none): the leaf
    :func:`descend` finds, searched (a get is these two functions and, for nodes
    not at hand, one ``src.node`` call per level)."""
    leaf, _ = descend(src, tree, key)
    keys = leaf.keys
    i = bisect_left(keys, key)
    if i < len(keys) and keys[i] == key:
        return leaf.value_at(i)
    return None


def get(src: Source, tree: TreeInfo | None, key: bytes) -> bytes | None:
    """The bytes stored under ``key`` in ``tree`` (None for no such key or tree),
    overflow chains read whole: every backend's lookup."""
    if tree is None:
        return None
    found = find(src, tree, key)
    return None if found is None else src.value(found)


def leaf_at(src: Source, tree: TreeInfo, key: bytes | None, before: bool) -> tuple[Leaf, bytes | None, bytes | None]:
    """The leaf holding ``key`` (``before``: the leaf holding the keys just below
    ``key``; ``key=None``: the first, or with ``before`` the last, leaf) and the
    separator range [lo, hi) its parents give it."""
    page = tree.root
    lo: bytes | None = None
    hi: bytes | None = None
    for level in range(tree.height - 1, 0, -1):
        node = checked(src, page, level, lo, hi)
        assert type(node) is Branch
        keys = node.keys
        if key is None:
            i = len(keys) if before else 0
        else:
            i = bisect_left(keys, key) if before else bisect_right(keys, key)
        if i:
            lo = keys[i - 1]
        if i < len(keys):
            hi = keys[i]
        page = node.children[i]
    leaf = checked(src, page, 0, lo, hi)
    assert type(leaf) is Leaf
    return leaf, lo, hi


#: fetch(lower, upper, reverse) -> (pairs, lo, hi): one leaf of a scan of the keys
#: in [lower, upper), read under whatever lock the caller's state needs: the leaf
#: holding ``lower`` (None: the first) or, ``reverse``, the keys just below ``upper``
#: (None: the last); ``pairs`` its (key, value) in that range in scan order, values
#: read; [lo, hi) the separator range its parents give it.
Fetch = Callable[
    [bytes | None, bytes | None, bool], tuple[list[tuple[bytes, bytes]], bytes | None, bytes | None]
]


def fetcher(src: Source, tree: TreeInfo) -> Fetch:
    """A :data:`Fetch` over ``src``'s decoded nodes (values read at once: a later
    commit may reuse an overflow chain's pages)."""

    def fetch(
        lower: bytes | None, upper: bytes | None, reverse: bool
    ) -> tuple[list[tuple[bytes, bytes]], bytes | None, bytes | None]:
        leaf, lo, hi = leaf_at(src, tree, upper if reverse else lower, reverse)
        keys = leaf.keys
        i = 0 if lower is None else bisect_left(keys, lower)
        end = len(keys) if upper is None else bisect_left(keys, upper)
        vals = leaf.values()[i:end]
        out: list[bytes] = vals if all(type(v) is bytes for v in vals) else [src.value(v) for v in vals]  # type: ignore[assignment]
        pairs = list(zip(keys[i:end], out))
        if reverse:
            pairs.reverse()
        return pairs, lo, hi

    return fetch


def scan(fetch: Fetch, start: bytes | None, stop: bytes | None, reverse: bool) -> Iterator[tuple[bytes, bytes]]:
    """(key, value) for ``start <= key < stop`` in key order (or reversed).

    A chain of leaves' lists of pairs (:func:`itertools.chain`: the next key is
    one C call, no Python frame per key), each leaf fetched when the one before it
    is used up, by a fresh descent from the root (through ``fetch``) for the key
    just past the last leaf's separator: a cursor that never follows stale
    pointers, so a writer may commit between two leaves (each leaf is read whole
    under the fetch's lock, and the scan goes on from the separator it saw).
    Separators strictly increase (decrease) from one leaf to the next, so a scan
    always ends.  Nothing is fetched before the first ``next``.
    """
    return chain.from_iterable(_leaves(fetch, start, stop, reverse))


def _leaves(
    fetch: Fetch, start: bytes | None, stop: bytes | None, reverse: bool
) -> Iterator[list[tuple[bytes, bytes]]]:
    """The pairs of each leaf :func:`scan` visits, in scan order."""
    if not reverse:
        lower = start
        while True:
            pairs, _lo, hi = fetch(lower, stop, False)
            yield pairs
            if hi is None or (stop is not None and hi >= stop):
                return
            lower = hi
    else:
        upper = stop
        while True:
            pairs, lo, _hi = fetch(start, upper, True)
            yield pairs
            if lo is None or (start is not None and lo <= start):
                return
            upper = lo


# -- changes ------------------------------------------------------------------------------
def _path_to(w: Writer, tree: TreeInfo, key: bytes) -> tuple[list[tuple[int, int]], int]:
    """The branches from the root down to ``key``'s leaf as (page, child index), and the leaf's page."""
    path: list[tuple[int, int]] = []
    _leaf, page = descend(w, tree, key, path)
    return path, page


def insert(w: Writer, tree: TreeInfo, key: bytes, value: bytes, inline: bool) -> None:
    """Store ``value`` under ``key`` (replacing any value it had)."""
    _leaf, page = descend(w, tree, key)  # no path: most puts need no split
    leaf = w.mutable(page)
    assert type(leaf) is Leaf
    keys, vals = leaf.keys, leaf.vals
    i = bisect_left(keys, key)
    if i < len(keys) and keys[i] == key:
        old = vals[i]
        if inline and type(old) is bytes:  # the common case, no overflow pages either side
            vals[i] = value
            leaf.size += len(value) - len(old)
        else:
            w.free_value(old)  # first: the new value may reuse its pages
            stored = vals[i] = w.store_value(value, inline)
            leaf.size += vsize(stored) - vsize(old)
    else:
        stored = value if inline else w.store_value(value, inline)
        keys.insert(i, key)
        vals.insert(i, stored)
        leaf.size += 4 + len(key) + (len(value) if inline else OVERFLOW_REF.size)
        tree.count += 1
    ps = w.page_size
    if tree.height > 1 and ps // 4 <= leaf.size <= ps:
        return  # no split or merge (the usual case): _fix would find the same
    path: list[tuple[int, int]] = []
    descend(w, tree, key, path)  # the same branches as above (none of them changed)
    _fix(w, tree, path, page)


def delete(w: Writer, tree: TreeInfo, key: bytes) -> bool:
    """Remove ``key``; False if it was not there."""
    path, page = _path_to(w, tree, key)
    leaf = w.node(page)
    keys = leaf.keys
    i = bisect_left(keys, key)
    if i == len(keys) or keys[i] != key:
        return False
    leaf = w.mutable(page)
    assert type(leaf) is Leaf
    old = leaf.vals.pop(i)
    del leaf.keys[i]
    leaf.size -= 4 + len(key) + vsize(old)
    w.free_value(old)
    tree.count -= 1
    _fix(w, tree, path, page)
    return True


def _fix(w: Writer, tree: TreeInfo, path: list[tuple[int, int]], page: int) -> None:
    """Split, merge or rebalance from the changed leaf up, as far as needed."""
    ps = w.page_size
    minimum = ps // 4
    depth = len(path)
    while True:
        node = w.node(page)
        if depth == 0:
            _fix_root(w, tree, page, node)
            return
        ppage, idx = path[depth - 1]
        if node.size > ps:
            right, sep = _split(w.mutable(page))
            rpage = w.new_page(right)
            parent = w.mutable(ppage)
            assert type(parent) is Branch
            parent.keys.insert(idx, sep)
            parent.children.insert(idx + 1, rpage)
            parent.size += 10 + len(sep)
        elif node.size < minimum:
            _rebalance(w, ppage, idx)
        else:
            return
        page = ppage
        depth -= 1


def _fix_root(w: Writer, tree: TreeInfo, page: int, node: Node) -> None:
    if node.size > w.page_size:
        right, sep = _split(w.mutable(page))
        rpage = w.new_page(right)
        root = Branch(node.level + 1, [sep], [page, rpage], branch_size([sep]))
        tree.root = w.new_page(root)
        tree.height += 1
        return
    while type(node) is Branch and not node.keys:  # one child left: it becomes the root
        child = node.children[0]
        w.free_page(tree.root)
        tree.root = child
        tree.height -= 1
        node = w.node(child)


def _balance_point(sizes: Iterable[int], lo: int, hi: int) -> tuple[int, int, int]:
    """The index m in [lo, hi] (both in 0..len(sizes)) that splits ``sizes``
    most evenly (the sum of sizes[:m] against the rest; the lower m of a tie,
    ``lo`` if the range is empty), that sum, and the total.

    The running sums rise, so the gap |total - 2 * sum(sizes[:m])| falls up to
    the first m whose sum is at least half the total and rises from there: the
    best m is that one or the one before (a bisection, no loop in Python)."""
    acc = list(accumulate(sizes, initial=0))
    total = acc[-1]
    first = bisect_left(acc, (total + 1) // 2)  # the first m with 2 * acc[m] >= total
    if hi < lo or first <= lo:
        m = lo
    elif first - 1 >= hi:
        m = hi
    else:
        m = first - 1 if total - 2 * acc[first - 1] <= 2 * acc[first] - total else first
    return m, acc[m], total


def _leaf_sizes(keys: list[bytes], vals: list[Value]) -> Iterator[int]:
    """Each leaf entry's encoded size: 4 + key + value (or its overflow reference)."""
    try:
        # every value inline (the usual leaf): C loops, no Python frame per entry
        lens = list(map(add, map(len, keys), map(len, vals)))  # type: ignore[arg-type]
    except TypeError:  # an Overflow among the values
        lens = [len(k) + vsize(v) for k, v in zip(keys, vals)]
    return map(add, lens, repeat(4))


def _split(node: Node) -> tuple[Node, bytes]:
    """Split ``node`` in place into itself (left) and a new right node; return
    the right node and the separator that goes up."""
    keys = node.keys
    if type(node) is Leaf:
        vals = node.vals
        m, left, total = _balance_point(_leaf_sizes(keys, vals), 1, len(keys) - 1)
        right = Leaf(keys[m:], vals[m:], HEAD + total - left)
        del keys[m:], vals[m:]
        node.size = HEAD + left
        return right, right.keys[0]
    assert type(node) is Branch
    # key m goes up; left keeps keys[:m] and children[:m + 1]
    m = _balance_point([10 + len(k) for k in keys], 1, len(keys) - 2)[0]
    sep = keys[m]
    rb = Branch(node.level, keys[m + 1 :], node.children[m + 1 :], 0)
    del keys[m:], node.children[m + 1 :]
    node.size = branch_size(keys)
    rb.size = branch_size(rb.keys)
    return rb, sep


def _rebalance(w: Writer, ppage: int, idx: int) -> None:
    """Child ``idx`` of branch ``ppage`` is under a quarter page: merge it with
    a sibling, or share the two nodes' entries evenly."""
    parent = w.mutable(ppage)
    assert type(parent) is Branch
    children = parent.children
    if len(children) < 2:
        return  # only the root may have one child; _fix_root collapses it
    li = idx - 1 if idx > 0 else idx
    ri = li + 1
    lpage, rpage = children[li], children[ri]
    left, right = w.mutable(lpage), w.mutable(rpage)
    ps = w.page_size
    if type(left) is Leaf and type(right) is Leaf:
        keys = left.keys + right.keys
        vals = left.vals + right.vals
        total = leaf_size(keys, vals)
        if total <= ps:
            left.keys, left.vals, left.size = keys, vals, total
            del parent.keys[li], children[ri]
            w.free_page(rpage)
        else:
            m, lsize, whole = _balance_point(_leaf_sizes(keys, vals), 1, len(keys) - 1)
            left.keys, left.vals = keys[:m], vals[:m]
            right.keys, right.vals = keys[m:], vals[m:]
            left.size, right.size = HEAD + lsize, HEAD + whole - lsize
            parent.keys[li] = right.keys[0]
    elif type(left) is Branch and type(right) is Branch:
        keys = [*left.keys, parent.keys[li], *right.keys]
        kids = left.children + right.children
        total = branch_size(keys)
        if total <= ps:
            left.keys, left.children, left.size = keys, kids, total
            del parent.keys[li], children[ri]
            w.free_page(rpage)
        else:
            m = _balance_point([10 + len(k) for k in keys], 1, len(keys) - 2)[0]
            parent.keys[li] = keys[m]
            left.keys, left.children = keys[:m], kids[: m + 1]
            right.keys, right.children = keys[m + 1 :], kids[m + 1 :]
            left.size, right.size = branch_size(left.keys), branch_size(right.keys)
    else:
        raise corrupt(w, rpage, 0, "siblings of one kind")
    parent.size = branch_size(parent.keys)


def overflow_pages(length: int, page_size: int) -> int:
    """How many overflow pages a value of ``length`` bytes takes."""
    per = page_size - HEAD
    return max(1, -(-length // per))


__all__ = [
    "Fetch",
    "Overflow",
    "Source",
    "Writer",
    "checked",
    "corrupt",
    "delete",
    "fetcher",
    "find",
    "insert",
    "leaf_at",
    "overflow_pages",
    "scan",
]
