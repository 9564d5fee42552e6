"""The store file as the writer holds it: its handle and lock, its header (as
committed and as on disk), its page checksums, the committed pages not yet
written into it, and the page cache.

One :class:`StoreFile` per writer (:class:`~engine.pages.store.PageStore`), which
owns it beside its :class:`~engine.pages.journal.Journal` and
:class:`~engine.pages.freelist.FreeList`.  Every write into the store file goes
through here, under the store file's exclusive lock (through its gate,
:class:`~engine.fs.GatedLock`), so readers in other processes never see half of
one: flushes of committed pages, checkpoints, header changes (the JOURNAL_LIVE
flag, a flush mark), recovery's redo and undo, and a shrink's cut.
"""

from __future__ import annotations

from collections.abc import Sequence

from engine.errors import CorruptFileError, LockedError
from engine.fs import FileHandle, FileSystem, GatedLock, RecoveryReport, crashpoint
from engine.pages import codec, store_codec
from engine.pages.cache import PageCache
from engine.pages.codec import ParsedTx
from engine.pages.recovery import StoreState, check_ops, redo, undo
from engine.pages.store_codec import StoreHeader
from engine.pages.storefile import check_store_size, gate_path, read_header, write_pages
from engine.pages.sums import PageSums
from engine.pages.transaction import Image, TransactionDelta


def read_raw_page(path: str, handle: FileHandle, page_size: int, page: int) -> bytes:
    """Page ``page`` from the store file, unchecked (to compute its checksum)."""
    data = handle.read_at(page * page_size, page_size)
    if len(data) < page_size:
        raise CorruptFileError(path, page * page_size + len(data), f"page {page} of {page_size} bytes",
                               "end of file")
    return data


