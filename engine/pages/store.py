"""PageStore: a paged file with a free list, protected by the JRNL write-ahead log.

Files: the store (``path``, ENGPAGES, ``docs/formats/pagestore.md``), its journal
(``path + "-journal"``, JRNL, ``docs/formats/jrnl.md``) and its page checksums
(``path + "-sums"``, :mod:`engine.pages.sums`).  This module is the writer; readers
in other processes use :class:`~engine.pages.reader.PageReader`
(``PageStore.open_reader(path)``), transactions live in
:mod:`engine.pages.transaction`, the open's recovery and the header's
JOURNAL_LIVE flag (set before the first commit, cleared at a clean close, so a
store whose journal went missing is refused) in :mod:`engine.pages.writeropen`.

Commit protocol (one sync per commit):

1. the transaction (after- *and* before-images) is written to the journal as one
   pre-linked range, synced by itself: the commit is durable;
2. its pages become the committed state in memory and are written to the store
   file, unsynced, at the next checkpoint (or right away with ``apply="commit"``);
3. at a checkpoint (journal past the threshold, see DEFAULT_CHECKPOINT_BYTES;
   :meth:`PageStore.checkpoint`, :meth:`PageStore.close`) the pending pages are
   written, the store is synced, every transaction is flagged JRNL_COMPLETE and the
   journal is reset.

A crash before 3 leaves complete transactions with the flag clear; the next open
redoes them from their after-images (idempotent) and checkpoints.

Locks (flock-style, whole files, all through :mod:`engine.fs.lock`; see
``docs/guide/pages.md``):

* ``path + "-lock"``: only writers lock it, exclusively and without waiting, first
  thing in :meth:`PageStore.open`, for their lifetime.  This is what makes a second
  writer get LockedError at once.
* the journal: the writer then locks it exclusively for its lifetime, waiting up to
  ``reader_wait`` seconds, because readers take a brief *shared* lock on it to ask
  "is a writer alive?" (while opening, and to scan it).  A reader's probe must never
  make a writer fail; only a second writer may.
* the store file: the writer locks it exclusively while it writes pages; readers
  take a shared lock on it for each read, so they never see a half-applied
  transaction.  Both take it through the gate ``path + "-gate"``
  (:class:`~engine.fs.GatedLock`), so overlapping snapshots cannot starve a
  checkpoint.
"""

from __future__ import annotations

import datetime
import errno
import logging
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace

from engine.conventions import duration_seconds, timeout_seconds
from engine.errors import ClosedError, ConfigError, CorruptFileError, DiskFullError, LockedError, PoisonedError
from engine.fs import (
    FileHandle,
    FileSystem,
    GatedLock,
    HeldLock,
    OpenMode,
    RecoveryReport,
    as_path,
    crashpoint,
    create_file,
    resolve,
    take_lock,
)
from engine.lifetime import ClosedWhenDropped
from engine.pages import codec, store_codec
from engine.pages.cache import PageCache
from engine.pages.journal import Journal, journal_path, scan
from engine.pages.reader import PageReader
from engine.pages.recovery import walk_free_list
from engine.pages.store_codec import StoreHeader
from engine.pages.storefile import (
    check_live,
    check_store_size,
    create_store_file,
    file_present,
    gate_path,
    header_says_journal_live,
    interrupted_creation,
    journal_present,
    lock_path,
    missing_journal_error,
    orphan_journal_error,
    read_header,
    slice_page,
    take_journal_lock,
    write_pages,
)
from engine.pages.sums import PageSums, sums_path
from engine.pages.transaction import Image, Transaction, TransactionDelta
from engine.pages.upkeep import shrink_store, store_stats, verify_store
from engine.pages.writeropen import clear_journal_live, mark_journal_live, recover_into_store

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
APPLY_MODES = ("checkpoint", "commit")
_COUNTS = ("cache_pages", "checkpoint_bytes", "checkpoint_max_bytes")


