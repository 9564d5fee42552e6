"""The journal file as a ring of pages: every write the stream journal makes.

:class:`RingFile` owns the open file (through the :mod:`engine.fs` seam), its
geometry, the file lock that puts one write+fsync at a time on it, and the
``fsyncs`` counter.  It knows the layout of what it writes (a transaction
followed by a zero page, a copy of one record at the file's end, a header page
with a zero page 1, zeroed pages) but nothing of streams or numbering, which
are the journal's (:mod:`engine.streams.journal`).  Every write here is data,
then ``fdatasync``, then (for the caller) whatever points at it: a stream is
acknowledged only after :meth:`RingFile.commit` returns.
"""

from __future__ import annotations

import threading
from typing import cast

from engine.fs import FileHandle, FileSystem, crashpoint
from engine.streams import codec
from engine.streams.reader import JournalScan, later_records

#: A record to copy past the end: (type, global, stream, record, data).
Echo = tuple[int, int, int, int, bytes]


class RingFile:
    """One open journald file: ``page_size`` pages, ``size`` bytes in all.

    ``acquire`` / ``release`` take and let go of the file (one write+fsync at a
    time, wraps included); the writer takes its own lock first (see
    :mod:`engine.streams.journal`).  The ``*_locked`` methods expect the file
    taken; :meth:`scrub`, :meth:`cut` and :meth:`mark` run while the journal is
    being opened, before anybody else can write.
    """

    __slots__ = ("acquire", "fsyncs", "handle", "page_size", "path", "release", "size", "zero_page")

    def __init__(self, handle: FileHandle, path: str, page_size: int, size: int) -> None:
        #: The file (its ``poisoned`` flag: a failed write or fsync, writes refused).
        self.handle = handle
        self.path = path
        self.page_size = page_size
        self.size = size
        self.zero_page = bytes(page_size)
        #: fdatasyncs made (one per commit, wrap flush, header, repair).
        self.fsyncs = 0
        io_lock = threading.Lock()
        # Bound once: the commit path takes the file on every transaction.
        self.acquire = io_lock.acquire
        self.release = io_lock.release

    # -- the write path (the file taken) --------------------------------------------------
    def spill_locked(self, at: int, pages: memoryview) -> None:
        """Write whole pages of a big pending transaction ahead of its commit
        (unsynced: a crash there is a torn transaction)."""
        self.handle.write_parts_at(at, [pages])

    def commit_locked(self, start: int, data: bytes | bytearray, pad: bytes, echo: Echo | None) -> None:
        """Write a transaction at ``start``, its padding and the zero page after
        it in one write (no join), then the copy of ``echo`` at the file's end,
        then fdatasync: a crash that keeps writes in order never keeps the copy
        without the transaction."""
        self.handle.write_parts_at(start, [data, pad, self.zero_page])
        self._write_echo(echo, start + len(data) + len(pad) + self.page_size)
        self._sync("commit")

    def write_and_sync_locked(self, offset: int, data: bytes | bytearray, what: str) -> None:
        """Write ``data`` at ``offset`` (a bytearray as it is: nothing mutates
        it afterwards), then fdatasync (the file is preallocated: no size change
        to sync).  ``what`` names the crash points around the sync."""
        self.handle.write_at(offset, cast(bytes, data))
        self._sync(what)

    def _write_echo(self, echo: Echo | None, free: int) -> None:
        """Queue a copy of one record of the transaction at the end of the file.

        Zeroed damage over the journal's last transaction would otherwise leave a
        perfect end marker with nothing after it to show the loss.  The copy (a
        record numbered within the last transaction, so behind the next number)
        sits at the last page(s) of the file, past the zero page, where readers
        of the format never look, except our reader's probe past the end: if the
        last transaction is zeroed, the copy is numbered at or ahead of where the
        journal seems to end, and the damage is reported.  Skipped when the
        transaction reaches that far (``free`` is where its zero page ends).
        Written after the transaction, in the same fdatasync; a crash that
        keeps the copy without its transaction (a disk that reorders writes)
        is a torn tail the writer's recovery cuts (the copy is zeroed by :meth:`scrub`).
        """
        if echo is None:
            return
        record = codec.encode_record(*echo)
        at = self.size - codec.page_ceil(len(record), self.page_size)
        if at >= free:
            self.handle.write_at(at, record)

    def _sync(self, what: str) -> None:
        # Only after it returns may any stream in what was written be acknowledged.
        crashpoint(f"streams.{what}.before-fsync")
        self.handle.fdatasync()
        crashpoint(f"streams.{what}.after-fsync")
        self.fsyncs += 1

    def scan_locked(self, fs: FileSystem) -> JournalScan:
        """A scan of the file through this handle (the writer's verify)."""
        return JournalScan(self.path, fs, handle=self.handle)

    # -- repairs made while opening -------------------------------------------------------
    def scrub(self, start: int, expected: int) -> int:
        """Zero every page from ``start`` on whose first bytes are an intact
        record numbered ``expected`` or later; returns how many (synced).

        Such records are never part of the journal (it ends before ``start``):
        torn pages of an unsynced transaction, or a previous lap's records after
        the numbers were started over.  Zeroing them keeps the reader's rule
        true: in a journal this writer has opened, an intact record at or ahead
        of the next number past the end means damage.  Cost: one small read per
        page start (see :func:`~engine.streams.reader.later_records`).
        """
        found = [off for off, _ in later_records(self.handle, start, self.size, self.page_size, expected)]
        for offset in found:
            self.handle.write_at(offset, self.zero_page)
        if found:
            self._sync("scrub")
        return len(found)

    def mark(self, first_global: int) -> None:
        """Add engine's mark to page 0 of a file the original server wrote (the
        header bytes are unchanged), synced."""
        head = codec.encode_header_page(self.page_size, first_global)[: codec.HEAD_SIZE]
        self.handle.write_at(0, head)
        self._sync("mark")

    def cut(self, end: int, start: int) -> None:
        """Zero from ``end`` (after the last good record) to the page start
        ``start`` and the page after it, so the journal ends right after the
        last good record again; synced."""
        self.handle.write_at(end, bytes(start - end) + self.zero_page)
        self._sync("recover")