class StoreFile:
    """The writer's store file (see the module docstring).

    :attr:`header` is the committed state (the file plus what is not yet written
    into it); :attr:`unflushed` the committed page images not yet written (read
    only for everyone but this class: a transaction holds it for its fast path).
    """

    def __init__(self, fs: FileSystem, path: str, handle: FileHandle, header: StoreHeader, sums: PageSums,
                 *, cache_pages: int) -> None:
        self.path = path
        self.page_size = header.page_size
        self._handle = handle
        #: The committed header: the file's plus what is not yet written into it.
        self.header = header
        self._disk_header = header  # the header as the store file has it
        # (header, it with FLUSHING set, the bytes of both): what a flush writes
        self._flush_headers: tuple[StoreHeader | None, StoreHeader, bytes, bytes] = (None, header, b"", b"")
        # The store file's lock: exclusive while this writer writes pages, through
        # <path>-gate so readers' overlapping snapshots cannot starve it.
        self._lock = GatedLock(fs, handle, gate_path(path), what="store file lock")
        self._sums = sums
        self.cache = PageCache(cache_pages)
        #: Committed page images not yet written to the store file.
        self.unflushed: dict[int, Image] = {}
        # The byte ranges of them the journal covers (a set: the same page
        # rewritten by many transactions is one range to write), and the pages
        # whose whole image is to be written (no ranges kept for them).
        self._extents: set[tuple[int, int]] = set()
        self._whole: set[int] = set()

    @classmethod
    def open(cls, fs: FileSystem, path: str, handle: FileHandle, header: StoreHeader, report: RecoveryReport,
             *, cache_pages: int) -> StoreFile:
        """The store file open for writing on ``handle``, with its checksums
        (rebuilt from the store if missing or unusable, into ``report``)."""
        ps = header.page_size

        def read_page(page: int) -> bytes:
            return read_raw_page(path, handle, ps, page)

        sums = PageSums.open(fs, path, ps, header.page_count, read_page, report)
        return cls(fs, path, handle, header, sums, cache_pages=cache_pages)

    # -- reading -----------------------------------------------------------------------
    def raw_page(self, page: int) -> bytes:
        """Page ``page`` from the store file, unchecked."""
        return read_raw_page(self.path, self._handle, self.page_size, page)

    def read_at(self, off: int, size: int) -> bytes:
        """Bytes of the store file as it is (not what is still unflushed)."""
        return self._handle.read_at(off, size)

    def size(self) -> int:
        return self._handle.size()

    def committed_page(self, page: int) -> Image:
        """The committed image of ``page`` (not yet written, cache, else the store
        file, checked against its checksum); read only: transactions copy it
        before changing it."""
        data = self.unflushed.get(page)
        if data is not None:
            return data
        data = self.cache.get(page)
        if data is None:
            data = self.raw_page(page)
            sums = self._sums
            if page < len(sums.values):  # entries being rebuilt come first
                sums.check(page, data, self.page_size)
            self.cache.put(page, data)
        return data

    def overlay_read(self, off: int, size: int) -> bytes:
        """Committed bytes at store offset ``off`` (inside one page)."""
        page, at = divmod(off, self.page_size)
        return bytes(self.committed_page(page)[at : at + size])

    # -- committing --------------------------------------------------------------------
    def install(self, delta: TransactionDelta) -> None:
        """Make ``delta``'s pages and header the committed state (in memory)."""
        images = delta.images
        # The transaction is over: its images become the store's (no copy; nothing
        # mutates them: reads and new transactions copy).
        self.unflushed.update(images)
        self.cache.discard_many(images)
        if delta.whole:
            self._whole.update(delta.whole)
        if delta.ranges:
            self._extents.update(delta.ranges)
        header = self.header
        if delta.page_count != header.page_count or delta.free_head != header.free_head:
            self.header = StoreHeader(header.page_size, delta.page_count, delta.free_head, flags=header.flags)

    def flush(self, wait: float | None) -> bool:
        """Write the committed-but-unwritten pages and header to the store (no sync).

        Under the exclusive store lock, so readers see all of it or none of it;
        ``wait`` bounds the wait for readers' snapshots (shared locks): past it the
        flush is put off (False; the pages stay in memory and in the journal).
        Only the byte ranges the journal holds after-images for are written (whole
        pages for appended ones): a write torn by a crash then damages only bytes
        that redo rewrites.  Adjacent ranges become one write.
        """
        if not self.unflushed and self.header == self._disk_header:
            return True
        try:
            self._lock.acquire(exclusive=True, wait=wait)
        except LockedError:
            return False
        try:
            self._flush_locked()
        finally:
            self._lock.release()
        return True

    def _flush_locked(self) -> None:
        """:meth:`flush` with the exclusive store lock held."""
        self._lock.note_written(self.unflushed)  # (readers drop just these pages: GatedLock's change ring)
        if not self.unflushed and self.header == self._disk_header:
            return
        # Mark the flush in progress first: if this process dies half way, readers
        # that already have the store open see the mark, not a torn state.
        h, handle = self.header, self._handle
        if self._flush_headers[0] is not h:  # encoded once per header, not per flush
            flushing = StoreHeader(h.page_size, h.page_count, h.free_head, flags=h.flags | store_codec.FLUSHING)
            self._flush_headers = (h, flushing, store_codec.encode_header(flushing), store_codec.encode_header(h))
        _, flushing, marked, clean = self._flush_headers
        self._disk_header = flushing
        # The marked header goes out first, in the same batch as the pages.
        write_pages(handle, self.page_size, self.unflushed, self._whole, self._extents, (0, marked))
        self._sums.update(self.unflushed)
        handle.write_at(0, clean)
        self._disk_header = h
        self.cache.put_many(self.unflushed)
        self.unflushed.clear()
        self._extents.clear()
        self._whole.clear()

    def sync(self, what: str) -> None:
        """fdatasync the store file (crash points named after ``what``)."""
        crashpoint(f"pages.{what}.before-store-fsync")
        self._handle.fdatasync()
        crashpoint(f"pages.{what}.after-store-fsync")

    def checkpoint(self, wait: float | None, *, final: bool = False) -> bool:
        """Write every committed page and sync the store file and its checksums:
        then the journal may forget them.  ``final`` (at close) also clears the
        header's JOURNAL_LIVE flag in the same header write.  False (nothing
        written) if readers' snapshots outlast ``wait``."""
        try:
            self._lock.acquire(exclusive=True, wait=wait)
        except LockedError:
            return False
        try:
            h = self.header
            if final and h.flags & store_codec.JOURNAL_LIVE:
                self.header = StoreHeader(h.page_size, h.page_count, h.free_head,
                                          flags=h.flags & ~store_codec.JOURNAL_LIVE)
            self._flush_locked()
            self.sync("checkpoint")
            self._sums.sync("checkpoint")
        finally:
            self._lock.release()
        return True

    # -- the header's flags ------------------------------------------------------------
    def _write_header(self, new: StoreHeader, what: str, wait: float | None) -> bool:
        """Write ``new`` as the header, synced, under the exclusive lock (False:
        readers' snapshots outlasted ``wait``, nothing written)."""
        try:
            self._lock.acquire(exclusive=True, wait=wait)
        except LockedError:
            return False
        try:
            self._handle.write_at(0, store_codec.encode_header(new))
            self.sync(what)
        finally:
            self._lock.release()
        self.header = self._disk_header = new
        return True

    def _with_flags(self, set_: int = 0, clear: int = 0) -> StoreHeader:
        h = self.header
        return StoreHeader(h.page_size, h.page_count, h.free_head, flags=(h.flags | set_) & ~clear)

    def mark_journal_live(self) -> None:
        """Set the header's JOURNAL_LIVE flag, synced, before the first commit: from
        now until a clean close the latest commits may be only in the journal, and
        an open that finds the flag but no journal refuses instead of losing them
        (``docs/formats/pagestore.md``, "What the header records")."""
        if not self.header.flags & store_codec.JOURNAL_LIVE:
            self._write_header(self._with_flags(set_=store_codec.JOURNAL_LIVE), "open", None)

    def clear_journal_live(self, wait: float | None) -> None:
        """At a clean close, after the checkpoint that applied every commit (the
        caller checked the journal is empty): the store file alone is the whole
        store again (clear the flag, synced).  If readers' snapshots outlast
        ``wait`` the flag stays: harmless, the journal is there and at rest."""
        if not self._disk_header.flags & store_codec.JOURNAL_LIVE or self.unflushed:
            return
        self._write_header(self._with_flags(clear=store_codec.JOURNAL_LIVE), "close", wait)

    def clear_flush_mark(self) -> bool:
        """Recovery with nothing to replay: clear a flush mark (FLUSHING) left by
        an interrupted flush (the pages it covered were all journaled and applied
        before).  Whether there was one."""
        if not self.header.flags & store_codec.FLUSHING:
            return False
        self._write_header(self._with_flags(clear=store_codec.FLUSHING), "recover", None)
        return True

    # -- recovery ----------------------------------------------------------------------
    def replay(self, txs: Sequence[ParsedTx], jpath: str) -> tuple[int, int]:
        """Redo (or undo, for rolled-back ones) the journal's transactions the
        store file lacks, in journal order; then the header and the checksums of
        every page they touched, synced.  Returns (redone, undone)."""
        h = self.header
        replay = StoreState(h.page_size, h.page_count, h.free_head)
        redone = undone = 0
        self._lock.acquire(exclusive=True, wait=None)
        try:
            for tx in txs:
                if tx.applied:
                    # Already in the synced store; keep the count of appended pages right for checks.
                    check_ops(jpath, tx, replay)
                elif tx.rolled_back:
                    undo(self._handle, jpath, tx, replay)
                    undone += 1
                else:
                    redo(self._handle, jpath, tx, replay)
                    redone += 1
            if redone or undone or h.flags & store_codec.FLUSHING:
                new = StoreHeader(h.page_size, replay.page_count, replay.free_head,
                                  flags=h.flags & ~store_codec.FLUSHING)
                self._handle.write_at(0, store_codec.encode_header(new))
                self.sync("recover")
                self.header = self._disk_header = new
                # Checksums of every page the replayed transactions touched, from the
                # pages as they now are (a crash may have torn their entries too).
                touched = {
                    off // h.page_size
                    for tx in txs
                    if not tx.applied
                    for op in tx.ops
                    for off in codec.op_page_offsets(op)
                }
                self._sums.truncate_to(replay.page_count)
                self._sums.recompute(sorted(p for p in touched if p <= replay.page_count), self.raw_page)
                self._sums.sync("recover")
        finally:
            self._lock.release()
        return redone, undone

    def fill_missing_sums(self, report: RecoveryReport) -> None:
        """Checksums of pages the sums file lacks, computed from the store (see
        :meth:`PageSums.fill_missing`)."""
        self._sums.fill_missing(self.header.page_count, self.raw_page, report)

    # -- upkeep ------------------------------------------------------------------------
    def cut(self, count: int, free_head: int, wait: float | None) -> None:
        """Shrink the store to ``count`` pages with free-list head ``free_head``
        (the caller checkpointed, and the pages past ``count`` head the free
        list): the header in one atomic write, synced, before the file and its
        checksums are truncated, so a crash leaves the old store or the new one
        (maybe longer than it needs, which is valid).  Waits up to ``wait`` for
        readers' snapshots (then LockedError)."""
        ps = self.page_size
        old = self.header.page_count
        new = StoreHeader(ps, count, free_head, flags=self.header.flags)
        self._lock.acquire(exclusive=True, wait=wait)
        try:
            self._handle.write_at(0, store_codec.encode_header(new))
            self.sync("shrink")
            self.header = self._disk_header = new
            self._handle.truncate((count + 1) * ps)
            self.sync("shrink-truncate")
            self._sums.truncate_to(count)
            self._sums.handle.truncate(store_codec.sum_offset(count + 1))
            self._sums.sync("shrink")
        finally:
            self._lock.release()
        self.cache.discard_many(range(count + 1, old + 1))

    def verify(self) -> None:
        """The store file's part of ``verify()``: the header on disk is the one this
        writer wrote, the file is long enough, every cached page equals the disk
        and every written page matches its checksum (CorruptFileError if not)."""
        disk_header = self._read_disk_header()
        if disk_header != self._disk_header:
            raise CorruptFileError(self.path, 0, f"header {self._disk_header}", str(disk_header))
        ps = disk_header.page_size
        check_store_size(self.path, disk_header, self._handle.size())
        for page, data in self.cache.items():
            if page not in self.unflushed and self._handle.read_at(page * ps, ps) != data:
                raise CorruptFileError(self.path, page * ps, "cached page equal to disk")
        sums = self._sums
        for page in range(1, min(disk_header.page_count, len(sums.values) - 1) + 1):
            if page not in self.unflushed:
                sums.check(page, self.raw_page(page), ps)  # raises if it does not match

    def _read_disk_header(self) -> StoreHeader:
        return read_header(self.path, self._handle)

    def stats(self) -> dict[str, int]:
        """The store file's figures for ``stats()``."""
        cache = self.cache
        return {
            "store_bytes": self._handle.size(),
            "unflushed_pages": len(self.unflushed),
            "cache_pages": cache.capacity,
            "cached_pages": len(cache),
            "cache_hits": cache.hits,
            "cache_misses": cache.misses,
        }

    def close(self) -> None:
        """Release the store file's lock (and gate) and the checksums file (the
        handle is the store core's to close)."""
        try:
            self._lock.close()
        finally:
            self._sums.close()
