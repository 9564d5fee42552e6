"""KVTransaction: the changes of one ``with kv.transaction()`` block and their commit.

A transaction owns what it changed: the nodes taken out of the writer's cache
(:meth:`ChangedStore.own_node`, no copy), the pages it freed, the trees' new
entries and, on commit, the encoded page images.  It writes them in one page store
transaction (one journal write, one fdatasync) and hands them back to the store
(:meth:`ChangedStore.install`).  The store it changes is seen through
:class:`ChangedStore`, the few methods :class:`engine.kv.store.KV` gives a
transaction, so this module does not import the store.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from types import TracebackType
from typing import Protocol

from engine.errors import ClosedError, ConfigError
from engine.kv import node as nodes
from engine.kv import pager
from engine.kv import tree as trees
from engine.kv.api import DEFAULT_TREE, EndedBackend, TreeAPI, TreeView, tree_name
from engine.kv.coding import Coding
from engine.kv.node import Leaf, Node, Overflow, TreeInfo, Value
from engine.kv.pager import diff_span, overflow_chain, read_overflow
from engine.pages import Transaction

META_PAGE = 1
"""The meta page (magic, commit counter, one entry per named tree: docs/formats/kv.md)."""


class ChangedStore(Protocol):
    """What a transaction needs of the store it changes (:class:`engine.kv.store.KV`)."""

    @property
    def path(self) -> str: ...
    @property
    def page_size(self) -> int: ...
    @property
    def max_key(self) -> int: ...
    @property
    def max_entry(self) -> int: ...
    @property
    def coding(self) -> Coding: ...

    def begin_changes(self) -> tuple[Transaction, int, dict[bytes, TreeInfo]]:
        """Take the writer's lock; the page store transaction, txid and trees as committed."""

    def end_changes(self) -> None:
        """Let the writer's lock go."""

    def cached(self, page: int) -> Node | None:
        """A committed node at hand, or None."""

    def node_to_change(self, page: int) -> Node:
        """A committed node, read with its values if not at hand."""

    def own_node(self, page: int) -> Node:
        """A committed node taken out of the cache for this transaction to change."""

    def install(self, changed: dict[int, Node], freed: set[int], images: dict[int, bytes],
                trees: dict[bytes, TreeInfo]) -> None:
        """Put a committed transaction's nodes, images and trees in place."""


