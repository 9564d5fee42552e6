"""PageStore: a paged file with a free list, protected by the JRNL write-ahead log.

Files: the store (``path``, ENGPAGES, ``docs/formats/pagestore.md``), its journal
(``path + "-journal"``, JRNL, ``docs/formats/jrnl.md``) and its page checksums
(``path + "-sums"``, :mod:`engine.pages.sums`).  This module is the writer; readers
in other processes use :class:`~engine.pages.reader.PageReader`
(``PageStore.open_reader(path)``), transactions live in
:mod:`engine.pages.transaction`, the open's recovery and the header's
JOURNAL_LIVE flag (set before the first commit, cleared at a clean close, so a
store whose journal went missing is refused) in :mod:`engine.pages.writeropen`.

The writer is a thin class over the store core (:class:`~engine.fs.core.StoreCore`:
open sequence, writer lock, kept files, recovery report, failure latch, close,
unclosed-use watch) and the three parts it is made of, each owning its state:
the store file (:class:`~engine.pages.pagefile.StoreFile`: handle, lock,
headers, checksums, unflushed pages, cache), the free list
(:class:`~engine.pages.freelist.FreeList`) and the journal
(:class:`~engine.pages.journal.Journal`).

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
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from engine.conventions import duration_seconds, timeout_seconds
from engine.errors import ConfigError, DiskFullError, LockedError
from engine.fs import FileSystem, OpenMode, SyncPolicy, as_path, resolve
from engine.fs.core import StoreCore
from engine.lifetime import ClosedWhenDropped
from engine.pages import store_codec
from engine.pages.cache import PageCache
from engine.pages.freelist import FreeList
from engine.pages.journal import Journal, journal_path
from engine.pages.pagefile import StoreFile
from engine.pages.reader import PageReader
from engine.pages.storefile import (
    check_live,
    gate_path,
    lock_path,
    read_header,
    refuse_foreign,
    slice_page,
    take_journal_lock,
)
from engine.pages.transaction import Image, Transaction, TransactionDelta
from engine.pages.upkeep import parts_stats, verify_parts
from engine.pages.writeropen import Recovered, prepare_files, read_journal, recover

log = logging.getLogger("engine.pages")

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
#: Why ``sync=`` other than "always" is refused (the ConfigError's message).
SYNC_REFUSED = (
    "the page store commits durably always: its journal is a redo and undo log whose space is reused after "
    "each checkpoint, and a checkpoint may write a commit's pages into the store file only once the commit "
    "is durable in the journal (a commit costs one fdatasync of its own journal range already; batch work "
    "into fewer transactions instead)"
)


class PageStore(ClosedWhenDropped):
    """A transactional page store's writer; create with :meth:`open`.

    A thin class over its :class:`~engine.fs.core.StoreCore` and its parts (see
    the module docstring): it holds the lock that orders transactions, the
    checkpoint policy and the counters.
    """

    readonly = False
    _core: StoreCore  # (set first in __init__)

    def __init__(
        self,
        core: StoreCore,
        files: StoreFile,
        journal: Journal,
        found: Recovered,
        *,
        checkpoint_bytes: int,
        checkpoint_max_bytes: int,
        apply_each_commit: bool,
        reader_wait: float,
    ) -> None:
        self._core = core
        self.path = core.path
        self.journal_path = journal.path
        self.page_size = files.page_size
        self._files = files
        self._journal = journal
        #: committed_page(page): the committed image of ``page`` (not yet written,
        #: cache, else the store file); read only: transactions copy it before
        #: changing it.  The store file's own method, bound here rather than
        #: wrapped (a bulk commit asks it for the before-image of ~1,000 pages).
        self.committed_page: Callable[[int], Image] = files.committed_page
        # What recovery found, installed: the free list (the header is the store file's).
        self._free = FreeList(found.free)
        self.checkpoint_bytes = checkpoint_bytes
        self.checkpoint_max_bytes = max(checkpoint_bytes, checkpoint_max_bytes)
        self.apply_each_commit = apply_each_commit
        self._lock = threading.RLock()
        #: What this open repaired (empty after a clean close).
        self.recovery = core.report
        self.commits = 0
        self.checkpoints = 0
        #: How long an explicit checkpoint()/close()/shrink() waits for readers'
        #: snapshots (shared locks on the store file); automatic flushes never wait.
        self.reader_wait = reader_wait
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
        sync: object = "always",
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

        ``sync`` must be ``"always"`` (every commit is durable when it returns);
        anything else is a ConfigError: see :data:`SYNC_REFUSED`.

        A second writer (any process) gets LockedError at once; a writer waits up
        to ``reader_wait`` (seconds or a timedelta) for readers that briefly hold the journal's
        shared lock (then LockedError).  What the open repaired is in
        :attr:`recovery` (and logged once as a warning).
        """
        path = as_path(path, "path")
        policy = None if isinstance(sync, datetime.timedelta) else SyncPolicy.parse(sync)
        if policy is None or not policy.always:
            raise ConfigError(f"sync must be 'always' for a page store, not {sync!r}: {SYNC_REFUSED}")
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
        refuse_foreign(fs, path)  # a directory or a foreign file: refused before creating anything
        checkpoint_max_bytes = max(checkpoint_bytes, checkpoint_max_bytes)
        jpath = journal_path(path)
        core = StoreCore(fs, path, "page store", policy=policy)
        with core.opening():
            # 1. The writer lock first, before anything is created or written: two
            # writers opening at once must not both create or recover the store.
            lpath = lock_path(path)
            try:
                core.lock(lpath, wait=0)
            except LockedError as exc:
                raise LockedError(f"{path}: another writer has the page store open (lock file {lpath})",
                                  lpath) from exc
            # The store file lock's gate (its scratch words: the change count and ring, engine.fs.lock).
            fs.open(gate_path(path), OpenMode.CREATE).close()
            # 2. The files, through the seam.
            prepare_files(fs, path, jpath, page_size or DEFAULT_PAGE_SIZE, create, core.report)
            jhandle = core.keep(fs.open(jpath, OpenMode.WRITE))
            # Readers share this lock for a moment to see whether a writer is alive
            # (and to scan the journal): wait for them.  Held until close, so they
            # know a live writer applies what the journal holds.
            take_journal_lock(jhandle, jpath, wait)
            handle = core.keep(fs.open(path, OpenMode.WRITE))
            header = read_header(path, handle)
            if page_size is not None and page_size != header.page_size:
                raise ConfigError(f"{path}: page size is {header.page_size}, not {page_size}")
            try:
                state = read_journal(jhandle, jpath, header, core.report)
                # Reuse the journal's space between checkpoints, but not a one-off giant's.
                journal = Journal(jpath, jhandle, state, keep_bytes=max(2 * checkpoint_max_bytes, 1 << 20))
                files = core.keep(StoreFile.open(fs, path, handle, header, core.report, cache_pages=cache_pages))
                # 3. Recovery, into the report; 4. the store installs what it found.
                found = recover(files, journal, state, core.report)
                files.mark_journal_live()
            except DiskFullError as exc:
                raise DiskFullError(exc.path, exc.errno or errno.ENOSPC, f"recovery of {path}") from exc
            store = cls(core, files, journal, found, checkpoint_bytes=checkpoint_bytes,
                        checkpoint_max_bytes=checkpoint_max_bytes, apply_each_commit=apply == "commit",
                        reader_wait=wait)
        # 5. The report logged; closed with a ResourceWarning if dropped or still open at exit.
        core.opened(store, log)
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

    # -- properties ------------------------------------------------------------------------
    @property
    def sync(self) -> SyncPolicy:
        """The ``sync=`` policy (always ``"always"``: see :data:`SYNC_REFUSED`)."""
        return self._core.policy

    @property
    def closed(self) -> bool:
        return self._core.closed

    @property
    def page_count(self) -> int:
        """Pages in the store (ids 1..page_count), live and free."""
        return self._files.header.page_count

    @property
    def free_pages(self) -> list[int]:
        """The free page ids, in free-list order (the next allocation first)."""
        return self._free.pages()

    @property
    def live_pages(self) -> list[int]:
        """Allocated page ids, ascending."""
        free = self._free.members
        return [p for p in range(1, self.page_count + 1) if p not in free]

    @property
    def journal_size(self) -> int:
        return self._journal.size

    @property
    def fs(self) -> FileSystem:
        """The file-system seam the store was opened with."""
        return self._core.fs

    @property
    def cache(self) -> PageCache:
        return self._files.cache

    # -- reading -------------------------------------------------------------------------
    def read(self, page: int, offset: int = 0, size: int | None = None) -> bytes:
        """Committed bytes of a live page (all of it by default)."""
        with self._lock:
            self._core.check_open()
            files = self._files
            is_free = page in self._free.members if isinstance(page, int) else False
            check_live(self.path, page, files.header.page_count, is_free, self.page_size)
            return slice_page(self.path, page, files.committed_page(page), offset, size, self.page_size)

    @contextmanager
    def snapshot(self) -> Iterator[PageStore]:
        """Several reads that see one committed state (holds the store's lock, so
        no commit of this process interleaves)."""
        with self._lock:
            self._core.check_open()
            yield self

    # -- writing -------------------------------------------------------------------------
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
            self._core.check_writable()
        except BaseException:
            self._lock.release()
            raise
        files = self._files
        h = files.header
        return h.page_size, h.page_count, h.free_head, self._free.members, files.unflushed

    def end_transaction(self) -> None:
        """For :class:`Transaction`: release the store's lock."""
        self._lock.release()

    def apply_delta(self, delta: TransactionDelta) -> None:
        """For :class:`Transaction`: journal ``delta`` durably, then make it the
        committed state (and checkpoint when the journal is due)."""
        core = self._core
        core.check_writable()  # an earlier commit may have failed since this one began
        journal = self._journal
        files = self._files
        try:
            journal.append(int(time.time()), delta.ops)
            # Durable from here on.  The new page images become the committed state in
            # memory; they reach the store file at the next flush (every commit with
            # apply="commit", else at checkpoints), and the journal redoes them after a
            # crash until a checkpoint has synced the store.
            files.install(delta)
            if delta.allocated or delta.freed:
                self._free.apply(delta.allocated, delta.freed)
            if self.apply_each_commit and not files.flush(0):
                self.postponed += 1  # a reader's snapshot: the pages wait for a later flush
        except BaseException as exc:
            core.fail(exc, self.path, "commit")
            raise
        self.commits += 1
        size = journal.size
        if size >= self.checkpoint_bytes and (
            size >= self.checkpoint_max_bytes or len(files.unflushed) * self.page_size * CHECKPOINT_RATIO <= size
        ):
            self._checkpoint(wait=0)  # never makes a commit wait for readers: postponed instead

    def flush(self, wait: float | datetime.timedelta | None = 0.0) -> bool:
        """Write committed pages to the store file now (no sync), so readers in
        other processes see the last commit; waits up to ``wait`` (seconds or a
        timedelta; None: for ever) for their snapshots (False: put off, nothing lost)."""
        seconds = timeout_seconds(wait, "wait")
        with self._lock:
            self._core.check_writable()
            try:
                done = self._files.flush(seconds)
            except BaseException as exc:
                self._core.fail(exc, self.path, "flush")
                raise
            if not done:
                self.postponed += 1
            return done

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
            try:
                self._journal.sync_reset()
            except BaseException as exc:
                self._core.fail(exc, self.journal_path, "checkpoint")
                raise

    def _checkpoint(self, wait: float | None, final: bool = False) -> bool:
        """Write and sync the store, then reset the journal (the reset left for the
        next commit's sync, see ``Journal.reset``).  Commits call this when the
        journal is due, with ``wait=0``: a reader's snapshot puts it off to a later
        commit (False) instead of making the commit wait."""
        with self._lock:
            self._core.check_writable()
            journal = self._journal
            if journal.empty:
                return True
            try:
                # The store must be durable before the journal forgets how to redo it.
                if not self._files.checkpoint(wait, final=final):
                    self.postponed += 1
                    return False
                journal.reset()
            except BaseException as exc:
                self._core.fail(exc, self.path, "checkpoint")
                raise
            self.checkpoints += 1
            return True

    def shrink(self) -> int:
        """Give the free pages at the end of the file back to the file system;
        returns how many pages the store lost.

        Checkpoints first (the journal is then at rest, so no redo can reach past
        the new end), then drops the longest run of free pages that ends at the
        last page *and* makes up the head of the free list (the newest frees: a
        caller that frees the pages it wants returned last, as ``engine.kv``'s
        compaction does, gets all of them), with one atomic header write before
        the truncation (:meth:`StoreFile.cut <engine.pages.pagefile.StoreFile.cut>`;
        the journal, at rest, is truncated to its header too).  Waits up to
        ``reader_wait`` for readers' snapshots like ``checkpoint``.
        """
        with self._lock:
            self.checkpoint()
            files, free = self._files, self._free
            try:
                self._journal.release_space()  # the journal is at rest: its old space goes too
                drop = free.tail_run(files.header.page_count)
                if not drop:
                    return 0
                files.cut(files.header.page_count - drop, free.head_after(drop, self.page_size), self.reader_wait)
            except LockedError:
                raise  # readers' snapshots: nothing written
            except BaseException as exc:
                self._core.fail(exc, self.path, "shrink")
                raise
            free.drop(drop)
            return drop

    # -- checking ------------------------------------------------------------------------
    def verify(self) -> list[str]:
        """Check every invariant; raise CorruptFileError (or EngineError) on a problem.

        Header sane and file long enough; free list in range without cycle (so
        every page is live or free exactly once); every page matches its checksum;
        the journal chain consistent and every op inside the store; the writer's
        memory agrees with the disk (:func:`engine.pages.upkeep.verify_parts`).
        """
        with self._lock:
            self._core.check_open()
            return verify_parts(self._core.fs, self._files, self._free, self._journal)

    def stats(self) -> dict[str, int]:
        """Figures about the store (see :func:`engine.pages.upkeep.parts_stats`):
        ``commits``, ``checkpoints`` and ``postponed`` (flushes and checkpoints
        put off because a reader held a snapshot) among them."""
        with self._lock:
            self._core.check_open()
            counters = {"commits": self.commits, "checkpoints": self.checkpoints, "postponed": self.postponed}
            return parts_stats(self._files, self._free, self._journal, counters)

    # -- closing -------------------------------------------------------------------------
    def close(self) -> None:
        """Checkpoint (unless a failure stopped the store's writes) and release the
        files, the writer lock last (the store core's close, once)."""
        with self._lock:
            core = self._core
            if not core.begin_close():
                return
            try:
                if not core.failed:
                    self._close_checkpoint()
            finally:
                core.finish_close()

    def _close_checkpoint(self) -> None:
        """The writer's last writes: a checkpoint that also clears JOURNAL_LIVE."""
        try:
            if not self._journal.empty:
                if not self._files.checkpoint(self.reader_wait, final=True):
                    raise LockedError(f"{self.path}: readers held a snapshot for over {self.reader_wait:g} s "
                                      "(reader_wait)", self.path)
                self._journal.reset()
                self.checkpoints += 1
            self._journal.sync_reset()
            if self._journal.empty:
                self._files.clear_journal_live(self.reader_wait)  # if the checkpoint had nothing to write
        except LockedError as exc:
            # A reader's snapshot outlasted reader_wait: the journal keeps
            # every commit and the next writable open redoes them.
            log.warning("%s; left to the next open's recovery", exc)

    def __enter__(self) -> PageStore:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<PageStore {self.path!r} writer page_size={self.page_size}>"
