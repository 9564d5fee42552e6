"""The writer: :class:`AppendLog`, one per directory (an exclusive lock file).

Every record reaches the files the same way, whatever the call: ``append`` and
``append_many`` validate their arguments and stamp the time, then, under the
writer's lock, hand runs of records that share flags and time (``append``: a run
of one) to :meth:`SegmentWriter.add <engine.applog.writer.SegmentWriter.add>` of
the active segment, the one write path (``append`` runs its lines in its own
frame: one Python call less per record).  It encodes them (one encoder,
:func:`engine.applog.writer.encode_batch`, compiled or the pure-Python
reference, chosen there once per process and imported here), and its
:meth:`~engine.applog.writer.SegmentWriter.settle` starts a new segment
(:meth:`AppendLog._roll_locked`) when a record would push the active log past
``segment_bytes``, and flushes when the buffer is full.  The segment writer's
module says in which order the bytes reach the disk and why that order is what
recovery relies on.

Every record's CRC-32 goes into the segment's ``.crc`` side file (an extension
of the LOG/IDX format), written after the log bytes and before the index
entries, and synced in the same round.  On open, a record whose checksum is
missing or wrong ends the log (a torn, never acknowledged append), so a torn
record never comes back as data that was not written.  What opening repaired is
in ``log.recovery`` (:mod:`engine.applog.opening`).

The life cycle is the store core's (:class:`engine.fs.core.StoreCore`), as for
every store: :meth:`AppendLog.open` is its open sequence (the writer lock, the
segments' files kept by the core, :func:`engine.applog.opening.open_segments`
repairing into ``core.report``, the log installing what it returned), a failed
write or sync trips the core's failure latch (every later write raises it), and
``close`` is the core's ``begin_close``/``finish_close``.

``sync=`` is the core's sync policy, driven by its
:class:`~engine.fs.core.SyncDriver`: ``"always"`` flushes and syncs before
``append`` returns, sharing the fsyncs of concurrent threads (the driver's group
commit); a period (seconds or a timedelta) syncs from the driver's thread once
per period while records were appended; ``"never"`` leaves it to the OS and to
``close()``.  Buffered records reach the files when the buffer holds
``buffer_bytes``, at every sync, on ``flush()`` and on ``close()``.

Rotation: the full segment is synced first, then the new one is created (files
fsynced, then the directory), so segments are always contiguous on disk.

A log dropped or left open at exit without ``close()`` is closed (flushed,
synced, its lock released) with a ResourceWarning (the core's unclosed-use
watch); the sync driver and the segment writer call the log through weak
references (:func:`engine.lifetime.weak_call`) so that they do not keep it alive.

Read-only access is :meth:`AppendLog.open_reader` (the same as
:meth:`LogReader.open <engine.applog.reader.LogReader.open>`): no lock, no
repair.
"""

from __future__ import annotations

import datetime
import logging
import os
import threading
import time
from collections.abc import Iterable
from types import TracebackType
from typing import Any

from engine.applog.args import as_bytes, instant_arg_ns, period_arg, ttl_arg_ns
from engine.applog.codec import (
    HEADER_SIZE,
    INT64_MAX,
    INT64_MIN,
    MAX_FLAGS,
    MAX_RECORD_SIZE,
    RECORD_HEADER_SIZE,
)
from engine.applog.opening import OpenedLog, open_segments
from engine.applog.reader import LogReader
from engine.applog.segment import Record, Segment, record_class
from engine.applog.view import LOCK_FILE, START_FILE, LogView
from engine.applog.writer import SegmentWriter, create_segment, encode_batch
from engine.conventions import Serializer
from engine.conventions import serializer as parse_serializer
from engine.errors import ConfigError, CorruptFileError
from engine.fs import (
    FileSystem,
    GroupCommit,
    SyncPolicy,
    as_path,
    atomic_write,
    crashpoint,
    make_dirs,
    no_such,
    resolve,
)
from engine.fs.core import StoreCore
from engine.lifetime import weak_call

log = logging.getLogger("engine.applog")

