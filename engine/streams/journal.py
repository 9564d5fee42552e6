"""The writer: many streams multiplexed into one preallocated journald file.

Threads open streams and write to them at the same time.  Records go into one
in-memory transaction; ``Stream.close()`` adds the stream's last record (EOS)
and waits on a :class:`~engine.fs.GroupCommit`: the leader writes the whole
pending transaction (records of every stream), pads it to the page end, writes a
zero page after it, and syncs once for everybody.  The next transaction then
overwrites that zero page, so a reader always finds the end of the journal at a
zero type word and a torn transaction fails its check codes.

The life cycle is the store core's (:class:`~engine.fs.core.StoreCore`): open
is its sequence (the writer lock ``<journal>.lock``, taken before anything is
created or read, so of two processes opening or creating the same journal one
gets :class:`~engine.errors.LockedError`; the file, kept by the core; recovery
into the core's report, ``journal.recovery``; install), a failed write or fsync
trips the core's latch, the group commit is the core's sync driver for
``always`` (the only policy: see :meth:`StreamJournal.open`), and close is the
core's ``begin_close``/``finish_close``.  Read-only access is
:meth:`StreamJournal.open_reader` (:class:`~engine.streams.reader.StreamReader`).

Thread locks, in this order: ``_lock`` (the pending transaction, counters, streams) then
``_io_lock`` (the file: one write+fsync at a time, wraps included).  The commit
leader takes the pending bytes and the file position under ``_lock``, then the
file under ``_io_lock`` before it lets go of ``_lock``, so transactions reach the
file in the order their positions were handed out.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import threading
import time
from collections.abc import Iterator, Sequence
from types import TracebackType
from typing import cast

from engine.conventions import duration_seconds, require_byte_counts
from engine.errors import ClosedError, ConfigError, CorruptFileError, FullError, PoisonedError
from engine.fs import (
    FileHandle,
    FileSystem,
    GroupCommit,
    OpenMode,
    RecoveryReport,
    SyncPolicy,
    as_path,
    crashpoint,
    create_file,
    no_such,
    parent_dir,
    resolve,
)
from engine.fs.core import StoreCore
from engine.lifetime import ClosedWhenDropped, weak_call
from engine.streams import codec
from engine.streams.reader import JournalScan, StreamReader, later_records
from engine.streams.stream import Stream, stream_ident

log = logging.getLogger("engine.streams")

#: Data bytes per record: the original journald server's connection buffer (CBUFSIZE).
DEFAULT_RECORD_SIZE = 8192
#: Longest identifier: the original journald server's IDENTSIZE.
MAX_IDENT = 1024
#: Default fsync delay while other streams are open (the original journald server's -t 10ms).
DEFAULT_SYNC_DELAY = 0.010
#: Pending transaction bytes above which whole pages are written out early.
SPILL_SIZE = 1 << 20
#: Zero bytes written per call when preallocating a new journal.
_PREALLOC_CHUNK = 1 << 20
#: Suffix of the temporary file a new journal is built in before its rename.
CREATING_SUFFIX = ".creating"
#: Suffix of the writer lock file beside the journal (``<journal>.lock``): an
#: empty file the writer holds an exclusive ``flock`` on while it is open.
LOCK_SUFFIX = ".lock"

#: The one sync policy: a stream's close() is its acknowledgement, which the
#: format gives only once the transaction holding its EOS is synced.
ALWAYS = SyncPolicy("always")


class StreamJournal(ClosedWhenDropped):
    """A journald version 2 file written by many concurrent streams.

    Use :meth:`open`.  ``recovery`` is what opening repaired (a
    :class:`~engine.fs.RecoveryReport`, empty for a clean or new journal).
    Counters: ``fsyncs``, ``transactions``, ``wraps``, ``streams_closed``,
    ``streams_aborted``; :meth:`stats` returns them with the geometry.

    ``len(journal)`` is the number of streams open now (not yet closed or
    aborted); iterating gives those :class:`Stream` objects (a snapshot), and
    ``stream in journal`` (a :class:`Stream` or its number) says whether it is
    one of them.  A context manager; a journal left open is closed at
    interpreter exit (its open streams aborted, everything committed, so the
    next open recovers nothing) with a :class:`ResourceWarning`.
    """

    _core: StoreCore  # (set first in __init__)

    def __init__(
        self,
        core: StoreCore,
        handle: FileHandle,
        page_size: int,
        size: int,
        *,
        record_size: int,
        sync_delay: float,
        spill_size: int = SPILL_SIZE,
    ) -> None:
        self._core = core
        self.path = core.path
        self.fs = core.fs
        self._handle = handle
        self.page_size = page_size
        self.size = size
        self.record_size = record_size
        self.sync_delay = sync_delay
        self.spill_size = max(spill_size, page_size)
        self._lock = threading.Lock()
        self._io_lock = threading.Lock()
        self._pending = bytearray()
        self._pending_count = 0  # records in _pending
        self._txn_pos = page_size  # file offset of the pending transaction
        self._spilled = 0  # bytes of it already written (whole pages, unsynced)
        self._global = 0
        self._next_stream = 0
        self._streams: dict[int, Stream] = {}
        self._active = 0  # open streams not yet closing: the fsync waits for them
        self._zero_page = bytes(page_size)
        # The smallest record of the pending transaction, copied past the end
        # at commit (see _commit): (type, global, stream, record, data).
        self._echo: tuple[int, int, int, int, bytes] | None = None
        # The core's sync driver (``always``): its group commit calls back through a
        # weak reference (engine.lifetime), so it does not keep the journal alive
        # (a dropped journal is closed).
        group = core.start_sync(weak_call(self._commit, required=True), name=f"streams-{core.path}").group
        assert group is not None
        self._gc: GroupCommit = group
        self.fsyncs = 0
        self.transactions = 0
        self.wraps = 0
        self.streams_closed = 0  # streams this writer closed (durable)
        self.streams_aborted = 0  # streams this writer aborted (close() of the journal included)

    @property
    def recovery(self) -> RecoveryReport:
        """What opening repaired (empty for a clean or new journal)."""
        return self._core.report

    # -- opening -------------------------------------------------------------------
    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        size: int | None = None,
        *,
        create: bool = True,
        reset: bool = False,
        page_size: int | None = None,
        record_size: int = DEFAULT_RECORD_SIZE,
        sync_delay: float | dt.timedelta = DEFAULT_SYNC_DELAY,
        preallocate: bool = True,
        spill_size: int = SPILL_SIZE,
        lock_wait: float | dt.timedelta | None = 0.0,
        fs: FileSystem | None = None,
    ) -> StreamJournal:
        """Open (or create, needing ``size``) the journal at ``path``.

        The writer lock ``<path>.lock`` is taken first (``LockedError`` if another
        writer has it).  An existing journal is recovered: read to its end, a
        torn transaction cut off, streams left open by the previous writer
        aborted (each reported in ``journal.recovery`` and logged), and writing
        continues after it with the next global record and stream numbers.
        ``reset=True`` starts it over instead, as the original journald server
        does at every start.  ``sync_delay`` (a :class:`~datetime.timedelta` or
        seconds, 0 for none) is how long a commit waits for other open streams;
        ``spill_size`` how big a pending transaction grows before its whole
        pages are written out (unsynced) ahead of the commit; ``lock_wait``
        how long to wait for another writer to close (seconds or a timedelta;
        None: for ever).

        There is no ``sync=``: a stream's :meth:`Stream.close` is its
        acknowledgement, and it returns only once the transaction holding its
        end is synced (group-committed with the other streams'); records of
        streams still open are not promised until then, so a period or
        ``never`` would have nothing to relax (``sync_delay`` is the knob).
        """
        path = as_path(path, "path")
        fs = resolve(fs)
        require_byte_counts(size=size, page_size=page_size, record_size=record_size, spill_size=spill_size)
        if record_size <= 0:
            raise ConfigError(f"record_size must be positive, not {record_size}")
        delay = duration_seconds(sync_delay, "sync_delay", allow_zero=True) or 0.0
        if not fs.exists(path):  # (checked again under the lock); bad arguments fail before it is created
            if not create:
                raise no_such(fs, path, "stream journal")
            cls._check_geometry(page_size or fs.block_size(parent_dir(path)), size, path)
        core = StoreCore(fs, path, "stream journal", policy=ALWAYS)
        with core.opening():
            core.lock(path + LOCK_SUFFIX, wait=lock_wait)
            journal = cls._open(core, size, create, reset, page_size, record_size, delay, preallocate, spill_size)
        # The report logged; closed with a ResourceWarning if dropped or still open at exit.
        core.opened(journal, log)
        return journal

    @staticmethod
    def open_reader(
        path: str | os.PathLike[str], *, strict_end: bool | None = None, fs: FileSystem | None = None
    ) -> StreamReader:
        """:meth:`StreamReader.open <engine.streams.reader.StreamReader.open>`: a
        reader of the journal at ``path`` (no lock, no repair)."""
        return StreamReader.open(path, strict_end=strict_end, fs=fs)

    @classmethod
    def _open(
        cls,
        core: StoreCore,
        size: int | None,
        create: bool,
        reset: bool,
        page_size: int | None,
        record_size: int,
        sync_delay: float,
        preallocate: bool,
        spill_size: int,
    ) -> StreamJournal:
        """Create, reset or recover the journal; the core holds the writer lock
        and keeps the file (released by ``core.opening`` if this fails)."""
        path, fs = core.path, core.fs
        exists = fs.exists(path)
        # A blank file -- empty, or a header of zeros -- holds no journal: it is
        # what a crash during creation leaves, or a file preallocated for the
        # original journald server (which writes its header at start).  Initialise it.
        blank = exists and cls._is_blank(fs, path)
        if blank and create:
            exists = False
            if size is None:
                size = fs.file_size(path)
        if not exists and not create:
            raise FileNotFoundError(path)
        if not exists:
            # journald's page size: the larger of the OS page size and the file
            # system's block size.
            page = page_size or fs.block_size(parent_dir(path))
            size = cls._check_geometry(page, size, path)
            handle = core.keep(cls._create(fs, path, page, size - size % page, preallocate, reuse=blank))
            journal = cls(core, handle, page, size - size % page, record_size=record_size, sync_delay=sync_delay,
                          spill_size=spill_size)
            if blank:
                # A reused file may hold stale records past page 1 (a header of
                # zeros is what a crash during creation leaves): scrub them.
                journal._scrub(2 * page, 0)
            return journal
        handle = core.keep(fs.open(path, OpenMode.WRITE))
        if reset:
            page = page_size or fs.block_size(parent_dir(path))
            file_size = handle.size()
            cls._check_geometry(page, file_size)
            journal = cls(core, handle, page, file_size - file_size % page, record_size=record_size,
                          sync_delay=sync_delay, spill_size=spill_size)
            journal._write_header_locked(0)
            # The old records beyond page 1 now count as ahead of number 0.
            journal._scrub(2 * page, 0)
            return journal
        return cls._recover(core, handle, record_size, sync_delay, spill_size)

    @staticmethod
    def _check_geometry(page: int, size: int | None, path: str = "") -> int:
        if size is None:
            raise ConfigError(f"{path}: a new journal needs size= (bytes)")
        if page < codec.MIN_PAGE_SIZE:
            raise ConfigError(f"page size must be at least {codec.MIN_PAGE_SIZE}, not {page}")
        if size // page < codec.MIN_PAGES:
            raise ConfigError(f"a journal needs at least {codec.MIN_PAGES} pages of {page} bytes, not {size} bytes")
        return size

    @staticmethod
    def _is_blank(fs: FileSystem, path: str) -> bool:
        with fs.open(path, OpenMode.READ) as handle:
            head = handle.read_at(0, codec.FILE_HEADER_SIZE)
        return head.count(0) == len(head)

    @staticmethod
    def _create(fs: FileSystem, path: str, page: int, size: int, preallocate: bool, *, reuse: bool) -> FileHandle:
        # A new journal is built whole under a temporary name (header page, zero
        # page 1, the preallocated rest), synced, and only then renamed into place
        # and the directory synced: a crash during creation leaves no journal or a
        # complete one, never a header on a file too short to open.  A reused blank
        # file is initialised in place (it already has its size).  The caller
        # holds the writer lock, so no other process builds the same journal.
        first = codec.encode_header_page(page, 0) + bytes(page)
        final_path = path
        if not reuse:
            path = path + CREATING_SUFFIX
            if fs.exists(path):
                fs.unlink(path)  # left by a crash during an earlier creation
        if reuse:
            handle = fs.open(path, OpenMode.WRITE)
            try:
                handle.write_at(0, first)
                handle.fsync()
                fs.fsync_dir(parent_dir(path))
            except BaseException:
                handle.close()
                raise
        else:
            handle = create_file(fs, path, first)
        try:
            if preallocate:
                # Real zeros rather than a hole: later fdatasyncs then need no
                # block allocation (the original journald server expects a
                # preallocated file).
                # A reused file keeps what it has (stale records past the zero
                # page 1 are scrubbed by the caller, see _scrub).
                chunk = bytes(_PREALLOC_CHUNK)
                offset = max(2 * page, handle.size()) if reuse else 2 * page
                while offset < size:
                    n = min(_PREALLOC_CHUNK, size - offset)
                    handle.write_at(offset, chunk if n == _PREALLOC_CHUNK else bytes(n))
                    offset += n
            else:
                handle.truncate(size)
            crashpoint("streams.create.before-fsync")
            handle.fsync()  # the size is metadata: a full fsync
            crashpoint("streams.create.after-fsync")
            if not reuse:
                fs.rename(path, final_path)
                handle.path = final_path  # the same inode, now under its real name
                crashpoint("streams.create.before-dir-fsync")
                fs.fsync_dir(parent_dir(final_path))
                crashpoint("streams.create.after-dir-fsync")
        except BaseException:
            handle.close()
            raise
        return handle

    @classmethod
    def _recover(
        cls, core: StoreCore, handle: FileHandle, record_size: int, sync_delay: float, spill_size: int
    ) -> StreamJournal:
        # Not strict: intact records past a clean end are what a crash leaves
        # when a torn transaction's first page never reached the disk but a later
        # one did (any transaction over a page, and the early page writes of one
        # over SPILL_SIZE).  They are cut below, with the torn tail.
        path = core.path
        scan = JournalScan(path, core.fs, handle=handle, strict_end=False)
        end = scan.run()
        assert scan.header is not None
        page = scan.header.page_size
        size = scan.file_size - scan.file_size % page
        if size // page < codec.MIN_PAGES:
            raise CorruptFileError(path, scan.file_size, f"at least {codec.MIN_PAGES} pages of {page} bytes")
        journal = cls(core, handle, page, size, record_size=record_size, sync_delay=sync_delay, spill_size=spill_size)
        journal._global = end.next_global
        journal._next_stream = 0 if scan.max_stream is None else (scan.max_stream + 1) & codec.U32_MASK
        start = codec.page_ceil(end.position, page)
        journal._txn_pos = start
        # Pages of the torn transaction that did reach the disk (or of an earlier
        # crash's) hold intact records numbered at or ahead of the next one.  Left
        # there, a strict reader would take them for damage (the journal going on
        # past its end) and, worse, the numbers the writer hands out next would
        # catch up with them.  Zero each such page before anything is written.
        scrubbed = journal._scrub(start + page if start + page <= size else start, end.next_global)
        report = journal.recovery
        if not end.clean:
            # What follows the last good record up to the zero page written below
            # (or to the end of the file, when recovery starts a new lap instead).
            report.cut(path, end.position, min(start + page, size) - end.position,
                       f"torn transaction: {end.reason}")
        if scrubbed:
            report.cut(path, end.position, scrubbed * page,
                       f"zeroed {scrubbed} page(s) holding intact records numbered {end.next_global} "
                       "or later past the end (a torn transaction's pages)")
        if not scan.marked and start + page <= size:
            # A file the original server (or an older engine) wrote: now that
            # nothing stale is numbered ahead of the end, mark page 0 so readers
            # probe past the end for damage (the header bytes are unchanged).
            head = codec.encode_header_page(page, scan.header.first_global)[: codec.HEAD_SIZE]
            handle.write_at(0, head)
            crashpoint("streams.mark.before-fsync")
            handle.fdatasync()
            journal.fsyncs += 1
            log.info("journal %s: page 0 marked as written by engine's writer", path)
        if start + page > size:
            journal._wrap_locked()
        elif not end.clean:
            # Zero the rest of the last good page and the page after it, so the
            # journal ends right after the last good record again.
            handle.write_at(end.position, bytes(start - end.position) + journal._zero_page)
            crashpoint("streams.recover.before-fsync")
            handle.fdatasync()
            crashpoint("streams.recover.after-fsync")
            journal.fsyncs += 1
        if scan.open_streams:
            # Their writer is gone: they can never end.  Abort them explicitly.
            report.add("undone", path, len(scan.open_streams), "streams",
                       detail="left open by the previous writer: aborted")
            with journal._lock:
                for st in scan.open_streams.values():
                    ghost = Stream(journal, st.number, st.ident)
                    ghost.records = st.record
                    ghost.total = st.offset
                    ghost._wrote_info = True
                    journal._emit(ghost, codec.ABORT, b"")
            journal._gc.sync_now()
        return journal

    def _scrub(self, start: int, expected: int) -> int:
        """Zero every page from ``start`` on whose first bytes are an intact
        record numbered ``expected`` or later; returns how many (synced).

        Such records are never part of the journal (it ends before ``start``):
        torn pages of an unsynced transaction, or a previous lap's records after
        the numbers were started over.  Zeroing them keeps the reader's rule
        true: in a journal this writer has opened, an intact record at or ahead
        of the next number past the end means damage.  Cost: one small read per
        page start (see :func:`~engine.streams.reader.later_records`).
        """
        found = [off for off, _ in later_records(self._handle, start, self.size, self.page_size, expected)]
        for offset in found:
            self._handle.write_at(offset, self._zero_page)
        if found:
            crashpoint("streams.scrub.before-fsync")
            self._handle.fdatasync()
            crashpoint("streams.scrub.after-fsync")
            self.fsyncs += 1
        return len(found)

    # -- records ---------------------------------------------------------------------
    def _check_usable(self) -> None:
        self._core.check_writable()  # closed, or the latch tripped by a failed write
        if self._handle.poisoned:
            raise PoisonedError(self.path, None)

    def _emit(self, stream: Stream, rtype: int, data: bytes | bytearray | memoryview) -> None:
        """Append one record of ``stream`` (and its INFO first, if this lap has
        none yet) to the pending transaction.  Caller holds ``_lock``."""
        need = codec.RECORD_OVERHEAD + len(data)
        info = b""
        if not stream._wrote_info:
            info = codec.encode_info(stream.total, stream.ident)
            need += codec.RECORD_OVERHEAD + len(info)
        # Room for these records, the padding and the zero page that must follow
        # (the original journald server's check_rotate), else wrap to page 1 first.
        if self._txn_pos + self._spilled + len(self._pending) + need + 1 + self.page_size >= self.size:
            self._wrap_locked()
            # The new lap needs this stream's INFO again (even if the stream is
            # no longer registered, e.g. while it is being aborted).
            stream._wrote_info = False
            info = codec.encode_info(stream.total, stream.ident)
            need = 2 * codec.RECORD_OVERHEAD + len(info) + len(data)
            if self.page_size + need + 1 + self.page_size >= self.size:
                raise FullError(f"{self.path}: a {need}-byte record cannot fit in a {self.size}-byte journal")
        if not stream._wrote_info:
            codec.append_record(self._pending, codec.INFO, self._global, stream.number, stream.records, info)
            self._global = (self._global + 1) & codec.U32_MASK
            self._pending_count += 1
            stream._wrote_info = True
        codec.append_record(self._pending, rtype, self._global, stream.number, stream.records, data)
        if self._echo is None or len(data) < len(self._echo[4]):
            self._echo = (rtype, self._global, stream.number, stream.records, bytes(data))
        self._global = (self._global + 1) & codec.U32_MASK
        self._pending_count += 1
        if rtype & codec.DATA:
            stream.total = (stream.total + len(data)) & codec.U32_MASK
        if not rtype & codec.ABORT:
            stream.records += 1

    def open_stream(self, ident: bytes | bytearray | memoryview | str) -> Stream:
        """A new stream named ``ident``: bytes, or a str (stored as UTF-8); at most
        1024 bytes, as in the original journald server."""
        raw = stream_ident(ident)
        if len(raw) > MAX_IDENT:
            raise ConfigError(f"stream identifier of {len(raw)} bytes; at most {MAX_IDENT}")
        with self._lock:
            self._check_usable()
            stream = Stream(self, self._next_stream, raw)
            self._next_stream = (self._next_stream + 1) & codec.U32_MASK
            self._streams[stream.number] = stream
            self._active += 1
            return stream

    def _write(self, stream: Stream, parts: Sequence[bytes | bytearray | memoryview]) -> None:
        """Add ``parts`` (bytes-like, back to back) to ``stream``: whole records
        go into the pending transaction, the rest waits in the stream's buffer.

        Like the original journald server, a full buffer is journaled only when
        more data follows, so the last record of a stream is DATA|EOS.  A record
        that lies within one part is journaled straight from it (no copy before
        the pending transaction's); only the tail kept for later is copied, so
        ``parts`` may be views of a buffer the caller reuses once this returns
        (the server passes views of its receive buffer, a whole read at a time).
        """
        with self._lock:
            self._check_usable()
            if stream.state != "open":
                raise ClosedError(f"stream #{stream.number} is {stream.state}")
            size = self.record_size
            buf = stream._buf
            pieces: list[bytes | bytearray | memoryview] = [buf] if buf else []
            have = len(buf)
            for part in parts:
                pos, n = 0, len(part)
                while pos < n:
                    if have == size:  # a full record, and more data follows
                        self._emit(stream, codec.DATA, pieces[0] if len(pieces) == 1 else b"".join(pieces))
                        pieces, have = [], 0
                    take = min(size - have, n - pos)
                    pieces.append(part if take == n else part[pos : pos + take])
                    have += take
                    pos += take
            stream._buf = b"".join(pieces)  # a copy: the parts may be reused
            if len(self._pending) < self.spill_size or not self._io_lock.acquire(blocking=False):
                return
            # A big transaction: write its whole pages now, unsynced, as the
            # original writes each page as it fills, so memory stays bounded and
            # the commit has less to write.  (Skipped while a commit holds the
            # file: the data simply waits in memory a little longer.)  The pages
            # are taken under _lock and written after letting go of it, holding
            # only _io_lock: other streams go on filling the transaction, and a
            # commit or wrap (which takes _io_lock) writes after these pages.
            spill = self._pending
            cut = len(spill) // self.page_size * self.page_size
            self._pending = spill[cut:]
            at = self._txn_pos + self._spilled
            self._spilled += cut
        try:
            self._handle.write_parts_at(at, [memoryview(spill)[:cut]])
        except BaseException as exc:
            self._core.fail(exc, self.path, "write")
            raise
        finally:
            self._io_lock.release()

    def _close_stream(self, stream: Stream) -> None:
        with self._lock:
            self._check_usable()
            if stream.state != "open":
                raise ClosedError(f"stream #{stream.number} is {stream.state}")
            rtype = codec.EOS | (codec.DATA if stream._buf else 0)
            self._emit(stream, rtype, stream._buf)
            stream._buf = b""
            stream.state = "closing"
            self._active -= 1
            ticket = self._gc.ticket()
        try:
            self._gc.wait(ticket)
        except BaseException:
            stream.state = "failed"
            raise
        finally:
            with self._lock:
                self._streams.pop(stream.number, None)
        stream.state = "closed"
        self.streams_closed += 1

    def _abort_stream(self, stream: Stream) -> None:
        with self._lock:
            self._abort_locked(stream)

    def _abort_locked(self, stream: Stream) -> None:
        """Abort ``stream`` (caller holds ``_lock``): its ABORT record goes into the
        pending transaction, unless nothing more can be written."""
        if stream.state != "open":
            return
        stream._buf = b""
        stream.state = "aborted"
        self.streams_aborted += 1
        self._active -= 1
        self._streams.pop(stream.number, None)
        if self._core.failed or self._handle.poisoned:
            return  # nothing more can be written; readers see it open, never complete
        # Nothing journaled yet means nothing to abort (the original journald server's rule).
        # The ABORT is not waited for: losing it leaves the stream open,
        # which a reader never mistakes for complete.
        if stream.records:
            self._emit(stream, codec.ABORT, b"")

    # -- commit ----------------------------------------------------------------------
    def _commit(self) -> None:
        """GroupCommit's sync: write the pending transaction + a zero page, fsync."""
        if self.sync_delay > 0 and self._active > 0:
            # Other streams are still writing: give them a moment to finish and
            # share this fsync (the original journald server's delayed sync).
            time.sleep(self.sync_delay)
        with self._lock:
            self._core.latch.check()
            if not self._pending and not self._spilled:
                return  # everything already reached the disk (a wrap synced it)
            data = self._pending
            start = self._txn_pos + self._spilled
            pad = codec.padding(len(data), self.page_size)  # the spilled part is whole pages
            self._txn_pos = start + len(data) + len(pad)
            self._spilled = 0
            self._pending = bytearray()
            self._pending_count = 0
            echo, self._echo = self._echo, None
            self._io_lock.acquire()
        try:
            # The transaction, its padding and the zero page in one write (no
            # join), then its copy past the end: a crash that keeps writes in
            # order never keeps the copy without the transaction.
            self._handle.write_parts_at(start, [data, pad, self._zero_page])
            self._write_echo(echo, start + len(data) + len(pad) + len(self._zero_page))
            self._write_and_sync(start, b"", "commit")
            self.transactions += 1
        except BaseException as exc:
            self._core.fail(exc, self.path, "commit")
            raise
        finally:
            self._io_lock.release()

    def _write_echo(self, echo: tuple[int, int, int, int, bytes] | None, free: int) -> None:
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
        is a torn tail the writer's recovery cuts (the copy is zeroed by _scrub).
        """
        if echo is None:
            return
        record = codec.encode_record(*echo)
        at = self.size - codec.page_ceil(len(record), self.page_size)
        if at >= free:
            self._handle.write_at(at, record)

    def _write_and_sync(self, offset: int, data: bytes | bytearray, what: str) -> None:
        # A bytearray is written as it is (no copy): nothing mutates it afterwards.
        if data:
            self._handle.write_at(offset, cast(bytes, data))
        # The transaction and the zero page after it in one write (for a
        # commit, the copy of one record at the file's end in a second one), then
        # one fdatasync (the file is preallocated: no size change to sync).  Only
        # after it returns may any stream in it be acknowledged.
        crashpoint(f"streams.{what}.before-fsync")
        self._handle.fdatasync()
        crashpoint(f"streams.{what}.after-fsync")
        self.fsyncs += 1

    def _wrap_locked(self) -> None:
        """Start over at page 1 (caller holds ``_lock``): commit what is pending,
        rewrite the header with the next global record number, zero page 1."""
        with self._io_lock:
            try:
                if self._pending or self._spilled:
                    data = self._pending + codec.padding(len(self._pending), self.page_size) + self._zero_page
                    self._write_and_sync(self._txn_pos + self._spilled, data, "wrap-flush")
                    self.transactions += 1
                    self._pending = bytearray()
                    self._pending_count = 0
                    self._spilled = 0
                self._echo = None
                # Header and zero page 1 in one write starting at offset 0: a
                # crash keeps the old header (the previous lap stays readable) or
                # the new one (an empty lap); the first sector is never torn.
                self._write_and_sync(
                    0, codec.encode_header_page(self.page_size, self._global) + self._zero_page, "wrap"
                )
            except BaseException as exc:
                self._core.fail(exc, self.path, "wrap")
                raise
        self._txn_pos = self.page_size
        self.wraps += 1
        for stream in self._streams.values():
            stream._wrote_info = False

    def _write_header_locked(self, first_global: int) -> None:
        with self._lock:
            self._global = first_global
            self._wrap_locked()
            self.wraps = 0

    # -- public ------------------------------------------------------------------------
    def sync(self) -> None:
        """Make every record written so far durable (aborts included)."""
        with self._lock:
            self._check_usable()
        self._gc.sync_now()

    @property
    def open_streams(self) -> int:
        """How many streams are open (not closed or aborted)."""
        with self._lock:
            return len(self._streams)

    @property
    def position(self) -> int:
        """File offset where the next transaction goes."""
        with self._lock:
            return self._txn_pos + self._spilled + len(self._pending)

    @property
    def next_global(self) -> int:
        """Global record number of the next record."""
        with self._lock:
            return self._global

    def verify(self) -> list[str]:
        """Check the file and this writer agree; raises CorruptFileError.

        Everything written is synced first; then the file must read to a clean
        end exactly where the writer will continue, with the same next global
        record number, no anomalies, and every stream this writer has open and
        journaled must read as open.
        """
        self.sync()
        with self._lock, self._io_lock:
            scan = JournalScan(self.path, self.fs, handle=self._handle)
            end = scan.run()
            notes: list[str] = []
            if scan.anomalies:
                raise CorruptFileError(
                    self.path, 0, "records consistent with their streams", found="; ".join(scan.anomalies)
                )
            if not end.clean:
                raise CorruptFileError(self.path, end.position, "the end of the journal", found=end.reason)
            if end.position != self._txn_pos:
                raise CorruptFileError(self.path, end.position, f"the journal to end at {self._txn_pos}")
            expected = (self._global - self._pending_count) & codec.U32_MASK
            if end.next_global != expected:
                raise CorruptFileError(
                    self.path, end.position, f"next global record {expected}", found=str(end.next_global)
                )
            for number, stream in self._streams.items():
                if stream._wrote_info and number not in scan.open_streams:
                    raise CorruptFileError(self.path, end.position, f"stream {number} to be open")
            notes.extend(str(action) for action in self.recovery.actions)
            return notes

    def close(self) -> None:
        """Abort the streams still open, commit, and close the file and the
        writer lock (the core's close, once)."""
        core = self._core
        if not core.begin_close():
            return
        try:
            with self._lock:
                for stream in [s for s in self._streams.values() if s.state == "open"]:
                    self._abort_locked(stream)
            if not core.failed and not self._handle.poisoned:
                self._gc.sync_now()
        finally:
            core.finish_close()

    def stats(self) -> dict[str, object]:
        """This writer's figures: geometry, where it writes, its counters (a dict,
        snake_case keys, numbers; see the guide's table)."""
        with self._lock:
            position = self._txn_pos + self._spilled + len(self._pending)
            return {
                "size_bytes": self.size,
                "page_size": self.page_size,
                "record_size": self.record_size,
                "sync_delay_seconds": self.sync_delay,
                "position": position,
                "free_bytes": self.size - position,
                "pending_bytes": self._spilled + len(self._pending),
                "next_global_record": self._global,
                "next_stream": self._next_stream,
                "open_streams": len(self._streams),
                "streams_closed": self.streams_closed,
                "streams_aborted": self.streams_aborted,
                "transactions": self.transactions,
                "fsyncs": self.fsyncs,
                "wraps": self.wraps,
            }

    def __len__(self) -> int:
        """Streams open now (opened, not yet closed or aborted)."""
        with self._lock:
            return len(self._streams)

    def __iter__(self) -> Iterator[Stream]:
        """The streams open now, by number (a snapshot)."""
        with self._lock:
            return iter([self._streams[n] for n in sorted(self._streams)])

    def __contains__(self, stream: object) -> bool:
        """``stream in journal``: a :class:`Stream` (or a stream number) open in this journal now."""
        with self._lock:
            if isinstance(stream, Stream):
                return self._streams.get(stream.number) is stream
            return isinstance(stream, int) and not isinstance(stream, bool) and stream in self._streams

    def __enter__(self) -> StreamJournal:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<StreamJournal {self.path!r} {self.size} bytes, page {self.page_size}>"
