"""PageStore: a paged file with a free list, protected by the JRNL write-ahead log.

Files: the store (``path``, format in ``docs/formats/pagestore.md``), its journal
(``path + "-journal"``, the JRNL format of seed 001) and its page checksums
(``path + "-sums"``, :mod:`engine.pages.sums`).

Commit protocol (one fsync per commit):

1. the transaction (after- *and* before-images) is appended to the journal and
   linked, and the journal is fdatasynced: the commit is durable;
2. its pages become the committed state in memory and are written to the store
   file, unsynced, at the next checkpoint (or right away with ``apply="commit"``);
3. at a checkpoint (journal past the threshold, see DEFAULT_CHECKPOINT_BYTES; :meth:`checkpoint`,
   :meth:`close`) the pending pages are written, the store is synced, every
   transaction is flagged JRNL_COMPLETE and the journal is reset.

A crash before 3 leaves complete transactions with the flag clear; the next open
redoes them from their after-images (idempotent) and checkpoints.

Locks (flock-style, whole files; see ``docs/guide/pages.md``):

* ``path + "-lock"`` (empty, ours): only writers lock it, exclusively and without
  waiting, first thing in :meth:`PageStore.open`, for their lifetime.  This is what
  makes a second writer get LockedError at once.
* the journal: the writer then locks it exclusively for its lifetime, waiting up to
  ``reader_wait`` seconds, because readers take a brief *shared* lock on it to ask
  "is a writer alive?" (while opening, and to scan it).  A reader's probe must never
  make a writer fail; only a second writer may.
* the store file: the writer locks it exclusively while it writes pages; readers
  (``readonly=True``, other processes) take a shared lock on it for each read, so
  they never see a half-applied transaction.
"""

from __future__ import annotations

import logging
import struct
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import TracebackType

from engine.errors import (
    ClosedError,
    ConfigError,
    CorruptFileError,
    EngineError,
    FormatError,
    LockedError,
    PoisonedError,
)
from engine.fs import FileHandle, FileSystem, OpenMode, crashpoint, create_file, parent_dir, resolve
from engine.pages import codec, store_codec
from engine.pages import sums as sums_module
from engine.pages.cache import PageCache
from engine.pages.journal import Journal, JournalScan, journal_path, scan, scan_if_idle
from engine.pages.recovery import StoreState, check_ops, redo, undo, walk_free_list
from engine.pages.store_codec import StoreHeader
from engine.pages.sums import PageSums, sums_path

log = logging.getLogger("engine.pages")

DEFAULT_PAGE_SIZE = 4096
DEFAULT_CACHE_PAGES = 1024
#: Checkpoint policy (``checkpoint_bytes=None``, the default): a checkpoint writes
#: every page changed since the last one and costs three syncs, so it is taken
#: once the journal holds DEFAULT_CHECKPOINT_BYTES (like SQLite's 4 MB WAL
#: auto-checkpoint) *if* the pages it would write are at most 1/CHECKPOINT_RATIO
#: of the journal; otherwise the journal grows (absorbing rewrites of the same
#: pages: 100-page transactions cycling over 1,000 pages write the store every
#: 32 MB instead of every 4 MB, 1/4 of the page data instead of all of it) up to
#: DEFAULT_CHECKPOINT_MAX_BYTES.  The price of the cap: up to 64 MB of journal to
#: replay after a crash (~0.3 s here) and up to half of it held in memory as page
#: images not yet written to the store.  Small transactions keep the journal at
#: 4 MB, so its space is reused and commits never grow the file.
DEFAULT_CHECKPOINT_BYTES = 4 << 20
DEFAULT_CHECKPOINT_MAX_BYTES = 64 << 20
CHECKPOINT_RATIO = 8
#: How long a writer's open waits for readers' shared locks on the journal.  Readers
#: hold it only to read the journal header or scan the journal, so seconds are plenty;
#: the bound turns a reader that never lets go into a LockedError instead of a hang.
DEFAULT_READER_WAIT = 10.0
LOCK_SUFFIX = "-lock"


class PageError(EngineError, ValueError):
    """A page id that was never allocated or is free, or a range outside the page."""

    def __init__(self, path: str, page: object, offset: int, reason: str) -> None:
        self.path = path
        self.page = page
        self.offset = offset
        self.reason = reason
        super().__init__(f"{path}: page {page!r} (byte offset {offset}): {reason}")

    def __reduce__(self) -> tuple[type, tuple[str, object, int, str]]:
        return (type(self), (self.path, self.page, self.offset, self.reason))


class RecoveryNeededError(EngineError):
    """A read-only open found journal transactions no writer has applied yet."""


@dataclass
class RecoveryReport:
    """What the last open repaired (tests and ``engine pages stats`` read it)."""

    journal_notes: list[str] = field(default_factory=list)
    cut_bytes: int = 0
    redone: int = 0
    undone: int = 0
    skipped_applied: int = 0

    @property
    def truncations(self) -> int:
        return 1 if self.journal_notes else 0


def _interrupted_creation(fs: FileSystem, path: str, jpath: str) -> bool:
    """An empty store file with no journal contents: a crash hit its creation.

    ``create_file`` syncs the header before the directory entry, but a crash can
    still leave the name of an empty file.  It never held data (the journal is
    created after the store is complete), so it is created again.
    """
    if fs.file_size(path) != 0:
        return False
    if fs.exists(jpath) and fs.file_size(jpath) > codec.FILE_HEADER_SIZE:
        return False  # a journal with transactions: not a fresh store; let the header check fail
    log.warning("%s: empty store file left by an interrupted creation: creating it again", path)
    return True


def lock_path(store_path: str) -> str:
    """The writers' lock file of the store at ``store_path``."""
    return store_path + LOCK_SUFFIX


def _take_writer_lock(fs: FileSystem, path: str) -> FileHandle:
    """Lock ``<path>-lock`` exclusively, not waiting: LockedError if a writer has it.

    The file holds no data, so creating it needs no fsync: if a crash loses its
    directory entry, the next writer creates it again.  Only writers ever lock it,
    so a held lock always means a live writer (the kernel drops a dead one's).
    """
    handle = fs.open(lock_path(path), OpenMode.CREATE)
    try:
        handle.lock(exclusive=True, blocking=False)
    except LockedError as exc:
        handle.close()
        raise LockedError(f"{path}: another writer has the page store open") from exc
    except BaseException:
        handle.close()
        raise
    return handle


