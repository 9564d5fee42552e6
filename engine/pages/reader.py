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

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import TracebackType
from typing import NoReturn

from engine.errors import ClosedError, ConfigError, CorruptFileError, FormatError, LockedError
from engine.fs import FileSystem, GatedLock, OpenMode, RecoveryReport, lock_handle
from engine.pages import codec, store_codec
from engine.pages import sums as sums_module
from engine.pages.journal import journal_path
from engine.pages.recovery import verify_journal, walk_free_list
from engine.pages.store_codec import StoreHeader
from engine.pages.storefile import (
    PageError,
    RecoveryNeededError,
    check_live,
    check_store_size,
    file_present,
    gate_path,
    journal_present,
    missing_journal_error,
    read_header,
    slice_page,
)
from engine.pages.sums import sums_path


def flushing_error(path: str) -> RecoveryNeededError:
    return RecoveryNeededError(f"{path}: a writer died while writing pages; open it for writing to recover")


class PageReader:
    """A read-only page store handle; open with :meth:`open` (or
    ``PageStore.open(path, readonly=True)``)."""

    readonly = True

    def __init__(self, fs: FileSystem, path: str, store_lock: GatedLock, header: StoreHeader) -> None:
        self._fs = fs
        self.path = path
        self.journal_path = journal_path(path)
        self._store_lock = store_lock
        self._handle = store_lock.handle
        self._header = header
        self._lock = threading.RLock()
        self._closed = False
        self._free: set[int] = set()
        self._free_order: list[int] = []
        self._key: tuple[bytes, int] | None = None  # header bytes and mtime of the loaded state
        self._sums: list[int] | None = None  # None: no usable sums file
        self._sum: store_codec.PageSum = store_codec.page_sum  # and its kind of entry
        self._shared_depth = 0
        #: Readers never repair anything: always an empty report.
        self.recovery = RecoveryReport(path)

    @classmethod
    def open(cls, path: str, page_size: int | None = None, *, fs: FileSystem) -> PageReader:
        """Open the store at ``path`` for reading.

        RecoveryNeededError if a crashed writer left work for recovery (a flush
        mark in the header, or journal transactions while no writer holds the
        journal); FileNotFoundError if there is no store.
        """
        handle = fs.open(path, OpenMode.READ)
        store_lock = GatedLock(fs, handle, gate_path(path), what="store file lock")
        try:
            store_lock.acquire(exclusive=False, wait=None)
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
        except BaseException:
            store_lock.close()
            handle.close()
            raise
        return cls(fs, path, store_lock, header)

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
        return self._closed

    # -- reading -------------------------------------------------------------------------
    def read(self, page: int, offset: int = 0, size: int | None = None) -> bytes:
        """Bytes of a live page as the store file holds them (all of it by default)."""
        with self._lock:
            self._check_open()
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
        is_free = page in self._free if isinstance(page, int) else False
        check_live(self.path, page, self._header.page_count, is_free, self.page_size, reader=True)
        return self._read_disk_page(page)

    def _read_disk_page(self, page: int) -> bytes:
        """Page ``page`` from the store file, checked against its checksum if known."""
        ps = self.page_size
        data = self._handle.read_at(page * ps, ps)
        if len(data) < ps:
            raise CorruptFileError(self.path, page * ps + len(data), f"page {page} of {ps} bytes", "end of file")
        sums = self._sums
        if sums is not None and page < len(sums) and self._sum(data) != sums[page]:
            raise CorruptFileError(
                self.path, page * ps, f"page {page} matching its checksum", "a different CRC (damaged)"
            )
        return data

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
        self._store_lock.acquire(exclusive=False, wait=None)
        self._shared_depth = 1
        try:
            yield
        finally:
            self._shared_depth = 0
            self._store_lock.release()

    @contextmanager
    def snapshot(self) -> Iterator[PageReader]:
        """Several reads that see one committed state (the shared lock is held for
        the whole block: the writer's page writes wait)."""
        with self._lock:
            self._check_open()
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
        spath = sums_path(self.path)
        if file_present(self._fs, spath, "the page checksum file"):
            with self._fs.open(spath, OpenMode.READ) as sh:
                loaded = sums_module.load(sh.read_all(), self.page_size)
            if loaded is not None:
                self._sums, self._sum = loaded[0].tolist(), loaded[1]
        self._key = key

    def transaction(self) -> NoReturn:
        """Readers cannot write: ConfigError (open the store without ``readonly``)."""
        raise ConfigError(f"{self.path}: opened read-only")

    def checkpoint(self) -> NoReturn:
        """Readers cannot write: ConfigError."""
        raise ConfigError(f"{self.path}: opened read-only")

    # -- checking ------------------------------------------------------------------------
    def verify(self) -> list[str]:
        """Check the store as this reader sees it: header, free list, every page
        against its checksum, and the journal when no writer is live.  Raises
        CorruptFileError (or another EngineError) on a problem; returns notes."""
        with self._lock:
            self._check_open()
            with self._shared():
                self._key = None
                self._refresh()
                header = self._header
                free = list(self._free_order)
                spath = sums_path(self.path)
                if self._sums is None and file_present(self._fs, spath, "the page checksum file"):
                    raise CorruptFileError(
                        spath,
                        0,
                        f"an ENGSUMS header for {header.page_size}-byte pages",
                        "a damaged or foreign header (the next writable open rebuilds the file from the store)",
                    )
                for page in range(1, header.page_count + 1):
                    self._read_disk_page(page)  # raises if it does not match its checksum
            notes = verify_journal(self._fs, self.journal_path, header)
            notes.append(f"{header.page_count} pages, {len(free)} free, page size {header.page_size}")
            return notes

    # -- closing -------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError(f"{self.path}: page store is closed")

    def close(self) -> None:
        """Release the store file (closing twice is fine)."""
        with self._lock:
            if not self._closed:
                self._closed = True
                self._store_lock.close()
                self._handle.close()

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
            f"{jpath}: holds transactions not yet applied; open the store for writing once to recover"
        )
