"""KV: an ordered key-value store, B+trees in a page store, one JRNL transaction per commit.

``KV.open(path)`` opens (or creates) the page store at ``path`` (``engine.pages``:
store file, JRNL journal, page checksums) and keeps B+trees in its pages: page 1
is the meta page (magic, commit counter, one entry per named tree), the rest are
nodes and overflow pages (``docs/formats/kv.md``).  Every change runs in a
:class:`KVTransaction`; a single ``kv[key] = value`` is a transaction of its own.
A transaction changes decoded nodes it takes out of the writer's cache (no copy;
the commit puts them back) and, on commit, writes each changed
node as a whole page, and the meta page's changed entries, in one page store
transaction: one journal write and one fdatasync.

Committed pages are applied to the store file after each commit
(``apply="commit"``), so readers in other processes (``KV.open(path,
open_reader()``, :class:`~engine.kv.reader.KVReader`) see every commit.
"""

from __future__ import annotations

import datetime
import difflib
import logging
import os
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from engine.errors import ClosedError, CorruptFileError, LockedError
from engine.fs import FileSystem, RecoveryReport, as_path, resolve
from engine.fs.core import StoreCore
from engine.kv import node as nodes
from engine.kv import tree as trees
from engine.kv.api import DEFAULT_TREE, TreeAPI, TreeView, tree_label, tree_name
from engine.kv.coding import PLAIN, Coding
from engine.kv.maint import compact, verify_trees
from engine.kv.node import Leaf, Node, Overflow, TreeInfo, Value
from engine.kv.pager import (
    DEFAULT_CACHE_NODES,
    NodeCache,
    check_cache_nodes,
    leaf_items,
    leaf_of,
    load_node,
    lookup,
    read_meta,
    read_overflow,
    read_page_node,
    resolved,
)
from engine.kv.reader import KVReader, kv_stats
from engine.kv.transaction import META_PAGE, KVTransaction
from engine.pages import PageStore, Transaction
from engine.pages.backup import copy_store
from engine.pages.store import DEFAULT_READER_WAIT

log = logging.getLogger("engine.kv")

#: When a writer with ``apply="commit"`` (the default) checkpoints: at 16 MiB of
#: journal, not at the page store's adaptive 4 MiB (which, since such a writer
#: leaves no page unwritten, would checkpoint at every 4 MiB).  Its commits have
#: already written their pages to the store file, so a checkpoint writes nothing:
#: it syncs the store and the checksums and resets the journal, and the fewer of
#: those the better (a commit of 1,000 random puts journals ~4 MiB: one checkpoint
#: every ~4 such commits instead of every one).  The price: up to 16 MiB of
#: journal on disk and to redo after a crash (~0.1 s).
COMMIT_CHECKPOINT_BYTES = 16 << 20


