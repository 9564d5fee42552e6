"""Reading a journald file: events record by record, or whole streams.

:class:`JournalScan` walks the transactions from page 1, checks every check code
and that the global record numbers run without a gap, and turns records into
:class:`Event` objects the way the original journald ``journal-read``/``journal-dump`` do
(``init`` / ``append`` / ``end`` / ``abort``, then ``unfinished`` for streams left
open).  The first record that fails a check is the end of the journal: after a
crash that is the torn, unsynced transaction; the scan stops there cleanly and
says where (:attr:`JournalScan.end`), logs a warning and counts it.

Files that have wrapped read the same way: the header names the first global
record number of the current lap, and older records beyond the newest
transaction fail the global record number check.  A wrap evicts, by design,
every stream that ended before it (the journal is a ring): stream numbers are
given at open, not at close, so a lap can hold stream N whole while stream N+1,
which closed earlier, is gone.  The scan says so instead of leaving the gap
unexplained: :attr:`JournalScan.wrapped` and :meth:`JournalScan.absent_streams`.

A clean end (a zero page at a transaction start) is checked before it is
believed, in a journal engine's writer wrote (its mark in page 0, see
:func:`codec.has_mark`): zeroed damage in the middle of a journal looks exactly like it.
Transactions start at page boundaries, so :func:`later_records` probes every
later page start (one small read each) for a record whose check code verifies
and whose global record number is at or ahead of the one the journal would
have written next.  Such a record means the journal goes on past the "end":
the region at the end is damaged, and the scan raises CorruptFileError naming
its offset.  Records of an older lap (after a wrap) have lower numbers and do
not count.  The writer never leaves such records behind in a journal it has
opened (see :meth:`RingFile.scrub <engine.streams.ring.RingFile.scrub>`), so in a closed journal they are damage.

A file without the mark was written by the original journald server, which
numbers records from 0 again at each start over the old records without
scrubbing them: it is read as the original ``journal-dump`` reads it, to the
first zero type word at a transaction start, and nothing past it is probed.

A live journal (a writer busy in it) is read as the original reader reads it:
what was committed when each part was read.  A transaction being written is
not a hole: before the probe's find is called damage, the end is read again,
and if the writer has since written there (or started a new lap: the header
changed), the scan ends cleanly where it found the end.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from types import TracebackType

from engine.errors import CorruptFileError, EngineError
from engine.fs import FileHandle, FileSystem, OpenMode, as_path, no_such, resolve
from engine.fs.core import StoreCore
from engine.lifetime import ClosedWhenDropped
from engine.streams import codec

log = logging.getLogger("engine.streams")

#: How much of the file one read fetches.
_CHUNK = 1 << 20

#: How many scans ended at something other than a clean end (tests read it).
torn_scans = 0

#: Reads of page 0 tried before a header whose check code fails is corrupt
#: (a live writer may be rewriting it).
_HEADER_RETRIES = 3

#: Global record numbers are compared modulo 2**32: a number less than this far
#: ahead of the expected one (or equal to it) is "at or ahead"; anything else is
#: behind (an older lap).
_AHEAD_WINDOW = 1 << 31


def is_ahead(global_record: int, expected: int) -> bool:
    """Whether ``global_record`` is ``expected`` or later (modulo 2**32)."""
    return (global_record - expected) & codec.U32_MASK < _AHEAD_WINDOW


def later_records(handle: FileHandle, start: int, limit: int, page: int, expected: int) -> Iterator[tuple[int, int]]:
    """(offset, global record number) of each intact record at a page start in
    ``[start, limit)`` whose number is ``expected`` or later.

    Cost: one read of a record header (20 bytes) per page start, plus one read
    of the whole record only when the header is plausible (a non-zero type word
    and a length that fits in the file).  Intact means its check code verifies.
    """
    pos = codec.page_ceil(start, page)
    while pos + codec.RECORD_OVERHEAD <= limit:
        raw_head = handle.read_at(pos, codec.RECORD_HEADER_SIZE)
        if len(raw_head) == codec.RECORD_HEADER_SIZE:
            rh = codec.decode_record_header(raw_head)
            total = codec.RECORD_OVERHEAD + rh.length
            if rh.type != codec.EOT and pos + total <= limit and is_ahead(rh.global_record, expected):
                raw = handle.read_at(pos, total)
                if len(raw) == total and codec.record_check_ok(raw, 0, rh.length):
                    yield pos, rh.global_record
        pos += page


def read_header(handle: FileHandle, path: str) -> tuple[bytes, codec.FileHeader]:
    """Page 0's first :data:`codec.HEAD_SIZE` bytes and the decoded header.

    A writer starting a new lap rewrites the header while a reader may be
    reading it; a read whose check code fails is retried a few times, and
    only a header that fails twice with the same bytes is corrupt.
    """
    head = handle.read_at(0, codec.HEAD_SIZE)
    for _ in range(_HEADER_RETRIES):
        try:
            return head, codec.decode_file_header(head, path)
        except CorruptFileError:
            again = handle.read_at(0, codec.HEAD_SIZE)
            if again == head:
                raise
            head = again
    return head, codec.decode_file_header(head, path)


@dataclass(frozen=True)
class Event:
    """One thing a record says about a stream.

    ``kind`` is ``init`` (INFO: ``ident`` and the stream ``offset`` it resumes
    at), ``append`` (``data``), ``end``, ``abort`` or ``unfinished`` (the journal
    ended with the stream still open).  ``record`` and ``offset`` are the
    stream's record number and byte offset before this record, as journal-dump
    prints them; ``position`` is the record's file offset (-1 for
    ``unfinished``).
    """

    kind: str
    stream: int
    record: int
    offset: int
    ident: bytes = b""
    data: bytes = b""
    position: int = -1
    global_record: int = -1


@dataclass
class StreamData:
    """One stream as read back: ``status`` is complete, aborted or open."""

    number: int
    ident: bytes
    start_offset: int
    data: bytes
    status: str
    position: int

    @property
    def complete(self) -> bool:
        return self.status == "complete"


@dataclass
class ScanEnd:
    """Where and why a scan stopped.

    ``position`` is where the next transaction goes: the start of the zero page
    for a clean end, else the end of the last good record.  ``clean`` is true
    when the journal ended at a zero type word at a transaction start; otherwise
    ``reason`` says what failed at ``position``.
    """

    position: int
    clean: bool
    reason: str
    next_global: int
    records: int


@dataclass
class _Open:
    number: int
    ident: bytes
    start: int
    offset: int
    record: int
    position: int
    chunks: list[bytes] = field(default_factory=list)


class _Source:
    """Random reads of a file through a 1 MiB window."""

    def __init__(self, handle: FileHandle, size: int) -> None:
        self.handle = handle
        self.size = size
        self._base = 0
        self._buf = b""

    def read(self, offset: int, length: int) -> bytes:
        end = offset + length
        if offset >= self._base and end <= self._base + len(self._buf):
            return self._buf[offset - self._base : end - self._base]
        if length >= _CHUNK:
            return self.handle.read_at(offset, length)
        self._base = offset
        self._buf = self.handle.read_at(offset, max(_CHUNK, length))
        return self._buf[:length]


class JournalScan:
    """Iterate over a journal's events; afterwards :attr:`end` says where it stopped.

    Iterating gives :class:`Event` objects, one per record (``init``,
    ``append``, ``end``, ``abort``) and then one ``unfinished`` per stream left
    open; a scan reads the file once (iterate it once).  :meth:`streams` gives
    whole streams instead, :meth:`stats` the counts.  The file is open only
    while an iteration runs; ``close()`` (or leaving a ``with`` block) ends one
    stopped half-way and closes the file.

    ``anomalies`` lists records that passed their checks but make no sense for
    their stream (data for an unknown stream, a record number out of sequence,
    an INFO for a stream already open): the original journald reader warns about
    them and so does this one; :meth:`StreamJournal.verify` treats them as corruption.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        fs: FileSystem | None = None,
        *,
        handle: FileHandle | None = None,
        strict_end: bool | None = None,
    ) -> None:
        self.path = as_path(path, "path")
        #: Probe past a clean end for records that show the journal goes on
        #: (damage) and raise.  ``None``: when page 0 carries engine's mark (a
        #: file the original server wrote may hold stale records there).  The
        #: writer's recovery turns it off: there such records are a torn
        #: transaction's pages, which it cuts and reports.
        self.strict_end = strict_end
        #: Whether page 0 carries engine's writer mark (set by the scan).
        self.marked = False
        self._fs = resolve(fs)
        self._handle = handle
        self.header: codec.FileHeader | None = None
        self.file_size = 0
        self.end: ScanEnd | None = None
        self.anomalies: list[str] = []
        self.open_streams: dict[int, _Open] = {}
        self.max_stream: int | None = None
        #: Stream numbers with at least one record in this lap.
        self.lap_streams: set[int] = set()
        self._collect = False
        self._finished: list[StreamData] = []
        self._started = False
        self._events: Iterator[Event] | None = None
        #: Streams read to their end, by status; data bytes of the append events.
        self.complete = 0
        self.aborted = 0
        self.data_bytes = 0

    # -- public ------------------------------------------------------------------
    def __iter__(self) -> Iterator[Event]:
        """The journal's events, record by record (see the class docstring)."""
        if self._started:
            raise RuntimeError("a JournalScan can be iterated once")
        self._started = True
        self._events = self._open_and_scan()
        return self._events

    def _open_and_scan(self) -> Iterator[Event]:
        if self._handle is not None:
            yield from self._scan(self._handle)
            return
        with self._fs.open(self.path, OpenMode.READ) as handle:
            yield from self._scan(handle)

    def close(self) -> None:
        """End an iteration stopped half-way (its file is closed); a no-op otherwise."""
        events, self._events = self._events, None
        if events is not None and hasattr(events, "close"):
            events.close()

    def __enter__(self) -> JournalScan:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    @property
    def wrapped(self) -> bool:
        """Whether the journal has wrapped: its lap starts at a global record
        number other than 0, so every stream that ended before that record was
        overwritten (the journal is a ring; see docs/guide/streams.md)."""
        return self.header is not None and self.header.first_global != 0

    def absent_streams(self) -> list[int]:
        """Stream numbers between the lowest and the highest read in this lap
        that have no record in it, in order (modulo 2**32).

        Each one ended (closed or aborted) before the lap began, and the wrap
        overwrote it; or it was aborted before writing any record (which leaves
        no trace, as in the original); or, in a live journal, it is still open
        with its data buffered.  Numbers are handed out at open, so such a gap
        is not a loss: a stream opened earlier may close after the wrap and read
        whole in this lap, while one opened later closed before it.
        """
        # Numbers are modulo 2**32: the lap's range is the circle minus its
        # widest gap between two numbers read (normally the one from the highest
        # round to the lowest).
        nums = sorted(self.lap_streams)
        if len(nums) < 2:
            return []
        gaps = list(zip(nums, [*nums[1:], nums[0] + codec.U32_MASK + 1], strict=True))
        widest = max(range(len(gaps)), key=lambda i: gaps[i][1] - gaps[i][0])
        inside = gaps[widest + 1 :] + gaps[:widest]  # from the lap's lowest number round
        return [n & codec.U32_MASK for a, b in inside for n in range(a + 1, b)]

    def stats(self) -> dict[str, object]:
        """What the scan found, as a dict (snake_case keys, numbers; None where
        not known yet).  Reads the journal to its end first if nothing read it
        yet (the scan is then used up); after a partial iteration, the figures
        so far with the ``end_*`` keys None.  Keys: see the guide's table."""
        if not self._started:
            self.run()
        header, end = self.header, self.end
        return {
            "version": header.version if header else None,
            "page_size": header.page_size if header else None,
            "file_size_bytes": self.file_size if header else None,
            "first_global_record": header.first_global if header else None,
            "wrapped": self.wrapped if header else None,
            "records": end.records if end else None,
            "next_global_record": end.next_global if end else None,
            "streams_complete": self.complete,
            "streams_aborted": self.aborted,
            "streams_open": len(self.open_streams),
            "streams_absent": len(self.absent_streams()),
            "data_bytes": self.data_bytes,
            "anomalies": len(self.anomalies),
            "end_position": end.position if end else None,
            "clean_end": end.clean if end else None,
            "end_reason": end.reason if end else None,
        }

    def streams(self) -> Iterator[StreamData]:
        """Whole streams: each complete or aborted one when its end is read, then
        the ones left open.  Data is kept in memory until the stream ends.  Damage
        found later (a zeroed region the journal goes on past) is raised after
        every stream ended before it: the same streams whichever record ended last."""
        self._collect = True
        try:
            for _ in self:
                if self._finished:
                    yield from self._finished
                    self._finished.clear()
        except EngineError:
            # A stream's end event comes before it is finished: the last one
            # ended is still here when the next step raises.
            yield from self._finished
            self._finished.clear()
            raise
        yield from self._finished
        self._finished.clear()

    def run(self) -> ScanEnd:
        """Read to the end, discarding events; returns :attr:`end`."""
        for _ in self:
            pass
        assert self.end is not None
        return self.end

    # -- the walk ------------------------------------------------------------------
    def _scan(self, handle: FileHandle) -> Iterator[Event]:
        size = handle.size()
        self.file_size = size
        head, header = read_header(handle, self.path)
        self.header = header
        self.marked = codec.has_mark(head)
        strict = self.marked if self.strict_end is None else self.strict_end
        page = header.page_size
        limit = size - size % page
        if limit < 2 * page:
            raise CorruptFileError(self.path, size, f"at least 2 pages of {page} bytes", found=f"{size} bytes")
        src = _Source(handle, limit)
        pos = page
        expected = header.first_global
        records = 0
        stop: tuple[int, bool, str] | None = None
        while stop is None:
            # At a transaction start (page aligned) a zero type word is the end.
            if pos + codec.WORD.size > limit:
                stop = (pos, False, "end of file without the zero page that ends a journal")
                break
            if codec.WORD.unpack(src.read(pos, codec.WORD.size))[0] == codec.EOT:
                # Both writers end the journal with a whole zero page; a zero
                # type word followed by anything else is a damaged record.
                if pos + page > limit or (handle.read_at(pos, page).count(0) != page and not self._written_since(
                    handle, head, pos, expected
                )):
                    stop = (pos, False, "a zero type word not followed by a zero page")
                else:
                    stop = (pos, True, "end of journal")
                    if strict:
                        self._check_real_end(handle, head, pos, page, limit, expected)
                break
            # Records of one transaction.
            while True:
                if pos + codec.RECORD_OVERHEAD > limit:
                    stop = (pos, False, "record header runs past the end of the file")
                    break
                raw_head = src.read(pos, codec.RECORD_HEADER_SIZE)
                rh = codec.decode_record_header(raw_head)
                total = codec.RECORD_OVERHEAD + rh.length
                if pos + total > limit:
                    stop = (pos, False, f"record length {rh.length} runs past the end of the file")
                    break
                raw = src.read(pos, total)
                if not codec.record_check_ok(raw, 0, rh.length):
                    stop = (pos, False, f"check code mismatch in record {expected}")
                    break
                if rh.global_record != expected:
                    stop = (pos, False, f"global record number {rh.global_record}, expected {expected}")
                    break
                data = raw[codec.RECORD_HEADER_SIZE : codec.RECORD_HEADER_SIZE + rh.length]
                yield from self._handle_record(rh, data, pos)
                records += 1
                expected = (expected + 1) & codec.U32_MASK
                pos += total
                room = page - pos % page
                if room == page:
                    break  # the record ended on a page boundary: a new start
                # The next type word may straddle the page boundary (records are
                # contiguous within a transaction; a header can start 1-3 bytes
                # before a page end).  It is still read whole: a type word's top
                # three bytes are always zero (types fit a byte, MSB first), so
                # when the transaction ended -- zero padding here, then the next
                # page's first type word or the zero page -- the straddling word
                # reads 0, and when a record continues it reads its non-zero type.
                if pos + codec.WORD.size > limit or codec.WORD.unpack(src.read(pos, codec.WORD.size))[0] == codec.EOT:
                    # End of transaction: NUL padding to the page end, which both
                    # writers zero; other bytes there mean a damaged type word.
                    if src.read(pos, room).count(0) != room:
                        stop = (pos, False, "non-zero bytes in the padding after a zero type word")
                        break
                    pos += room
                    break
        position, clean, reason = stop
        self.end = ScanEnd(position, clean, reason, expected, records)
        if not clean:
            global torn_scans
            torn_scans += 1
            log.warning(
                "journal %s: stopped at offset %d: %s (a torn transaction or damage; later data is ignored)",
                self.path,
                position,
                reason,
            )
        for number in sorted(self.open_streams):
            st = self.open_streams[number]
            if self._collect:
                self._finished.append(
                    StreamData(st.number, st.ident, st.start, b"".join(st.chunks), "open", st.position)
                )
            yield Event("unfinished", st.number, st.record, st.offset, st.ident, position=-1)

    def _written_since(self, handle: FileHandle, head: bytes, pos: int, expected: int) -> bool:
        """Whether a live writer has written at the end ``pos`` since the scan
        found it there (a fresh read: an intact record numbered ``expected``),
        or started a new lap (page 0 changed).  Then what the scan read up to
        ``pos`` was the committed journal at that moment and ``pos`` its end."""
        raw_head = handle.read_at(pos, codec.RECORD_HEADER_SIZE)
        if len(raw_head) == codec.RECORD_HEADER_SIZE:
            rh = codec.decode_record_header(raw_head)
            if rh.type != codec.EOT and rh.global_record == expected:
                raw = handle.read_at(pos, codec.RECORD_OVERHEAD + rh.length)
                if len(raw) == codec.RECORD_OVERHEAD + rh.length and codec.record_check_ok(raw, 0, rh.length):
                    return True
        return handle.read_at(0, codec.HEAD_SIZE) != head

    def _check_real_end(
        self, handle: FileHandle, head: bytes, pos: int, page: int, limit: int, expected: int
    ) -> None:
        """Raise if an intact record at or ahead of ``expected`` sits at a later
        page start: the zero page at ``pos`` is damage, not the end (unless a
        live writer has written at ``pos`` since: see :meth:`_written_since`)."""
        for offset, number in later_records(handle, pos + page, limit, page, expected):
            if self._written_since(handle, head, pos, expected):
                return
            raise CorruptFileError(
                self.path,
                pos,
                f"the end of the journal (nothing intact numbered {expected} or later after it)",
                found=(
                    f"zeros where a transaction should start, and an intact record {number} at offset "
                    f"{offset}: the journal goes on past a damaged region"
                ),
            )

    def _anomaly(self, message: str, position: int) -> None:
        text = f"offset {position}: {message}"
        self.anomalies.append(text)
        log.warning("journal %s: %s", self.path, text)

    def _finish(self, st: _Open, status: str) -> None:
        del self.open_streams[st.number]
        if status == "complete":
            self.complete += 1
        else:
            self.aborted += 1
        if self._collect:
            self._finished.append(StreamData(st.number, st.ident, st.start, b"".join(st.chunks), status, st.position))

    def _handle_record(self, rh: codec.RecordHeader, data: bytes, position: int) -> Iterator[Event]:
        """The original reader's per-record state machine (reader.c)."""
        number = rh.stream
        g = rh.global_record
        if self.max_stream is None or number > self.max_stream:
            self.max_stream = number
        self.lap_streams.add(number)
        st = self.open_streams.get(number)
        if st is not None and rh.record != st.record:
            self._anomaly(
                f"stream {number}: record number {rh.record}, expected {st.record}; dropping the stream", position
            )
            yield Event("abort", number, st.record, st.offset, st.ident, position=position, global_record=g)
            self._finish(st, "aborted")
            return
        rtype = rh.type
        if rtype & codec.ABORT:
            if st is None:
                self._anomaly(f"stream {number}: ABORT for a stream not open", position)
                return
            yield Event("abort", number, st.record, st.offset, st.ident, position=position, global_record=g)
            self._finish(st, "aborted")
        elif rtype & codec.INFO:
            if st is not None:
                self._anomaly(f"stream {number}: INFO for a stream already open; ignored", position)
                return
            try:
                offset, ident = codec.decode_info(data)
            except ValueError:
                self._anomaly(f"stream {number}: INFO data of {len(data)} bytes is too short", position)
                return
            st = _Open(number, ident, offset, offset, rh.record, position)
            self.open_streams[number] = st
            yield Event("init", number, rh.record, offset, ident, position=position, global_record=g)
        else:
            if rtype & codec.DATA:
                if st is None:
                    self._anomaly(f"stream {number}: DATA for a stream not open", position)
                else:
                    self.data_bytes += len(data)
                    yield Event("append", number, st.record, st.offset, st.ident, data, position, g)
                    if self._collect:
                        st.chunks.append(data)
                    st.offset = (st.offset + len(data)) & codec.U32_MASK
                    st.record += 1
            if rtype & codec.EOS:
                if st is None:
                    self._anomaly(f"stream {number}: EOS for a stream not open", position)
                else:
                    yield Event("end", number, st.record, st.offset, st.ident, position=position, global_record=g)
                    self._finish(st, "complete")
            if not rtype & (codec.DATA | codec.EOS):
                self._anomaly(f"stream {number}: record type 0x{rtype:x} has no known type bit; ignored", position)