def _wait_for_readers(handle: FileHandle, jpath: str, seconds: float) -> None:
    """Lock the journal exclusively, waiting up to ``seconds`` for readers' shared locks.

    The caller holds the writer lock, so no other writer competes: whoever holds
    the journal now is a reader probing or scanning it, which takes milliseconds.
    The lock API has no timed wait, so poll with a growing sleep (1 ms .. 50 ms).
    """
    deadline = time.monotonic() + seconds
    delay = 0.001
    while True:
        try:
            handle.lock(exclusive=True, blocking=False)
            return
        except LockedError:
            left = deadline - time.monotonic()
            if left <= 0:
                raise LockedError(
                    f"{jpath}: readers held a shared lock on the journal for over {seconds:g} s"
                ) from None
            time.sleep(min(delay, left))
            delay = min(delay * 2, 0.05)


def _create(fs: FileSystem, path: str, initial: bytes) -> None:
    """Create ``path`` durably holding ``initial`` (replacing an empty leftover)."""
    if fs.exists(path):
        with fs.open(path, OpenMode.WRITE) as handle:
            handle.write_at(0, initial)
            handle.fsync()
        fs.fsync_dir(parent_dir(path))
        return
    create_file(fs, path, initial).close()


def _read_header(path: str, handle: FileHandle) -> StoreHeader:
    raw = handle.read_at(0, store_codec.HEADER_SIZE)
    try:
        return store_codec.decode_header(raw)
    except store_codec.ForeignMagic as exc:
        raise FormatError(path, 0, *str(exc).split(", ", 1)) from exc
    except ValueError as exc:
        expected, _, found = str(exc).partition(", ")
        raise CorruptFileError(path, 0, expected, found or None) from exc