class KVTransaction(TreeAPI):
    """``with kv.transaction() as tx:`` — many changes, one atomic durable commit.

    ``tx`` has the dict methods of the store (on the default tree) and
    ``tx.tree(name)``; reads see the transaction's own changes.  Leaving the
    block commits; an exception rolls everything back.
    """

    #: For :class:`engine.kv.tree.Source`: the nodes this transaction changed
    #: (a committed node comes from :meth:`node`).
    cached: Callable[[int], Node | None]

    def __init__(self, kv: ChangedStore) -> None:
        self._kv = kv
        self.path = kv.path
        self.page_size = kv.page_size
        self.max_key = kv.max_key
        self.max_entry = kv.max_entry
        self._bind(self, DEFAULT_TREE, kv.coding)
        self.state = "new"

    # -- the transaction's life ----------------------------------------------------------
    def __enter__(self) -> KVTransaction:
        if self.state != "new":
            raise ClosedError(f"{self.path}: a transaction can be entered once")
        kv = self._kv
        # the writer's lock held from here to __exit__; the committed state as of now
        self._ptx: Transaction
        self._ptx, self._txid, self._committed = kv.begin_changes()
        # (committed nodes not at hand are read as a change needs them: kv.node_to_change)
        self._committed_cached, self._committed_node = kv.cached, kv.node_to_change
        self._own = kv.own_node
        self._dirty: dict[int, Node] = {}
        self.cached = self._dirty.get
        # (entries, size) of each changed node as committed: an unchanged shape means
        # values overwritten in place, worth journalling as the bytes that changed
        self._shape: dict[int, tuple[int, int]] = {}
        self._freed: set[int] = set()
        #: The page images of the changed nodes, encoded on commit (for the cache).
        self._images: dict[int, bytes] = {}
        self._trees = {name: t.copy() for name, t in self._committed.items()}
        self._catalogue_changed = False
        self.state = "open"
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            if exc_type is not None or self.state != "open":
                self.rollback()
            else:
                self.commit()
        finally:
            try:
                self._ptx.__exit__(exc_type, exc, tb)
            finally:
                self._kv.end_changes()
                # Over: no longer its own backend (a cycle; see EndedBackend).
                ended = EndedBackend(self.max_key, f"{self.path}: transaction is {self.state}")
                self._bind(ended, DEFAULT_TREE, self._coding)

    def _check(self) -> None:
        if self.state != "open":
            raise ClosedError(f"{self.path}: transaction is {self.state}")

    def commit(self) -> None:
        """Write the changed nodes and meta entries in one page store commit."""
        self._check()
        kv = self._kv
        ptx = self._ptx
        changed = self._dirty
        ps = self.page_size
        if changed or self._freed or self._trees != self._committed:
            try:
                shape = self._shape
                images = self._images = {}
                encode_leaf, encode_branch, write = pager.leaf_image, pager.branch_image, ptx.write
                for page, node in changed.items():
                    # (pager.encode_node, written out: a bulk commit encodes ~1,000 nodes)
                    if type(node) is Leaf:
                        image = images[page] = encode_leaf(node.keys, node.vals, ps)
                    else:
                        image = images[page] = encode_branch(node.level, node.keys, node.children, ps)  # type: ignore[union-attr]
                    was = shape.get(page)
                    if was is not None and was == (len(node.keys), node.size):
                        _write_changes(ptx, page, image)
                    else:  # new, or entries added or removed: the arrays moved
                        write(page, 0, image)
                self._write_meta()
                ptx.commit()
            except BaseException:
                self.state = "failed"
                if ptx.state == "open":
                    ptx.rollback()  # failed before the page store commit: nothing may reach it
                raise
            kv.install(changed, self._freed, self._images, self._trees)
        self.state = "committed"

    def _write_meta(self) -> None:
        """The meta page: whole when the set of trees changed, else only its CRC,
        commit counter and the entries of the trees that changed (a few dozen bytes
        of journal instead of two page images)."""
        ordered = list(self._trees.values())
        if self._catalogue_changed:
            self._ptx.write(META_PAGE, 0, nodes.encode_meta(self._txid + 1, ordered, self.page_size))
            return
        image = nodes.encode_meta_used(self._txid + 1, ordered)
        # One write per run of nearby changes: the head and a changed entry close
        # after it (the usual store: the default tree right after the head) go as
        # one span.  Bytes in a small gap are rewritten unchanged, which costs less
        # journal than another op's header (see _META_GAP) and a Transaction.write call.
        start, end = nodes.META_CRC_AT, nodes.META_HEAD.size
        for at, t in zip(nodes.tree_entry_offsets(ordered), ordered, strict=True):
            if self._committed[t.name] != t:
                if at - end > _META_GAP:
                    self._ptx.write(META_PAGE, start, image[start:end])
                    start = at
                end = at + nodes.TREE_ENTRY.size
        self._ptx.write(META_PAGE, start, image[start:end])

    def rollback(self) -> None:
        if self.state == "open":
            self.state = "rolled back"
            self._ptx.rollback()
            self._dirty.clear()

    # -- trees ---------------------------------------------------------------------------
    def tree(self, name: str | bytes, *, create: bool = True) -> TreeView:
        """The tree ``name`` in this transaction (created with it unless ``create=False``)."""
        raw = tree_name(name)
        self._check()
        if raw not in self._trees:
            if not create:
                raise KeyError(name)
            root = self.new_page(nodes.Leaf([], [], nodes.HEAD))
            self._trees[raw] = TreeInfo(raw, root, 0, 1)
            self._catalogue_changed = True
        return TreeView(self, raw, self._coding)

    def drop_tree(self, name: str | bytes) -> bool:
        """Remove a named tree and free all its pages; False if there was none."""
        raw = tree_name(name)
        self._check()
        if raw == DEFAULT_TREE:
            raise ConfigError("the default tree cannot be dropped (clear it instead)")
        info = self._trees.pop(raw, None)
        if info is None:
            return False
        self._catalogue_changed = True
        stack = [(info.root, info.height - 1)]
        while stack:
            page, level = stack.pop()
            node = self.node(page)
            if type(node) is nodes.Branch:
                stack.extend((c, level - 1) for c in node.children)
            else:
                for v in node.overflows():  # type: ignore[union-attr]
                    self.free_value(v)
            self.free_page(page)
        return True

    def _info(self, name: bytes, create: bool) -> TreeInfo | None:
        info = self._trees.get(name)
        if info is None and create:
            self.tree(name)
            info = self._trees[name]
        return info

    # -- the Backend protocol ------------------------------------------------------------------
    def tree_get(self, name: bytes, key: bytes) -> bytes | None:
        self._check()
        return trees.get(self, self._trees.get(name), key)

    def tree_count(self, name: bytes) -> int:
        info = self._trees.get(name)
        return 0 if info is None else info.count

    def tree_items(
        self, name: bytes, start: bytes | None, stop: bytes | None, reverse: bool
    ) -> Iterator[tuple[bytes, bytes]]:
        self._check()
        info = self._trees.get(name)
        if info is None:
            return iter(())
        return trees.scan(trees.fetcher(self, info), start, stop, reverse)

    def tree_put(self, name: bytes, key: bytes, value: bytes) -> None:
        if self.state != "open":
            self._check()
        info = self._trees.get(name) or self._info(name, True)
        assert info is not None
        trees.insert(self, info, key, value, 4 + len(key) + len(value) <= self.max_entry)

    def tree_delete(self, name: bytes, key: bytes) -> bool:
        self._check()
        info = self._trees.get(name)
        return info is not None and trees.delete(self, info, key)

    def tree_clear(self, name: bytes) -> None:
        for key in [k for k, _ in self.tree_items(name, None, None, False)]:
            self.tree_delete(name, key)

    def tree_put_many(self, name: bytes, pairs: Iterable[tuple[bytes, bytes]]) -> None:
        for key, value in pairs:
            self.tree_put(name, key, value)

    # -- the tree.Writer protocol --------------------------------------------------------------
    def node(self, page: int) -> Node:
        found = self._dirty.get(page)
        if found is None:
            found = self._committed_cached(page)
            if found is None:
                found = self._committed_node(page)
        return found

    def mutable(self, page: int) -> Node:
        found = self._dirty.get(page)
        if found is None:
            found = self._own(page)  # the committed node itself, out of the writer's cache
            self._shape[page] = (len(found.keys), found.size)
            self._dirty[page] = found
        return found

    # -- for compaction (engine.kv.maint) ------------------------------------------------------
    def tree_infos(self) -> list[TreeInfo]:
        """This transaction's own tree entries (changing one changes what commits)."""
        return list(self._trees.values())

    def allocate(self) -> int:
        """A page off the free list (or the file's end), for the caller to fill."""
        return self._ptx.allocate()

    def write_page(self, page: int, image: bytes) -> None:
        """Write a whole page image (an overflow page moved by compaction)."""
        self._ptx.write(page, 0, image)

    def move_node(self, page: int, to: int, node: Node) -> None:
        """``node`` (a changed copy of the node at ``page``) is to be written at ``to``."""
        self._dirty.pop(page, None)
        self._dirty[to] = node

    def new_page(self, node: Node) -> int:
        page = self._ptx.allocate()
        self._freed.discard(page)
        self._dirty[page] = node
        return page

    def free_page(self, page: int) -> None:
        self._dirty.pop(page, None)
        self._ptx.free(page)
        self._freed.add(page)

    def value(self, value: Value) -> bytes:
        if type(value) is bytes:
            return value
        assert isinstance(value, Overflow)
        ptx = self._ptx
        return read_overflow(self.path, value, ptx.read, self.page_size, ptx.page_count)

    def page_reader(self) -> tuple[Callable[[int], bytes], int]:
        ptx = self._ptx
        return ptx.read, ptx.page_count

    def store_value(self, value: bytes, inline: bool) -> Value:
        if inline:
            return value
        ps = self.page_size
        per = ps - nodes.HEAD
        chunks = [value[i : i + per] for i in range(0, len(value), per)] or [b""]
        pages = [self._ptx.allocate() for _ in chunks]
        for i, (page, chunk) in enumerate(zip(pages, chunks, strict=True)):
            self._freed.discard(page)
            nxt = pages[i + 1] if i + 1 < len(pages) else 0
            self._ptx.write(page, 0, nodes.encode_overflow(chunk, nxt, ps))
        return Overflow(pages[0], len(value))

    def free_value(self, value: Value) -> None:
        if type(value) is bytes:
            return
        assert isinstance(value, Overflow)
        ptx = self._ptx
        for page, _ in overflow_chain(self.path, value, ptx.read, self.page_size, ptx.page_count):
            self.free_page(page)

    def __repr__(self) -> str:
        return f"<KVTransaction {self.path!r} {self.state}>"


