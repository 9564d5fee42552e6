"""PageReader: a read-only view of a page store, for readers beside a writer.

Any number of readers, in any process, may have a store open while one writer
(:class:`~engine.pages.store.PageStore`) runs.  A reader never writes and never
recovers: a store whose journal holds transactions no live writer is applying
(a crashed writer) raises :class:`RecoveryNeededError` until a writer opens it.

A reader sees what the writer has written to the store file: the state of the
last checkpoint, or of every commit with ``apply="commit"``.  Each read holds a
shared lock on the store file (the writer writes pages under an exclusive one),
so it never sees a half-written flush; :meth:`PageReader.snapshot` holds it
across several reads.  The header, free list and checksums are reloaded when
the file changed: when the store file lock's change count moved (every
exclusive hold of the lock moves it, :meth:`GatedLock.changes
<engine.fs.GatedLock.changes>`), or, for a store without the count (no writer
of this version opened it), when its header bytes or mtime changed, or a page
does not match its checksum (mtime can miss two flushes in one clock tick).
Each reload notes which pages were written since the last one
(:meth:`take_changed`), so a cache of pages above the reader drops those and
keeps the rest: the pages the writer's flushes recorded in the store lock's
change ring (then only their checksum entries are read again, 4 bytes each), or,
when the ring does not reach back that far (or the store has none), the pages
whose checksum entry changed (the checksum file read whole and compared).
With a change count, the same reload can be done without the lock
(:meth:`PageReader.take_unlocked`, a seqlock: applied only when the count was
even and did not move across the reads), which is how a key-value reader takes
a commit without a system call for the lock.
"""

from __future__ import annotations

import os
import threading
from array import array
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from types import TracebackType
from typing import NoReturn

from engine.conventions import timeout_seconds
from engine.errors import ConfigError, CorruptFileError, EngineError, FormatError, LockedError
from engine.fs import FileHandle, FileSystem, GatedLock, OpenMode, as_path, lock_handle, resolve
from engine.fs.core import StoreCore
from engine.lifetime import ClosedWhenDropped
from engine.pages import codec, store_codec
from engine.pages import sums as sums_module
from engine.pages.journal import journal_path
from engine.pages.recovery import page_range, pages_words, verify_journal, walk_free_list
from engine.pages.store_codec import StoreHeader
from engine.pages.storefile import (
    PageError,
    RecoveryNeededError,
    check_live,
    check_store_size,
    gate_path,
    journal_present,
    missing_journal_error,
    read_header,
    slice_page,
)

SUM_SIZE = store_codec.SUM.size
#: What changed since a reload (PageReader._stage): the change ring's head, the
#: header and its bytes, the written pages' checksum entries, the free list (None:
#: unchanged).
_Staged = tuple[int, StoreHeader, bytes, dict[int, bytes], list[int] | None]
#: Pages appended since the last reload that one staged reload takes (more: the whole reload).
_GROWN = 1024
#: The smallest block changed_entries compares before halving (bytes).
_BLOCK = 1024


def not_visible_words(beyond: bool, count: int) -> str:
    """Why a reader cannot read a page: past the end of the store file
    (``beyond``) or free in it, with the store file's pages in words."""
    holds = f"the store file holds {page_range(count)}"
    where = f"beyond what the store file holds yet ({holds})" if beyond else f"free in the store file ({holds})"
    return (
        f"{where}; pages a writer has committed reach readers at its next flush or checkpoint "
        '(a writer opened with apply="commit" makes every commit visible at once)'
    )


def flushing_error(path: str) -> RecoveryNeededError:
    return RecoveryNeededError(
        f"{path}: a writer stopped while writing pages into the store file; open the store for writing once "
        "to finish from its journal (nothing committed is lost)"
    )


