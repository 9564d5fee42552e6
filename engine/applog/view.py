"""The read side shared by the writer and the lock-free reader.

:class:`LogView` holds the ordered list of :class:`~engine.applog.segment.Segment`
objects and answers every query by index or time, over one
:class:`~engine.fs.core.StoreCore` (which keeps the segments' files and the
writer's lock, closes them once, and watches for a view left open).  Subclasses
decide how the list is kept current (:meth:`LogView._prepare_read`): the writer
(:class:`engine.applog.log.AppendLog`) flushes its buffer, the reader
(:class:`engine.applog.reader.LogReader`) re-reads the directory and the index
sizes.

Generators (``scan``, ``between``, ``follow``) read in chunks under the lock and
yield outside it, so a slow consumer never blocks the writer.
"""

from __future__ import annotations

import bisect
import datetime
import threading
import time
from collections import OrderedDict
from collections.abc import AsyncGenerator, Iterator
from dataclasses import dataclass
from typing import Any

from engine.applog import aio
from engine.applog.args import instant_arg_ns
from engine.applog.codec import CRC_MAGIC, HEADER_SIZE, IDX_MAGIC, LOG_MAGIC, check_header
from engine.applog.recovery import Mismatch, scan_segment
from engine.applog.segment import Record, Segment
from engine.conventions import duration_seconds, timeout_seconds
from engine.errors import CorruptFileError
from engine.fs import FileSystem, RecoveryReport
from engine.fs.core import StoreCore
from engine.lifetime import ClosedWhenDropped

_bisect_right = bisect.bisect_right
_new_record = tuple.__new__

#: Records materialised per chunk by the generators.
CHUNK_RECORDS = 4096
#: The first chunk of a scan is smaller, then chunks grow to CHUNK_RECORDS.
FIRST_CHUNK = 1

#: How many segments' record offsets ``get`` keeps in memory (8 bytes per record:
#: about 4.4 MiB for a full 64 MiB segment of 100-byte records).
INDEX_CACHE_SEGMENTS = 32
#: A segment displaces a cached one after count / ADMIT_DIVISOR uncached lookups.
ADMIT_DIVISOR = 16

#: Name of the log-start checkpoint written by ``truncate_before`` (an extension of
#: the LOG/IDX format).
START_FILE = "log-start-index"
#: Name of the writer's lock file (an extension of the format; readers never take
#: it, they only probe it: :mod:`engine.applog.reader`).
LOCK_FILE = ".lock"


@dataclass(frozen=True)
class SegmentInfo:
    """A public, immutable description of one segment (for listing and Spark)."""

    first_index: int  # index of the segment's first record (its file name)
    next_index: int  # one past its last visible record
    first_time_ns: int | None
    last_time_ns: int | None
    ttl_ns: int
    log_path: str
    idx_path: str
    log_bytes: int

    @property
    def count(self) -> int:
        return self.next_index - self.first_index


def parse_start(raw: bytes, path: str) -> int:
    """The index stored in the ``log-start-index`` checkpoint."""
    text = raw.decode("ascii", "replace").strip()
    if not text.isdigit():
        raise CorruptFileError(path, 0, "a decimal record index", repr(raw[:32]))
    return int(text)


