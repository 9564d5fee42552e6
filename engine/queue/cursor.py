"""A reader's position in the writer files, and where the files come from.

A :class:`JournalCursor` walks the PUT records of all segments in id order, one
read buffer at a time, so a reader's memory does not depend on the backlog.  It
gets the segment list and how far it may read from a :class:`JournalSource`,
which for every reader, in a producer's process or any other, is a
:class:`PollingSource`: it reads the files as they are (what any producer wrote,
whole checksummed batches only), re-lists the directory for a newer file and
looks at the newest file's size again every ``poll_interval`` seconds.  A record
that is only partly written is never delivered: the scanner stops at it
("incomplete") and the next look reads it whole.  In a producer's process the
source also hears of that producer's writes at once (:class:`LocalWriter`:
its writes wake the waiting readers, it says which file is the newest without a
listing, and it writes its staged puts when a reader here has caught up).

Waiters wake through :class:`WakeUps`: a version number that changes whenever
new data may be readable, a condition variable for threads, and callbacks for
other kinds of waiters (an asyncio reader registers one that resolves its future
on its loop: :mod:`engine.queue.aio`).
"""

from __future__ import annotations

import logging
import operator
import threading
import time
from bisect import bisect_right
from collections import deque
from collections.abc import Callable, Sequence
from typing import Protocol, TypeVar

from engine.errors import CorruptFileError
from engine.fs import FileHandle, FileSystem, probe_lock
from engine.native import kernel
from engine.queue import codec, naming
from engine.queue.segments import RecordScanner, Segment, corrupt, list_segments, open_segment_handle

_Run = TypeVar("_Run")

log = logging.getLogger("engine.queue")
_first = operator.itemgetter(0)

#: The batch readers' columnar decoder: the compiled twin of
#: :func:`codec.decode_columns` when it is built (``engine/queue/_native.c``), chosen
#: once per process; the pure function otherwise, and always with ``ENGINE_PURE_PYTHON=1``.
decode_columns = kernel("queue.decode_columns") or codec.decode_columns


class JournalSource(Protocol):
    """What a cursor needs from whoever owns the writer files."""

    fs: FileSystem

    def segment_list(self, *, fresh: bool = False) -> list[Segment]: ...

    def readable_end(self, segment: Segment, handle: FileHandle) -> tuple[int, bool]:
        """``(limit, still_growing)`` for ``segment``: read up to ``limit``; the
        segment may grow later only if ``still_growing``."""
        ...

    @property
    def version(self) -> int:
        """Changes whenever new data may be readable (for waits)."""
        ...

    def wait(self, version: int, timeout: float | None) -> None:
        """Block until ``version`` changes or ``timeout`` passes (may return early)."""
        ...

    def notify(self) -> None:
        """Wake waiters (an abort put an item back)."""
        ...

    def add_waiter(self, version: int, callback: Callable[[], None]) -> bool:
        """Call ``callback`` (from any thread) at the next change of ``version``;
        False (nothing registered) if it has changed already."""
        ...

    def remove_waiter(self, callback: Callable[[], None]) -> None:
        """Forget ``callback`` (no-op if it is not registered)."""
        ...

    @property
    def poll_period(self) -> float | None:
        """Seconds after which new data may be readable without a notify (another
        process writes the files); None when every change is notified."""
        ...

    def writer_alive(self) -> bool:
        """Whether a writer has the queue open (and may be writing its newest file)."""
        ...


