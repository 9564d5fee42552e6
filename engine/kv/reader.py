"""KVReader: a read-only key-value store handle, for readers beside the writer.

Any number of processes may read while one writer commits.  A reader works on
a :class:`~engine.pages.PageReader`, whose shared lock on the store file keeps
the writer's page writes (one flush per commit, all or nothing) out while it
reads, so every read sees whole commits.  Each operation is one snapshot;
``with reader.snapshot() as snap:`` (and every ``items()``/``prefix()``
iteration, for as long as it runs) holds one snapshot across many reads.  The
writer never waits for a snapshot to commit: it puts its flush off and readers
keep seeing the last commit flushed before they took their snapshot.

The snapshot guarantee: every read sees one whole commit (never a torn or a
mixed state), the last one flushed to the store file when the read (or the
``snapshot()`` block) began or later; every page read from the file is checked
against its checksum as before.  What makes a snapshot cheap:

* Decoded nodes and their page images are cached by page id and kept across
  commits: a snapshot that finds the store file changed drops only the pages
  written since (:meth:`PageReader.take_changed
  <engine.pages.PageReader.take_changed>`): the pages the writer's flushes
  recorded in the store lock's change ring (:class:`~engine.fs.GatedLock`);
  when the ring no longer reaches back that far, or the store has none, the
  pages whose checksum entry changed (every flush rewrites the entries of the
  pages it writes; a page without an entry is always dropped).  By the entries,
  a page rewritten in place with the same id is dropped unless its new bytes
  have the old CRC-32C (a 1 in 2**32 chance per rewritten page: the bound of
  the checksum's own detection of damage); by the ring, always.
* The store lock's change count (:meth:`PageReader.change_count
  <engine.pages.PageReader.change_count>`) moves whenever a writer holds the
  lock to write (odd while it holds it): a snapshot under the shared lock that
  finds it where the last one left it reads neither header, checksums nor meta
  page; and a get that finds it so *without* the lock, and whose whole path is
  in the cache, is answered from memory with no system call: no writer has
  touched the file since that snapshot, so its cached pages are the file's
  state now, the commit that snapshot saw (the get is ordered as if it had
  taken the lock at the moment it loaded the count; it reads nothing from the
  file, so a writer starting meanwhile cannot mix into it).
* A get that finds the count moved takes the new state without the lock too:
  the page reader's seqlock (:meth:`PageReader.take_unlocked
  <engine.pages.PageReader.take_unlocked>`) reads the header, the checksum
  entries of the pages the change ring names and the meta page between two
  loads of the count, and applies them only when both loads are equal and even
  (no writer held the lock or took it in between: one flushed commit); a page
  on the way that is not at hand is read the same way, checked against its
  checksum.  Only a get that cannot (a writer under way, a change the ring does
  not name page by page, the page count moved, an overflow value) takes the
  snapshot under the lock, as before.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from types import TracebackType
from typing import Any, NoReturn

from engine.errors import ClosedError, ConfigError
from engine.fs import FileSystem, as_path, resolve
from engine.fs.core import StoreCore
from engine.kv import node as nodes
from engine.kv import tree as trees
from engine.kv.api import DEFAULT_TREE, TreeAPI, TreeView, tree_label, tree_name
from engine.kv.coding import PLAIN, Coding
from engine.kv.maint import verify_trees
from engine.kv.node import Node, NodeError, Overflow, TreeInfo, Value
from engine.kv.pager import (
    DEFAULT_CACHE_NODES,
    NodeCache,
    check_cache_nodes,
    decode_page,
    find,
    leaf_of,
    load_node,
    lookup,
    read_meta,
    read_overflow,
    resolved,
)
from engine.kv.tree import Fetch
from engine.pages import PageReader
from engine.pages.backup import copy_store

META_PAGE = 1
#: What KVReader._get_unlocked answers when the get needs the lock's path.
_LOCKED = object()


def kv_stats(path: str, page_stats: Mapping[str, int], txid: int, infos: Iterable[TreeInfo]) -> dict[str, object]:
    """``stats()`` of a key-value store: ``path``; ``page_size``, ``pages``
    (``live_pages`` + ``free_pages``) and ``store_bytes`` of the file; ``txid``
    (the commit counter); ``keys`` in all trees; ``trees``: each tree's name (as
    text; undecodable bytes replaced) to its ``keys`` and ``height``."""
    trees_ = list(infos)
    return {
        "path": path,
        **{k: page_stats[k] for k in ("page_size", "pages", "live_pages", "free_pages", "store_bytes")},
        "txid": txid,
        "keys": sum(t.count for t in trees_),
        "trees": {tree_label(t.name): {"keys": t.count, "height": t.height} for t in trees_},
    }


class KVReader(TreeAPI):
    """A read-only key-value store: ``KV.open_reader(path)`` (or ``KVReader.open``)."""

    readonly = True
    #: For :class:`engine.kv.tree.Source`: the decoded-node cache's lookup.
    cached: Callable[[int], Node | None]

    def __init__(self, core: StoreCore, reader: PageReader, cache_nodes: int, coding: Coding = PLAIN) -> None:
        self._core = core
        self._pr = reader
        self._fs = reader.fs
        self.path = reader.path
        self.page_size = reader.page_size
        self.max_key = nodes.max_key(self.page_size)
        self._bind(self, DEFAULT_TREE, coding)
        self._lock = threading.RLock()
        self._cache = NodeCache(cache_nodes)
        self.cached = self._cache.get
        self._txid: int | None = None
        # The store file lock's change count at the last snapshot's load (None:
        # none loaded, or the store has no count: every snapshot loads).
        self._changes: int | None = None
        self._count: Callable[[], int] | None = None  # its loader, once there is one
        self._trees: dict[bytes, TreeInfo] = {}
        self._page_count = 0
        self._depth = 0
        #: Readers never repair anything.
        self.recovery = reader.recovery

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        *,
        fs: FileSystem | None = None,
        cache_nodes: int = DEFAULT_CACHE_NODES,
        keys: Any = "bytes",
        serializer: Any = None,
    ) -> KVReader:
        """Open the store at ``path`` (a str or os.PathLike) for reading
        (FormatError for a plain page store); ``keys`` and ``serializer`` as
        :meth:`KV.open <engine.kv.store.KV.open>` takes them."""
        check_cache_nodes(cache_nodes)
        coding = Coding.parse(keys, serializer)
        path = as_path(path, "path")
        fs = resolve(fs)
        # The store core's open sequence for a reader: the page store's reader (its
        # own core) is the one resource kept, released by close.
        core = StoreCore(fs, path, "key-value store", writer=False)
        with core.opening():
            reader = core.keep(PageReader.open(path, fs=fs))
            self = cls(core, reader, cache_nodes, coding)
            with self._snap():
                pass  # checks the meta page
        # Closed if collected or still open at exit, with a ResourceWarning.
        core.opened(self, close=reader.close, name=f"key-value store reader {path!r}")
        return self

    # -- snapshots ------------------------------------------------------------------------
    @contextmanager
    def _snap(self) -> Iterator[None]:
        with self._lock:
            if self._depth:
                self._depth += 1
                try:
                    yield
                finally:
                    self._depth -= 1
                return
            with self._pr.snapshot():
                count = self._count or self._pr.change_count()
                self._count = count
                changes = None if count is None else count()
                if changes is None or changes != self._changes:
                    self._changes = None  # (until loaded: an error leaves nothing trusted)
                    self._load()
                    self._changes = changes
                self._depth = 1
                try:
                    yield
                finally:
                    self._depth = 0

    def _load(self) -> None:
        """Take the store file's state (under its shared lock): page count, meta
        page, and the cached pages whose checksum entry changed dropped."""
        page_count = self._pr.page_count
        # Nothing in the store file yet (a new store whose writer, with
        # apply="checkpoint", has not checkpointed): an empty store.
        self._take(page_count, None if page_count == 0 else self._pr.read(META_PAGE))

    def _take(self, page_count: int, meta: bytes | None) -> None:
        """Make the state of ``meta`` (the meta page, None: an empty store) and
        ``page_count`` this reader's, the cached pages written since dropped."""
        infos: list[TreeInfo]
        txid, infos = (0, []) if meta is None else read_meta(self.path, meta, page_count)
        changed = self._pr.take_changed()  # (after the reads: a read may reload)
        if changed is None:
            self._cache.clear()
        elif changed:
            self._cache.drop(changed)
        self._txid, self._page_count = txid, page_count
        self._trees = {t.name: t for t in infos}

    @contextmanager
    def snapshot(self) -> Iterator[KVReader]:
        """Many reads of one commit (the writer's flushes are put off meanwhile,
        never its commits)."""
        self._check_open()
        with self._snap():
            yield self

    @property
    def txid(self) -> int:
        """The commit counter of the state this reader sees."""
        with self._snap():
            assert self._txid is not None
            return self._txid

    def tree_info(self, name: bytes) -> TreeInfo | None:
        """The stored entry of tree ``name`` (root, height, count) in the commit this
        reader sees, or None (for planners: ``engine.spark.kvsource``)."""
        with self._snap():
            return self._trees.get(name)

    def trees(self) -> list[str]:
        """The names of the store's trees, as :meth:`KV.trees <engine.kv.store.KV.trees>`."""
        with self._snap():
            return [tree_label(name) for name in self._trees]

    def tree(self, name: str | bytes) -> TreeView:
        """The named tree ``name`` (KeyError if it does not exist)."""
        raw = tree_name(name)
        with self._snap():
            if raw not in self._trees:
                raise KeyError(name)
        return TreeView(self, raw, self._coding)

    # -- tree.Source ------------------------------------------------------------------------
    def node(self, page: int) -> Node:
        found = self._cache.get(page)
        if found is None:
            found = load_node(self.path, page, self._pr.read, self._page_count, self._cache)
        return found

    def value(self, value: Value) -> bytes:
        if type(value) is bytes:
            return value
        assert isinstance(value, Overflow)
        return read_overflow(self.path, value, self._pr.read, self.page_size, self._page_count)

    def page_reader(self) -> tuple[Callable[[int], bytes], int]:
        return self._pr.read, self._page_count

    # -- Backend ----------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._core.closed or self._pr.closed:
            raise ClosedError(f"{self.path}: key-value store is closed")

    def tree_get(self, name: bytes, key: bytes) -> bytes | None:
        lock = self._lock
        # acquire/release rather than ``with``: no bound __enter__/__exit__ made per get
        lock.acquire()
        try:
            count = self._count  # (None once closed)
            if count is not None and not self._depth:
                if count() == self._changes:
                    # The common case inline (one call less per get): nothing written
                    # since the last snapshot, the whole path cached.
                    tree = self._trees.get(name)
                    if tree is None:
                        return None
                    try:
                        hit = find(self._cache.images, tree.root, tree.height, key, self._page_count)
                    except NodeError:
                        hit = 0  # (the snapshot's descent below raises it, naming the file)
                    if hit is None or type(hit) is bytes:
                        return hit
                got = self._get_unlocked(name, key)
                if got is not _LOCKED:
                    return got  # type: ignore[return-value]
            self._check_open()
            return self._get(name, key)
        finally:
            lock.release()

    def _get_unlocked(self, name: bytes, key: bytes) -> bytes | object | None:
        """:meth:`tree_get` without the store file's lock, or :data:`_LOCKED`
        when it needs the lock's path (see the module docstring): from the cache
        while the change count is where the last snapshot left it; after a commit,
        the new state and its meta page taken by the page reader's seqlock
        (:meth:`PageReader.take_unlocked <engine.pages.PageReader.take_unlocked>`),
        and the pages on the way that are not at hand read in that same state."""
        count = self._count
        assert count is not None
        seen = self._changes
        if count() != seen:
            got = self._pr.take_unlocked(META_PAGE)
            if got is None:
                return _LOCKED
            seen, page_count, meta = got
            self._changes = None  # (until taken: an error leaves nothing trusted)
            self._take(page_count, meta)
            self._changes = seen
        assert seen is not None
        tree = self._trees.get(name)
        if tree is None:
            return None
        for _ in range(tree.height + 1):  # (a page read at each level at most)
            try:
                hit = find(self._cache.images, tree.root, tree.height, key, self._page_count)
            except NodeError:
                return _LOCKED  # (the snapshot's descent raises it, naming the file)
            if type(hit) is not int:
                return hit if hit is None or type(hit) is bytes else _LOCKED  # (an overflow value: locked)
            data = self._pr.read_unlocked(seen, hit)
            if data is None:
                return _LOCKED
            self._cache.put(hit, decode_page(self.path, hit, data, self._page_count), data)
        return _LOCKED

    def _get(self, name: bytes, key: bytes) -> bytes | None:
        """:meth:`tree_get` in a snapshot."""
        with self._snap():
            tree = self._trees.get(name)
            if tree is None:
                return None
            # one call over the cached page images, or the decoded descent for a page not at hand
            hit = lookup(self.path, self._cache.images, tree, key, self._page_count)
            if hit is None or type(hit) is bytes:
                return hit
            if type(hit) is tuple:
                return self.value(Overflow(*hit))
            return trees.get(self, tree, key)

    def tree_count(self, name: bytes) -> int:
        with self._snap():
            info = self._trees.get(name)
            return 0 if info is None else info.count

    def tree_items(
        self, name: bytes, start: bytes | None, stop: bytes | None, reverse: bool
    ) -> Iterator[tuple[bytes, bytes]]:
        self._check_open()
        with self._snap():
            info = self._trees.get(name)
            if info is None:
                return
            yield from trees.scan(self._fetcher(info), start, stop, reverse)

    def _fetcher(self, info: TreeInfo) -> Fetch:
        """Leaves of ``info`` in one call each over the cached page images, or by
        the decoded descent for a page not at hand (inside a snapshot)."""
        decoded = trees.fetcher(self, info)
        images = self._cache.images

        def fetch(lower: bytes | None, upper: bytes | None, reverse: bool) -> tuple[
            list[tuple[bytes, bytes]], bytes | None, bytes | None
        ]:
            got = leaf_of(self.path, images, info, lower, upper, reverse, self._page_count)
            if type(got) is int:
                return decoded(lower, upper, reverse)
            return resolved(got, self.value)  # type: ignore[arg-type]

        return fetch

    def tree_put(self, name: bytes, key: bytes, value: bytes) -> NoReturn:
        raise ConfigError(f"{self.path}: opened read-only")

    def tree_delete(self, name: bytes, key: bytes) -> NoReturn:
        raise ConfigError(f"{self.path}: opened read-only")

    def tree_clear(self, name: bytes) -> NoReturn:
        raise ConfigError(f"{self.path}: opened read-only")

    def tree_put_many(self, name: bytes, pairs: Iterable[tuple[bytes, bytes]]) -> NoReturn:
        raise ConfigError(f"{self.path}: opened read-only")

    def transaction(self) -> NoReturn:
        raise ConfigError(f"{self.path}: opened read-only")

    # -- maintenance ------------------------------------------------------------------------
    def verify(self) -> list[str]:
        """The page store's checks and every tree's (one snapshot)."""
        self._check_open()
        with self._snap():
            notes = self._pr.verify()
            notes += verify_trees(self, list(self._trees.values()), self._page_count, self._pr.free_pages)
            return notes

    def backup(self, dest: str | os.PathLike[str]) -> int:
        """A consistent copy of the store at ``dest`` (see ``engine.pages.backup``)."""
        dest = as_path(dest, "dest")
        self._check_open()
        return copy_store(self._fs, self.path, dest)

    def stats(self) -> dict[str, object]:
        """Figures about the commit this reader sees (see :func:`kv_stats`)."""
        self._check_open()
        with self._snap():
            assert self._txid is not None
            return kv_stats(self.path, self._pr.stats(), self._txid, self._trees.values())

    def close(self) -> None:
        """Release the store file (closing twice is fine)."""
        with self._lock:
            self._count = None  # no get from memory once closed
        if self._core.begin_close():
            self._cache.clear()
            self._core.finish_close()

    def __enter__(self) -> KVReader:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<KVReader {self.path!r}>"