class LogView(ClosedWhenDropped):
    """Queries over a list of segments; see the module docstring."""

    _core: StoreCore  # (set first in __init__)

    def __init__(self, core: StoreCore, decoded: type[Record] | None) -> None:
        self._core = core
        self.directory = core.path
        self._fs: FileSystem = core.fs
        #: The log's lock: a plain Lock (cheaper than an RLock on every append),
        #: so nothing that holds it calls a method that takes it: the public
        #: methods take it once and the ``*_locked`` helpers expect it held.
        self._lock = threading.Lock()
        self._segments: list[Segment] = []
        self._bases: list[int] = []
        self._start = 0
        self._index_cache: OrderedDict[int, Segment] = OrderedDict()
        #: The record class of a log opened with ``serializer=`` (decodes
        #: ``value``); None: plain :class:`Record` s, returned as read.
        self._decoded = decoded

    @property
    def recovery(self) -> RecoveryReport:
        """The writer: what opening repaired (empty when the log was closed
        cleanly).  A reader repairs nothing: what it does not show of a torn
        tail of the newest segment (see :mod:`engine.applog.reader`)."""
        return self._core.report

    @property
    def read_only(self) -> bool:
        """True for a reader (:class:`~engine.applog.reader.LogReader`)."""
        return not self._core.writer

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._core.closed

    # -- the segments the core keeps ----------------------------------------------------
    def _keep(self, seg: Segment) -> Segment:
        """Keep ``seg``'s files open until close (the core closes them once)."""
        return self._core.keep(seg)

    def _drop(self, seg: Segment) -> None:
        """Close ``seg`` now (deleted, or no longer the view's) and stop keeping it."""
        self._index_cache.pop(seg.base, None)
        self._core.forget(seg)
        seg.close()

    # -- subclass hooks ----------------------------------------------------------------
    def _prepare_read(self, index: int | None) -> None:
        """Make records up to ``index`` (all if None) readable, if they exist."""

    def close(self) -> None:
        """Release the files (each subclass its own)."""
        raise NotImplementedError

    def _check_open(self) -> None:
        self._core.check_open()

    # -- extent ------------------------------------------------------------------------
    def _first_locked(self) -> int:
        """``first_index`` (the lock held)."""
        if not self._segments:
            return self._start
        return min(max(self._start, self._segments[0].base), self._segments[-1].end)

    def _extent_locked(self) -> tuple[int, int]:
        """``(first_index, next_index)`` as they are now (the lock held; the view
        brought up to date first)."""
        self._check_open()
        self._prepare_read(None)
        return self._first_locked(), self._segments[-1].end if self._segments else self._start

    @property
    def first_index(self) -> int:
        """Index of the oldest record still kept (== next_index when empty)."""
        with self._lock:
            self._check_open()
            return self._first_locked()

    @property
    def next_index(self) -> int:
        """Index the next appended record will get."""
        with self._lock:
            return self._extent_locked()[1]

    def __len__(self) -> int:
        """How many records are kept (``next_index - first_index``)."""
        with self._lock:
            first, nxt = self._extent_locked()
            return nxt - first

    def __getitem__(self, index: int) -> Record:
        """``log[i]``: the record with index ``i`` (:meth:`get`); IndexError when it
        expired, was truncated or does not exist yet (indexes are absolute and
        never reused: ``log[-1]`` is not the newest, ``log[log.next_index - 1]`` is)."""
        if isinstance(index, slice):
            raise TypeError("an append log takes one record index, not a slice: use scan(start, stop)")
        if isinstance(index, bool) or not isinstance(index, int):
            raise TypeError(f"record indexes are ints, not {type(index).__name__} {index!r}")
        return self.get(index)

    def __contains__(self, index: object) -> bool:
        """``i in log``: whether record ``i`` is kept (``first_index <= i < next_index``)."""
        if isinstance(index, bool) or not isinstance(index, int):
            return False
        with self._lock:
            first, nxt = self._extent_locked()
            return first <= index < nxt

    def __iter__(self) -> Iterator[Record]:
        """The records kept when the iteration starts, oldest to newest (records
        appended meanwhile are not included; ones expired meanwhile are skipped)."""
        with self._lock:
            first, stop = self._extent_locked()
        return self.scan(first, stop)

    def stats(self) -> dict[str, Any]:
        """A summary (snake_case keys, numbers; None where unknown):
        ``first_index``, ``next_index``, ``records``, ``segment_count``, ``log_bytes``
        (the ``.log`` files' sizes), ``first_time_ns`` / ``last_time_ns`` (the
        oldest and newest kept records' times, None when empty) and ``ttl_ns``
        (the newest segment's; 0 or less: never expire)."""
        with self._lock:
            first, nxt = self._extent_locked()
            segs = self._segment_infos_locked()
            first_time = last_time = None
            if nxt > first:
                first_time, last_time = self._read_locked(first).time_ns, self._read_locked(nxt - 1).time_ns
            return {
                "directory": self.directory,
                "first_index": first,
                "next_index": nxt,
                "records": nxt - first,
                "segment_count": len(segs),
                "log_bytes": sum(s.log_bytes for s in segs),
                "first_time_ns": first_time,
                "last_time_ns": last_time,
                "ttl_ns": segs[-1].ttl_ns if segs else 0,
            }

    def segments(self) -> list[SegmentInfo]:
        """The segments, oldest first, with their index and time ranges."""
        with self._lock:
            self._check_open()
            self._prepare_read(None)
            return self._segment_infos_locked()

    def _segment_infos_locked(self) -> list[SegmentInfo]:
        return [
            SegmentInfo(s.base, s.end, s.first_time, s.last_time, s.ttl_ns, s.log_path, s.idx_path, s.log_size)
            for s in self._segments
        ]

    def _read_locked(self, index: int) -> Record:
        """Record ``index`` (kept: the caller checked), as stored (the lock held)."""
        seg = self._locate(index)
        return seg.read(index - seg.base)

    def _locate(self, index: int) -> Segment:
        k = bisect.bisect_right(self._bases, index) - 1
        if k < 0:
            raise IndexError(f"record {index} is before the log's first segment")
        return self._segments[k]

    # -- lookups -----------------------------------------------------------------------
    def get(self, index: int) -> Record:
        """The record with this index; IndexError if it is not (or no longer) kept."""
        with self._lock:
            if self._core.closed:
                self._core.check_open()
            self._prepare_read(index)
            segs = self._segments
            first = self._start
            if segs:
                last = segs[-1]
                nxt = last.base + last.count
                if segs[0].base > first:
                    first = segs[0].base
            else:
                nxt = first
            if not first <= index < nxt:
                raise IndexError(_missing(index, min(first, nxt), nxt))
            seg = segs[_bisect_right(self._bases, index) - 1]
            if seg.mem_idx is None:
                cache = self._index_cache
                if seg.cached is not None and cache.get(seg.base) is seg:
                    cache.move_to_end(seg.base)  # the common case of _touch_cache, inline
                else:
                    self._touch_cache(seg)
            rec = seg.read(index - seg.base)
            return rec if self._decoded is None else _new_record(self._decoded, rec)

    def _touch_cache(self, seg: Segment) -> None:
        """Keep some segments' indexes in memory so that a lookup there is one read
        of the log (see INDEX_CACHE_SEGMENTS).

        Admission is cost-aware, so random lookups over more segments than fit
        never thrash: while there is room a segment is cached on first use;
        when full, a segment gets in (evicting the least recently used) only
        after ``count / ADMIT_DIVISOR`` lookups missed it, so loading its index
        costs at most ADMIT_DIVISOR * 24 bytes of reading per lookup it serves.
        """
        cache = self._index_cache
        if seg.cached is not None and cache.get(seg.base) is seg:
            cache.move_to_end(seg.base)
            return
        if len(cache) >= INDEX_CACHE_SEGMENTS:
            seg.misses += 1
            if seg.misses * ADMIT_DIVISOR < seg.count:
                return
            _, old = cache.popitem(last=False)
            old.drop_cache()
        seg.misses = 0
        seg.load_cache()
        cache[seg.base] = seg

    def _chunk(self, index: int, stop: int | None, limit: int = CHUNK_RECORDS) -> list[Record]:
        """Up to ``limit`` records from ``index`` (clamped to the first kept one)."""
        with self._lock:
            self._check_open()
            self._prepare_read(None if stop is None else stop - 1)
            if not self._segments:
                return []
            index = max(index, self._first_locked())
            end = self._segments[-1].end if stop is None else min(stop, self._segments[-1].end)
            if index >= end:
                return []
            seg = self._locate(index)
            position = index - seg.base
            upto = min(seg.count, position + limit, end - seg.base)
            cls = self._decoded
            if cls is None:
                return list(seg.iter_range(position, upto))
            return [_new_record(cls, rec) for rec in seg.iter_range(position, upto)]

    def scan(self, start: int = 0, stop: int | None = None) -> Iterator[Record]:
        """Records with ``start <= index < stop`` in order (``stop`` None: up to the
        end as of each chunk).  Records expired meanwhile are skipped."""
        index = start
        limit = FIRST_CHUNK  # small first: between() often wants only a few records
        while stop is None or index < stop:
            chunk = self._chunk(index, stop, limit)
            if not chunk:
                return
            yield from chunk
            index = chunk[-1].index + 1
            limit = min(limit * 4, CHUNK_RECORDS)

    def index_at_time(self, time: datetime.datetime | float | None = None, *, time_ns: int | None = None) -> int:
        """Index of the first kept record at or after ``time`` (a datetime or
        seconds since the epoch; exact: ``time_ns``), ``next_index`` if none: a
        binary search over segments, then over one segment's index."""
        t0 = instant_arg_ns(time, time_ns, "time")
        if t0 is None:
            raise TypeError("index_at_time() needs time (a datetime or seconds since the epoch) or time_ns")
        return self._index_at_ns(t0)

    def _index_at_ns(self, t0: int) -> int:
        with self._lock:
            self._check_open()
            self._prepare_read(None)
            segs = self._segments
            lo, hi = 0, len(segs)
            while lo < hi:  # first segment whose newest record is >= t0
                mid = (lo + hi) >> 1
                last = segs[mid].last_time
                if last is None or last < t0:
                    lo = mid + 1
                else:
                    hi = mid
            if lo == len(segs):
                return segs[-1].end if segs else self._start
            seg = segs[lo]
            found = max(seg.base + seg.bisect_time(t0), self._first_locked())
            self._check_boundary(seg, found, t0)
            return found

    def _check_boundary(self, seg: Segment, found: int, t0: int) -> None:
        """Check the answer of a search by time against the records themselves
        (each read checks its checksum): the one before ``found`` is older than
        ``t0``, the one at ``found`` is not.  The search reads only index times,
        which no checksum covers; a damaged one must not move ``between()``
        silently.  CorruptFileError (naming the damaged entry) if they disagree.
        The lock held."""
        segs = self._segments
        end = segs[-1].end
        before = found - 1 >= self._first_locked() and self._read_locked(found - 1).time_ns >= t0
        at = found < end and self._read_locked(found).time_ns < t0
        if not (before or at):
            return
        for _rec in seg.iter_range(0, seg.count):  # raises at the entry whose time is wrong
            pass
        raise CorruptFileError(
            seg.idx_path, HEADER_SIZE, f"index times that find the first record at time >= {t0}",
            f"record {found}, which does not",
        )

    def between(
        self,
        start: datetime.datetime | float | None = None,
        end: datetime.datetime | float | None = None,
        *,
        start_ns: int | None = None,
        end_ns: int | None = None,
    ) -> Iterator[Record]:
        """Records with ``start <= time < end``, oldest first.  ``start`` and ``end``
        are datetimes or seconds since the epoch (exact: ``start_ns``/``end_ns``);
        a missing bound is open (from the oldest record, up to the newest)."""
        t0 = instant_arg_ns(start, start_ns, "start")
        t1 = instant_arg_ns(end, end_ns, "end")
        return self._between_ns(t0, t1)

    def _between_ns(self, t0: int | None, t1: int | None) -> Iterator[Record]:
        if t0 is not None and t1 is not None and t1 <= t0:
            return
        for rec in self.scan(self.first_index if t0 is None else self._index_at_ns(t0)):
            if t1 is not None and rec.time_ns >= t1:
                return
            yield rec

    def follow(
        self,
        start: int | None = None,
        *,
        poll: float | datetime.timedelta = 0.05,
        timeout: float | datetime.timedelta | None = None,
    ) -> Iterator[Record]:
        """Yield records from index ``start`` (default: the current end) on,
        waiting for new ones (checking every ``poll``); ends after ``timeout``
        without a new record (None: never).  ``poll`` and ``timeout`` are seconds
        or timedeltas.  Records that expire before they are read are skipped."""
        poll_s = duration_seconds(poll, "poll")
        assert poll_s is not None
        return self._follow(start, poll_s, timeout_seconds(timeout))

    def follow_async(
        self,
        start: int | None = None,
        *,
        poll: float | datetime.timedelta = 0.05,
        timeout: float | datetime.timedelta | None = None,
    ) -> AsyncGenerator[Record, None]:
        """:meth:`follow` for asyncio: ``async for record in log.follow_async()``.

        The same arguments and records; between looks it awaits ``poll`` with
        ``asyncio.sleep`` (the threaded ``follow`` sleeps the same period: a
        writer announces nothing, see :mod:`engine.applog.aio`), so the event loop
        is never blocked.  Cancel the task (or break) to stop following."""
        poll_s = duration_seconds(poll, "poll")
        assert poll_s is not None
        return aio.follow_async(self._follow_steps(start, poll_s, timeout_seconds(timeout)))

    def _follow(self, start: int | None, poll: float, timeout: float | None) -> Iterator[Record]:
        for step in self._follow_steps(start, poll, timeout):
            if isinstance(step, float):
                time.sleep(step)
            else:
                yield from step

    def _follow_steps(self, start: int | None, poll: float, timeout: float | None) -> Iterator[list[Record] | float]:
        """What following does, for the threaded and the asyncio face alike: the
        next chunk of records, or how many seconds to wait before looking again
        (``poll``, or what is left of ``timeout``); ends once ``timeout`` passed
        without a new record."""
        index = self.next_index if start is None else start
        idle_since = time.monotonic()
        while True:
            chunk = self._chunk(index, None)
            if chunk:
                yield chunk
                index = chunk[-1].index + 1
                idle_since = time.monotonic()
                continue
            idle = time.monotonic() - idle_since
            if timeout is not None and idle >= timeout:
                return
            yield float(poll if timeout is None else min(poll, max(0.0, timeout - idle)))

    # -- self-check --------------------------------------------------------------------
    def _verify_segments(
        self, fs_read: dict[int, tuple[bytes, bytes, bytes | None]], *, tail_ok: bool
    ) -> list[str]:
        """Check every invariant on the given file contents (base -> (log, idx,
        .crc or None)): with a ``.crc`` file, every record's checksum too.

        ``tail_ok``: a torn or unindexed tail of the newest segment is a note (a
        closed log that the next open would repair) rather than an error.
        """
        notes: list[str] = []
        prev_end: int | None = None
        prev_time: int | None = None
        bases = sorted(fs_read)
        for n, base in enumerate(bases):
            log, idx, crc = fs_read[base]
            seg_log = f"{self.directory}/{base:020d}.log"
            seg_idx = f"{self.directory}/{base:020d}.idx"
            log_head = check_header(log, LOG_MAGIC, seg_log)
            idx_head = check_header(idx, IDX_MAGIC, seg_idx)
            if crc is not None:
                seg_crc = f"{self.directory}/{base:020d}.crc"
                check_header(crc, CRC_MAGIC, seg_crc)
            else:
                notes.append(
                    f"{seg_log}: no .crc file (written by the original LOG/IDX writer or an older engine): "
                    "weaker checks"
                )
            if idx_head.ttl_ns != log_head.ttl_ns:
                notes.append(f"{seg_idx}: TTL {idx_head.ttl_ns} differs from the log's {log_head.ttl_ns}")
            if prev_end is not None and base != prev_end:
                raise CorruptFileError(seg_log, 0, f"a segment starting at index {prev_end}", f"{base}")
            try:
                scan = scan_segment(log, idx, base, prev_time, crc)
            except Mismatch as exc:
                path = seg_idx if exc.where == "idx" else seg_log
                raise CorruptFileError(path, exc.offset, exc.expected, exc.found) from None
            if not scan.clean:
                what = (
                    f"{scan.log_cut} log bytes past the last record, {len(scan.rebuilt)} unindexed records, "
                    f"{scan.idx_dropped} dangling index entries, {scan.idx_partial} bytes of a partial entry, "
                    f"{scan.torn_records} record(s) failing their checksum, {scan.crc_dropped} .crc bytes past the end"
                )
                if n == len(bases) - 1 and tail_ok:
                    notes.append(f"{seg_log}: torn tail that the next open repairs: {what}")
                else:
                    raise CorruptFileError(seg_log, scan.log_end, "log and index ending together", what)
            prev_end = base + scan.count
            if scan.last_time is not None:
                prev_time = scan.last_time
        if bases and self._start > (prev_end or 0):
            raise CorruptFileError(
                f"{self.directory}/{START_FILE}", 0, f"a start index <= {prev_end}", str(self._start)
            )
        if not bases:
            notes.append("no segments")
        return notes


def _missing(index: int, first: int, nxt: int) -> str:
    """Why record ``index`` is not in a log that keeps ``[first, nxt)``, in words."""
    if index < 0:
        return f"record {index} does not exist: record indexes start at 0"
    if index < first:
        return (f"record {index} is no longer in the log: expired or truncated "
                f"(the oldest kept is {first})" if first < nxt else
                f"record {index} is no longer in the log: expired or truncated (the log is empty)")
    if first < nxt:
        return f"record {index} does not exist yet: the newest record is {nxt - 1}"
    return f"record {index} does not exist yet: the log is empty (the next record appended gets {nxt})"


def read_headers(log_head: bytes, log_path: str) -> int:
    """The TTL in a log file's header (FormatError if it is not a LOG file)."""
    return check_header(log_head[:HEADER_SIZE], LOG_MAGIC, log_path).ttl_ns
