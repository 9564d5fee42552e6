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
``always`` (the only policy: see :data:`SYNC_REFUSED`), and close is the
core's ``begin_close``/``finish_close``.  Read-only access is
:meth:`StreamJournal.open_reader` (:class:`~engine.streams.reader.StreamReader`).

The parts, split by the state each owns: this module's :class:`StreamJournal`
owns the pending transaction, the numbering and the open streams; the file and
every write to it are :class:`~engine.streams.ring.RingFile`'s; what opening
finds is :mod:`engine.streams.opening`'s (a value the journal installs); a
stream's handle and the writer's record of it are :mod:`engine.streams.stream`'s
(:class:`Stream` forwards to the journal through a protocol, so that module
does not import this one).

Thread locks, in this order: ``_lock`` (the pending transaction, counters, streams) then
the file's (``ring.acquire``: one write+fsync at a time, wraps included).  The commit
leader takes the pending bytes and the file position under ``_lock``, then the
file before it lets go of ``_lock``, so transactions reach the file in the
order their positions were handed out.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import threading
import time
from collections.abc import Iterator
from types import TracebackType

from engine.conventions import duration_seconds, require_byte_counts
from engine.errors import ClosedError, ConfigError, CorruptFileError, FullError, PoisonedError
from engine.fs import FileSystem, GroupCommit, RecoveryReport, SyncPolicy, as_path, no_such, resolve
from engine.fs.core import StoreCore
from engine.lifetime import ClosedWhenDropped, weak_call
from engine.streams import codec
from engine.streams.opening import CREATING_SUFFIX, Start, check_geometry, default_page_size, free_for, open_ring
from engine.streams.reader import StreamReader
from engine.streams.ring import Echo, RingFile
from engine.streams.stream import Lane, Parts, Stream, stream_ident

log = logging.getLogger("engine.streams")

#: Data bytes per record: the original journald server's connection buffer (CBUFSIZE).
DEFAULT_RECORD_SIZE = 8192
#: Longest identifier: the original journald server's IDENTSIZE.
MAX_IDENT = 1024
#: Default fsync delay while other streams are open (the original journald server's -t 10ms).
DEFAULT_SYNC_DELAY = 0.010
#: Pending transaction bytes above which whole pages are written out early.
SPILL_SIZE = 1 << 20
#: Suffix of the writer lock file beside the journal (``<journal>.lock``): an
#: empty file the writer holds an exclusive ``flock`` on while it is open.
LOCK_SUFFIX = ".lock"
#: Why ``sync=`` other than "always" is refused (the ConfigError's message).
SYNC_REFUSED = (
    "a stream's close() is its acknowledgement and returns only after the fdatasync of the transaction "
    "holding its end (shared with the other streams closing meanwhile); nothing before a close is promised, "
    "so there is nothing for 'never' or a period to relax (sync_delay sets how long a commit waits for "
    "other open streams)"
)

