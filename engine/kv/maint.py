"""Checking every tree (``verify``) and compaction (``compact``).

:func:`verify_trees` walks every tree in key order and checks what the B+tree
promises (``engine.kv.tree``'s invariants): node kinds and levels (so every leaf
is ``height`` levels down), keys ascending inside each node and across
neighbouring leaves and inside the separators' ranges, every node at most a page
and, but for the root, at least a quarter page, each tree's key count, overflow
chains whole, and every page of the store used exactly once: the meta page, a
node, an overflow page, or on the free list.

:func:`compact` moves the live pages into the free pages lowest in the file, in
one transaction, so the free pages all end up at the end and at the head of the
free list, then asks the page store to cut them off (``PageStore.shrink``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from engine.errors import CorruptFileError
from engine.kv import node as nodes
from engine.kv.node import Branch, Leaf, Overflow, TreeInfo
from engine.kv.pager import overflow_chain
from engine.kv.tree import Source, checked, corrupt

META_PAGE = 1


def verify_trees(src: Source, infos: Iterable[TreeInfo], page_count: int, free_pages: list[int]) -> list[str]:
    """Check every tree of ``src`` and the page accounting; CorruptFileError on a problem."""
    ps = src.page_size
    minimum = ps // 4
    read, _ = src.page_reader()
    owner: dict[int, str] = {META_PAGE: "the meta page"}

    def claim(page: int, what: str) -> None:
        if page in owner:
            raise CorruptFileError(src.path, page * ps, f"page {page} used once", f"{owner[page]} and {what}")
        owner[page] = what

    total_keys = node_count = overflow_count = 0
    tree_list = list(infos)
    for info in tree_list:
        label = f"tree {info.name!r}"
        count = 0
        last: bytes | None = None
        # In-order depth-first walk: (page, level, lo, hi); children pushed right to left.
        stack: list[tuple[int, int, bytes | None, bytes | None]] = [(info.root, info.height - 1, None, None)]
        while stack:
            page, level, lo, hi = stack.pop()
            claim(page, f"a node of {label}")
            node = checked(src, page, level, lo, hi)
            node_count += 1
            root = page == info.root
            if node.size > ps or (not root and node.size < minimum):
                raise corrupt(src, page, 4, f"a node of {minimum}..{ps} bytes", str(node.size))
            if type(node) is Branch:
                if not node.keys and not root:
                    raise corrupt(src, page, 2, "a branch with at least one separator", "none")
                keys, kids = node.keys, node.children
                for i in range(len(kids) - 1, -1, -1):
                    stack.append((kids[i], level - 1, keys[i - 1] if i else lo, keys[i] if i < len(keys) else hi))
                continue
            assert type(node) is Leaf
            if not node.keys and not root:
                raise corrupt(src, page, 2, "a leaf with at least one key", "none")
            if node.keys:
                if last is not None and node.keys[0] <= last:
                    raise corrupt(src, page, nodes.HEAD, f"keys above the previous leaf's last key {last!r}")
                last = node.keys[-1]
            count += len(node.keys)
            for value in node.overflows():
                for opage, _ in overflow_chain(src.path, value, read, ps, page_count):
                    claim(opage, f"an overflow page of {label}")
                    overflow_count += 1
        if count != info.count:
            raise CorruptFileError(src.path, ps, f"{label} holding {info.count} keys (meta page)", str(count))
        total_keys += count
    for page in free_pages:
        claim(page, "the free list")
    missing = [p for p in range(1, page_count + 1) if p not in owner]
    if missing:
        raise CorruptFileError(
            src.path,
            missing[0] * ps,
            "every page reachable from a tree or free",
            f"{len(missing)} lost, page {missing[0]} first",
        )
    return [
        f"{len(tree_list)} tree(s), {total_keys} keys, {node_count} nodes, {overflow_count} overflow pages, "
        f"{len(free_pages)} free pages"
    ]


def compact(kv: Any) -> int:
    """Move live pages down into free ones and shrink the file; returns the bytes freed.

    One transaction takes every free page off the free list, copies each live
    page above the live count into one of the free pages below it (fixing the
    pointers: parents' child ids, overflow references and links, tree roots),
    and frees every page above the live count last, so they make the head of the
    free list and the end of the file: ``PageStore.shrink`` then cuts them off.
    """
    pages = kv.pages
    ps = pages.page_size
    free = pages.free_pages
    total = pages.page_count
    live = total - len(free)
    if free and min(free) <= live:
        with kv.transaction() as tx:
            _relocate(tx, live, len(free))
        kv.drop_cache()
    return pages.shrink() * ps


def _relocate(tx: Any, live: int, free_count: int) -> None:
    """Inside ``tx``: move the live pages above ``live`` into free pages at or below it."""
    popped = [tx.allocate() for _ in range(free_count)]
    targets = sorted(p for p in popped if p <= live)
    ps = tx.page_size
    read, page_count = tx.page_reader()
    node_pages: list[int] = []
    chains: list[list[tuple[int, bytes]]] = []
    for info in tx.tree_infos():
        stack = [info.root]
        while stack:
            page = stack.pop()
            node_pages.append(page)
            node = tx.node(page)
            if type(node) is Branch:
                stack.extend(node.children)
            else:
                for value in node.overflows():
                    chains.append(overflow_chain(tx.path, value, read, ps, page_count))
    high = sorted(p for p in node_pages + [pg for chain in chains for pg, _ in chain] if p > live)
    if len(high) != len(targets):
        raise CorruptFileError(tx.path, 0, f"{len(targets)} live pages above page {live}", str(len(high)))
    moved = dict(zip(high, targets, strict=True))
    for page in node_pages:
        node = tx.node(page)
        if type(node) is Branch:
            touched = page in moved or any(c in moved for c in node.children)
        else:
            touched = page in moved or any(v.page in moved for v in node.overflows())
        if not touched:
            continue
        new = node.copy()
        if type(new) is Branch:
            new.children = [moved.get(c, c) for c in new.children]
        else:
            assert type(new) is Leaf
            new.vals = [
                Overflow(moved.get(v.page, v.page), v.length) if isinstance(v, Overflow) else v for v in new.vals
            ]
        tx.move_node(page, moved.get(page, page), new)
    for chain in chains:
        for i, (page, chunk) in enumerate(chain):
            nxt = chain[i + 1][0] if i + 1 < len(chain) else 0
            if page in moved or nxt in moved:
                tx.write_page(moved.get(page, page), nodes.encode_overflow(chunk, moved.get(nxt, nxt), ps))
    for info in tx.tree_infos():
        info.root = moved.get(info.root, info.root)
    for page in range(live + 1, live + free_count + 1):
        tx.free_page(page)