class PageReader(ClosedWhenDropped):
    """A read-only page store handle; open with :meth:`open` (or
    ``PageStore.open_reader``).  A thin class over a reader's
    :class:`~engine.fs.core.StoreCore` (no writer lock, no recovery)."""

    readonly = True
    _core: StoreCore  # (set first in __init__)

    def __init__(self, core: StoreCore, store_lock: GatedLock, header: StoreHeader, lock_wait: float | None) -> None:
        self._core = core
        self._fs = core.fs
        self.path = core.path
        self.journal_path = journal_path(self.path)
        self._store_lock = store_lock
        self._handle = store_lock.handle
        self._header = header
        self._header_raw: bytes | None = None  # its bytes, once a staged reload read them
        #: How long a read waits for the writer's page writes (None: as long as they take).
        self.lock_wait = lock_wait
        self._lock = threading.RLock()
        self._free: set[int] = set()
        self._free_order: list[int] = []
        # Header bytes and mtime of the loaded state (a store without a change count).
        self._key: tuple[bytes, int] | None = None
        self._sums: array[int] | None = None  # None: no usable sums file
        self._sums_handle: FileHandle | None = None  # the sums file, for the entries of a few pages
        self._head: int | None = None  # the store lock's change ring head at the last reload
        self._seen: int | None = None  # the store file lock's change count at the last reload
        self._count: Callable[[], int] | None = None  # its loader (change_count)
        # Pages whose checksum entry changed (or that have none) since the last
        # take_changed(); None: unknown, all of them.
        self._changed: set[int] | None = None
        self._sum: store_codec.PageSum = store_codec.page_sum  # and its kind of entry
        self._shared_depth = 0
        #: Readers never repair anything: always an empty report.
        self.recovery = core.report

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        *,
        page_size: int | None = None,
        lock_wait: float | timedelta | None = None,
        fs: FileSystem | None = None,
    ) -> PageReader:
        """Open the store at ``path`` (a str or os.PathLike) for reading: no lock
        held between reads, nothing repaired (the store core's reader sequence).

        ``page_size``, if given, must be the store's.  ``lock_wait`` (seconds or
        a timedelta; None, the default: as long as it takes) bounds how long a
        read waits for the writer's page writes (the shared lock on the store
        file), then LockedError.  RecoveryNeededError if a crashed writer left
        work for recovery (a flush mark in the header, or journal transactions
        while no writer holds the journal); FileNotFoundError if there is no store.
        """
        path = as_path(path, "path")
        if page_size is not None and not store_codec.valid_page_size(page_size):
            raise ConfigError(f"page_size must be a power of two from 512 to 65536, not {page_size}")
        wait = timeout_seconds(lock_wait, "lock_wait")
        fs = resolve(fs)
        core = StoreCore(fs, path, "page store", writer=False)
        with core.opening():
            handle = core.keep(fs.open(path, OpenMode.READ))
            # Kept after the handle, so released before it (the lock and its gate first).
            store_lock = core.keep(GatedLock(fs, handle, gate_path(path), what="store file lock"))
            store_lock.acquire(exclusive=False, wait=wait)
            try:
                header = read_header(path, handle)
            finally:
                store_lock.release()
            if page_size is not None and page_size != header.page_size:
                raise ConfigError(f"{path}: page size is {header.page_size}, not {page_size}")
            if header.flags & store_codec.FLUSHING:
                raise flushing_error(path)
            jpath = journal_path(path)
            if not journal_present(fs, jpath) and header.flags & store_codec.JOURNAL_LIVE:
                raise missing_journal_error(path, jpath)
            check_journal_applied(fs, jpath)
            reader = cls(core, store_lock, header, wait)
        core.opened(reader)
        return reader

    # -- properties ------------------------------------------------------------------------
    @property
    def page_size(self) -> int:
        return self._header.page_size

    @property
    def page_count(self) -> int:
        """Pages in the store (ids 1..page_count), live and free: the header's
        field, read now under the shared lock (checked by its CRC; a header marked
        mid-flush is RecoveryNeededError).  The free list and the checksums are
        not loaded for it: they are checked where pages are read (:meth:`read`,
        :attr:`free_pages`, :meth:`verify`), so a damaged free list does not hide
        how many pages there are (a planner splits them into ranges whose reads
        report the damage)."""
        with self._shared():
            return self._current_header().page_count

    @property
    def free_pages(self) -> list[int]:
        """The free page ids, in free-list order (the next allocation first)."""
        with self._shared():
            self._refresh()
        return list(self._free_order)

    @property
    def live_pages(self) -> list[int]:
        """Allocated page ids, ascending."""
        free = set(self.free_pages)
        return [p for p in range(1, self.page_count + 1) if p not in free]

    @property
    def journal_size(self) -> int:
        return 0

    @property
    def fs(self) -> FileSystem:
        """The file-system seam the reader was opened with."""
        return self._fs

    @property
    def closed(self) -> bool:
        return self._core.closed

    # -- reading -------------------------------------------------------------------------
    def read(self, page: int, offset: int = 0, size: int | None = None) -> bytes:
        """Bytes of a live page as the store file holds them (all of it by default)."""
        with self._lock:
            core = self._core
            if core.closed:  # (the check inline: this is the reader's hot path)
                core.check_open()
            with self._shared():
                self._refresh()
                try:
                    data = self._read_live(page)
                except (PageError, CorruptFileError):
                    # Without a change count the free list and checksums are cached
                    # by header bytes and mtime, and mtime can miss two commits in
                    # one clock tick: look again first (a damaged page fails again).
                    self._forget()
                    self._refresh()
                    data = self._read_live(page)
            return slice_page(self.path, page, data, offset, size, self.page_size)

    def _read_live(self, page: int) -> bytes:
        count = self._header.page_count
        if type(page) is int and (page > count or page in self._free):
            # A writer may have committed the page already: it reaches this file
            # (and readers) at the writer's next flush or checkpoint.
            raise PageError(self.path, page, page * self.page_size, not_visible_words(page > count, count))
        check_live(self.path, page, count, False, self.page_size)
        return self._read_disk_page(page)

    def _read_disk_page(self, page: int) -> bytes:
        """Page ``page`` from the store file, checked against its checksum if known."""
        ps = self.page_size
        return self._checked(page, self._handle.read_at(page * ps, ps))

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
        self._store_lock.acquire(exclusive=False, wait=self.lock_wait)
        self._shared_depth = 1
        try:
            yield
        finally:
            self._shared_depth = 0
            if not self._core.closed:  # closed meanwhile (an unfinished iterator): the lock went with the file
                self._store_lock.release()

    @contextmanager
    def snapshot(self) -> Iterator[PageReader]:
        """Several reads that see one committed state (the shared lock is held for
        the whole block: the writer's page writes wait)."""
        with self._lock:
            self._core.check_open()
            with self._shared():
                yield self

    def _read_header(self) -> StoreHeader:
        """The store file's header (:meth:`_current_header`), made the loaded one."""
        self._header, self._header_raw = self._current_header(), None
        return self._header

    def _current_header(self) -> StoreHeader:
        """The store file's header as it is now (under the shared lock), nothing loaded."""
        header = read_header(self.path, self._handle)
        if header.flags & store_codec.FLUSHING:
            # We hold the shared lock, so no writer is flushing now: one died mid-flush.
            raise flushing_error(self.path)
        return header

    def change_count(self) -> Callable[[], int] | None:
        """A function of no arguments loading the store file lock's change count
        now, without the lock (None: the store has no count yet): while it is
        what it was when a snapshot was taken, nothing has been written to the
        store file since, so what that snapshot read is still the file's state
        (see :class:`~engine.fs.GatedLock`).  Valid while the reader is open."""
        if self._count is None:
            self._count = self._store_lock.changes()
        return self._count

    def take_changed(self) -> set[int] | None:
        """The pages written since the last call, by the reloads in between (the
        change ring's pages, or those whose checksum entry changed or that have
        no entry); None: unknown (the first load, a store without checksums),
        take every page as changed.  For the one cache of pages kept above this
        reader."""
        lock = self._lock
        lock.acquire()  # (not a with block: once per commit a key-value reader takes)
        try:
            changed, self._changed = self._changed, set()
        finally:
            lock.release()
        return changed

    def _forget(self) -> None:
        """Make the next :meth:`_refresh` reload."""
        self._key = None
        self._seen = None
        self._head = None

    def _refresh(self) -> None:
        """Reload header, free list and checksums if the store file changed (under the shared lock)."""
        count = self._count or self.change_count()
        seen = None if count is None else count()
        key = None
        if seen is not None:
            if seen == self._seen:
                return  # no exclusive hold since the last reload: the file is as it was
            # Only the pages the change ring names, when it names them all (an odd
            # count: a writer died holding the lock, and what it wrote is not recorded).
            staged = None if seen % 2 else self._stage()
            if staged is not None:
                self._apply(seen, staged)
                return
        else:
            key = (self._handle.read_at(0, store_codec.HEADER_SIZE), self._fs.mtime_ns(self.path))
            if key == self._key:
                return
        header = self._read_header()
        check_store_size(self.path, header, self._handle.size())
        ring = None if seen is None else self._store_lock.written_since(None)
        self._head = None if ring is None else ring[0]  # (the next reload's ring starts here)
        self._reload(header)
        self._key, self._seen = key, seen

    def _stage(self) -> _Staged | None:
        """What changed since the last reload when only the pages the change ring
        names were written: the ring's head, the header, their checksum entries (4
        bytes each, not the whole file) and the free list if it may have moved;
        nothing applied yet.  A store that grew (pages appended: a split, a
        longer free list) stages the entries of every page past those loaded
        too, read in one span.  None (reload whole) when the ring does not name
        them all, the page count shrank, the header is marked mid-flush, there
        are no checksums, or an entry is not in the checksum file yet.  Under the
        shared lock, or between two equal loads of the change count
        (:meth:`take_unlocked`)."""
        sums, handle, before = self._sums, self._sums_handle, self._header
        if sums is None or handle is None:
            return None
        raw = self._handle.read_at(0, store_codec.HEADER_SIZE)
        if raw == self._header_raw:
            header = before  # (the usual commit leaves the header as it was: decoded and checked already)
        else:
            try:
                header = store_codec.decode_header(raw)
            except ValueError:
                return None  # (the whole reload reports it)
        count = header.page_count
        if header.flags & store_codec.FLUSHING or header.page_size != before.page_size or count < before.page_count:
            return None
        ring = self._store_lock.written_since(self._head)
        if ring is None or ring[1] is None:
            return None
        pages = ring[1]
        loaded = len(sums)  # entries of pages 1..loaded-1 are loaded
        grown = count > before.page_count and count >= loaded
        entries: dict[int, bytes] = {}
        read_at, first = handle.read_at, store_codec.sum_offset(0)
        for page in pages:  # (the usual commit: two pages, checked one by one rather than by min() and max())
            if not 0 < page <= count:
                return None
            if page < loaded:
                entry = read_at(first + page * SUM_SIZE, SUM_SIZE)  # (store_codec.sum_offset(page))
                if len(entry) < SUM_SIZE:
                    return None
                entries[page] = entry
            elif not grown:
                return None  # (a page without a loaded entry and no growth to read it with: reload whole)
        if grown:
            # The store grew: the entries of the pages past the loaded ones
            # (appended since) in one read, all of them or reload whole.
            if count - loaded >= _GROWN or self._handle.size() < (count + 1) * header.page_size:
                return None  # (a large growth, or a file too short: the whole reload reads or reports it)
            span = handle.read_at(store_codec.sum_offset(loaded), (count + 1 - loaded) * SUM_SIZE)
            if len(span) < (count + 1 - loaded) * SUM_SIZE:
                return None
            for at, page in enumerate(range(loaded, count + 1)):
                entries[page] = span[at * SUM_SIZE : (at + 1) * SUM_SIZE]
        free = None
        if header.free_head != before.free_head or not self._free.isdisjoint(pages):
            try:
                free = walk_free_list(self.path, header, self._handle.read_at)
            except EngineError:
                return None  # (the whole reload reports it)
        return ring[0], header, raw, entries, free

    def _apply(self, seen: int, staged: _Staged) -> None:
        """Make ``staged`` (:meth:`_stage`) the loaded state, that of change count ``seen``."""
        head, header, raw_header, entries, free = staged
        sums = self._sums
        assert sums is not None
        count = header.page_count
        if count > self._header.page_count and count >= len(sums):
            # (the store grew: _stage read every entry from len(sums) on)
            sums.extend([0] * (count + 1 - len(sums)))
        for page, entry in entries.items():
            sums[page] = int.from_bytes(entry, "little")
        if free is not None:
            self._free_order, self._free = free, set(free)
        if self._changed is not None:
            self._changed.update(entries)
        self._header, self._header_raw, self._head, self._key, self._seen = header, raw_header, head, None, seen

    # -- without the lock: a seqlock over the change count --------------------------------
    def take_unlocked(self, page: int) -> tuple[int, int, bytes] | None:
        """The store file's state taken without the shared lock, and page ``page``
        read (checked) in it: (the change count it is the state of, its page
        count, the page's bytes); None when it cannot be had so, and the caller
        takes the lock (a store without a count, a writer holding the lock or
        taking it meanwhile, a change the change ring does not name page by page,
        the page count moved, ``page`` not live).

        A seqlock: the change count is loaded before and after the reads; equal
        and even, no exclusive hold was under way or began in between (each moves
        the count at its start, before its first write, and at its end), so what
        was read is one flushed state, as under the lock.  Nothing is applied
        until the second load agrees; a page that then does not match its
        checksum is CorruptFileError, as :meth:`read` raises it.  (Ordering: the
        writer stores the count before its first ``pwrite`` and the reader loads
        it after its last ``pread``, each across a system call; on x86-64's
        ordered stores and loads that is enough, as the get from memory in
        :mod:`engine.kv.reader` already assumes.)"""
        lock = self._lock
        lock.acquire()  # (not a with block: no bound __enter__/__exit__ made per commit taken)
        try:
            count = self._count or self.change_count()
            if count is None or self._core.closed:
                return None
            seen = count()
            staged = None
            if seen % 2 or (seen != self._seen and (staged := self._stage()) is None):
                return None
            header = self._header if staged is None else staged[1]
            free = self._free if staged is None or staged[4] is None else set(staged[4])
            if not 0 < page <= header.page_count or page in free:
                return None
            ps = header.page_size
            data = self._handle.read_at(page * ps, ps)
            if count() != seen:
                return None
            if staged is not None:
                self._apply(seen, staged)
            return seen, header.page_count, sums_module.check_read(self.path, page, data, ps, self._sums, self._sum)
        finally:
            lock.release()

    def read_unlocked(self, seen: int, page: int) -> bytes | None:
        """Page ``page`` in the state of change count ``seen`` (one
        :meth:`take_unlocked` returned), read without the lock: None when the
        count has moved since (the caller takes the lock), else as :meth:`read`
        (checked against its checksum)."""
        with self._lock:
            count = self._count
            if count is None or self._core.closed or seen != self._seen or count() != seen:
                return None
            header = self._header
            if not 0 < page <= header.page_count or page in self._free:
                return None
            ps = header.page_size
            data = self._handle.read_at(page * ps, ps)
            if count() != seen:
                return None
            return self._checked(page, data)

    def _checked(self, page: int, data: bytes) -> bytes:
        return sums_module.check_read(self.path, page, data, self.page_size, self._sums, self._sum)

    def _reload(self, header: StoreHeader) -> None:
        """Load free list and checksums whole (the changed pages found by
        comparing the checksums with the ones loaded before)."""
        self._free_order = walk_free_list(self.path, header, self._handle.read_at)
        self._free = set(self._free_order)
        if self._sums_handle is not None:
            self._sums_handle.close()
            self._sums_handle = None
        # A sums file there but unusable is CorruptFileError (no page could be
        # checked): a reader never reads on as if every page were checked.
        loaded = sums_module.load_present(self._fs, self.path, self.page_size)
        # (the entries loaded, as the array holds them: what the new ones are compared with)
        old = self._sums.tobytes() if self._sums is not None else None
        self._sums = None
        if loaded is not None:
            self._sums, self._sum = loaded[0], loaded[1]
            # Kept for the next reloads' few entries (the file is rewritten in
            # place, never replaced, while a writer runs).
            self._sums_handle = self._fs.open(sums_module.sums_path(self.path), OpenMode.READ)
        self._note_changed(old, header.page_count)

    def _note_changed(self, old: bytes | None, page_count: int) -> None:
        """Add the pages whose checksum entry differs between ``old`` and the
        entries just loaded (each 4 bytes, index = page id) to :attr:`_changed`."""
        if self._changed is None:
            return
        new = self._sums.tobytes() if self._sums is not None else None
        if old is None or new is None:
            self._changed = None  # no entries to compare: every page may have changed
            return
        changed = self._changed
        changed.update(changed_entries(old, new))
        # Pages without an entry on either side (cut off, or appended and not
        # summed yet) are never known unchanged.
        low = min(len(old), len(new)) // SUM_SIZE
        changed.update(range(low, max(len(old) // SUM_SIZE, len(new) // SUM_SIZE, page_count + 1)))

    def stats(self) -> dict[str, int]:
        """Figures about the store file as this reader sees it: ``page_size``,
        ``pages`` (``live_pages`` + ``free_pages``) and ``store_bytes``."""
        with self._lock:
            self._core.check_open()
            with self._shared():
                self._refresh()
                free = len(self._free_order)
                count = self._header.page_count
                size = self._handle.size()
        return {
            "page_size": self.page_size,
            "pages": count,
            "live_pages": count - free,
            "free_pages": free,
            "store_bytes": size,
        }

    def transaction(self) -> NoReturn:
        """Readers cannot write: ConfigError (open the store with ``PageStore.open``)."""
        self._core.check_writable()
        raise AssertionError("a reader's core refuses writes")  # pragma: no cover

    def checkpoint(self) -> NoReturn:
        """Readers cannot write: ConfigError."""
        self._core.check_writable()
        raise AssertionError("a reader's core refuses writes")  # pragma: no cover

    # -- checking ------------------------------------------------------------------------
    def verify(self) -> list[str]:
        """Check the store as this reader sees it: header, free list, every page
        against its checksum, and the journal when no writer is live.  Raises
        CorruptFileError (or another EngineError) on a problem; returns notes."""
        with self._lock:
            self._core.check_open()
            with self._shared():
                self._forget()
                self._refresh()
                header = self._header
                free = list(self._free_order)
                for page in range(1, header.page_count + 1):
                    self._read_disk_page(page)  # raises if it does not match its checksum
            notes = verify_journal(self._fs, self.journal_path, header)
            notes.append(pages_words(header, len(free)))
            return notes

    # -- closing -------------------------------------------------------------------------
    def close(self) -> None:
        """Release the store file (the core's close, once: closing twice is fine)."""
        with self._lock:
            if self._core.begin_close():
                try:
                    if self._sums_handle is not None:
                        self._sums_handle.close()
                        self._sums_handle = None
                finally:
                    self._core.finish_close()

    def __enter__(self) -> PageReader:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<PageReader {self.path!r} page_size={self.page_size}>"


def changed_entries(old: bytes, new: bytes) -> list[int]:
    """Indexes of the 4-byte entries that differ between ``old`` and ``new``
    (over their common length), by halving the spans that differ: a commit's
    few changed entries among many thousands cost a few dozen comparisons."""
    out: list[int] = []
    size = min(len(old), len(new)) // SUM_SIZE * SUM_SIZE
    if old[:size] == new[:size]:
        return out
    # Blocks first (a few dozen slices), then halve every differing block down to
    # single entries (ascending order); bytes slices compare with one memcmp
    # (memoryviews compare item by item).
    block = max(_BLOCK, size // 64 // SUM_SIZE * SUM_SIZE)
    spans = [(at, min(at + block, size)) for at in range(size - (size - 1) % block - 1 if size else 0, -1, -block)]
    while spans:
        start, end = spans.pop()
        if old[start:end] == new[start:end]:
            continue
        if end - start == SUM_SIZE:
            out.append(start // SUM_SIZE)
            continue
        mid = start + (end - start) // SUM_SIZE // 2 * SUM_SIZE
        spans.append((mid, end))
        spans.append((start, mid))
    return out


def check_journal_applied(fs: FileSystem, jpath: str) -> None:
    """RecoveryNeededError if the journal holds transactions and no writer is live
    to apply them (a live writer holds the journal's lock for its lifetime);
    CorruptFileError naming it if its name leads to no file (a broken link)."""
    if not journal_present(fs, jpath):
        return
    with fs.open(jpath, OpenMode.READ) as jh:
        raw = jh.read_at(0, codec.FILE_HEADER_SIZE)
        try:
            first = codec.decode_file_header(raw).first
        except ValueError as exc:
            raise FormatError(jpath, 0, "a JRNL header", raw[:4].hex(" ")) from exc
        if first == 0:
            return
        try:
            lock_handle(jh, exclusive=False, wait=0, what="journal lock")
        except LockedError:
            return  # a live writer applies what its journal holds
        raise RecoveryNeededError(
            f"{jpath}: holds committed transactions not yet in the store file (its writer did not close it); "
            "open the store for writing once to apply them (nothing is lost)"
        )