class PageStore(ClosedWhenDropped):
    """A transactional page store's writer; create with :meth:`open`."""

    readonly = False

    def __init__(
        self,
        fs: FileSystem,
        path: str,
        handle: FileHandle,
        header: StoreHeader,
        journal: Journal,
        *,
        cache_pages: int,
        checkpoint_bytes: int,
        checkpoint_max_bytes: int,
        apply_each_commit: bool,
        writer_lock: HeldLock,
        report: RecoveryReport,
    ) -> None:
        self._fs = fs
        self.path = path
        self.journal_path = journal_path(path)
        self._handle = handle
        self._header = header
        self._journal = journal
        self._cache = PageCache(cache_pages)
        self.checkpoint_bytes = checkpoint_bytes
        self.checkpoint_max_bytes = max(checkpoint_bytes, checkpoint_max_bytes)
        self.apply_each_commit = apply_each_commit
        self._lock = threading.RLock()
        self._closed = False
        self._failure: BaseException | None = None
        self._free: set[int] = set()
        self._free_order: list[int] = []
        # Committed page images not yet written to the store file, the byte ranges
        # of them the journal covers, and the header as the store file has it.
        self._dirty: dict[int, Image] = {}
        # (a set: the same page rewritten by many transactions is one range to write)
        self._extents: set[tuple[int, int]] = set()
        # Pages whose whole image is to be written (no ranges kept for them).
        self._whole: set[int] = set()
        self._disk_header = header
        # (header, it with FLUSHING set, the bytes of both): what a flush writes
        self._flush_headers: tuple[StoreHeader | None, StoreHeader, bytes, bytes] = (None, header, b"", b"")
        self._sums: PageSums | None = None
        self._writer_lock = writer_lock  # <path>-lock, held until close
        # The store file's lock: exclusive while this writer writes pages, through
        # <path>-gate so readers' overlapping snapshots cannot starve it.
        self._store_lock = GatedLock(fs, handle, gate_path(path), what="store file lock")
        #: What this open repaired (empty after a clean close).
        self.recovery = report
        self.commits = 0
        self.checkpoints = 0
        #: How long an explicit checkpoint()/close()/shrink() waits for readers'
        #: snapshots (shared locks on the store file); automatic flushes never wait.
        self.reader_wait = DEFAULT_READER_WAIT
        #: Flushes and automatic checkpoints put off because a reader held a snapshot.
        self.postponed = 0

    # -- opening ---------------------------------------------------------------------
    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        page_size: int | None = None,
        *,
        create: bool = True,
        cache_pages: int = DEFAULT_CACHE_PAGES,
        checkpoint_bytes: int | None = None,
        checkpoint_max_bytes: int | None = None,
        apply: str = "checkpoint",
        reader_wait: float | datetime.timedelta = DEFAULT_READER_WAIT,
        fs: FileSystem | None = None,
    ) -> PageStore:
        """Open (or create) the store at ``path`` for writing and recover it.

        ``page_size`` (a power of two, 512..65536) is used when creating; 4096 if
        not given.  For an existing store it must match or be ``None``.
        Readers open with :meth:`open_reader` instead (never writes, never recovers).
        ``apply`` says when committed pages are written to the store file:
        ``"checkpoint"`` (batched, the fastest: a commit is one journal write synced
        by itself; readers in other processes see the state of the last
        checkpoint) or ``"commit"`` (right after each commit, unsynced, so other
        processes' readers see every commit at once).
        ``checkpoint_bytes``/``checkpoint_max_bytes``: by default (both ``None``)
        a checkpoint comes once the journal holds 4 MiB if the pages to write are
        at most 1/8 of it, else at the latest at 64 MiB (see
        DEFAULT_CHECKPOINT_BYTES); ``checkpoint_bytes=N`` alone checkpoints at N
        bytes exactly, and with ``checkpoint_max_bytes=M`` adaptively between them.

        A commit writes its journal transaction as one contiguous range,
        pre-linked to where the next one goes; the journal header's ``last``
        catches up when the journal is reset (checkpoints, close, recovery), so a
        journal at rest is exactly what the JRNL format describes
        (``docs/formats/jrnl.md``).

        A second writer (any process) gets LockedError at once; a writer waits up
        to ``reader_wait`` (seconds or a timedelta) for readers that briefly hold the journal's
        shared lock (then LockedError).  What the open repaired is in
        :attr:`recovery` (and logged once as a warning).
        """
        path = as_path(path, "path")
        if apply not in APPLY_MODES:
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
        for name, number in zip(_COUNTS, (cache_pages, checkpoint_bytes, checkpoint_max_bytes), strict=True):
            if number < 0:
                raise ConfigError(f"{name} must be >= 0, got {number!r}")
        wait = duration_seconds(reader_wait, "reader_wait", allow_zero=True)
        assert wait is not None
        if not create and not fs.exists(path):
            raise FileNotFoundError(2, "No such page store", path)  # before leaving a lock file
        # The writer lock first, before anything is created or written: two writers
        # opening at once must not both create or recover the store.
        lpath = lock_path(path)
        try:
            wlock = take_lock(fs, lpath, wait=0, what="writer lock")
        except LockedError as exc:
            raise LockedError(f"{path}: another writer has the page store open (lock file {lpath})", lpath) from exc
        try:
            fs.open(gate_path(path), OpenMode.CREATE).close()  # the store file lock's gate, empty like the lock file
            store = cls._open_writer(
                fs,
                path,
                page_size,
                create,
                wlock,
                cache_pages=cache_pages,
                checkpoint_bytes=checkpoint_bytes,
                checkpoint_max_bytes=max(checkpoint_bytes, checkpoint_max_bytes),
                apply_each_commit=apply == "commit",
                reader_wait=wait,
            )
        except BaseException:
            wlock.release()
            raise
        store.reader_wait = wait
        store.recovery.log(log)
        # Closed cleanly if collected or still open at exit (with a ResourceWarning).
        # Closed with a ResourceWarning if dropped or still open at exit (engine.lifetime).
        store._watch_unclosed(f"page store {path!r}")
        return store

    @staticmethod
    def open_reader(
        path: str | os.PathLike[str],
        *,
        page_size: int | None = None,
        lock_wait: float | datetime.timedelta | None = None,
        fs: FileSystem | None = None,
    ) -> PageReader:
        """:meth:`PageReader.open <engine.pages.reader.PageReader.open>`: a
        read-only reader of the store at ``path`` (any process, beside a live
        writer; no lock held between reads, nothing repaired)."""
        return PageReader.open(path, page_size=page_size, lock_wait=lock_wait, fs=fs)

    @classmethod
    def _open_writer(
        cls,
        fs: FileSystem,
        path: str,
        page_size: int | None,
        create: bool,
        wlock: HeldLock,
        *,
        cache_pages: int,
        checkpoint_bytes: int,
        checkpoint_max_bytes: int,
        apply_each_commit: bool,
        reader_wait: float,
    ) -> PageStore:
        """The rest of a writer's open; the caller holds the writer lock."""
        jpath = journal_path(path)
        report = RecoveryReport(path)
        missing = not fs.exists(path)
        has_journal = journal_present(fs, jpath)  # a broken link to it is an error, not "none"
        if missing and has_journal:
            # The journal is created after its store file, so a journal without one
            # means the store file was deleted or moved: never an empty new store
            # over it (its commits, or the store's whole contents, would be lost).
            with fs.open(jpath, OpenMode.READ) as orphan:
                held = len(scan(jpath, orphan.read_all()).txs)
            raise orphan_journal_error(path, jpath, held)
        if not missing and not has_journal and header_says_journal_live(fs, path):
            raise missing_journal_error(path, jpath)
        if missing or interrupted_creation(fs, path, jpath):
            if not create:
                if missing:
                    raise FileNotFoundError(2, "No such page store", path)
                raise CorruptFileError(path, 0, "a 40-byte header", "an empty file (interrupted creation)")
            if not missing:
                report.add("rebuilt", path, 1, "files", detail="empty file left by an interrupted creation")
            ps = page_size or DEFAULT_PAGE_SIZE
            header = StoreHeader(ps, 0, 0)
            # Header page durable (data, then directory entry) before anything refers to it.
            create_store_file(fs, path, store_codec.encode_header(header) + bytes(ps - store_codec.HEADER_SIZE))
            if not file_present(fs, sums_path(path), "the page checksum file"):
                create_file(fs, sums_path(path), store_codec.encode_sums_header(ps, True)).close()
        if not has_journal:
            create_file(fs, jpath, codec.encode_file_header(0, 0)).close()
        jhandle = fs.open(jpath, OpenMode.WRITE)
        try:
            # Readers share this lock for a moment to see whether a writer is alive
            # (and to scan the journal): wait for them.  Held until close, so they
            # know a live writer applies what the journal holds.
            take_journal_lock(jhandle, jpath, reader_wait)
            handle = fs.open(path, OpenMode.WRITE)
        except BaseException:
            jhandle.close()
            raise
        store: PageStore | None = None
        try:
            header = read_header(path, handle)
            if page_size is not None and page_size != header.page_size:
                raise ConfigError(f"{path}: page size is {header.page_size}, not {page_size}")
            if jhandle.size() == 0 and header.page_count == 0:
                # A crash while creating the journal of a new store left its name
                # without the header; it never held a transaction.
                jhandle.write_at(0, codec.encode_file_header(0, 0))
                jhandle.fsync()
                report.add("rebuilt", jpath, codec.FILE_HEADER_SIZE, "bytes", detail="the empty journal's header")
            state = scan(jpath, jhandle.read_all())
            # Reuse the journal's space between checkpoints, but not a one-off giant's.
            journal = Journal(jpath, jhandle, state, keep_bytes=max(2 * checkpoint_max_bytes, 1 << 20))
            store = cls(
                fs,
                path,
                handle,
                header,
                journal,
                cache_pages=cache_pages,
                checkpoint_bytes=checkpoint_bytes,
                checkpoint_max_bytes=checkpoint_max_bytes,
                apply_each_commit=apply_each_commit,
                writer_lock=wlock,
                report=report,
            )
            try:
                store._sums = PageSums.open(fs, path, header.page_size, header.page_count, store._raw_page, report)
                recover_into_store(store, state)
                store._sums.fill_missing(store._header.page_count, store._raw_page, report)
                store._load_free_list()
                mark_journal_live(store)
            except DiskFullError as exc:
                raise DiskFullError(exc.path, exc.errno or errno.ENOSPC, f"recovery of {path}") from exc
        except BaseException:
            handle.close()
            jhandle.close()
            if store is not None:
                store._store_lock.close()
                if store._sums is not None:
                    store._sums.close()
            raise
        return store

    def _load_free_list(self) -> None:
        check_store_size(self.path, self._header, self._handle.size())
        self._free_order = walk_free_list(self.path, self._header, self._handle.read_at)
        self._free = set(self._free_order)

    # -- properties ------------------------------------------------------------------------
    @property
    def page_size(self) -> int:
        return self._header.page_size

    @property
    def page_count(self) -> int:
        """Pages in the store (ids 1..page_count), live and free."""
        return self._header.page_count

    @property
    def free_pages(self) -> list[int]:
        """The free page ids, in free-list order (the next allocation first)."""
        return list(self._free_order)

    @property
    def live_pages(self) -> list[int]:
        """Allocated page ids, ascending."""
        free = self._free
        return [p for p in range(1, self.page_count + 1) if p not in free]

    @property
    def journal_size(self) -> int:
        return self._journal.size

    @property
    def fs(self) -> FileSystem:
        """The file-system seam the store was opened with."""
        return self._fs

    @property
    def cache(self) -> PageCache:
        return self._cache

    # -- reading -------------------------------------------------------------------------
    def read(self, page: int, offset: int = 0, size: int | None = None) -> bytes:
        """Committed bytes of a live page (all of it by default)."""
        with self._lock:
            self._check_open()
            is_free = page in self._free if isinstance(page, int) else False
            check_live(self.path, page, self._header.page_count, is_free, self.page_size)
            return slice_page(self.path, page, self.committed_page(page), offset, size, self.page_size)

    def committed_page(self, page: int) -> Image:
        """The committed image of ``page`` (not yet written, cache, else the store
        file); read only: transactions copy it before changing it."""
        data = self._dirty.get(page)
        if data is not None:
            return data
        data = self._cache.get(page)
        if data is None:
            data = self._raw_page(page)
            if self._sums is not None and page < len(self._sums.values):  # entries being rebuilt come first
                self._sums.check(page, data, self.page_size)
            self._cache.put(page, data)
        return data

    def _raw_page(self, page: int) -> bytes:
        """Page ``page`` from the store file, unchecked (to compute its checksum)."""
        ps = self.page_size
        data = self._handle.read_at(page * ps, ps)
        if len(data) < ps:
            raise CorruptFileError(self.path, page * ps + len(data), f"page {page} of {ps} bytes", "end of file")
        return data

    @contextmanager
    def snapshot(self) -> Iterator[PageStore]:
        """Several reads that see one committed state (holds the store's lock, so
        no commit of this process interleaves)."""
        with self._lock:
            self._check_open()
            yield self

    # -- writing -------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError(f"{self.path}: page store is closed")

    def _check_writable(self) -> None:
        sums = self._sums
        if (
            not self._closed
            and self._failure is None
            and not self._journal.handle.poisoned
            and not self._handle.poisoned
            and (sums is None or not sums.handle.poisoned)
        ):
            return  # the common case in one expression: checked twice per transaction
        self._check_open()
        if self._failure is not None:
            raise PoisonedError(self.path, self._failure)
        if self._journal.handle.poisoned:
            raise PoisonedError(self.journal_path)
        if self._handle.poisoned:
            raise PoisonedError(self.path)
        raise PoisonedError(sums_path(self.path))

    def transaction(self) -> Transaction:
        """``with store.transaction() as tx:`` commits on leaving, rolls back on an exception.

        Transactions of one store run one at a time (threads wait their turn).
        """
        return Transaction(self)

    def begin_transaction(self) -> tuple[int, int, int, set[int], dict[int, Image]]:
        """For :class:`Transaction`: take the store's lock, check it can write, and
        return the state the transaction starts from (see ``TransactionHost``)."""
        self._lock.acquire()
        try:
            self._check_writable()
        except BaseException:
            self._lock.release()
            raise
        h = self._header
        return h.page_size, h.page_count, h.free_head, self._free, self._dirty

    def end_transaction(self) -> None:
        """For :class:`Transaction`: release the store's lock."""
        self._lock.release()

    def apply_delta(self, delta: TransactionDelta) -> None:
        """For :class:`Transaction`: journal ``delta`` durably, then make it the
        committed state (and checkpoint when the journal is due)."""
        self._check_writable()  # an earlier commit may have failed since this one began
        journal = self._journal
        journal.append(int(time.time()), delta.ops)
        # Durable from here on.  The new page images become the committed state in
        # memory; they reach the store file at the next flush (every commit with
        # apply="commit", else at checkpoints), and the journal redoes them after a
        # crash until a checkpoint has synced the store.
        try:
            self._install(delta)
            if self.apply_each_commit:
                self._flush(wait=0)  # a reader's snapshot: the pages wait for a later flush
        except BaseException as exc:
            self._failure = exc
            raise
        self.commits += 1
        size = journal.size
        if size >= self.checkpoint_bytes and (
            size >= self.checkpoint_max_bytes or len(self._dirty) * self.page_size * CHECKPOINT_RATIO <= size
        ):
            self._checkpoint(wait=0)  # never makes a commit wait for readers: postponed instead

    def _install(self, delta: TransactionDelta) -> None:
        """Make ``delta`` the committed state in memory (header, free list, unflushed pages)."""
        images = delta.images
        # The transaction is over: its images become the store's (no copy; nothing
        # mutates them: reads and new transactions copy).
        self._dirty.update(images)
        self._cache.discard_many(images)
        if delta.whole:
            self._whole.update(delta.whole)
        if delta.ranges:
            self._extents.update(delta.ranges)
        header = self._header
        if delta.page_count != header.page_count or delta.free_head != header.free_head:
            self._header = StoreHeader(header.page_size, delta.page_count, delta.free_head, flags=header.flags)
        if delta.allocated or delta.freed:
            self._free.difference_update(delta.allocated)
            self._free.update(delta.freed)
            # LIFO: the pages this transaction freed (newest first), then what it
            # left of the old list.
            self._free_order = delta.freed[::-1] + self._free_order[len(delta.allocated) :]

    def flush(self, wait: float | datetime.timedelta | None = 0.0) -> bool:
        """Write committed pages to the store file now (no sync), so readers in
        other processes see the last commit; waits up to ``wait`` (seconds or a
        timedelta; None: for ever) for their snapshots (False: put off, nothing lost)."""
        seconds = timeout_seconds(wait, "wait")
        with self._lock:
            self._check_writable()
            return self._flush(seconds)

    def _flush(self, wait: float | None = None) -> bool:
        """Write the committed-but-unwritten pages and header to the store (no sync).

        Under the exclusive store lock, so readers see all of it or none of it;
        ``wait`` bounds the wait for readers' snapshots (shared locks): past it the
        flush is put off (False; the pages stay in memory and in the journal).
        Only the byte ranges the journal holds after-images for are written (whole
        pages for appended ones): a write torn by a crash then damages only bytes
        that redo rewrites.  Adjacent ranges become one write.
        """
        if not self._dirty and self._header == self._disk_header:
            return True
        try:
            self._store_lock.acquire(exclusive=True, wait=wait)
        except LockedError:
            self.postponed += 1
            return False
        try:
            self._flush_locked()
        finally:
            self._store_lock.release()
        return True

    def _flush_locked(self) -> None:
        """:meth:`_flush` with the exclusive store lock held."""
        if not self._dirty and self._header == self._disk_header:
            return
        # Mark the flush in progress first: if this process dies half way, readers
        # that already have the store open see the mark, not a torn state.
        h, handle = self._header, self._handle
        if self._flush_headers[0] is not h:  # encoded once per header, not per flush
            flushing = StoreHeader(h.page_size, h.page_count, h.free_head, flags=h.flags | store_codec.FLUSHING)
            self._flush_headers = (h, flushing, store_codec.encode_header(flushing), store_codec.encode_header(h))
        _, flushing, marked, clean = self._flush_headers
        handle.write_at(0, marked)
        self._disk_header = flushing
        write_pages(handle, self.page_size, self._dirty, self._whole, self._extents)
        if self._sums is not None:
            self._sums.update(self._dirty)
        handle.write_at(0, clean)
        self._disk_header = h
        self._cache.put_many(self._dirty)
        self._dirty.clear()
        self._extents.clear()
        self._whole.clear()

    def _overlay_read(self, off: int, size: int) -> bytes:
        """Committed bytes at store offset ``off`` (inside one page)."""
        page, at = divmod(off, self.page_size)
        return bytes(self.committed_page(page)[at : at + size])

    def _sync_store(self, what: str) -> None:
        crashpoint(f"pages.{what}.before-store-fsync")
        self._handle.fdatasync()
        crashpoint(f"pages.{what}.after-store-fsync")

    def checkpoint(self) -> None:
        """Write and sync the store, flag the journal's transactions complete and
        reset the journal, durably: the journal is then at rest (empty).

        Waits up to ``reader_wait`` seconds for readers' snapshots (shared locks on
        the store file), then raises LockedError (nothing lost: the journal keeps
        the commits).
        """
        self._checkpoint_durably(final=False)

    def _checkpoint_durably(self, *, final: bool) -> None:
        """:meth:`checkpoint`; ``final`` (at close) also clears the header's
        JOURNAL_LIVE flag, with the same header write and store sync when there
        are pages to write (safe: the store is then synced with every commit
        before the journal is reset, and redoing them again is idempotent)."""
        with self._lock:
            if not self._checkpoint(wait=self.reader_wait, final=final):
                raise LockedError(
                    f"{self.path}: readers held a snapshot for over {self.reader_wait:g} s (reader_wait); "
                    "checkpoint put off, nothing lost (the journal keeps every commit)",
                    self.path,
                )
            self._journal.sync_reset()

    def _checkpoint(self, wait: float | None, final: bool = False) -> bool:
        """Write and sync the store, then reset the journal (the reset left for the
        next commit's sync, see ``Journal.reset``).  Commits call this when the
        journal is due, with ``wait=0``: a reader's snapshot puts it off to a later
        commit (False) instead of making the commit wait."""
        with self._lock:
            self._check_writable()
            journal = self._journal
            if journal.empty:
                return True
            try:
                self._store_lock.acquire(exclusive=True, wait=wait)
            except LockedError:
                self.postponed += 1
                return False
            try:
                # The store must be durable before the journal forgets how to redo it.
                try:
                    h = self._header
                    if final and h.flags & store_codec.JOURNAL_LIVE:
                        self._header = replace(h, flags=h.flags & ~store_codec.JOURNAL_LIVE)
                    self._flush_locked()
                except BaseException as exc:
                    self._failure = exc
                    raise
                self._sync_store("checkpoint")
                assert self._sums is not None
                self._sums.sync("checkpoint")
            finally:
                self._store_lock.release()
            journal.reset()
            self.checkpoints += 1
            return True

    def shrink(self) -> int:
        """Give the free pages at the end of the file back to the file system;
        returns how many pages the store lost (see :func:`engine.pages.upkeep.shrink_store`:
        it checkpoints, then cuts the free pages at the end that head the free list,
        with one atomic header write before the truncation)."""
        with self._lock:
            return shrink_store(self)

    # -- checking ------------------------------------------------------------------------
    def verify(self) -> list[str]:
        """Check every invariant; raise CorruptFileError (or EngineError) on a problem.

        Header sane and file long enough; free list in range without cycle (so
        every page is live or free exactly once); every page matches its checksum;
        the journal chain consistent and every op inside the store; the writer's
        memory agrees with the disk (:func:`engine.pages.upkeep.verify_store`).
        """
        with self._lock:
            self._check_open()
            return verify_store(self)

    def stats(self) -> dict[str, int]:
        """Figures about the store (see :func:`engine.pages.upkeep.store_stats`)."""
        with self._lock:
            self._check_open()
            return store_stats(self)

    # -- closing -------------------------------------------------------------------------
    def close(self) -> None:
        """Checkpoint (unless a failure poisoned the store) and release the files."""
        with self._lock:
            if self._closed:
                return
            self._unwatch()
            try:
                sums = self._sums
                healthy = self._failure is None and not self._handle.poisoned and not self._journal.handle.poisoned
                if healthy and (sums is None or not sums.handle.poisoned):
                    try:
                        self._checkpoint_durably(final=True)
                        clear_journal_live(self)  # if the checkpoint had nothing to write
                    except LockedError as exc:
                        # A reader's snapshot outlasted reader_wait: the journal keeps
                        # every commit and the next writable open redoes them.
                        log.warning("%s; left to the next open's recovery", exc)
            finally:
                self._closed = True
                self._store_lock.close()
                self._handle.close()
                self._journal.handle.close()
                if self._sums is not None:
                    self._sums.close()
                # Last: until here this process still holds the journal.
                self._writer_lock.release()

    def __enter__(self) -> PageStore:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<PageStore {self.path!r} writer page_size={self.page_size}>"