class WakeUps:
    """Waiting for new data: the version number, its condition variable, and
    callbacks (for waiters that are not threads).

    ``notify`` bumps the version, wakes the threads in :meth:`wait` and calls each
    registered callback once (outside the condition's lock, in the notifying
    thread; a callback must be quick and must not raise).  ``waiters`` counts both
    kinds, so a writer may skip ``notify`` when nobody waits.  A subclass whose
    ``_closed`` is true no longer blocks in :meth:`wait` nor registers callbacks.
    """

    _closed = False
    #: See :attr:`JournalSource.poll_period`.
    poll_period: float | None = None

    def __init__(self) -> None:
        self._init_wakeups()

    def _init_wakeups(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._version = 0
        self.waiters = 0
        self._callbacks: set[Callable[[], None]] = set()

    @property
    def version(self) -> int:
        return self._version

    def close(self) -> None:
        """No more waits: wake every waiter (the queue closed)."""
        self._closed = True
        self.notify()

    def wait(self, version: int, timeout: float | None) -> None:
        """Block until ``version`` changes or ``timeout`` passes (at most
        :attr:`poll_period`; may return early)."""
        poll = self.poll_period
        if poll is not None:
            timeout = poll if timeout is None else min(timeout, poll)
        with self._cond:
            if self._version == version and not self._closed and (timeout is None or timeout > 0):
                self.waiters += 1
                try:
                    self._cond.wait(timeout)
                finally:
                    self.waiters -= 1

    def notify(self) -> None:
        with self._cond:
            self._version += 1
            self._cond.notify_all()
            if not self._callbacks:
                return
            callbacks = list(self._callbacks)
            self._callbacks.clear()
            self.waiters -= len(callbacks)
        for callback in callbacks:
            callback()

    def add_waiter(self, version: int, callback: Callable[[], None]) -> bool:
        with self._cond:
            if self._version != version or self._closed:
                return False
            if callback not in self._callbacks:
                self._callbacks.add(callback)
                self.waiters += 1
            return True

    def remove_waiter(self, callback: Callable[[], None]) -> None:
        with self._cond:
            if callback in self._callbacks:
                self._callbacks.discard(callback)
                self.waiters -= 1


class LocalWriter(Protocol):
    """What a :class:`PollingSource` asks the producer in its own process (if any)."""

    def newest_number(self) -> int:
        """The newest writer file's number as the producers published it (0: unknown)."""
        ...

    @property
    def staged(self) -> bool:
        """Whether puts are staged in memory, not yet written."""
        ...

    def flush(self) -> None:
        """Write the staged puts (a reader here caught up)."""
        ...


class PollingSource(WakeUps):
    """The writer files as they are on disk: poll sizes and the directory."""

    def __init__(
        self,
        fs: FileSystem,
        directory: str,
        queue: str,
        poll_interval: float,
        known: Sequence[Segment] = (),
        writer: LocalWriter | None = None,
    ) -> None:
        # No item size limit: a reader reads whatever item a valid file holds,
        # bounded by the file's size (the limit is what a writer accepts).
        self.fs = fs
        self.directory = directory
        self.queue = queue
        self.poll_interval = poll_interval
        # ``known``: files listed already with their first ids (a Spark task gets its
        # plan's), not read again; the listing still decides which files exist.
        self._segments: list[Segment] = list(known)
        self._listed_at = 0.0
        self._writer = writer
        self.poll_period = poll_interval
        self._init_wakeups()

    def segment_list(self, *, fresh: bool = False) -> list[Segment]:
        now = time.monotonic()
        if fresh or not self._segments or now - self._listed_at >= self.poll_interval:
            self._segments = list_segments(self.fs, self.directory, self.queue, known=self._segments)
            self._listed_at = now
        return self._segments

    def readable_end(self, segment: Segment, handle: FileHandle) -> tuple[int, bool]:
        writer = self._writer
        if writer is not None:
            if writer.staged:
                writer.flush()  # a reader here caught up: hand it the staged puts
            if writer.newest_number() == segment.number:
                return handle.size(), True  # the newest file, as the producers say: no listing
        # Decide "is it still the newest" BEFORE reading the size: the writer fsyncs
        # a file and stops writing it before it creates the next one, so a size read
        # after seeing a newer file is final.
        segs = self.segment_list(fresh=True) if self._is_newest(segment) else self._segments
        growing = not any(seg.number > segment.number for seg in segs)
        return handle.size(), growing

    def _is_newest(self, segment: Segment) -> bool:
        return not any(seg.number > segment.number for seg in self._segments)

    def writer_alive(self) -> bool:
        if self._writer is not None:
            return True  # this process is a producer
        # A probe holds the lock for microseconds; the writer's open waits for it.
        return probe_lock(self.fs, naming.join(self.directory, naming.writer_lock_name(self.queue)))


class JournalCursor:
    """Yields the PUTs with ids above ``after_id``, in order, across segments."""

    def __init__(self, source: JournalSource, after_id: int) -> None:
        self.source = source
        self.after_id = after_id
        self.last_id = 0  # highest id read so far (ids must increase)
        self.prev_id = 0  # the id read just before the one peeked (gap detection)
        self.segment: Segment | None = None
        self._handle: FileHandle | None = None
        self._scanner: RecordScanner | None = None
        #: The record :meth:`peek` returned and nobody consumed yet.
        self.peeked: codec.Put | None = None
        #: Decoded records not handed out yet (one batch: refilled only when empty):
        #: the reader takes the next item from here (its hot path), :meth:`fill`
        #: decodes the next batch into it.
        self.ready: deque[codec.Put] = deque()
        # id -> the id read just before it in the journal, for the records in
        # ``ready`` that do not follow the previous one (a hole: rare).  Every other
        # record's predecessor is its id - 1: no per-record bookkeeping.
        self.gaps: dict[int, int] = {}
        self._batch_bytes = 0  # journal bytes of the batch in ``ready``
        self._batch_count = 1  # its records
        self._stall: tuple[str, int, int] | None = None  # (file, offset, limit) last judged
        self._rewound: tuple[str, int] | None = None  # (file, offset) last read again (see _reread)

    @property
    def ready_bytes(self) -> int:
        """About how many journal bytes ``ready`` holds (the batch's bytes, pro rata)."""
        left = len(self.ready)
        return self._batch_bytes * left // self._batch_count if left else 0

    # -- positioning ---------------------------------------------------------------
    def _open(self, segment: Segment) -> None:
        self.close()
        self._handle = open_segment_handle(self.source.fs, segment.path, allow_short=True)
        self._scanner = RecordScanner(self._handle, codec.MAGIC_SIZE)
        self.segment = segment

    def _start(self) -> bool:
        for attempt in range(3):
            segs = self.source.segment_list(fresh=attempt > 0)
            if not segs:
                return False
            start = segs[0]
            for seg in segs:
                if seg.first_id is not None and seg.first_id <= self.after_id + 1:
                    start = seg
            try:
                self._open(start)
            except FileNotFoundError:
                continue  # deleted meanwhile: list again
            return True
        return False

    def _advance(self) -> bool:
        assert self.segment is not None
        current = self.segment.number
        for attempt in range(3):
            later = [seg for seg in self.source.segment_list(fresh=attempt > 0) if seg.number > current]
            if not later:
                return False
            try:
                self._open(later[0])
            except FileNotFoundError:
                continue
            return True
        return False

    # -- reading -------------------------------------------------------------------
    def peek(self) -> codec.Put | None:
        """The next PUT without consuming it (None: nothing readable now)."""
        if self.peeked is None:
            entry = self._read()
            if entry is None:
                return None
            self.prev_id, self.peeked = entry
        return self.peeked

    def next(self) -> codec.Put | None:
        """The next PUT, consumed (None: nothing readable now)."""
        item = self.peek()
        self.peeked = None
        return item

    def _read(self) -> tuple[int, codec.Put] | None:
        """The next PUT and the id read just before it."""
        ready = self.ready
        while True:
            if ready:
                put = ready.popleft()
                return self.gaps.get(put[0], put[0] - 1), put
            if not self.fill():
                return None

    def fill(self) -> bool:
        """Decode the next run of readable records into ``ready``; False = none now.

        Called only when ``ready`` is empty."""
        self.gaps.clear()
        if self.segment is None and not self._start():
            return False
        while True:
            run = self._next_run(lambda scanner, limit: scanner.next_batch(limit))
            if run is None:
                return False
            records, start = run
            last, after = self.last_id, self.after_id
            first = records[0][0]
            ids = list(map(_first, records))
            if first == last + 1 and ids == list(range(first, first + len(ids))):
                # The common case, checked in C: ids follow on from the last one read.
                if first > after:
                    self.ready.extend(records)
                elif ids[-1] > after:
                    self.ready.extend(records[after - first + 1 :])
                self.last_id = ids[-1]
            else:
                self._read_with_holes(records, start)
            ready = self.ready
            if ready:
                assert self._scanner is not None
                self._batch_bytes = self._scanner.offset - start
                self._batch_count = len(ready)
                return True

    def _next_run(self, decode: Callable[[RecordScanner, int], _Run | None]) -> tuple[_Run, int] | None:
        """``decode(scanner, limit)`` over the readable records of the files until
        it decodes something (a list of PUTs, a run of columns; empty or None:
        nothing): that and where the scanner was before it.  None: nothing
        readable now.  Damage in a growing file is read again (:meth:`_reread`);
        a read that decoded nothing goes on as :meth:`_read_on` says."""
        while True:
            assert self.segment is not None and self._handle is not None and self._scanner is not None
            scanner = self._scanner
            limit, growing = self.source.readable_end(self.segment, self._handle)
            start = scanner.offset
            try:
                got = decode(scanner, limit)
            except codec.BadRecord as exc:
                if growing and self._reread():
                    continue
                raise corrupt(self.segment.path, exc) from None
            if got:
                return got, start
            if not self._read_on(scanner, limit, growing):
                return None

    def _read_on(self, scanner: RecordScanner, limit: int, growing: bool) -> bool:
        """A read of the file up to ``limit`` decoded nothing: whether to read
        again now (rewound to the last CHECK, or on to the next file); False:
        nothing more now.  In a finished file, a record the file ends inside, or
        records no CHECK vouches for (the writer ends every write with one), are
        damage: CorruptFileError, never delivered."""
        assert self.segment is not None
        if growing:
            # A write in progress (a record or its CHECK) unless it stalled.
            return bool((scanner.stop == "incomplete" or scanner.unverified) and self._judge_stall(limit))
        if scanner.stop == "incomplete":
            raise CorruptFileError(self.segment.path, scanner.offset, "a whole record", "the file ends inside it")
        if scanner.unverified:
            if scanner.accept_foreign_tail(self.last_id or None, self._next_first_id()):
                return True  # libkestrel appended them before it started a newer file: read them
            raise CorruptFileError(
                self.segment.path,
                scanner.offset - scanner.unverified,
                "a CHECK record after the records from here",
                "the file ends without one",
            )
        return self._advance()

    def _next_first_id(self) -> int | None:
        """The first id of the file after this one (None: unknown, or none yet)."""
        assert self.segment is not None
        current = self.segment.number
        return next((seg.first_id for seg in self.source.segment_list() if seg.number > current), None)

    def _read_with_holes(self, records: list[codec.Put], start: int) -> None:
        """:meth:`fill` for a run whose ids do not simply follow on: note each hole
        (for the reader's gap detection); ids that go back are damage."""
        assert self.segment is not None
        last, after, gaps, append = self.last_id, self.after_id, self.gaps, self.ready.append
        for record in records:
            xid = record[0]
            if xid != last + 1:
                if xid <= last:
                    raise CorruptFileError(
                        self.segment.path, start, f"item ids above {last} in the records from here", str(xid)
                    )
                gaps[xid] = last
            if xid > after:
                append(record)
            last = xid
        self.last_id = last

    def _judge_stall(self, limit: int) -> bool:
        """The newest file holds bytes after the last delivered record that cannot be
        delivered yet: a record or its CHECK still being written, or damage.

        As the writer's open does: a valid CHECK after them (one that vouches for
        later bytes) means damage in the middle of the file, CorruptFileError; with
        nothing valid after them and no writer holding the queue, they are a torn
        tail (or damage to the last write) that the writer's next open cuts: said
        once as a warning, and nothing of them is delivered.  Judged once per
        position and size (reads only while stalled, never on the hot path).

        True when the cursor was rewound to the last CHECK (:meth:`_reread`): the
        caller reads again at once, and if the same bytes stall it again the
        damage is raised then (a caller polling with no wait must never see the
        rest of the file silently missing).
        """
        assert self.segment is not None and self._handle is not None and self._scanner is not None
        start = self._scanner.offset - self._scanner.unverified
        stall = (self.segment.path, start, limit)
        if stall == self._stall:
            return False
        self._stall = stall
        rest = self._handle.read_at(start, limit - start)
        hit = codec.find_valid_check(rest, 1, 0)
        if hit is not None:
            if self._reread():
                # Judged again if the same bytes stall the reread: then the damage
                # is real (``_reread`` says so once per position) and raised below.
                self._stall = None
                return True
            raise CorruptFileError(
                self.segment.path,
                start,
                "a valid record (damage in the middle of the file: run `engine queue repair`)",
                f"records that do not decode or match their CHECK; a valid CHECK follows at offset {start + hit}",
            )
        if not self.source.writer_alive():
            log.warning(
                "%s: %d bytes at offset %d are not a whole, checked write and no writer has the queue open: "
                "a torn tail (or damage) that the writer's next open cuts; not delivered",
                self.segment.path,
                limit - start,
                start,
            )
        return False

    def _reread(self) -> bool:
        """Read the newest file again from its last CHECK, once per position; False
        if that was done already (the damage is real).

        A producer killed in the middle of its write leaves a torn batch after the
        last CHECK; the next producer cuts it and writes new records in its place
        (:func:`engine.queue.recover.resync`).  What this cursor decoded of the torn
        batch (never delivered: no CHECK vouched for it) no longer matches the file.
        """
        assert self.segment is not None and self._scanner is not None
        base = self._scanner.offset - self._scanner.unverified
        if base == self._scanner.offset or self._rewound == (self.segment.path, base):
            return False
        self._rewound = (self.segment.path, base)
        self._scanner.rewind_to(base)
        return True

    def position(self) -> tuple[str | None, int]:
        """(current segment path, byte offset of the next record)."""
        if self.segment is None or self._scanner is None:
            return None, 0
        return self.segment.path, self._scanner.offset

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()
        self._handle = None
        self._scanner = None


#: Bytes a :class:`ColumnScanner` reads at a time (more for a run of records bigger than this).
COLUMN_CHUNK = 8 << 20
#: PUTs per run a :class:`ColumnCursor` returns (about: runs end at a CHECK).
COLUMN_ITEMS = 65536


class ColumnScanner(RecordScanner):
    """A :class:`RecordScanner` for batch reads: :meth:`next_columns` decodes the
    verified PUTs of large chunks of the file into columns (:func:`codec.decode_columns`).

    Every decode starts at a CHECK boundary (``_resume``): records after the last
    CHECK in a chunk are decoded again with the next chunk rather than carried.
    :attr:`offset` is where the last decode stopped and :attr:`unverified` the
    bytes from the boundary to there, as for :meth:`RecordScanner.next_batch`, so
    the cursor's stall and reread logic applies unchanged.
    """

    def __init__(
        self, handle: FileHandle, offset: int, chunk: int = COLUMN_CHUNK, max_items: int = COLUMN_ITEMS
    ) -> None:
        super().__init__(handle, offset, chunk)
        self.max_items = max_items
        self._resume = offset
        #: Where the records of the columns last returned start (a CHECK boundary).
        self.run_start = offset

    def rewind_to(self, offset: int) -> None:
        super().rewind_to(offset)
        self._resume = offset

    def next_columns(self, limit: int) -> codec.PutColumns | None:
        """The next verified PUTs of records ending by ``limit``, as columns (at
        least one PUT); None: nothing more now (:attr:`stop` says why, as for
        :meth:`RecordScanner.next_batch`).  A malformed record or a CHECK that
        does not match is raised only once the PUTs before it have been returned."""
        while True:
            buf = self._buf
            pos = self._resume - self._buf_off
            if 0 <= pos < len(buf):
                if self.checked is None:
                    self.checked = self._uses_checks(buf, pos)
                checked, self._foreign = self.checked and not self._foreign, False
                try:
                    cols = decode_columns(buf, pos, checked, self.max_items)
                except codec.BadRecord as exc:
                    raise exc.shifted(self._buf_off) from None
                self.run_start = self._resume
                self._resume = self._buf_off + cols.end
                self.offset = self._buf_off + cols.scanned
                self._covered = cols.scanned - cols.end
                if cols.items:
                    return cols
                if cols.stop == "marker":
                    self.stop = "marker"
                    if self.checked:
                        self._check_after_marker(limit)
                    return None
                # nothing whole and verified in the buffer from the boundary: read more below
            if not self._read_more(self._resume, limit):
                return None


def _next_columns(scanner: RecordScanner, limit: int) -> codec.PutColumns | None:
    assert isinstance(scanner, ColumnScanner)  # a ColumnCursor's
    return scanner.next_columns(limit)


class ColumnCursor(JournalCursor):
    """A :class:`JournalCursor` for batch reads: the PUTs with ids above
    ``after_id``, in order, across segments, as runs of columns (:meth:`next_columns`).

    The same files, checks and errors as the item cursor (it is one: segment
    choice, growing files, torn tails, rereads and the id order are its code);
    only the decoding is columnar, so no Python object is made per item.
    """

    #: Bytes read at a time, and PUTs per run (about: runs end at a CHECK).
    chunk = COLUMN_CHUNK
    max_items = COLUMN_ITEMS

    def _open(self, segment: Segment) -> None:
        self.close()
        self._handle = open_segment_handle(self.source.fs, segment.path, allow_short=True)
        self._scanner = ColumnScanner(self._handle, codec.MAGIC_SIZE, self.chunk, self.max_items)
        self.segment = segment

    def fill(self) -> bool:
        raise TypeError("a ColumnCursor reads runs of items: next_columns(), not peek() / next()")

    def next_columns(self) -> tuple[codec.PutColumns, int] | None:
        """The next run of PUTs and the index of its first one above ``after_id``
        (the ones before it are below the cursor's start); None: nothing readable now."""
        if self.segment is None and not self._start():
            return None
        while True:
            run = self._next_run(_next_columns)
            if run is None:
                return None
            cols, _ = run
            scanner = self._scanner
            assert isinstance(scanner, ColumnScanner)
            ids = memoryview(cols.ids).cast("q")
            if ids[0] <= self.last_id or not cols.ascending:
                self._ids_go_back(ids, scanner.run_start)
            self.last_id = ids[-1]
            first = bisect_right(ids, self.after_id) if ids[0] <= self.after_id else 0
            if first < cols.items:
                return cols, first

    def _ids_go_back(self, ids: memoryview, start: int) -> None:
        """Raise the item cursor's error for a run whose ids do not increase."""
        assert self.segment is not None
        last = self.last_id
        for xid in ids:
            if xid <= last:
                raise CorruptFileError(
                    self.segment.path, start, f"item ids above {last} in the records from here", str(xid)
                )
            last = xid
        raise AssertionError("unreachable: the ids increase")