class StreamReader(ClosedWhenDropped):
    """A read-only view of a stream journal: no writer lock, no repair.

    Open with :meth:`open` (or :meth:`StreamJournal.open_reader
    <engine.streams.journal.StreamJournal.open_reader>`); the file stays open
    until :meth:`close` (a context manager; one left open is closed when it is
    collected or at exit, with a ResourceWarning).  Each :meth:`events` /
    :meth:`streams` / :meth:`stats` / :meth:`verify` reads what is committed at
    that moment, even while a writer is busy in the journal (see
    :class:`JournalScan`).
    """

    _core: StoreCore  # (set first in __init__)

    def __init__(self, core: StoreCore, handle: FileHandle, strict_end: bool | None) -> None:
        self._core = core
        self.path = core.path
        self._handle = handle
        self.strict_end = strict_end

    @classmethod
    def open(
        cls, path: str | os.PathLike[str], *, strict_end: bool | None = None, fs: FileSystem | None = None
    ) -> StreamReader:
        """Open the journal at ``path`` for reading (the store core's reader
        sequence: no lock, no recovery).  ``strict_end`` as for
        :func:`read_events`.  Raises FileNotFoundError (no journal there),
        FormatError / CorruptFileError (not a journald v2 file, a damaged header)."""
        path = as_path(path, "path")
        fs = resolve(fs)
        if not fs.exists(path):
            raise no_such(fs, path, "stream journal")
        core = StoreCore(fs, path, "stream journal", writer=False)
        with core.opening():
            handle = core.keep(fs.open(path, OpenMode.READ))
            read_header(handle, path)  # a journald file at all?
            reader = cls(core, handle, strict_end)
        core.opened(reader)
        return reader

    def events(self) -> JournalScan:
        """A scan of the journal as it is now: iterate it for its events, then
        read its ``end`` (see :class:`JournalScan`)."""
        self._core.check_open()
        return JournalScan(self.path, self._core.fs, handle=self._handle, strict_end=self.strict_end)

    def streams(self) -> Iterator[StreamData]:
        """Whole streams (complete, aborted, then those left open)."""
        return self.events().streams()

    def stats(self) -> dict[str, object]:
        """The figures of :meth:`JournalScan.stats` (the whole journal read)."""
        return self.events().stats()

    def verify(self) -> list[str]:
        """Read the whole journal; raise CorruptFileError on damage or records
        that make no sense for their stream; return notes on what is not damage
        (a torn tail a writer cuts, streams left open, streams a wrap evicted)."""
        scan = self.events()
        scan.run()
        end = scan.end
        assert end is not None
        if scan.anomalies:
            raise CorruptFileError(self.path, 0, "records consistent with their streams",
                                   found="; ".join(scan.anomalies))
        notes = []
        if not end.clean:
            notes.append(f"journal ends at offset {end.position} in a torn transaction ({end.reason}); "
                         "it is cut there when a writer opens it")
        if scan.open_streams:
            notes.append(f"{len(scan.open_streams)} stream(s) left open (not complete)")
        absent = scan.absent_streams()
        if scan.wrapped and absent:
            notes.append(f"{len(absent)} stream number(s) between the lowest and highest of this lap have no "
                         "record in it (the journal wrapped: streams that ended before the lap are overwritten)")
        return notes

    def close(self) -> None:
        """Close the file (the core's close, once)."""
        core = self._core
        if core.begin_close():
            core.finish_close()

    def __enter__(self) -> StreamReader:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<StreamReader {self.path!r}{' closed' if self._core.closed else ''}>"


def read_events(
    path: str | os.PathLike[str], fs: FileSystem | None = None, *, strict_end: bool | None = None
) -> JournalScan:
    """The journal's events, as an iterable :class:`JournalScan` (see its ``end``).

    ``strict_end`` (default: whether page 0 carries engine's mark) probes past a
    zero page for records showing the journal goes on (damage).  Without the
    mark -- a file the original journald server wrote, which after a restart
    numbers records from 0 again over older ones -- a zero page is the end, as
    for the original reader.
    """
    path = as_path(path, "path")
    return JournalScan(path, fs, strict_end=strict_end)


def read_streams(
    path: str | os.PathLike[str], fs: FileSystem | None = None, *, strict_end: bool | None = None
) -> Iterator[StreamData]:
    """Whole streams (ident, start offset, data, status complete/aborted/open):
    :meth:`StreamReader.streams`, the reader closed when the iteration ends."""
    with StreamReader.open(path, strict_end=strict_end, fs=fs) as reader:
        yield from reader.streams()
