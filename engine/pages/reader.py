"""PageReader: a read-only view of a page store, for readers beside a writer.

Any number of readers, in any process, may have a store open while one writer
(:class:`~engine.pages.store.PageStore`) runs.  A reader never writes and never
recovers: a store whose journal holds transactions no live writer is applying
(a crashed writer) raises :class:`RecoveryNeededError` until a writer opens it.

A reader sees what the writer has written to the store file: the state of the
last checkpoint, or of every commit with ``apply="commit"``.  Each read holds a
shared lock on the store file (the writer writes pages under an exclusive one),
so it never sees a half-written flush; :meth:`PageReader.snapshot` holds it
across several reads.  The header and free list are reloaded when the file
changed (its header bytes or mtime).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from types import TracebackType
from typing import NoReturn

from engine.conventions import timeout_seconds
from engine.errors import ConfigError, FormatError, LockedError
from engine.fs import FileSystem, GatedLock, OpenMode, as_path, lock_handle, resolve
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
        #: How long a read waits for the writer's page writes (None: as long as they take).
        self.lock_wait = lock_wait
        self._lock = threading.RLock()
        self._free: set[int] = set()
        self._free_order: list[int] = []
        self._key: tuple[bytes, int] | None = None  # header bytes and mtime of the loaded state
        self._sums: list[int] | None = None  # None: no usable sums file
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
        """Pages in the store (ids 1..page_count), live and free."""
        with self._shared():
            return self._read_header().page_count

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
                except PageError:
                    # The free list is cached by header bytes and mtime, and mtime
                    # can miss two commits in one clock tick: look again first.
                    self._key = None
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
        return sums_module.check_read(self.path, page, self._handle.read_at(page * ps, ps), ps, self._sums, self._sum)

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
        header = read_header(self.path, self._handle)
        if header.flags & store_codec.FLUSHING:
            # We hold the shared lock, so no writer is flushing now: one died mid-flush.
            raise flushing_error(self.path)
        self._header = header
        return header

    def _refresh(self) -> None:
        """Reload header, free list and checksums if the store file changed (under the shared lock)."""
        raw = self._handle.read_at(0, store_codec.HEADER_SIZE)
        key = (raw, self._fs.mtime_ns(self.path))
        if key == self._key:
            return
        header = self._read_header()
        check_store_size(self.path, header, self._handle.size())
        self._free_order = walk_free_list(self.path, header, self._handle.read_at)
        self._free = set(self._free_order)
        self._sums = None
        # A sums file there but unusable is CorruptFileError (no page could be
        # checked): a reader never reads on as if every page were checked.
        loaded = sums_module.load_present(self._fs, self.path, self.page_size)
        if loaded is not None:
            self._sums, self._sum = loaded[0].tolist(), loaded[1]
        self._key = key

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
                self._key = None
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
                self._core.finish_close()

    def __enter__(self) -> PageReader:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<PageReader {self.path!r} page_size={self.page_size}>"


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