class KV(TreeAPI):
    """An ordered key-value store's writer; create with :meth:`open`.

    Dict methods work on the default tree; :meth:`tree` gives named ones.  One
    writer per store (any process: a second gets LockedError); one object may be
    shared by threads (operations and transactions run one at a time).
    """

    readonly = False
    path: str
    page_size: int
    max_key: int
    max_entry: int
    #: For :class:`engine.kv.tree.Source`: the decoded-node cache's lookup.
    cached: Callable[[int], Node | None]
    _lock: threading.RLock
    _trees: dict[bytes, TreeInfo]
    _txid: int

    def __init__(
        self, core: StoreCore, pages: PageStore, txid: int, infos: list[TreeInfo], cache_nodes: int,
        coding: Coding = PLAIN,
    ) -> None:
        self._core = core
        self._pages = pages
        self._fs: FileSystem = pages.fs
        self.path = pages.path
        self.page_size = pages.page_size
        self.max_key = nodes.max_key(self.page_size)
        self.max_entry = nodes.max_entry(self.page_size)
        self._bind(self, DEFAULT_TREE, coding)
        self._lock = threading.RLock()
        self._cache = NodeCache(cache_nodes)
        self.cached = self._cached = self._cache.get
        self._images = self._cache.images
        self._txid = txid
        self._trees = {t.name: t for t in infos}
        self.commits = 0
        #: What opening the page store repaired (an ``engine.fs.RecoveryReport``).
        self.recovery: RecoveryReport = pages.recovery

    # -- opening ---------------------------------------------------------------------------
    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        *,
        create: bool = True,
        page_size: int | None = None,
        cache_nodes: int = DEFAULT_CACHE_NODES,
        reader_wait: float | datetime.timedelta = DEFAULT_READER_WAIT,
        keys: Any = "bytes",
        serializer: Any = None,
        fs: FileSystem | None = None,
        **page_options: Any,
    ) -> KV:
        """Open (or create) the store at ``path``: the writer (:meth:`open_reader`
        opens a reader).

        ``page_size`` (power of two, 512..65,536; 4096 when creating) fixes the
        longest key (a quarter page less 32 bytes) and when values move to
        overflow pages (entries over a quarter page).  ``cache_nodes`` decoded
        nodes are kept in memory (6-7 KiB each for 4 KiB leaves of short keys and
        values: the default holds a tree of ~1.4 million such keys; see
        ``docs/guide/kv.md``), and as many committed pages by the page store.
        ``reader_wait`` (seconds or a timedelta): how long an explicit
        checkpoint, ``close``, ``compact`` or the writer's open waits for readers
        (see ``docs/guide/kv.md``).  ``keys``: ``"bytes"`` (the default) or ``"str"``
        (stored as UTF-8: ordered by code point), or an ``(encode, decode)`` pair;
        ``serializer``: None (bytes values), ``"json"``, ``"pickle"`` or a ``(dumps,
        loads)`` pair, as every store takes (:mod:`engine.kv.coding`).  Other keywords
        go to ``PageStore.open``
        (``checkpoint_bytes``, ``cache_pages``...; with ``apply="commit"``, the
        default, checkpoints come at 16 MiB of journal unless they are given:
        COMMIT_CHECKPOINT_BYTES).  FormatError if ``path`` is a page store
        without the key-value meta page.
        """
        path = as_path(path, "path")
        check_cache_nodes(cache_nodes)
        coding = Coding.parse(keys, serializer)
        fs = resolve(fs)
        page_options.setdefault("apply", "commit")
        # The page store's cache of committed images (its own default is 1,024 pages):
        # as many pages as nodes are kept decoded, so that a commit finds each changed
        # node's before-image in memory.  A node decoded from a cached page keeps that
        # same bytes object, so the two caches share the pages.
        page_options.setdefault("cache_pages", cache_nodes)
        if page_options.get("apply") == "commit" and "checkpoint_max_bytes" not in page_options:
            # Pages already written by each commit: a checkpoint only syncs, so fewer is cheaper.
            page_options.setdefault("checkpoint_bytes", COMMIT_CHECKPOINT_BYTES)
        unknown = sorted(set(page_options) - _PAGE_OPTIONS)
        if unknown:  # named here, not as PageStore.open()'s
            close = difflib.get_close_matches(unknown[0], [*_KV_OPTIONS, *_PAGE_OPTIONS], 1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            raise TypeError(f"KV.open() got an unexpected keyword argument {unknown[0]!r}{hint}")
        # The store core's open sequence; the files, the writer lock, recovery, the
        # latch and the sync policy are the page store's (itself on a core), which
        # this core keeps as its one resource and closes last.
        core = StoreCore(fs, path, "key-value store")
        with core.opening():
            try:
                pages = core.keep(
                    PageStore.open(path, page_size, create=create, reader_wait=reader_wait, fs=fs, **page_options)
                )
            except LockedError as exc:
                raise LockedError(f"{path}: another writer has the key-value store open (lock file {exc.path})",
                                  exc.path) from None
            if pages.page_count == 0:
                with pages.transaction() as ptx:
                    meta = ptx.allocate()
                    root = ptx.allocate()
                    assert meta == META_PAGE
                    ps = pages.page_size
                    ptx.write(root, 0, nodes.encode_leaf(nodes.Leaf([], [], nodes.HEAD), ps))
                    ptx.write(meta, 0, nodes.encode_meta(0, [TreeInfo(DEFAULT_TREE, root, 0, 1)], ps))
            txid, infos = read_meta(pages.path, pages.read(META_PAGE), pages.page_count)
            kv = cls(core, pages, txid, infos, cache_nodes, coding)
        # Closed cleanly (checkpointed) if collected or still open at exit, with a
        # ResourceWarning; through the page store, so that this object can be collected.
        core.opened(kv, close=pages.close, name=f"key-value store {path!r}")
        return kv

    @staticmethod
    def open_reader(
        path: str | os.PathLike[str],
        *,
        cache_nodes: int = DEFAULT_CACHE_NODES,
        keys: Any = "bytes",
        serializer: Any = None,
        fs: FileSystem | None = None,
    ) -> KVReader:
        """:meth:`KVReader.open <engine.kv.reader.KVReader.open>`: a read-only
        handle on the store at ``path`` (any process, beside a live writer; every
        read sees one commit, no lock held between reads, nothing repaired)."""
        return KVReader.open(path, cache_nodes=cache_nodes, keys=keys, serializer=serializer, fs=fs)

    # -- state -----------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._core.closed:
            raise ClosedError(f"{self.path}: key-value store is closed")

    @property
    def pages(self) -> PageStore:
        """The page store underneath (for its statistics; do not write it directly)."""
        return self._pages

    @property
    def txid(self) -> int:
        """The number of commits the store has seen (the meta page's counter)."""
        return self._txid

    def trees(self) -> list[str]:
        """The names of the store's trees, as ``stats()`` shows them (the default
        tree is ``""``; see :func:`~engine.kv.api.tree_label`)."""
        with self._lock:
            return [tree_label(name) for name in self._trees]

    def tree(self, name: str | bytes, *, create: bool = True) -> TreeView:
        """The named tree ``name`` (created, in its own transaction, if missing
        unless ``create=False``: then KeyError)."""
        raw = tree_name(name)
        with self._lock:
            self._check_open()
            if raw not in self._trees:
                if not create:
                    raise KeyError(name)
                with self.transaction() as tx:
                    tx.tree(raw)
        return TreeView(self, raw, self._coding)

    def drop_tree(self, name: str | bytes) -> bool:
        with self.transaction() as tx:
            return tx.drop_tree(name)

    def transaction(self) -> KVTransaction:
        return KVTransaction(self)

    # -- what a transaction needs of its store ----------------------------------------------------
    def begin_changes(self) -> tuple[Transaction, int, dict[bytes, TreeInfo]]:
        """For :class:`KVTransaction`: take the writer's lock (held until
        :meth:`end_changes`) and start a page store transaction; returns it, the
        commit counter and the committed trees (not to be changed)."""
        self._lock.acquire()
        try:
            self._check_open()
            return self._pages.transaction().__enter__(), self._txid, self._trees
        except BaseException:
            self._lock.release()
            raise

    def end_changes(self) -> None:
        """Release the writer's lock :meth:`begin_changes` took."""
        self._lock.release()

    def install(
        self, changed: dict[int, Node], freed: set[int], images: dict[int, bytes], infos: dict[bytes, TreeInfo]
    ) -> None:
        """After a transaction's page store commit: its nodes, their images and its
        trees become the committed state (under the lock :meth:`begin_changes` took)."""
        self._cache.update(changed, freed, images)
        self._trees = infos
        self._txid += 1
        self.commits += 1

    def drop_cache(self) -> None:
        """Forget every cached node (after pages moved: ``compact``)."""
        self._cache.clear()

    # -- committed reads -------------------------------------------------------------------------
    def _committed(self, page: int) -> bytes:
        """The committed image of ``page`` without the copy and checks of
        ``PageStore.read``: node ids are range-checked when their parent is
        decoded, and a free page's bytes fail the node's CRC."""
        data = self._pages.committed_page(page)
        return data if type(data) is bytes else bytes(data)

    def node(self, page: int) -> Node:
        """For :class:`engine.kv.tree.Source` (and a transaction's reads of
        unchanged nodes): the committed node at ``page``, read, checked and kept
        if it is not cached."""
        found = self._cached(page)
        if found is None:
            found = load_node(self.path, page, self._committed, self._pages.page_count, self._cache)
        return found

    def node_to_change(self, page: int) -> Node:
        """:meth:`node` for a transaction: a leaf not at hand is decoded with its
        values sliced at once (``eager``), not lazily, and kept so.  A transaction
        reads a leaf to change it (a put, a delete) far more often than to get one
        value, and :meth:`own_node` then has the values without a second pass over
        the page (the lazy decode and ``leaf_items`` after it cost ~20k instructions
        a leaf; the eager decode about half)."""
        found = self._cached(page)
        if found is None:
            found = load_node(self.path, page, self._committed, self._pages.page_count, self._cache, True)
        return found

    def own_node(self, page: int) -> Node:
        """The committed node at ``page``, for a transaction to change in place (no copy).

        The node and its image leave the cache first (``NodeCache.take``), so nothing
        else sees it change: a read through this writer inside the transaction (the
        same thread; others wait for the lock) decodes the committed page afresh, the
        commit puts the node back (:meth:`install`), a rollback has nothing to undo.
        (A bulk put changes about one leaf; copying it cost most of the put's tree work.)
        A node not cached is read with its values (eager decode, as
        :meth:`node_to_change`); a lazy leaf's values (cached by a get) come from
        its verified image in one compiled call (:data:`engine.kv.pager.leaf_items`
        over that page, which checks it again)."""
        taken = self._cache.take(page)
        if taken is None:  # decoded with its values (eager): ready to change
            return read_page_node(self.path, page, self._committed, self._pages.page_count, True)[0]
        node, image = taken
        if type(node) is Leaf and node.lazy:
            try:
                got = leaf_items({page: image}, page, 1, None, False, self._pages.page_count)
            except nodes.NodeError as exc:
                raise CorruptFileError(self.path, exc.offset, exc.expected, exc.found) from exc
            if isinstance(got, int):  # not a leaf after all: decoding said it was
                raise CorruptFileError(self.path, page * self.page_size, "a leaf page")
            # Every value is bytes: a leaf is lazy only if its page holds no overflow
            # reference (decode_node), and leaf_items read that same page.  The node
            # itself takes them (no new Leaf: it is out of the cache, this transaction's).
            node.own(got[1])  # type: ignore[arg-type]
        return node

    def value(self, value: Value) -> bytes:
        if type(value) is bytes:
            return value
        assert isinstance(value, Overflow)
        pages = self._pages
        return read_overflow(self.path, value, pages.read, self.page_size, pages.page_count)

    def page_reader(self) -> tuple[Callable[[int], bytes], int]:
        pages = self._pages
        return pages.read, pages.page_count

    def tree_get(self, name: bytes, key: bytes) -> bytes | None:
        with self._lock:
            if self._core.closed:
                self._check_open()
            tree = self._trees.get(name)
            if tree is None:
                return None
            # one call over the cached page images (no Python frame per level) ...
            hit = lookup(self.path, self._images, tree, key, self._pages.page_count)
            if hit is None or type(hit) is bytes:
                return hit
            if type(hit) is tuple:
                return self.value(Overflow(*hit))
            # ... or a page not at hand: the decoded descent reads (and keeps) it
            found = trees.find(self, tree, key)
            return found if found is None or type(found) is bytes else self.value(found)

    def tree_count(self, name: bytes) -> int:
        with self._lock:
            info = self._trees.get(name)
            return 0 if info is None else info.count

    def tree_items(
        self, name: bytes, start: bytes | None, stop: bytes | None, reverse: bool
    ) -> Iterator[tuple[bytes, bytes]]:
        def fetch(lower: bytes | None, upper: bytes | None, reverse: bool) -> tuple[
            list[tuple[bytes, bytes]], bytes | None, bytes | None
        ]:
            with self._lock:
                self._check_open()
                info = self._trees.get(name)
                if info is None:
                    return [], None, None
                # one call over the cached page images, or the decoded descent for a page not at hand
                got = leaf_of(self.path, self._images, info, lower, upper, reverse, self._pages.page_count)
                if type(got) is int:
                    return trees.fetcher(self, info)(lower, upper, reverse)
                return resolved(got, self.value)  # type: ignore[arg-type]

        return trees.scan(fetch, start, stop, reverse)

    def tree_put(self, name: bytes, key: bytes, value: bytes) -> None:
        with self.transaction() as tx:
            tx.tree_put(name, key, value)

    def tree_delete(self, name: bytes, key: bytes) -> bool:
        with self.transaction() as tx:
            return tx.tree_delete(name, key)

    def tree_clear(self, name: bytes) -> None:
        """Every key of tree ``name`` removed in one transaction (``kv.clear()``,
        ``kv.tree(name).clear()``): one commit, not one per key."""
        with self.transaction() as tx:
            tx.tree_clear(name)

    def tree_put_many(self, name: bytes, pairs: Iterable[tuple[bytes, bytes]]) -> None:
        """Every pair stored in one transaction (``kv.update``,
        ``kv.tree(name).update``): one commit, and none of them if one fails."""
        with self.transaction() as tx:
            tx.tree_put_many(name, pairs)

    # -- snapshots, maintenance ---------------------------------------------------------------------
    @contextmanager
    def snapshot(self) -> Iterator[Any]:
        """A read-only view of the last commit applied to the file, in a reader
        of its own (so this writer's commits go on meanwhile)."""
        with self._lock:
            self._check_open()
            self._pages.flush(wait=self._pages.reader_wait)
        coding = self._coding
        reader = KVReader.open(
            self.path, fs=self._fs, cache_nodes=self._cache.capacity // 4, keys=coding.keys, serializer=coding.values
        )
        try:
            with reader.snapshot() as snap:
                yield snap
        finally:
            reader.close()

    def backup(self, dest: str | os.PathLike[str]) -> int:
        """A consistent copy of the store as of one commit at ``dest`` (see
        ``engine.pages.backup``); returns the bytes copied.  Commits go on meanwhile."""
        dest = as_path(dest, "dest")
        with self._lock:
            self._check_open()
            self._pages.flush(wait=self._pages.reader_wait)
        return copy_store(self._fs, self.path, dest, wait=self._pages.reader_wait)

    def compact(self) -> int:
        """Move every live page below the free ones and give the free pages at
        the end back to the file system; returns the bytes the file shrank by."""
        with self._lock:
            self._check_open()
            return compact(self)

    def verify(self) -> list[str]:
        """Check the page store and every tree (see ``engine.kv.maint.verify_trees``)."""
        with self._lock:
            self._check_open()
            notes = self._pages.verify()
            pages = self._pages
            notes += verify_trees(self, self._trees.values(), pages.page_count, pages.free_pages)
            return notes

    def stats(self) -> dict[str, object]:
        """Figures about the store (the keys of :func:`engine.kv.reader.kv_stats`)
        and the writer's own: ``commits`` (by this handle), ``cached_nodes``,
        ``journal_bytes`` and ``pending_transactions`` (commits in the journal not
        yet checkpointed into the store file)."""
        with self._lock:
            self._check_open()
            page_stats = self._pages.stats()
            return {
                **kv_stats(self.path, page_stats, self._txid, self._trees.values()),
                "commits": self.commits,
                "cached_nodes": len(self._cache),
                "journal_bytes": page_stats["journal_bytes"],
                "pending_transactions": page_stats["pending_transactions"],
            }

    def checkpoint(self) -> None:
        with self._lock:
            self._check_open()
            self._pages.checkpoint()

    def close(self) -> None:
        with self._lock:
            if self._core.begin_close():
                self._cache.clear()
                self._core.finish_close()  # the page store: checkpointed and closed

    def __enter__(self) -> KV:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<KV {self.path!r} writer>"


#: The keywords KV.open passes on to PageStore.open, and its own.
_PAGE_OPTIONS = frozenset({"checkpoint_bytes", "checkpoint_max_bytes", "cache_pages", "apply", "sync"})
_KV_OPTIONS = ("create", "page_size", "cache_nodes", "reader_wait", "keys", "serializer", "fs")


__all__ = ["KV", "KVTransaction"]