__all__ = [
    "CREATING_SUFFIX",
    "DEFAULT_RECORD_SIZE",
    "DEFAULT_SYNC_DELAY",
    "LOCK_SUFFIX",
    "MAX_IDENT",
    "SPILL_SIZE",
    "Stream",
    "StreamJournal",
]


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
        ring: RingFile,
        start: Start,
        *,
        record_size: int,
        sync_delay: float,
        spill_size: int = SPILL_SIZE,
    ) -> None:
        self._core = core
        self.path = core.path
        self.fs = core.fs
        self._ring = ring
        self.page_size = ring.page_size
        self.size = ring.size
        self.record_size = record_size
        self.sync_delay = sync_delay
        self.spill_size = max(spill_size, ring.page_size)
        self._lock = threading.Lock()
        self._pending = bytearray()
        self._pending_count = 0  # records in _pending
        self._txn_pos = start.position  # file offset of the pending transaction
        self._spilled = 0  # bytes of it already written (whole pages, unsynced)
        self._global = start.next_global
        self._next_stream = start.next_stream
        self._streams: dict[int, Stream] = {}
        self._active = 0  # open streams not yet closing: the fsync waits for them
        # The smallest record of the pending transaction, copied past the end
        # at commit (see RingFile.commit_locked): (type, global, stream, record, data).
        self._echo: Echo | None = None
        # The core's sync driver (``always``): its group commit calls back through a
        # weak reference (engine.lifetime), so it does not keep the journal alive
        # (a dropped journal is closed).
        group = core.start_sync(weak_call(self._commit, required=True), name=f"streams-{core.path}").group
        assert group is not None
        self._gc: GroupCommit = group
        self.transactions = 0
        self.wraps = 0
        self.streams_closed = 0  # streams this writer closed (durable)
        self.streams_aborted = 0  # streams this writer aborted (close() of the journal included)
        self._install(start)

    def _install(self, start: Start) -> None:
        """The last step of opening: start a new lap if recovery left no room,
        and abort the streams the previous writer left open (durably)."""
        if start.wrap:
            with self._lock:
                self._wrap_locked()
        if start.orphans:
            with self._lock:
                for lane in start.orphans:
                    self._emit(lane, codec.ABORT, b"")
            self._gc.sync_now()

    @property
    def recovery(self) -> RecoveryReport:
        """What opening repaired (empty for a clean or new journal)."""
        return self._core.report

    @property
    def sync_policy(self) -> SyncPolicy:
        """The ``sync=`` policy (always ``"always"``: see :data:`SYNC_REFUSED`)."""
        return self._core.policy

    @property
    def fsyncs(self) -> int:
        """fdatasyncs made by this writer (opening's repairs included)."""
        return self._ring.fsyncs

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
        sync: object = "always",
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

        ``sync`` is ``"always"``, the one policy (anything else is a
        ConfigError saying why, :data:`SYNC_REFUSED`): a stream's
        :meth:`Stream.close` is its acknowledgement, and it returns only once
        the transaction holding its end is synced (group-committed with the
        other streams'); records of streams still open are not promised until
        then, so a period or ``never`` would have nothing to relax
        (``sync_delay`` is the knob).
        """
        path = as_path(path, "path")
        fs = resolve(fs)
        require_byte_counts(size=size, page_size=page_size, record_size=record_size, spill_size=spill_size)
        if record_size <= 0:
            raise ConfigError(f"record_size must be positive, not {record_size}")
        delay = duration_seconds(sync_delay, "sync_delay", allow_zero=True) or 0.0
        policy = None if isinstance(sync, dt.timedelta) else SyncPolicy.parse(sync)
        if policy is None or not policy.always:
            raise ConfigError(f"sync must be 'always' for a stream journal, not {sync!r}: {SYNC_REFUSED}")
        if not fs.exists(path):  # (checked again under the lock); bad arguments fail before it is created
            if not create:
                raise no_such(fs, path, "stream journal")
            check_geometry(page_size or default_page_size(fs, path), size, path,
                           free=free_for(fs, path, preallocate))
        core = StoreCore(fs, path, "stream journal", policy=policy)
        with core.opening():
            core.lock(path + LOCK_SUFFIX, wait=lock_wait)
            ring, start = open_ring(core, size, create=create, reset=reset, page_size=page_size,
                                    preallocate=preallocate)
            journal = cls(core, ring, start, record_size=record_size, sync_delay=delay, spill_size=spill_size)
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

    # -- records ---------------------------------------------------------------------
    def _check_usable(self) -> None:
        # Three attribute reads on the hot path (every write, close and open of
        # a stream); the core's check raises the typed error when one says no.
        core = self._core
        if core.closed or core.latch.failure is not None or self._ring.handle.poisoned:
            core.check_writable()  # closed, or the latch tripped by a failed write
            raise PoisonedError(self.path, None)

    def _emit(self, lane: Lane, rtype: int, data: bytes | bytearray | memoryview) -> None:
        """Append one record of ``lane`` (and its INFO first, if this lap has
        none yet) to the pending transaction.  Caller holds ``_lock``."""
        need = codec.RECORD_OVERHEAD + len(data)
        info = b""
        if not lane.info_written:
            info = codec.encode_info(lane.total, lane.ident)
            need += codec.RECORD_OVERHEAD + len(info)
        # Room for these records, the padding and the zero page that must follow
        # (the original journald server's check_rotate), else wrap to page 1 first.
        if self._txn_pos + self._spilled + len(self._pending) + need + 1 + self.page_size >= self.size:
            self._wrap_locked()
            # The new lap needs this stream's INFO again (even if the stream is
            # no longer registered, e.g. while it is being aborted).
            lane.info_written = False
            info = codec.encode_info(lane.total, lane.ident)
            need = 2 * codec.RECORD_OVERHEAD + len(info) + len(data)
            if self.page_size + need + 1 + self.page_size >= self.size:
                raise FullError(f"{self.path}: a {need}-byte record cannot fit in a {self.size}-byte journal")
        if not lane.info_written:
            codec.append_record(self._pending, codec.INFO, self._global, lane.number, lane.records, info)
            self._global = (self._global + 1) & codec.U32_MASK
            self._pending_count += 1
            lane.info_written = True
        codec.append_record(self._pending, rtype, self._global, lane.number, lane.records, data)
        if self._echo is None or len(data) < len(self._echo[4]):
            self._echo = (rtype, self._global, lane.number, lane.records, bytes(data))
        self._global = (self._global + 1) & codec.U32_MASK
        self._pending_count += 1
        if rtype & codec.DATA:
            lane.total = (lane.total + len(data)) & codec.U32_MASK
        if not rtype & codec.ABORT:
            lane.records += 1

    def open_stream(self, ident: bytes | bytearray | memoryview | str) -> Stream:
        """A new stream named ``ident``: bytes, or a str (stored as UTF-8); at most
        1024 bytes, as in the original journald server."""
        raw = stream_ident(ident)
        if len(raw) > MAX_IDENT:
            raise ConfigError(f"stream identifier of {len(raw)} bytes; at most {MAX_IDENT}")
        with self._lock:
            self._check_usable()
            number = self._next_stream
            stream = Stream(self, Lane(number, raw))
            self._next_stream = (number + 1) & codec.U32_MASK
            self._streams[number] = stream
            self._active += 1
            return stream

    def write_stream(self, lane: Lane, parts: Parts) -> None:
        """:meth:`Stream.write` / :meth:`Stream.write_parts`: add ``parts``
        (bytes-like, back to back) to the stream: whole records go into the
        pending transaction, the rest waits in the stream's buffer.

        Like the original journald server, a full buffer is journaled only when
        more data follows, so the last record of a stream is DATA|EOS.  A record
        that lies within one part is journaled straight from it (no copy before
        the pending transaction's); only the tail kept for later is copied, so
        ``parts`` may be views of a buffer the caller reuses once this returns
        (the server passes views of its receive buffer, a whole read at a time).
        """
        ring = self._ring
        with self._lock:
            self._check_usable()
            if lane.state != "open":
                raise ClosedError(f"stream #{lane.number} is {lane.state}")
            size = self.record_size
            buf = lane.buffered
            pieces: list[bytes | bytearray | memoryview] = [buf] if buf else []
            have = len(buf)
            for part in parts:
                pos, n = 0, len(part)
                while pos < n:
                    if have == size:  # a full record, and more data follows
                        self._emit(lane, codec.DATA, pieces[0] if len(pieces) == 1 else b"".join(pieces))
                        pieces, have = [], 0
                    take = min(size - have, n - pos)
                    pieces.append(part if take == n else part[pos : pos + take])
                    have += take
                    pos += take
            lane.buffered = b"".join(pieces)  # a copy: the parts may be reused
            if len(self._pending) < self.spill_size or not ring.acquire(blocking=False):
                return
            # A big transaction: write its whole pages now, unsynced, as the
            # original writes each page as it fills, so memory stays bounded and
            # the commit has less to write.  (Skipped while a commit holds the
            # file: the data simply waits in memory a little longer.)  The pages
            # are taken under _lock and written after letting go of it, holding
            # only the file: other streams go on filling the transaction, and a
            # commit or wrap (which takes the file) writes after these pages.
            spill = self._pending
            cut = len(spill) // self.page_size * self.page_size
            self._pending = spill[cut:]
            at = self._txn_pos + self._spilled
            self._spilled += cut
        try:
            ring.spill_locked(at, memoryview(spill)[:cut])
        except BaseException as exc:
            self._core.fail(exc, self.path, "write")
            raise
        finally:
            ring.release()

    def close_stream(self, lane: Lane) -> None:
        """:meth:`Stream.close`: the stream's last record, then wait for the
        group commit that makes it durable."""
        with self._lock:
            self._check_usable()
            if lane.state != "open":
                raise ClosedError(f"stream #{lane.number} is {lane.state}")
            rtype = codec.EOS | (codec.DATA if lane.buffered else 0)
            self._emit(lane, rtype, lane.buffered)
            lane.buffered = b""
            lane.state = "closing"
            self._active -= 1
            ticket = self._gc.ticket()
        try:
            self._gc.wait(ticket)
        except BaseException:
            lane.state = "failed"
            raise
        finally:
            with self._lock:
                self._streams.pop(lane.number, None)
        lane.state = "closed"
        self.streams_closed += 1

    def abort_stream(self, lane: Lane) -> None:
        """:meth:`Stream.abort`."""
        with self._lock:
            self._abort_locked(lane)

    def _abort_locked(self, lane: Lane) -> None:
        """Abort ``lane`` (caller holds ``_lock``): its ABORT record goes into the
        pending transaction, unless nothing more can be written."""
        if lane.state != "open":
            return
        lane.buffered = b""
        lane.state = "aborted"
        self.streams_aborted += 1
        self._active -= 1
        self._streams.pop(lane.number, None)
        if self._core.failed or self._ring.handle.poisoned:
            return  # nothing more can be written; readers see it open, never complete
        # Nothing journaled yet means nothing to abort (the original journald server's rule).
        # The ABORT is not waited for: losing it leaves the stream open,
        # which a reader never mistakes for complete.
        if lane.records:
            self._emit(lane, codec.ABORT, b"")

    # -- commit ----------------------------------------------------------------------
    def _commit(self) -> None:
        """GroupCommit's sync: write the pending transaction + a zero page, fsync."""
        if self.sync_delay > 0 and self._active > 0:
            # Other streams are still writing: give them a moment to finish and
            # share this fsync (the original journald server's delayed sync).
            time.sleep(self.sync_delay)
        ring = self._ring
        with self._lock:
            if self._core.latch.failure is not None:
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
            ring.acquire()
        try:
            ring.commit_locked(start, data, pad, echo)
            self.transactions += 1
        except BaseException as exc:
            self._core.fail(exc, self.path, "commit")
            raise
        finally:
            ring.release()

    def _wrap_locked(self) -> None:
        """Start over at page 1 (caller holds ``_lock``): commit what is pending,
        rewrite the header with the next global record number, zero page 1.

        Every stream that ended before this point is evicted: the new header's
        first number is above all of the old lap's records, so no reader returns
        them (the journal is a ring; docs/guide/streams.md, "What a wrap
        evicts").  Streams still open write their INFO again in the new lap."""
        ring = self._ring
        ring.acquire()
        try:
            if self._pending or self._spilled:
                data = self._pending + codec.padding(len(self._pending), self.page_size) + ring.zero_page
                ring.write_and_sync_locked(self._txn_pos + self._spilled, data, "wrap-flush")
                self.transactions += 1
                self._pending = bytearray()
                self._pending_count = 0
                self._spilled = 0
            self._echo = None
            # Header and zero page 1 in one write starting at offset 0: a
            # crash keeps the old header (the previous lap stays readable) or
            # the new one (an empty lap); the first sector is never torn.
            ring.write_and_sync_locked(0, codec.encode_header_page(self.page_size, self._global) + ring.zero_page,
                                       "wrap")
        except BaseException as exc:
            self._core.fail(exc, self.path, "wrap")
            raise
        finally:
            ring.release()
        self._txn_pos = self.page_size
        self.wraps += 1
        for stream in self._streams.values():
            stream.lane.info_written = False

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
        ring = self._ring
        with self._lock:
            ring.acquire()
            try:
                scan = ring.scan_locked(self.fs)
                end = scan.run()
            finally:
                ring.release()
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
                if stream.lane.info_written and number not in scan.open_streams:
                    raise CorruptFileError(self.path, end.position, f"stream {number} to be open")
            return [str(action) for action in self.recovery.actions]

    def close(self) -> None:
        """Abort the streams still open, commit, and close the file and the
        writer lock (the core's close, once)."""
        core = self._core
        if not core.begin_close():
            return
        try:
            with self._lock:
                for stream in [s for s in self._streams.values() if s.state == "open"]:
                    self._abort_locked(stream.lane)
            if not core.failed and not self._ring.handle.poisoned:
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