class PageStore:
    """A transactional page store; create with :meth:`open`."""

    def __init__(
        self,
        fs: FileSystem,
        path: str,
        handle: FileHandle,
        header: StoreHeader,
        *,
        readonly: bool,
        journal: Journal | None,
        cache_pages: int,
        checkpoint_bytes: int,
        checkpoint_max_bytes: int = 0,
    ) -> None:
        self._fs = fs
        self.path = path
        self.journal_path = journal_path(path)
        self._handle = handle
        self._header = header
        self.readonly = readonly
        self._journal = journal
        self._cache = PageCache(cache_pages)
        self.checkpoint_bytes = checkpoint_bytes
        self.checkpoint_max_bytes = max(checkpoint_bytes, checkpoint_max_bytes)
        self._lock = threading.RLock()
        self._closed = False
        self._failure: BaseException | None = None
        self._free: set[int] = set()
        self._free_order: list[int] = []
        self._reader_key: tuple[bytes, int] | None = None
        self.apply_each_commit = False
        # Committed page images not yet written to the store file, the byte ranges
        # of them the journal covers, and the header as the store file has it.
        self._dirty: dict[int, bytes | bytearray] = {}
        # (a set: the same page rewritten by many transactions is one range to write)
        self._extents: set[tuple[int, int]] = set()
        # Pages whose whole image is to be written (no ranges kept for them).
        self._whole: set[int] = set()
        self._disk_header = header
        self._sums: PageSums | None = None  # the writer's checksums
        self._reader_sums: list[int] | None = None  # a reader's copy (None: no usable sums file)
        self._reader_sum: store_codec.PageSum = store_codec.page_sum  # and its kind of entry
        self._shared_depth = 0
        self._writer_lock: FileHandle | None = None  # <path>-lock, held by a writer until close
        self.recovery = RecoveryReport()
        self.commits = 0
        self.checkpoints = 0

    # -- opening ---------------------------------------------------------------------
    @classmethod
    def open(
        cls,
        path: str,
        page_size: int | None = None,
        *,
        create: bool = True,
        readonly: bool = False,
        cache_pages: int = DEFAULT_CACHE_PAGES,
        checkpoint_bytes: int | None = None,
        checkpoint_max_bytes: int | None = None,
        apply: str = "checkpoint",
        reader_wait: float = DEFAULT_READER_WAIT,
        exact_header: bool = False,
        fs: FileSystem | None = None,
    ) -> PageStore:
        """Open (or create) the store at ``path`` and recover it.

        ``page_size`` (a power of two, 512..65536) is used when creating; 4096 if
        not given.  For an existing store it must match or be ``None``.
        ``readonly`` opens a reader that never writes (and never recovers).
        ``apply`` says when committed pages are written to the store file:
        ``"checkpoint"`` (batched, the fastest: a commit is one journal write synced
        by itself; readers in other processes see the state of the last
        checkpoint) or ``"commit"`` (right after each commit, so other processes'
        readers see every commit at once).
        ``checkpoint_bytes``/``checkpoint_max_bytes``: by default (both ``None``)
        a checkpoint comes once the journal holds 4 MiB if the pages to write are
        at most 1/8 of it, else at the latest at 64 MiB (see
        DEFAULT_CHECKPOINT_BYTES); ``checkpoint_bytes=N`` alone checkpoints at N
        bytes exactly, and with ``checkpoint_max_bytes=M`` adaptively between them.

        ``exact_header``: a commit normally writes its journal transaction as one
        contiguous range, pre-linked to where the next one goes, and the journal
        header's ``last`` catches up at checkpoints (our recovery follows the chain;
        see ``docs/formats/jrnl.md``).  ``True`` rewrites the previous ``next`` and
        the header on every commit, as the seed shows them, for other JRNL readers
        that look at a live or crashed journal (slower: three writes per sync).

        A second writer (any process) gets LockedError at once; a writer waits up
        to ``reader_wait`` seconds for readers that briefly hold the journal's
        shared lock (then LockedError).
        """
        if apply not in ("checkpoint", "commit"):
            raise ConfigError(f"apply must be 'checkpoint' or 'commit', not {apply!r}")
        fs = resolve(fs)
        if page_size is not None and not store_codec.valid_page_size(page_size):
            raise ConfigError(f"page_size must be a power of two from 512 to 65536, not {page_size}")
        if checkpoint_bytes is None:
            checkpoint_bytes = DEFAULT_CHECKPOINT_BYTES
            if checkpoint_max_bytes is None:
                checkpoint_max_bytes = DEFAULT_CHECKPOINT_MAX_BYTES
        if checkpoint_max_bytes is None:
            checkpoint_max_bytes = checkpoint_bytes  # a fixed threshold, as given
        if cache_pages < 0 or checkpoint_bytes < 0 or checkpoint_max_bytes < 0 or reader_wait < 0:
            raise ConfigError("cache_pages, checkpoint_bytes, checkpoint_max_bytes and reader_wait must be >= 0")
        if readonly:
            return cls._open_reader(fs, path, page_size, cache_pages)
        if not create and not fs.exists(path):
            raise FileNotFoundError(2, "No such page store", path)  # before leaving a lock file
        # The writer lock first, before anything is created or written: two writers
        # opening at once must not both create or recover the store.
        wlock = _take_writer_lock(fs, path)
        try:
            store = cls._open_writer(
                fs,
                path,
                page_size,
                create,
                cache_pages,
                checkpoint_bytes,
                max(checkpoint_bytes, checkpoint_max_bytes),
                reader_wait,
                exact_header,
            )
        except BaseException:
            wlock.close()
            raise
        store._writer_lock = wlock
        store.apply_each_commit = apply == "commit"
        return store

    @classmethod
    def _open_writer(
        cls,
        fs: FileSystem,
        path: str,
        page_size: int | None,
        create: bool,
        cache_pages: int,
        checkpoint_bytes: int,
        checkpoint_max_bytes: int,
        reader_wait: float,
        exact_header: bool = False,
    ) -> PageStore:
        """The rest of a writer's open; the caller holds the writer lock."""
        jpath = journal_path(path)
        missing = not fs.exists(path)
        if missing or _interrupted_creation(fs, path, jpath):
            if not create:
                if missing:
                    raise FileNotFoundError(2, "No such page store", path)
                raise CorruptFileError(path, 0, "a 40-byte header", "an empty file (interrupted creation)")
            ps = page_size or DEFAULT_PAGE_SIZE
            header = StoreHeader(ps, 0, 0)
            # Header page durable (data, then directory entry) before anything refers to it.
            _create(fs, path, store_codec.encode_header(header) + bytes(ps - store_codec.HEADER_SIZE))
            if not fs.exists(sums_path(path)):
                create_file(
                    fs, sums_path(path), store_codec.encode_sums_header(ps, store_codec.NEW_SUMS_CRC32C)
                ).close()
        if not fs.exists(jpath):
            create_file(fs, jpath, codec.encode_file_header(0, 0)).close()
        jhandle = fs.open(jpath, OpenMode.WRITE)
        try:
            # Readers share this lock for a moment to see whether a writer is alive
            # (and to scan the journal): wait for them.  Held until close, so they
            # know a live writer applies what the journal holds.
            _wait_for_readers(jhandle, jpath, reader_wait)
            handle = fs.open(path, OpenMode.WRITE)
        except BaseException:
            jhandle.close()
            raise
        store: PageStore | None = None
        try:
            header = _read_header(path, handle)
            if page_size is not None and page_size != header.page_size:
                raise ConfigError(f"{path}: page size is {header.page_size}, not {page_size}")
            if jhandle.size() == 0 and header.page_count == 0:
                # A crash while creating the journal of a new store left its name
                # without the header; it never held a transaction.
                log.warning("%s: empty journal of a new store: writing its header", jpath)
                jhandle.write_at(0, codec.encode_file_header(0, 0))
                jhandle.fsync()
            state = scan(jpath, jhandle.read_all())
            # Reuse the journal's space between checkpoints, but not a one-off giant's.
            journal = Journal(
                jpath,
                jhandle,
                state,
                keep_bytes=max(2 * checkpoint_max_bytes, 1 << 20),
                exact_header=exact_header,
            )
            store = cls(
                fs,
                path,
                handle,
                header,
                readonly=False,
                journal=journal,
                cache_pages=cache_pages,
                checkpoint_bytes=checkpoint_bytes,
                checkpoint_max_bytes=checkpoint_max_bytes,
            )
            store._sums = PageSums.open(fs, path, header.page_size, header.page_count, store._raw_page)
            store._recover(state)
            store._sums.fill_missing(store._header.page_count, store._raw_page)
            store._load_free_list()
        except BaseException:
            handle.close()
            jhandle.close()
            if store is not None and store._sums is not None:
                store._sums.close()
            raise
        return store

    @classmethod
    def _open_reader(cls, fs: FileSystem, path: str, page_size: int | None, cache_pages: int) -> PageStore:
        handle = fs.open(path, OpenMode.READ)
        try:
            handle.lock(exclusive=False, blocking=True)
            try:
                header = _read_header(path, handle)
            finally:
                handle.unlock()
            if page_size is not None and page_size != header.page_size:
                raise ConfigError(f"{path}: page size is {header.page_size}, not {page_size}")
            if header.flags & store_codec.FLUSHING:
                raise RecoveryNeededError(f"{path}: a writer died while writing pages; open it for writing to recover")
            jpath = journal_path(path)
            if fs.exists(jpath):
                with fs.open(jpath, OpenMode.READ) as jh:
                    raw = jh.read_at(0, codec.FILE_HEADER_SIZE)
                    try:
                        first = codec.decode_file_header(raw).first
                    except ValueError as exc:
                        raise FormatError(jpath, 0, "a JRNL header", raw[:4].hex(" ")) from exc
                    if first != 0:
                        try:
                            # No writer holds the journal: nobody applied these yet.
                            jh.lock(exclusive=False, blocking=False)
                        except LockedError:
                            pass  # a live writer applies every commit before it returns
                        else:
                            raise RecoveryNeededError(
                                f"{jpath}: holds transactions not yet applied; "
                                "open the store for writing once to recover"
                            )
        except BaseException:
            handle.close()
            raise
        return cls(fs, path, handle, header, readonly=True, journal=None, cache_pages=0, checkpoint_bytes=0)

    def _recover(self, state: JournalScan) -> None:
        """Cut an unfinished tail, redo/undo what the store lacks, checkpoint."""
        journal = self._journal
        assert journal is not None
        rep = self.recovery
        if state.needs_repair:
            rep.journal_notes = list(state.notes)
            rep.cut_bytes = state.cut_bytes
            log.warning("%s: recovery: %s", self.journal_path, "; ".join(state.notes) or "header repaired")
            journal.repair(state)
        h = self._header
        if not state.txs:
            if h.flags & store_codec.FLUSHING:
                # A flush mark with nothing to replay: the pages it covered were all
                # journaled and applied before; only the mark is left to clear.
                log.warning("%s: clearing a flush mark left by a crash", self.path)
                self._header = self._disk_header = StoreHeader(h.page_size, h.page_count, h.free_head)
                self._handle.write_at(0, store_codec.encode_header(self._header))
                self._sync_store("recover")
            return
        replay = StoreState(h.page_size, h.page_count, h.free_head)
        self._handle.lock(exclusive=True, blocking=True)
        try:
            for tx in state.txs:
                if tx.applied:
                    rep.skipped_applied += 1
                    # Already in the synced store; keep the count of appended pages right for checks.
                    check_ops(self.journal_path, tx, replay)
                    continue
                if tx.rolled_back:
                    undo(self._handle, self.journal_path, tx, replay)
                    rep.undone += 1
                else:
                    redo(self._handle, self.journal_path, tx, replay)
                    rep.redone += 1
            if rep.redone or rep.undone or h.flags & store_codec.FLUSHING:
                self._header = StoreHeader(h.page_size, replay.page_count, replay.free_head)
                self._disk_header = self._header
                self._handle.write_at(0, store_codec.encode_header(self._header))
                self._sync_store("recover")
                # Checksums of every page the replayed transactions touched, from the
                # pages as they now are (a crash may have torn their entries too).
                assert self._sums is not None
                touched = {
                    off // h.page_size
                    for tx in state.txs
                    if not tx.applied
                    for op in tx.ops
                    for off in codec.op_page_offsets(op)
                }
                self._sums.truncate_to(replay.page_count)
                self._sums.recompute(sorted(p for p in touched if p <= replay.page_count), self._raw_page)
                self._sums.sync("recover")
        finally:
            self._handle.unlock()
        if rep.redone or rep.undone:
            log.warning("%s: recovery redid %d and undid %d transaction(s)", self.path, rep.redone, rep.undone)
        journal.reset()

    def _load_free_list(self) -> None:
        size = self._handle.size()
        need = (self._header.page_count + 1) * self._header.page_size
        if size < need:
            raise CorruptFileError(self.path, size, f"{need} bytes for {self._header.page_count} pages", f"{size}")
        self._free_order = walk_free_list(self.path, self._header, self._handle.read_at)
        self._free = set(self._free_order)

    # -- properties ------------------------------------------------------------------------
    @property
    def page_size(self) -> int:
        return self._header.page_size

    @property
    def page_count(self) -> int:
        """Pages in the store (ids 1..page_count), live and free."""
        if self.readonly:
            with self._shared():
                return self._reader_header().page_count
        return self._header.page_count

    @property
    def free_pages(self) -> list[int]:
        """The free page ids, in free-list order (the next allocation first)."""
        if self.readonly:
            with self._shared():
                self._reader_refresh()
        return list(self._free_order)

    @property
    def live_pages(self) -> list[int]:
        """Allocated page ids, ascending."""
        free = set(self.free_pages)
        return [p for p in range(1, self.page_count + 1) if p not in free]

    @property
    def journal_size(self) -> int:
        return self._journal.size if self._journal is not None else 0

    @property
    def cache(self) -> PageCache:
        return self._cache

    # -- reading -------------------------------------------------------------------------
    def read(self, page: int, offset: int = 0, size: int | None = None) -> bytes:
        """Committed bytes of a live page (all of it by default)."""
        with self._lock:
            self._check_open()
            if self.readonly:
                with self._shared():
                    self._reader_refresh()
                    try:
                        data = self._read_page_checked(page)
                    except PageError:
                        # The free list is cached by header bytes and mtime, and mtime
                        # can miss two commits in one clock tick: look again first.
                        self._reader_key = None
                        self._reader_refresh()
                        data = self._read_page_checked(page)
            else:
                data = self._read_page_checked(page)
            return _slice(self.path, page, data, offset, size, self.page_size)

    def _read_page_checked(self, page: int) -> bytes | bytearray:
        self._check_live(page, self._header.page_count, page in self._free if isinstance(page, int) else False)
        return self._committed(page)

    def _committed(self, page: int) -> bytes | bytearray:
        """The committed image of ``page`` (not yet written, cache, else the store file)."""
        data = self._dirty.get(page)
        if data is not None:
            return data
        data = self._cache.get(page)
        if data is None:
            data = self._read_disk_page(page)
            self._cache.put(page, data)
        return data

    def _read_disk_page(self, page: int) -> bytes:
        """Page ``page`` from the store file, checked against its checksum if known."""
        data = self._raw_page(page)
        self._check_sum(page, data)
        return data

    def _raw_page(self, page: int) -> bytes:
        """Page ``page`` from the store file, unchecked (to compute its checksum)."""
        ps = self.page_size
        data = self._handle.read_at(page * ps, ps)
        if len(data) < ps:
            raise CorruptFileError(self.path, page * ps + len(data), f"page {page} of {ps} bytes", "end of file")
        return data

    def _check_sum(self, page: int, data: bytes) -> None:
        if self._sums is not None:
            if page < len(self._sums.values):  # entries being rebuilt are filled in first
                self._sums.check(page, data, self.page_size)
        elif (
            self._reader_sums is not None
            and page < len(self._reader_sums)
            and self._reader_sum(data) != self._reader_sums[page]
        ):
            raise CorruptFileError(
                self.path, page * self.page_size, f"page {page} matching its checksum", "a different CRC (damaged)"
            )

    def _check_live(self, page: object, count: int, is_free: bool) -> None:
        if not isinstance(page, int) or isinstance(page, bool) or not 1 <= page <= count:
            off = page * self.page_size if isinstance(page, int) else 0
            raise PageError(self.path, page, off, f"never allocated (pages are 1..{count})")
        if is_free:
            raise PageError(self.path, page, page * self.page_size, "is free")

    @contextmanager
    def _shared(self) -> Iterator[None]:
        """Hold the shared store lock (re-entrant: nested uses keep the outer lock)."""
        if self._shared_depth:
            self._shared_depth += 1
            try:
                yield
            finally:
                self._shared_depth -= 1
            return
        self._handle.lock(exclusive=False, blocking=True)
        self._shared_depth = 1
        try:
            yield
        finally:
            self._shared_depth = 0
            self._handle.unlock()

    @contextmanager
    def snapshot(self) -> Iterator[PageStore]:
        """Several reads that see one committed state.

        A reader holds its shared lock for the whole block (the writer's page
        writes wait); in the writer it holds the store's lock, so no commit of
        this process interleaves.
        """
        with self._lock:
            self._check_open()
            if self.readonly:
                with self._shared():
                    yield self
            else:
                yield self

    def _reader_header(self) -> StoreHeader:
        header = _read_header(self.path, self._handle)
        if header.flags & store_codec.FLUSHING:
            # We hold the shared lock, so no writer is flushing now: one died mid-flush.
            raise RecoveryNeededError(f"{self.path}: a writer died while writing pages; open it for writing to recover")
        self._header = header
        return header

    def _reader_refresh(self) -> None:
        """Reload header and free list if the store file changed (reader, under shared lock)."""
        raw = self._handle.read_at(0, store_codec.HEADER_SIZE)
        key = (raw, self._fs.mtime_ns(self.path))
        if key == self._reader_key:
            return
        self._reader_header()
        self._load_free_list()
        self._reader_sums = None
        spath = sums_path(self.path)
        if self._fs.exists(spath):
            with self._fs.open(spath, OpenMode.READ) as sh:
                loaded = sums_module.load(sh.read_all(), self.page_size)
            if loaded is not None:
                self._reader_sums, self._reader_sum = loaded[0].tolist(), loaded[1]
        self._reader_key = key

    # -- writing -------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError(f"{self.path}: page store is closed")

    def _check_writable(self) -> None:
        journal, sums = self._journal, self._sums
        if (
            not self._closed
            and not self.readonly
            and self._failure is None
            and journal is not None
            and not journal.handle.poisoned
            and not self._handle.poisoned
            and (sums is None or not sums.handle.poisoned)
        ):
            return  # the common case in one expression: checked twice per transaction
        self._check_open()
        if self.readonly:
            raise ConfigError(f"{self.path}: opened read-only")
        if self._failure is not None:
            raise PoisonedError(self.path, self._failure)
        assert self._journal is not None
        if self._journal.handle.poisoned:
            raise PoisonedError(self.journal_path)
        if self._handle.poisoned:
            raise PoisonedError(self.path)
        if self._sums is not None and self._sums.handle.poisoned:
            raise PoisonedError(sums_path(self.path))

    def transaction(self) -> Transaction:
        """``with store.transaction() as tx:`` commits on leaving, rolls back on an exception.

        Transactions of one store run one at a time (threads wait their turn).
        """
        return Transaction(self)

    def _commit(self, tx: Transaction) -> None:
        self._check_writable()  # an earlier commit may have failed since this one began
        journal = self._journal
        assert journal is not None
        journal.append(int(time.time()), tx.ops)
        # Durable from here on.  The new page images become the committed state in
        # memory; they reach the store file at the next flush (every commit with
        # apply="commit", else at checkpoints), and the journal redoes them after a
        # crash until a checkpoint has synced the store.
        try:
            self._install(tx)
            if self.apply_each_commit:
                self._flush()
        except BaseException as exc:
            self._failure = exc
            raise
        self.commits += 1
        size = journal.size
        if size >= self.checkpoint_bytes and (
            size >= self.checkpoint_max_bytes or len(self._dirty) * self.page_size * CHECKPOINT_RATIO <= size
        ):
            self._checkpoint(durable_reset=False)

    def _install(self, tx: Transaction) -> None:
        """Make ``tx`` the committed state in memory (header, free list, dirty pages)."""
        ps = self.page_size
        pages, touched = tx.pages, tx.dirty
        # The transaction is over: its images become the store's (no copy; nothing
        # mutates them: reads and new transactions copy).  ``pages`` holds the
        # touched pages plus any it only read; with none of those, one update.
        if len(pages) == len(touched):
            self._dirty.update(pages)
        else:
            dirty = self._dirty
            for page in touched:
                dirty[page] = pages[page]
        self._cache.discard_many(touched)
        whole = tx.whole_pages
        if whole:
            self._whole.update(whole)
        if len(whole) != len(touched):
            if len(touched) == 1:
                ((page, ranges),) = touched.items()
                if len(ranges) == 1:  # one write to one page: the common small transaction
                    self._extents.add((page * ps + ranges[0][0], page * ps + ranges[0][1]))
                else:
                    self._extents.update(tx.extents())
            else:
                # Unmerged: the flush sorts and merges every range once.
                wr = tx.whole
                self._extents.update(
                    [(p * ps + a, p * ps + b) for p, ranges in touched.items() if ranges is not wr for a, b in ranges]
                )
        header = self._header
        if tx.page_count != header.page_count or tx.free_head != header.free_head:
            self._header = StoreHeader(ps, tx.page_count, tx.free_head)
        if tx.popped or tx.pushed:
            self._free.difference_update(tx.popped)
            self._free.update(tx.pushed)
            # LIFO: the pages this transaction pushed (newest first), then what it
            # left of the old list.
            self._free_order = tx.stack[::-1] + self._free_order[tx.popped_from_list :]

    def _flush(self) -> None:
        """Write the committed-but-unwritten pages and header to the store (no sync).

        Under the exclusive store lock, so readers see all of it or none of it.
        Only the byte ranges the journal holds after-images for are written (whole
        pages for appended ones): a write torn by a crash then damages only bytes
        that redo rewrites.  Adjacent ranges become one write.
        """
        if not self._dirty and self._header == self._disk_header:
            return
        ps = self.page_size
        self._handle.lock(exclusive=True, blocking=True)
        try:
            # Mark the flush in progress first: if this process dies half way, readers
            # that already have the store open see the mark, not a torn state.
            flushing = StoreHeader(ps, self._header.page_count, self._header.free_head, flags=store_codec.FLUSHING)
            self._handle.write_at(0, store_codec.encode_header(flushing))
            self._disk_header = flushing
            dirty = self._dirty
            whole = self._whole
            write_parts_at = self._handle.write_parts_at
            # Whole pages: one vectored write per run of consecutive pages, straight
            # from the images (no join: a run can be thousands of pages).
            run: list[int] = []
            for page in sorted(whole):
                if run and page != run[-1] + 1:
                    write_parts_at(run[0] * ps, [dirty[p] for p in run])
                    run = []
                run.append(page)
            if run:
                write_parts_at(run[0] * ps, [dirty[p] for p in run])
            # Ranges of the other pages, merged where adjacent (a whole page written
            # above covers any range of it).
            spans = self._extents if not whole else [span for span in self._extents if span[0] // ps not in whole]
            for start, end in _merge(spans):
                parts: list[bytes | bytearray | memoryview] = []
                pos = start
                while pos < end:
                    page, off = divmod(pos, ps)
                    stop = min(end, (page + 1) * ps)
                    image = dirty[page]
                    parts.append(image if stop - pos == ps else memoryview(image)[off : off + stop - pos])
                    pos = stop
                write_parts_at(start, parts)
            if self._sums is not None:
                self._sums.update(self._dirty)
            if self._header != self._disk_header:
                self._handle.write_at(0, store_codec.encode_header(self._header))
                self._disk_header = self._header
        finally:
            self._handle.unlock()
        self._cache.put_many(self._dirty)
        self._dirty.clear()
        self._extents.clear()
        self._whole.clear()

    def _overlay_read(self, off: int, size: int) -> bytes:
        """Committed bytes at store offset ``off`` (inside one page)."""
        page, at = divmod(off, self.page_size)
        return bytes(self._committed(page)[at : at + size])

    def _sync_store(self, what: str) -> None:
        crashpoint(f"pages.{what}.before-store-fsync")
        self._handle.fdatasync()
        crashpoint(f"pages.{what}.after-store-fsync")

    def checkpoint(self) -> None:
        """Sync the store, flag the journal's transactions complete, reset the journal."""
        self._checkpoint(durable_reset=True)

    def _checkpoint(self, *, durable_reset: bool) -> None:
        """:meth:`checkpoint`; ``durable_reset=False`` when a commit triggered it
        (the journal's reset then needs no sync of its own, see ``Journal.reset``)."""
        with self._lock:
            self._check_writable()
            journal = self._journal
            assert journal is not None
            if journal.empty:
                if durable_reset:
                    journal.sync_reset()  # an automatic checkpoint's reset, not yet durable
                return
            # The store must be durable before the journal forgets how to redo it.
            try:
                self._flush()
            except BaseException as exc:
                self._failure = exc
                raise
            self._handle.lock(exclusive=True, blocking=True)
            try:
                self._sync_store("checkpoint")
                assert self._sums is not None
                self._sums.sync("checkpoint")
            finally:
                self._handle.unlock()
            journal.reset(durable=durable_reset)
            self.checkpoints += 1

    # -- checking ------------------------------------------------------------------------
    def verify(self) -> list[str]:
        """Check every invariant; raise CorruptFileError (or EngineError) on a problem.

        Header sane and file long enough; free list in range without cycle (so
        every page is live or free exactly once); every page matches its checksum;
        the journal chain consistent and every op inside the store; the writer's
        memory agrees with the disk.
        """
        with self._lock:
            self._check_open()
            notes: list[str] = []
            if self.readonly:
                with self._shared():
                    self._reader_key = None
                    self._reader_refresh()
                    header = self._header
                    free = list(self._free_order)
                    for page in range(1, header.page_count + 1):
                        self._read_disk_page(page)  # raises if it does not match its checksum
            else:
                disk_header = _read_header(self.path, self._handle)
                if disk_header != self._disk_header:
                    raise CorruptFileError(self.path, 0, f"header {self._disk_header}", str(disk_header))
                ps = disk_header.page_size
                need = (disk_header.page_count + 1) * ps
                if self._handle.size() < need:
                    raise CorruptFileError(self.path, self._handle.size(), f"at least {need} bytes")
                header = self._header  # the committed state: the file plus what is not yet written
                free = walk_free_list(self.path, header, self._overlay_read)
                if free != self._free_order or set(free) != self._free:
                    raise CorruptFileError(self.path, 24, f"free list {self._free_order}", str(free))
                for page, data in self._cache.items():
                    if page not in self._dirty and self._handle.read_at(page * ps, ps) != data:
                        raise CorruptFileError(self.path, page * ps, "cached page equal to disk")
                for page in range(1, disk_header.page_count + 1):
                    if page not in self._dirty:
                        self._read_disk_page(page)  # raises if it does not match its checksum
            journal = self._journal
            owner = journal.handle if journal is not None else None
            expected = journal.tx_offsets if journal is not None else None
            notes.extend(verify_journal(self._fs, self.journal_path, header, owner=owner, expected=expected))
            notes.append(f"{header.page_count} pages, {len(free)} free, page size {header.page_size}")
            return notes

    # -- closing -------------------------------------------------------------------------
    def close(self) -> None:
        """Checkpoint (unless a failure poisoned the store) and release the files."""
        with self._lock:
            if self._closed:
                return
            try:
                healthy = self._failure is None and not self._handle.poisoned
                healthy = healthy and (self._sums is None or not self._sums.handle.poisoned)
                if not self.readonly and healthy and self._journal is not None and not self._journal.handle.poisoned:
                    self.checkpoint()
            finally:
                self._closed = True
                self._handle.close()
                if self._journal is not None:
                    self._journal.handle.close()
                if self._sums is not None:
                    self._sums.close()
                if self._writer_lock is not None:
                    # Last: until here this process still holds the journal.
                    self._writer_lock.close()

    def __enter__(self) -> PageStore:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        mode = "reader" if self.readonly else "writer"
        return f"<PageStore {self.path!r} {mode} page_size={self.page_size}>"


def verify_journal(
    fs: FileSystem,
    jpath: str,
    header: StoreHeader,
    *,
    owner: FileHandle | None = None,
    expected: list[int] | None = None,
) -> list[str]:
    """Check the journal next to a store (read only): chain, ops in range.

    ``owner`` is the writer's own journal handle (it reads through it); anyone else
    checks the journal only when no writer is live (see :func:`scan_if_idle`).
    ``expected``: the transaction offsets the writer holds in memory; the chain on
    disk (followed past a lagging header) must be exactly those.
    """
    if owner is not None:
        state = scan(jpath, owner.read_all())
        found = [tx.offset for tx in state.txs]
        if expected is not None and (found != expected or state.cut):
            raise CorruptFileError(
                jpath,
                state.txs[-1].end if state.txs else codec.FILE_HEADER_SIZE,
                f"the writer's transactions {expected}",
                str(found),
            )
    elif not fs.exists(jpath):
        return [f"{jpath}: no journal (created on the next writable open)"]
    else:
        idle = scan_if_idle(fs, jpath)
        if idle is None:
            return [f"{jpath}: in use by a live writer, not checked from this handle"]
        state = idle
    notes = [f"{jpath}: {n} (recovery would repair)" for n in state.notes]
    replay = StoreState(header.page_size, 0, 0)
    # The store may already hold the transactions: check against the larger of the two counts.
    replay.page_count = header.page_count
    for tx in state.txs:
        check_ops(jpath, tx, replay)
    if state.txs:
        notes.append(f"{jpath}: {len(state.txs)} transaction(s), {len(state.pending)} not flagged complete")
    return notes


def _merge(spans: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """Sorted, merged byte ranges (overlapping or touching ranges become one)."""
    merged: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            if end > merged[-1][1]:
                merged[-1] = (merged[-1][0], end)
        else:
            merged.append((start, end))
    return merged


def _slice(path: str, page: int, data: bytes | bytearray, offset: int, size: int | None, ps: int) -> bytes:
    if size is None:
        size = ps - offset
    if offset < 0 or size < 0 or offset + size > ps:
        raise PageError(
            path, page, page * ps + max(offset, 0), f"range [{offset}:{offset + size}] is outside the {ps}-byte page"
        )
    return bytes(data[offset : offset + size])


# A whole-page MODIFY op's fixed part (17 bytes): u8 type 0x02 | u32 data size |
# u64 page offset | u16 offset in page (0) | u16 image size (the page size).
_WHOLE_MODIFY = struct.Struct("<BIQHH")
assert _WHOLE_MODIFY.size == codec.OP_HEADER.size + codec.MODIFY_HEAD.size == 17


class Transaction:
    """A unit of work: allocations, writes and frees that commit all or nothing.

    Changes are kept in memory (whole page copies plus the journal ops) until
    :meth:`commit`; a rollback just drops them.  Reads see the transaction's own writes.
    """

    def __init__(self, store: PageStore) -> None:
        self._store = store
        self.state = "new"

    def __enter__(self) -> Transaction:
        store = self._store
        store._lock.acquire()
        try:
            if self.state != "new":
                raise ClosedError(f"{store.path}: a transaction can be entered once")
            store._check_writable()
        except BaseException:
            store._lock.release()
            raise
        self._begin()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            if exc_type is not None:
                self.rollback()
            elif self.state == "open":
                self.commit()
        finally:
            self._store._lock.release()

    def _begin(self) -> None:
        store = self._store
        # Page images as this transaction sees them: a bytearray once it was edited
        # in place, or the caller's bytes after a whole-page write (no copy).
        self.pages: dict[int, bytes | bytearray] = {}
        self.ops: list[bytes | bytearray | memoryview] = []
        self.ps = store._header.page_size
        self.page_count = store._header.page_count
        self.free_head = store._header.free_head
        self.popped: set[int] = set()
        self.pushed: set[int] = set()
        self.stack: list[int] = []  # pages pushed by this transaction and still free, oldest first
        self.popped_from_list = 0  # pages popped off the committed free list
        self.dirty: dict[int, list[tuple[int, int]]] = {}
        # Pages this transaction rewrites whole: their ``dirty`` entry is this one
        # shared list (no range list per page; _touch leaves it alone, and the
        # store writes them as whole pages without merging ranges).
        self.whole = [(0, self.ps)]
        self.whole_pages: list[int] = []
        # For write()'s fast path: the committed free set and unflushed images
        # (the same objects until this transaction installs), and whether a whole
        # page fits in one MODIFY op (65,536-byte pages are split).
        self.free_set = store._free
        self.unflushed = store._dirty
        self.whole_op_size = codec.MODIFY_HEAD.size + 2 * self.ps if self.ps <= codec.MAX_MODIFY else 0
        self.state = "open"

    def _touch(self, page: int, start: int, end: int) -> None:
        ranges = self.dirty.get(page)
        if ranges is None:
            self.dirty[page] = [(start, end)]
        elif ranges is not self.whole:  # a whole page covers any range of it
            ranges.append((start, end))

    def _touch_whole(self, page: int) -> None:
        """Mark ``page`` rewritten whole (it was not touched before in this transaction)."""
        self.dirty[page] = self.whole
        self.whole_pages.append(page)

    def extents(self) -> list[tuple[int, int]]:
        """Absolute byte ranges of the store file this transaction changes, merged."""
        ps = self._store.page_size
        if len(self.dirty) == 1:
            ((page, ranges),) = self.dirty.items()
            if len(ranges) == 1:  # the common small transaction: one write to one page
                return [(page * ps + ranges[0][0], page * ps + ranges[0][1])]
        return _merge([(p * ps + a, p * ps + b) for p, ranges in self.dirty.items() for a, b in ranges])

    # -- helpers -------------------------------------------------------------------------
    def _check_state(self) -> None:
        if self.state != "open":
            if self.state == "new":
                raise ClosedError(f"{self._store.path}: use the transaction in a with block")
            raise ClosedError(f"{self._store.path}: transaction already {self.state}")

    def _is_free(self, page: int) -> bool:
        return page in self.pushed or (page in self._store._free and page not in self.popped)

    def _live(self, page: int) -> bytearray:
        self._check_state()
        store = self._store
        store._check_live(page, self.page_count, isinstance(page, int) and self._is_free(page))
        return self._page(page)

    def _page(self, page: int) -> bytearray:
        """This transaction's image of ``page``, editable in place (copied on first use)."""
        buf = self.pages.get(page)
        if type(buf) is not bytearray:
            buf = bytearray(self._store._committed(page) if buf is None else buf)
            self.pages[page] = buf
        return buf

    # -- the API -------------------------------------------------------------------------
    def allocate(self) -> int:
        """A new zero-filled page: the free-list head if any, else appended at the end."""
        self._check_state()
        ps = self._store.page_size
        head = self.free_head
        if head:
            page = head // ps
            buf = self._page(page)
            nxt = store_codec.decode_link(buf)
            if nxt % ps or (nxt and not 1 <= nxt // ps <= self.page_count):
                raise CorruptFileError(self._store.path, head, "a free page link inside the store", str(nxt))
            self.ops.append(codec.encode_alloc(head, head, nxt))
            self.free_head = nxt
            if self.stack:
                assert self.stack[-1] == page
                self.stack.pop()
                self.pushed.discard(page)
            else:
                self.popped.add(page)
                self.popped_from_list += 1
            # Zero the reused page through the journal, so undo and redo both see it.
            if any(buf):
                # First and last nonzero byte, found in C (strip), not a Python loop.
                start = ps - len(buf.lstrip(b"\0"))
                end = len(buf.rstrip(b"\0"))
                self.ops.extend(codec.encode_modify(head, start, bytes(buf[start:end]), bytes(end - start)))
                buf[start:end] = bytes(end - start)
                self._touch(page, start, end)
        else:
            page = self.page_count + 1
            self.page_count = page
            self.ops.append(codec.encode_alloc(page * ps, 0, 0))
            self.pages[page] = bytearray(ps)
            self._touch_whole(page)  # redo zero-fills an appended page: write all of it
        return page

    def write(self, page: int, offset: int, data: bytes) -> None:
        """Write ``data`` at ``offset`` of a live page (must stay inside the page)."""
        buf = self.pages.get(page)
        if buf is None:
            # First touch of this page in the transaction.  The usual case (a
            # committed live page, open transaction) is checked inline; anything
            # else gets the full checks and their typed errors.
            if (
                self.state != "open"
                or type(page) is not int
                or not 0 < page <= self.page_count
                or page in self.pushed
                or (page in self.free_set and page not in self.popped)
            ):
                self._check_state()
                self._store._check_live(page, self.page_count, isinstance(page, int) and self._is_free(page))
            if offset == 0 and type(data) is bytes and len(data) == self.ps and self.whole_op_size:
                # A whole-page write (the bulk case), no copy at all: the committed
                # image (never mutated: new transactions copy it) is the before
                # image, the caller's immutable bytes become the new image.
                committed = self.unflushed.get(page)
                if committed is None:
                    committed = self._store._committed(page)
                if committed == data:
                    return
                ps = self.ps
                self.ops += (_WHOLE_MODIFY.pack(codec.OP_MODIFY, self.whole_op_size, page * ps, 0, ps), committed, data)
                self.pages[page] = data
                self.dirty[page] = self.whole  # _touch_whole, inlined on the bulk path
                self.whole_pages.append(page)
                return
        elif page in self.pushed or self.state != "open":
            self._check_state()
            self._store._check_live(page, self.page_count, True)  # freed by this transaction
        ps = self.ps
        end = offset + len(data)
        if offset < 0 or end > ps:
            raise PageError(
                self._store.path, page, page * ps + max(offset, 0), f"write [{offset}:{end}] past the {ps}-byte page"
            )
        data = bytes(data)  # no copy for bytes; the caller may not change it under us
        if buf is None:
            committed = self.unflushed.get(page)
            if committed is None:
                committed = self._store._committed(page)
            if offset == 0 and end == ps:
                # A whole page that is not ``bytes`` or needs split ops.
                if committed == data:
                    return
                self.ops.extend(codec.modify_parts(page * ps, 0, committed, data))
                self.pages[page] = data
                self._touch_whole(page)
                return
            buf = bytearray(committed)
            self.pages[page] = buf
        elif type(buf) is not bytearray:
            buf = self._page(page)  # a whole-page image edited again: now copied
        with memoryview(buf) as view:
            if view[offset:end] == data:
                return
            before = bytes(view[offset:end])  # the buffer changes below: the image must not
        self.ops.extend(codec.modify_parts(page * ps, offset, before, data))
        buf[offset:end] = data
        self._touch(page, offset, end)

    def read(self, page: int, offset: int = 0, size: int | None = None) -> bytes:
        """Bytes of a live page as this transaction sees them."""
        buf = self.pages.get(page) if isinstance(page, int) else None
        if buf is None:
            buf = self._live(page)
        else:
            self._live(page)
        return _slice(self._store.path, page, bytes(buf), offset, size, self._store.page_size)

    def free(self, page: int) -> None:
        """Put a live page on the free list (its first 8 bytes become the link)."""
        buf = self._live(page)
        ps = self._store.page_size
        off = page * ps
        link = store_codec.encode_link(self.free_head)
        # The link overwrites the page's first bytes: journal that as a MODIFY too,
        # so undoing the removal can restore them (REMOVE alone records only the head).
        self.ops.extend(codec.encode_modify(off, 0, bytes(buf[:8]), link))
        buf[:8] = link
        self._touch(page, 0, 8)
        self.ops.append(codec.encode_remove(off, self.free_head))
        self.free_head = off
        self.pushed.add(page)
        self.stack.append(page)

    def commit(self) -> None:
        """Make the transaction durable (returns after the journal fsync)."""
        self._check_state()
        if self.ops:
            try:
                self._store._commit(self)
            except BaseException:
                self.state = "failed"  # maybe in the journal: reopen and recovery decides
                raise
        self.state = "committed"

    def rollback(self) -> None:
        """Drop every change (nothing reached a file)."""
        if self.state == "open":
            self.state = "rolled back"
            self.pages.clear()
            self.ops.clear()