_time_ns = time.time_ns
_BYTES_ONLY = frozenset({bytes})

DEFAULT_SEGMENT_BYTES = 64 << 20
DEFAULT_BUFFER_BYTES = 64 << 10


class AppendLog(LogView):
    """A TTL'd, segmented append log on the LOG/IDX format.  Use :meth:`open`."""

    def __init__(
        self,
        core: StoreCore,
        opened: OpenedLog,
        *,
        segment_bytes: int,
        buffer_bytes: int,
        serializer: Serializer | None = None,
    ) -> None:
        super().__init__(core, record_class(serializer))
        #: The serializer's dumps (None: records are bytes, appended as given).
        self._dumps = None if serializer is None else serializer.dumps
        self.segment_bytes = segment_bytes
        self.buffer_bytes = buffer_bytes
        self._sync_lock = threading.Lock()
        # The active segment's writer (None until installed and after close()).
        self._writer: SegmentWriter | None = None
        #: What ``append`` hands the encoder: the active writer's state, or None
        #: when the log takes no record (closed, or failed): the encoder refuses
        #: None, and append's rare path says why (_refused).  Set with _writer
        #: (_install), cleared by _fail_locked and close.
        self._state: list[Any] | None = None
        self._synced_end = 0  # the writer's next index at the last sync
        #: ``sync="always"``: the sync driver's group commit (None otherwise).
        self._gc: GroupCommit | None = None
        # What recovery found, installed.
        self._segments = opened.segments
        self._bases = [s.base for s in opened.segments]
        self._start = opened.start
        self.ttl_ns = opened.ttl_ns
        last_time = next((s.last_time for s in reversed(self._segments) if s.last_time is not None), INT64_MIN)
        self._synced_end = self._install(self._new_writer(self._segments[-1], last_time)).next_index

    @property
    def sync_policy(self) -> SyncPolicy:
        """The ``sync=`` policy the log was opened with."""
        return self._core.policy

    # ==================================================================================
    # open
    # ==================================================================================
    @classmethod
    def open(
        cls,
        directory: str | os.PathLike[str],
        ttl: float | datetime.timedelta | None = None,
        segment_bytes: int = DEFAULT_SEGMENT_BYTES,
        sync: object = "always",
        *,
        ttl_ns: int | None = None,
        buffer_bytes: int = DEFAULT_BUFFER_BYTES,
        create: bool = True,
        lock_wait: float | datetime.timedelta | None = 0.0,
        fs: FileSystem | None = None,
        serializer: object = None,
    ) -> AppendLog:
        """Open (and recover) the log in ``directory``, creating it if needed.

        ``ttl``: seconds or a timedelta (exact: ``ttl_ns``, an int of nanoseconds;
        not both); records expire ``ttl`` after their time (``None``: keep the TTL
        of the existing newest segment, 0 for a new log; 0: never).  A changed TTL
        applies to segments created from now on; each segment's header keeps the
        TTL it was written with.  A number of seconds from 10**9 (31 years) up is
        refused: it is a nanosecond TTL of an older engine (use ``ttl_ns``).
        ``sync``: ``"always"``, ``"never"`` or a period (seconds or a timedelta).
        ``lock_wait``: how long to wait for another writer to close the log
        (seconds or a timedelta; None: for ever) before LockedError.
        ``serializer``: None (records are bytes), ``"json"``, ``"pickle"`` or a
        ``(dumps, loads)`` pair: ``append`` takes objects, records give them back
        as ``record.value`` (``record.data`` stays the bytes).

        The store core's open sequence: the writer lock (``<dir>/.lock``), then
        recovery (:func:`engine.applog.opening.open_segments`, into
        :attr:`recovery`), then the log installs the segments it found; any
        failure releases what was taken.
        """
        directory = as_path(directory, "directory").rstrip("/") or "/"
        ttl_value = ttl_arg_ns(ttl, ttl_ns)
        if segment_bytes < HEADER_SIZE + RECORD_HEADER_SIZE:
            raise ConfigError(f"segment_bytes must be at least {HEADER_SIZE + RECORD_HEADER_SIZE}")
        if buffer_bytes < 0:
            raise ConfigError("buffer_bytes must be >= 0")
        fsys = resolve(fs)
        codec = parse_serializer(serializer)
        policy = SyncPolicy.parse(period_arg(sync))
        if create:
            make_dirs(fsys, directory)
        elif not fsys.isdir(directory):
            raise no_such(fsys, directory, "append log directory")
        core = StoreCore(fsys, directory, "append log", policy=policy)
        with core.opening():
            core.lock(f"{directory}/{LOCK_FILE}", wait=lock_wait)
            opened = open_segments(fsys, directory, ttl_value, core.report)
            for seg in opened.segments:
                core.keep(seg)
            self = cls(core, opened, segment_bytes=segment_bytes, buffer_bytes=buffer_bytes, serializer=codec)
        core.opened(self, log)
        # The driver calls the log through weak references, so a log dropped
        # without close() is collected and closed (the core's watch).
        driver = core.start_sync(weak_call(self._sync_files, required=True), dirty=weak_call(self._has_unsynced),
                                 name="engine-applog-sync")
        self._gc = driver.group
        return self

    @staticmethod
    def open_reader(
        directory: str | os.PathLike[str],
        *,
        serializer: object = None,
        fs: FileSystem | None = None,
    ) -> LogReader:
        """:meth:`LogReader.open <engine.applog.reader.LogReader.open>`: a reader
        of the log in ``directory`` (no lock, no repair)."""
        return LogReader.open(directory, serializer=serializer, fs=fs)

    def _has_unsynced(self) -> bool:
        """Whether records were appended since the last sync (the periodic syncer
        skips a round otherwise)."""
        writer = self._writer
        return writer is not None and writer.next_index != self._synced_end

    # ==================================================================================
    # writing
    # ==================================================================================
    def _check_writable(self) -> SegmentWriter:
        """The active segment's writer, or the core's ClosedError/PoisonedError
        (the latch: a failed write or sync, the background one's included)."""
        self._core.check_writable()
        writer = self._writer
        assert writer is not None  # (None only once closed)
        return writer

    def _fail_locked(self, exc: BaseException) -> None:
        """Trip the core's failure latch (the lock held): the files' state is
        unknown from then on, so every later write raises PoisonedError."""
        self._core.fail(exc, self.directory)
        self._state = None  # append refuses from now on (see _refused)

    def _stamp(self, time_ns: int | None) -> int:
        """The time of the next record: ``time_ns`` checked, or the clock (never
        earlier than the newest record).  Under the lock; ClosedError or
        PoisonedError when the log takes no record."""
        last = self._check_writable().last_time
        if time_ns is None:
            now = _time_ns()
            # The clock may step back (NTP); times in a log never do.
            return now if now >= last else last
        if isinstance(time_ns, bool) or not isinstance(time_ns, int):
            raise TypeError(
                f"time_ns must be an int of nanoseconds since the epoch (time.time_ns()), "
                f"not {type(time_ns).__name__} {time_ns!r}"
            )
        if time_ns < last:
            raise ConfigError(
                f"time_ns {time_ns} is earlier than the log's newest record ({last}): times never go backwards"
            )
        if not INT64_MIN <= time_ns <= INT64_MAX:
            raise ConfigError(f"time_ns {time_ns} does not fit an i64")
        return time_ns

    @staticmethod
    def _check_record(data: bytes, flags: int) -> None:
        if len(data) > MAX_RECORD_SIZE:
            raise ConfigError(f"a record holds at most {MAX_RECORD_SIZE} bytes, not {len(data)}")
        if isinstance(flags, bool) or not isinstance(flags, int) or not 0 <= flags <= MAX_FLAGS:
            raise ConfigError(f"flags must be a u32, not {flags!r}")

    def append(self, data: Any, flags: int = 0, time_ns: int | None = None) -> int:
        """Append one record and return its index.

        ``data``: bytes (any bytes-like object), or with ``serializer=`` any object
        it takes.  A ``str`` without a serializer is a TypeError that says to encode
        it.  ``time_ns``: exact, an int of nanoseconds since the epoch.

        ``time_ns`` defaults to the wall clock (never earlier than the newest
        record); an explicit time earlier than the newest record raises ConfigError.
        Under ``sync="always"`` the record is durable when this returns.

        The record goes to the encoder as it is, with the active segment's
        write state (see ``_state``), by the steps of :meth:`SegmentWriter.add
        <engine.applog.writer.SegmentWriter.add>` (run here, one Python call
        less).  The encoder checks every argument (the data's type and size, the
        flags, the state), so this method checks none of them on the way in:
        what the encoder refuses, ``_refused`` explains (a closed or failed log,
        bytes-like data to take as bytes, a bad record).
        """
        if self._dumps is not None:  # with a serializer, every value goes through dumps
            data = self._payload(data)
        # acquire/try/finally rather than ``with``: the same lock, released on
        # every exit, and ~80 ns less per call on CPython 3.11 (``with`` looks
        # up and calls __enter__/__exit__ with three arguments each time).
        lock = self._lock
        lock.acquire()
        try:
            # A clock reading as it is: the encoder stamps no earlier than the
            # newest record (the clock may step back; times in a log never do).
            t = _time_ns() if time_ns is None else self._stamp(time_ns)
            try:
                index: int = encode_batch(data, flags, t, self._state)
                if index >= 0:  # encoded; nothing else to do
                    return index
            except (TypeError, ValueError) as exc:  # the encoder refuses the arguments
                index = self._refused(data, flags, t, exc)
                if index >= 0:
                    return index
            # The encoder reported back: the record is left for the next
            # segment, or the buffer is full, or (sync="always") a ticket.
            index, gc, ticket = self._settle(data, index, flags, t)
        finally:
            lock.release()
        if gc is not None:
            gc.wait(ticket)
        return index

    def _refused(self, data: Any, flags: int, t: int, exc: Exception) -> int:
        """Why the encoder refused what ``append`` handed it (under the lock):
        data that is bytes-like but not ``bytes`` is taken as bytes and encoded
        (the encoder's result returned); otherwise ClosedError or PoisonedError
        when the log takes no record, else a ConfigError (what is wrong with the
        record, or what the encoder said), with nothing appended."""
        if self._dumps is None and type(data) is not bytes:
            data = as_bytes(data, "data")  # a TypeError for a str, saying to encode it
            self._check_writable()
            try:
                reported: int = encode_batch(data, flags, t, self._state)
                return reported
            except (TypeError, ValueError) as again:
                exc = again
        self._check_writable()
        self._check_record(data, flags)
        raise ConfigError(f"{self.directory}: cannot append: {exc}") from exc

    def _settle(self, data: bytes, reported: int, flags: int, t: int) -> tuple[int, GroupCommit | None, int]:
        """``append``'s rare path, under the lock, after the encoder reported
        back (``reported`` < 0): the writer settles the record (the next
        segment, a full buffer; :meth:`SegmentWriter.settle
        <engine.applog.writer.SegmentWriter.settle>`); returns the record's
        index, and under ``sync="always"`` the group commit and the ticket to
        wait for once the lock is released (else None, 0)."""
        writer = self._writer
        assert writer is not None
        index = writer.settle(data, reported, flags, t).next_index - 1
        gc = self._gc
        return index, gc, 0 if gc is None else gc.ticket()

    def _payload(self, data: Any, what: str = "data") -> bytes:
        """``data`` as the bytes to store: the serializer's ``dumps(data)``, or a
        bytes-like object as ``bytes``; a TypeError that says what to do for a
        ``str`` (:func:`engine.conventions.require_bytes`)."""
        if self._dumps is not None:
            data = self._dumps(data)
            if type(data) is bytes:
                return data
        return as_bytes(data, what)

    def append_many(
        self,
        records: Iterable[Any],
        flags: int = 0,
        time_ns: int | None = None,
    ) -> range:
        """Append several records in one go; returns the range of their indexes.

        Items are ``bytes`` (using ``flags`` and ``time_ns``, one clock reading when
        None) or ``(data, flags)`` / ``(data, flags, time_ns)`` tuples; with a
        serializer every item is a value (tuples too), all with ``flags`` and
        ``time_ns``.  Every item is checked before any is appended, so a bad one
        appends nothing.  Under ``sync="always"`` one sync covers them all.
        """
        self._check_record(b"", flags)
        items = records if isinstance(records, list) else list(records)
        if self._dumps is not None:
            items = [self._payload(value, f"item {n}") for n, value in enumerate(items)]
        with self._lock:
            first = self._check_writable().next_index
            if set(map(type, items)) <= _BYTES_ONLY:  # C-level check of every item
                t = self._stamp(time_ns)
                if items and max(map(len, items)) > MAX_RECORD_SIZE:
                    raise ConfigError(f"a record holds at most {MAX_RECORD_SIZE} bytes")
                runs: list[tuple[list[bytes], int, int]] = [(items, flags, t)] if items else []  # type: ignore[list-item]
            else:
                # Runs of consecutive items sharing flags and time.
                runs = []
                for data, fl, t in self._check_items(items, flags, time_ns):
                    if runs and runs[-1][1] == fl and runs[-1][2] == t:
                        runs[-1][0].append(data)
                    else:
                        runs.append(([data], fl, t))
            for run, fl, t in runs:
                try:
                    self._writer.add(run, fl, t)  # type: ignore[union-attr]
                except (TypeError, ValueError) as exc:  # what the encoder says of arguments checked above
                    raise ConfigError(f"{self.directory}: cannot append: {exc}") from exc
            end = self._writer.next_index  # type: ignore[union-attr]
            if self._gc is None:
                return range(first, end)
            ticket = self._gc.ticket()
        self._gc.wait(ticket)
        return range(first, end)

    def _check_items(self, items: list[Any], flags: int, time_ns: int | None) -> list[tuple[bytes, int, int]]:
        """Validate mixed items (bytes or tuples) and give each its time."""
        fixed = None if time_ns is None else self._stamp(time_ns)
        now = _time_ns()  # one clock reading for the items without a time
        last = self._writer.last_time  # type: ignore[union-attr]
        batch: list[tuple[bytes, int, int]] = []
        for item in items:
            if isinstance(item, tuple):
                data, fl = as_bytes(item[0], f"the data of item {len(batch)}"), item[1]
                t = item[2] if len(item) > 2 else fixed
            else:
                data, fl, t = as_bytes(item, f"item {len(batch)}"), flags, fixed
            self._check_record(data, fl)
            if t is None:
                t = now if now >= last else last
            elif isinstance(t, bool) or not isinstance(t, int) or t < last or t > INT64_MAX:
                raise ConfigError(
                    f"time_ns {t!r} of item {len(batch)} is not an i64 >= {last}: times never go backwards"
                )
            last = t
            batch.append((data, fl, t))
        return batch

    def _roll_locked(self) -> SegmentWriter:
        """Seal the active segment (flush + sync) and start a new one."""
        writer = self._writer
        assert writer is not None
        self._core.latch.check()
        try:
            writer.seal()
            seg = self._keep(create_segment(self._fs, self.directory, writer.seg.end, self.ttl_ns))
        except BaseException as exc:
            self._fail_locked(exc)
            raise
        self._segments.append(seg)
        self._bases.append(seg.base)
        return self._install(self._new_writer(seg, writer.last_time))

    def _new_writer(self, seg: Segment, last_time: int) -> SegmentWriter:
        """The writer of the active segment (``last_time``: the log's newest
        record's): a full segment rolls over, a full buffer is flushed (a failure
        of either poisons the log).  Under ``sync="always"`` the encoder reports
        back after every record: ``append``'s rare path takes the group commit's
        ticket (see :meth:`_settle`)."""
        return SegmentWriter(
            seg, self.segment_bytes, self.buffer_bytes, weak_call(self._roll_locked, required=True),
            weak_call(self._flush_locked, required=True), last_time, report_each=self.sync_policy.always,
        )

    def _install(self, writer: SegmentWriter) -> SegmentWriter:
        """Make ``writer`` the active segment's (``append`` encodes into its state)."""
        self._writer = writer
        self._state = writer.state
        return writer

    def _flush_locked(self) -> None:
        """Write the buffered records: log bytes, checksums, then index entries."""
        writer = self._writer
        if writer is None or not writer.unflushed:
            return
        self._core.latch.check()
        try:
            writer.flush()
        except BaseException as exc:
            self._fail_locked(exc)
            raise

    def flush(self) -> None:
        """Write buffered records to the files (visible to readers; not synced)."""
        with self._lock:
            self._check_writable()
            self._flush_locked()

    def _sync_files(self) -> None:
        """Flush, then fdatasync the active segment (see engine.applog.writer)."""
        with self._sync_lock:
            self._sync_files_locked()

    def _sync_files_locked(self) -> None:
        """Flush, then fdatasync (the sync lock held: the lock is taken for the
        flush only, so appends go on while the disk syncs)."""
        with self._lock:
            writer = self._flush_for_sync_locked()
        try:
            writer.sync()
        except BaseException as exc:
            with self._lock:
                self._fail_locked(exc)
            raise

    def _flush_for_sync_locked(self) -> SegmentWriter:
        """Flush what a sync is to cover (the lock held); the writer to sync."""
        self._core.latch.check()
        self._flush_locked()
        writer = self._writer
        assert writer is not None
        self._synced_end = writer.next_index
        return writer

    def sync(self) -> None:
        """Make every record appended so far durable (whatever the sync mode)."""
        self._check_writable()
        if self._gc is not None:
            self._gc.sync_now()
        else:
            self._sync_files()

    def _prepare_read(self, index: int | None) -> None:
        # Buffered records become readable by writing them out first.  A record
        # already in the files needs nothing: its segment's state is the flushed one.
        writer = self._writer
        if writer is None:
            return
        seg = writer.seg
        if index is not None and index < seg.base + seg.count:  # (seg.end, without a property call)
            return
        if writer.unflushed and not self._core.failed:
            self._flush_locked()

    # ==================================================================================
    # deletion
    # ==================================================================================
    def _delete_front(self, victims: list[Segment]) -> int:
        """Delete the oldest segments (never the active one), oldest first: each
        log before its index, then one directory fsync.  A crash part-way leaves a
        contiguous suffix and maybe an orphan index, which open() removes."""
        removed = 0
        try:
            for seg in victims:
                assert seg is not self._segments[-1]
                self._drop(seg)
                crashpoint("applog.delete.before-unlink")
                self._fs.unlink(seg.log_path)
                self._fs.unlink(seg.idx_path)
                if seg.crc is not None or self._fs.exists(seg.crc_path):
                    self._fs.unlink(seg.crc_path)
                removed += seg.count
            crashpoint("applog.delete.before-dir-fsync")
            self._fs.fsync_dir(self.directory)
            crashpoint("applog.delete.after-dir-fsync")
        except BaseException as exc:
            # The in-memory segment list no longer matches the directory: stop
            # writing; reopening lists what is really there.
            self._fail_locked(exc)
            raise
        finally:
            del self._segments[: len(victims)]
            del self._bases[: len(victims)]
        return removed

    def expire(self, now: datetime.datetime | float | None = None, *, now_ns: int | None = None) -> int:
        """Delete whole segments whose newest record has outlived its segment's TTL
        (``now > last_time + ttl``, the original LOG/IDX writer's rule), oldest first; returns how
        many records went.  ``now``: a datetime or seconds since the epoch (exact:
        ``now_ns``; default: the clock).  Segments with TTL <= 0 never expire, and
        expiry stops at the first segment that has not expired, so the log stays
        contiguous."""
        given = instant_arg_ns(now, now_ns, "now")
        with self._sync_lock, self._lock:
            self._check_writable()
            self._flush_locked()  # the segments' times include every record appended
            at = time.time_ns() if given is None else given
            victims: list[Segment] = []
            for seg in self._segments:
                if seg.ttl_ns > 0 and seg.count and seg.last_time is not None and at > seg.last_time + seg.ttl_ns:
                    victims.append(seg)
                else:
                    break
            if not victims:
                return 0
            before = self._first_locked()
            if victims[-1] is self._segments[-1]:
                self._roll_locked()  # keep next_index: an empty segment named after it
            self._delete_front(victims)
            self._start = max(self._start, self._segments[0].base)
            # Records hidden earlier by truncate_before() but still on disk went
            # with their segments too; they are not counted again.
            return self._first_locked() - before

    def truncate_before(self, index: int) -> int:
        """Drop every record below ``index``; returns how many were dropped.

        ``first_index`` becomes ``index`` at once (written to the ``log-start-index``
        checkpoint, an extension of the LOG/IDX format); segments wholly below it are deleted, a segment that
        straddles it stays on disk until it is wholly below.
        """
        with self._sync_lock, self._lock:
            self._check_writable()
            first, nxt = self._extent_locked()
            if index > nxt:
                raise ConfigError(f"truncate_before({index}) is past the log's end {nxt}")
            if index <= first:
                return 0
            # The records up to ``index`` must be durable before the checkpoint that
            # names it, or a crash could leave a start beyond the log's end.
            writer = self._flush_for_sync_locked()
            try:
                writer.sync()
            except BaseException as exc:
                self._fail_locked(exc)
                raise
            crashpoint("applog.truncate.before-checkpoint")
            try:
                atomic_write(self._fs, f"{self.directory}/{START_FILE}", b"%d\n" % index)
            except BaseException as exc:
                self._fail_locked(exc)
                raise
            crashpoint("applog.truncate.after-checkpoint")
            self._start = index
            active = self._segments[-1]
            if active.count and active.end <= index:
                self._roll_locked()
            victims = [s for s in self._segments[:-1] if s.end <= index]
            self._delete_front(victims)
            return index - first

    # ==================================================================================
    # checks and closing
    # ==================================================================================
    def verify(self) -> list[str]:
        """Check every invariant of the files (flushing first): headers, contiguous
        segments, every entry agreeing with its record, dense indexes, times never
        going down.  Raises CorruptFileError/FormatError; returns notes."""
        with self._lock:
            self._check_open()
            if not self._core.failed:
                self._flush_locked()
            contents = {}
            for seg in self._segments:
                assert seg.idx is not None
                crc = seg.crc.read_all() if seg.crc is not None else None
                contents[seg.base] = (seg.log.read_all(), seg.idx.read_all(), crc)
            notes = self._verify_segments(contents, tail_ok=False)
            names = set(self._fs.listdir(self.directory))
            for seg in self._segments:
                paths = (seg.log_path, seg.idx_path) + ((seg.crc_path,) if seg.crc is not None else ())
                for path in paths:
                    if path.rsplit("/", 1)[-1] not in names:
                        raise CorruptFileError(path, 0, "the segment file", "no file")
            return notes

    def close(self) -> None:
        """Flush and (unless sync="never") sync, then release the files and lock
        (the store core's close, once: the sync thread stopped first)."""
        core = self._core
        # (Stops the driver's thread, which takes the locks below: not held here.)
        if not core.begin_close():
            return
        try:
            with self._sync_lock:
                with self._lock:
                    self._state = None  # append refuses from now on: closed
                if not core.failed:
                    if core.policy.mode == "never":
                        with self._lock:
                            self._flush_locked()
                    else:
                        self._sync_files_locked()
        finally:
            with self._lock:
                self._writer = None
                self._segments = []
                self._bases = []
                self._index_cache.clear()
                core.finish_close()  # the segments' files, then the writer lock

    def __enter__(self) -> AppendLog:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._core.closed else f"[{self._start}, ...)"
        return f"<AppendLog {self.directory!r} {state} sync={self.sync_policy}>"


__all__ = ["AppendLog", "Record"]