_META_GAP = 8
"""Unchanged meta bytes between two changes that are rewritten rather than split
into two writes: a rewritten byte costs two journal bytes (before and after), a
second modify op its 17-byte header, so up to 8 bytes the span is no longer."""


def _write_changes(ptx: Transaction, page: int, image: bytes) -> None:
    """Write a changed node's new ``image`` over its committed one, journalling only
    what changed: the header (or just its CRC) and one span of the body.  A value
    overwritten in place costs ~2 x its size in the journal, not two page images;
    a span over half the page is written whole (the page store's no-copy path)."""
    old = ptx.image(page)
    if old == image:  # nothing changed (a value overwritten with an equal one)
        return
    old = bytes(old)  # no copy for bytes; read only until the writes below
    size = len(image)
    body = nodes.CRC_AT + 4
    start, end = diff_span(old, image, body)  # one compiled call (engine.kv.node.diff_span)
    if start == size:  # the body is unchanged, so is the CRC: only the header changed
        ptx.write(page, 0, image[:body])
        return
    if end - start > size // 2:
        ptx.write(page, 0, image)
        return
    head = 0 if old[: nodes.CRC_AT] != image[: nodes.CRC_AT] else nodes.CRC_AT
    ptx.write(page, head, image[head:body])
    ptx.write(page, start, image[start:end])


__all__ = ["ChangedStore", "KVTransaction"]
