"""The writer: :class:`AppendLog`, one per directory (an exclusive lock file).

Write path, in order (each step is what makes the next safe after a crash):

1. ``append`` encodes the record and its index entry into memory buffers (the
   entry goes into the in-memory copy of the active index);
2. a *flush* writes the buffered log bytes, then the index bytes, so another
   process never sees an index entry whose record is not in the file yet;
3. a *sync* fdatasyncs the log, the ``.crc`` file, **then** the index: a durable
   index entry always names a durable, checksummed record, which is what lets
   recovery tell a torn tail from damage in the middle (see
   :mod:`engine.applog.recovery`).

Every record's CRC-32 goes into the segment's ``.crc`` side file (ours, not
wallaby's), written after the log bytes and before the index entries, and synced
in the same round.  On open, a record whose checksum is missing or wrong ends the
log (a torn, never acknowledged append), so a torn record never comes back as data
that was not written.

``sync="always"`` flushes and syncs before ``append`` returns, sharing the fsyncs of
concurrent threads (group commit); a number of seconds syncs in the background;
``"never"`` leaves it to the OS.  Buffered records reach the files when the buffer
holds ``buffer_bytes``, at every sync, on ``flush()`` and on ``close()``.

Native fast path: with ``sync="never"`` or a period, and the C extension built,
``log.append`` is the native appender's method (:mod:`engine.applog.fastpath`): it
buffers common-case records in C without the lock and hands everything else to
:meth:`AppendLog.append`; :meth:`AppendLog._settle` moves its records into the
buffers above before any other code touches the log's state.

Rotation: a new segment starts when a record would push the active log past
``segment_bytes``.  The full segment is synced first, then the new pair is created
(file fsynced, then the directory), so segments are always contiguous on disk.
"""

from __future__ import annotations

import bisect
import datetime
import logging
import struct
import sys
import threading
import time
import types
import zlib
from array import array
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from itertools import accumulate, repeat
from types import TracebackType
from typing import Any

from engine.applog.codec import (
    CRC_MAGIC,
    CRC_SIZE,
    ENTRY_SIZE,
    HEADER_SIZE,
    IDX_MAGIC,
    INDEX_ENTRY,
    INT64_MAX,
    INT64_MIN,
    LOG_MAGIC,
    MAX_FLAGS,
    MAX_RECORD_SIZE,
    RECORD_HEADER,
    RECORD_HEADER_SIZE,
    check_header,
    crc_matches,
    decode_entry,
    encode_header,
    entry_count,
    parse_record,
    parse_segment_name,
)
from engine.applog.recovery import Mismatch, scan_segment
from engine.applog.segment import Record, Segment, crc_path, idx_path, log_path
from engine.applog.view import START_FILE, LogView, parse_start
from engine.errors import ConfigError, CorruptFileError, FormatError, PoisonedError
from engine.fs import (
    FileHandle,
    FileSystem,
    GroupCommit,
    OpenMode,
    PeriodicSync,
    SyncPolicy,
    atomic_write,
    crashpoint,
    create_file,
    make_dirs,
    resolve,
)
from engine.native import load as load_native

log = logging.getLogger("engine.applog")

#: The native appender (engine/applog/_native.c), or None (not built, or
#: ENGINE_PURE_PYTHON=1).  See engine.applog.fastpath for what it does and why.
_native = load_native("engine.applog._native")

_pack_header = RECORD_HEADER.pack
_pack_entry = INDEX_ENTRY.pack
_time_ns = time.time_ns
_crc32 = zlib.crc32
# The record header split for bulk packing: u32 size, then u32 flags + i64 time.
_U32 = struct.Struct("<I")
_FLAGS_TIME = struct.Struct("<Iq")
assert _U32.size + _FLAGS_TIME.size == RECORD_HEADER_SIZE
_BIG_ENDIAN = sys.byteorder == "big"
_BYTES_ONLY = frozenset({bytes})
# Pending .crc entries live in an array("I") (see AppendLog._pend_crc).
assert array("I").itemsize == CRC_SIZE

#: Name of the writer's lock file (ours; readers never take it).
LOCK_FILE = ".lock"
DEFAULT_SEGMENT_BYTES = 64 << 20
DEFAULT_BUFFER_BYTES = 64 << 10


@dataclass
class RecoveryReport:
    """What :meth:`AppendLog.open` repaired (tests and operators read this)."""

    truncated_log_bytes: int = 0  # torn or zero tail bytes cut off the log
    rebuilt_entries: int = 0  # index entries re-created from the log
    dropped_entries: int = 0  # index entries past the log's end, removed
    partial_entry_bytes: int = 0  # bytes of a half-written entry cut off the index
    torn_records: int = 0  # records cut because their checksum was missing or wrong
    crc_dropped_bytes: int = 0  # bytes of .crc entries past the verified end, removed
    removed_files: list[str] = field(default_factory=list)  # orphans deleted
    notes: list[str] = field(default_factory=list)

    @property
    def repaired(self) -> bool:
        return bool(
            self.truncated_log_bytes
            or self.rebuilt_entries
            or self.dropped_entries
            or self.partial_entry_bytes
            or self.torn_records
            or self.crc_dropped_bytes
            or self.removed_files
        )


def _ttl_ns(ttl: int | float | datetime.timedelta | None) -> int | None:
    if ttl is None:
        return None
    if isinstance(ttl, datetime.timedelta):
        return int(ttl.total_seconds() * 1_000_000_000)
    if isinstance(ttl, bool) or not isinstance(ttl, int):
        raise ConfigError(f"ttl is an int of nanoseconds or a timedelta, not {ttl!r}")
    return ttl


class AppendLog(LogView):
    """A TTL'd, segmented append log on the LOG/IDX format.  Use :meth:`open`."""

    def __init__(
        self,
        fs: FileSystem,
        directory: str,
        *,
        ttl_ns: int | None,
        segment_bytes: int,
        sync: SyncPolicy,
        buffer_bytes: int,
    ) -> None:
        super().__init__(directory)
        self._fs = fs
        self._ttl_arg = ttl_ns
        self.ttl_ns = 0
        self.segment_bytes = segment_bytes
        self.sync_policy = sync
        self.buffer_bytes = buffer_bytes
        self._sync_lock = threading.Lock()
        self._lock_handle: FileHandle | None = None
        self._pend_log = bytearray()
        # .crc entries of the buffered records, as native u32s (``append`` of an int
        # is cheaper than packing 4 bytes per record); byte-swapped at the flush on a
        # big-endian host.
        self._pend_crc: array[int] = array("I")
        self._flushed_crc = 0  # bytes of the active .crc file in the file
        self._flushed_log = 0  # bytes of the active log in the file
        self._flushed_idx = 0  # bytes of the active index in the file
        self._flushed_end = 0  # records of the log in the files
        self._last_time = INT64_MIN  # newest record's time (INT64_MIN: none yet)
        self._dirty = False
        self._failure: BaseException | None = None
        self._dir_dirty = False
        self.recovery = RecoveryReport()
        self._gc: GroupCommit | None = None
        self._periodic: PeriodicSync | None = None
        # The native fast path of append (engine.applog.fastpath), when installed:
        # it buffers records of its own, which _settle() moves into the buffers
        # above before any other code reads or changes the log's state.
        self._fast: Any = None

    # ==================================================================================
    # open / recovery
    # ==================================================================================
    @classmethod
    def open(
        cls,
        directory: str,
        ttl: int | datetime.timedelta | None = None,
        segment_bytes: int = DEFAULT_SEGMENT_BYTES,
        sync: object = "always",
        *,
        buffer_bytes: int = DEFAULT_BUFFER_BYTES,
        create: bool = True,
        fs: FileSystem | None = None,
    ) -> AppendLog:
        """Open (and recover) the log in ``directory``, creating it if needed.

        ``ttl``: nanoseconds (int) or a timedelta; records expire ``ttl`` after their
        time (``None``: keep the TTL of the existing newest segment, 0 for a new
        log; 0 or less: never).  A changed TTL applies to segments created from now
        on; each segment's header keeps the TTL it was written with.
        ``sync``: ``"always"``, ``"never"`` or a period in seconds.
        Raises LockedError if another writer has the log open.
        """
        if segment_bytes < HEADER_SIZE + RECORD_HEADER_SIZE:
            raise ConfigError(f"segment_bytes must be at least {HEADER_SIZE + RECORD_HEADER_SIZE}")
        if buffer_bytes < 0:
            raise ConfigError("buffer_bytes must be >= 0")
        fsys = resolve(fs)
        self = cls(
            fsys,
            directory,
            ttl_ns=_ttl_ns(ttl),
            segment_bytes=segment_bytes,
            sync=SyncPolicy.parse(sync),
            buffer_bytes=buffer_bytes,
        )
        if create:
            make_dirs(fsys, self.directory)
        elif not fsys.isdir(self.directory):
            raise FileNotFoundError(f"{self.directory}: no such append log directory")
        handle = fsys.open(f"{self.directory}/{LOCK_FILE}", OpenMode.CREATE)
        try:
            handle.lock(exclusive=True, blocking=False)
        except BaseException:
            handle.close()
            raise
        self._lock_handle = handle
        try:
            self._recover()
        except BaseException:
            self._release()
            raise
        if self.sync_policy.always:
            self._gc = GroupCommit(self._sync_files, name=self.directory)
        elif self.sync_policy.mode == "periodic":
            self._periodic = PeriodicSync(
                self._sync_files, self.sync_policy.period, dirty=self._has_unsynced, name="engine-applog-sync"
            )
        if _native is not None and self._gc is None:
            # sync="never" or a period: appends need no fsync wait, so the native
            # fast path answers log.append (an instance attribute shadowing the
            # method); it hands every call it does not take to the method itself.
            self._fast = _native.Appender(types.MethodType(type(self).append, self), self._flush_full)
            self.__dict__["append"] = self._fast.append
            with self._lock:
                self._arm()
        return self

    def _flush_full(self) -> None:
        """The native appender's buffer is full: flush, as ``append`` does."""
        with self._lock:
            self._flush_locked()
            self._arm()

    def _has_unsynced(self) -> bool:
        """Whether records were appended since the last sync (the periodic syncer
        skips a round otherwise)."""
        fast = self._fast
        return self._dirty or (fast is not None and fast.pending > 0)

    def _recover(self) -> None:
        fs = self._fs
        names = fs.listdir(self.directory)
        logs: list[int] = []
        idxs: set[int] = set()
        crcs: set[int] = set()
        for name in names:
            parsed = parse_segment_name(name)
            if parsed is None:
                if name.startswith(START_FILE) and name != START_FILE:  # an interrupted atomic_write
                    fs.unlink(f"{self.directory}/{name}")
                    self.recovery.removed_files.append(name)
                continue
            if parsed[1] == ".log":
                logs.append(parsed[0])
            else:
                (idxs if parsed[1] == ".idx" else crcs).add(parsed[0])
        logs.sort()
        for base in sorted(crcs - set(logs)):
            # Same for a checksum file without its log (deleted after the log).
            fs.unlink(crc_path(self.directory, base))
            self.recovery.removed_files.append(f"{base:020d}.crc")
        for base in sorted(idxs - set(logs)):
            # An index without its log: left by an interrupted deletion (the log is
            # unlinked first) or creation.  The log is the truth, so it goes.
            fs.unlink(idx_path(self.directory, base))
            self.recovery.removed_files.append(f"{base:020d}.idx")
        start_path = f"{self.directory}/{START_FILE}"
        if fs.exists(start_path):
            with fs.open(start_path) as h:
                self._start = parse_start(h.read_all(), start_path)
        if not logs:
            self._ttl_resolved(None)
            self._segments = [self._create_segment(self._start)]
            self._bases = [self._start]
        else:
            prev_time: int | None = None
            for n, base in enumerate(logs):
                seg = self._open_segment(base, last=n == len(logs) - 1, prev_time=prev_time)
                if self._segments and self._segments[-1].end != base:
                    prev = self._segments[-1]
                    seg.close()
                    raise CorruptFileError(
                        seg.log_path, 0, f"a segment starting at index {prev.end} (after {prev.log_path})", str(base)
                    )
                self._segments.append(seg)
                self._bases.append(base)
                if seg.last_time is not None:
                    prev_time = seg.last_time
            self._ttl_resolved(self._segments[-1].ttl_ns)
        if self.recovery.removed_files or self._dir_dirty:
            fs.fsync_dir(self.directory)
        active = self._segments[-1]
        self._last_time = next(
            (s.last_time for s in reversed(self._segments) if s.last_time is not None), INT64_MIN
        )
        if self._start > active.end:
            self.recovery.notes.append(f"start index {self._start} beyond the log's end {active.end}: clamped")
            self._start = active.end
        self._flushed_log = active.log_size
        self._flushed_end = active.end
        assert active.mem_idx is not None
        self._flushed_idx = len(active.mem_idx)
        if active.crc is None:
            # A segment without a .crc file (wallaby's or an older engine's) gets
            # no new records: new ones must be checksummed.  An empty one gets its
            # .crc file now; one holding records is sealed and a new segment starts.
            if active.count == 0:
                crashpoint("applog.recover.before-create-crc")
                active.crc = create_file(fs, active.crc_path, encode_header(CRC_MAGIC, 0))
                self.recovery.notes.append(f"{active.crc_path}: created for a segment without one")
            else:
                self._roll_locked()
                self.recovery.notes.append(
                    f"{active.log_path}: has no .crc file: sealed, new records go to a new segment"
                )
            active = self._segments[-1]
        assert active.crc is not None
        self._flushed_crc = active.crc.size()
        if self.recovery.repaired or self.recovery.notes:
            log.warning(
                "%s: recovered: cut %d torn log bytes (%d torn records), rebuilt %d index entries, dropped %d, "
                "removed %s; %s",
                self.directory,
                self.recovery.truncated_log_bytes,
                self.recovery.torn_records,
                self.recovery.rebuilt_entries,
                self.recovery.dropped_entries,
                self.recovery.removed_files or "nothing",
                "; ".join(self.recovery.notes),
            )

    def _ttl_resolved(self, existing: int | None) -> None:
        self.ttl_ns = self._ttl_arg if self._ttl_arg is not None else (existing or 0)

    def _open_segment(self, base: int, *, last: bool, prev_time: int | None) -> Segment:
        """Open one segment, checking it (fully for the newest, whose tail may be
        torn) and repairing what a crash can leave."""
        fs = self._fs
        lpath, ipath = log_path(self.directory, base), idx_path(self.directory, base)
        lh = fs.open(lpath, OpenMode.WRITE)
        ih: FileHandle | None = None
        ch: FileHandle | None = None
        try:
            log_bytes = lh.read_all()
            if len(log_bytes) < HEADER_SIZE:
                # Only the newest segment can be half-created (its name survived, its
                # header did not): it holds no record, so write the header again.
                header = encode_header(LOG_MAGIC, self._ttl_arg or 0)
                if not last or (log_bytes and not (header.startswith(log_bytes) or not any(log_bytes))):
                    raise FormatError(lpath, 0, "a 16-byte LOG header", f"{len(log_bytes)} bytes")
                lh.truncate(0)
                lh.write_at(0, header)
                lh.fdatasync()
                self.recovery.notes.append(f"{lpath}: rewrote a header torn at creation")
                log_bytes = header
            ttl = check_header(log_bytes, LOG_MAGIC, lpath).ttl_ns
            ih = fs.open(ipath, OpenMode.CREATE)
            idx_bytes = ih.read_all()
            if len(idx_bytes) >= HEADER_SIZE:
                check_header(idx_bytes, IDX_MAGIC, ipath)
            else:
                # Missing or torn at creation: the index is derived data; rebuild it.
                if idx_bytes and not (encode_header(IDX_MAGIC, ttl).startswith(idx_bytes) or not any(idx_bytes)):
                    raise FormatError(ipath, 0, "a 16-byte IDX header", f"{len(idx_bytes)} bytes")
                idx_bytes = encode_header(IDX_MAGIC, ttl)
                ih.truncate(0)
                ih.write_at(0, idx_bytes)
                ih.fdatasync()
                self._dir_dirty = True  # the new name must survive too
                self.recovery.notes.append(f"{ipath}: index missing or torn at creation: rebuilt")
            cpath = crc_path(self.directory, base)
            crc_bytes: bytes | None = None
            if fs.exists(cpath):
                ch = fs.open(cpath, OpenMode.WRITE)
                crc_bytes = ch.read_all()
                if len(crc_bytes) >= HEADER_SIZE:
                    check_header(crc_bytes, CRC_MAGIC, cpath)
                else:
                    # Torn at creation (its header is fsynced before any record is
                    # appended, so no record can have been acknowledged): rewrite.
                    crc_head = encode_header(CRC_MAGIC, 0)
                    if crc_bytes and not (crc_head.startswith(crc_bytes) or not any(crc_bytes)):
                        raise FormatError(cpath, 0, "a 16-byte CRC header", f"{len(crc_bytes)} bytes")
                    ch.truncate(0)
                    ch.write_at(0, crc_head)
                    ch.fdatasync()
                    self.recovery.notes.append(f"{cpath}: header torn at creation: rewritten")
                    crc_bytes = crc_head
            if not last and self._sealed_ok(log_bytes, idx_bytes, base, crc_bytes):
                n = entry_count(len(idx_bytes))
                first_t = decode_entry(idx_bytes, 0)[0] if n else None
                last_t = decode_entry(idx_bytes, n - 1)[0] if n else None
                seg = Segment(self.directory, base, ttl, lh, ih, n, len(log_bytes), first_t, last_t, crc=ch)
                return seg
            try:
                scan = scan_segment(log_bytes, idx_bytes, base, prev_time, crc_bytes)
            except Mismatch as exc:
                where = lpath if exc.where == "log" else ipath
                raise CorruptFileError(where, exc.offset, exc.expected, exc.found) from None
            if not scan.clean:
                if not last:
                    # A sealed segment was synced before the next one was created, so
                    # a crash cannot leave it torn.  The log is still the truth: log it
                    # loudly and repair the same way.
                    self.recovery.notes.append(f"{lpath}: sealed segment needed repair")
                if scan.log_cut:
                    crashpoint("applog.recover.before-log-truncate")
                    lh.truncate(scan.log_end)
                    lh.fdatasync()
                keep_end = HEADER_SIZE + ENTRY_SIZE * scan.idx_keep
                ih.truncate(keep_end)
                if scan.rebuilt:
                    ih.write_at(keep_end, b"".join(scan.rebuilt))
                crashpoint("applog.recover.before-idx-fsync")
                ih.fdatasync()
                if ch is not None and scan.crc_dropped:
                    ch.truncate(scan.crc_end)
                    ch.fdatasync()
                self.recovery.truncated_log_bytes += scan.log_cut
                self.recovery.torn_records += scan.torn_records
                self.recovery.crc_dropped_bytes += scan.crc_dropped
                self.recovery.rebuilt_entries += len(scan.rebuilt)
                self.recovery.dropped_entries += scan.idx_dropped
                self.recovery.partial_entry_bytes += scan.idx_partial
                idx_bytes = idx_bytes[:keep_end] + b"".join(scan.rebuilt)
                self.recovery.notes.append(
                    f"{lpath}: cut {scan.log_cut} log bytes, rebuilt {len(scan.rebuilt)} entries, "
                    f"dropped {scan.idx_dropped} entries and {scan.idx_partial} bytes of a partial one, "
                    f"{scan.torn_records} torn record(s), {scan.crc_dropped} .crc bytes"
                )
            mem = bytearray(idx_bytes) if last else None
            return Segment(
                self.directory, base, ttl, lh, ih, scan.count, scan.log_end, scan.first_time, scan.last_time, mem,
                crc=ch,
            )
        except BaseException:
            lh.close()
            if ih is not None:
                ih.close()
            if ch is not None:
                ch.close()
            raise

    @staticmethod
    def _sealed_ok(log_bytes: bytes, idx_bytes: bytes, base: int, crc_bytes: bytes | None) -> bool:
        """Cheap check of a sealed segment: whole entries, first and last entries
        agree with the log (and their checksums), the last record ends the file
        (verify() checks all)."""
        if (len(idx_bytes) - HEADER_SIZE) % ENTRY_SIZE:
            return False
        n = entry_count(len(idx_bytes))
        if crc_bytes is not None and len(crc_bytes) != HEADER_SIZE + CRC_SIZE * n:
            return False
        if n == 0:
            return len(log_bytes) == HEADER_SIZE
        t0, i0, o0 = decode_entry(idx_bytes, 0)
        t1, i1, o1 = decode_entry(idx_bytes, n - 1)
        first = parse_record(log_bytes, o0) if o0 == HEADER_SIZE else None
        lastr = parse_record(log_bytes, o1) if HEADER_SIZE <= o1 < len(log_bytes) else None
        return (
            i0 == base
            and i1 == base + n - 1
            and first is not None
            and first.time_ns == t0
            and lastr is not None
            and lastr.time_ns == t1
            and lastr.end == len(log_bytes)
            and t1 >= t0
            and (crc_bytes is None or (crc_matches(log_bytes, first, crc_bytes, 0)
                                       and crc_matches(log_bytes, lastr, crc_bytes, n - 1)))
        )

    def _create_segment(self, base: int) -> Segment:
        """Create a segment durably: each file's header is fsynced, then the
        directory (create_file); log first: an index or .crc file without a log
        is an orphan that recovery deletes, a log without an index gets it
        rebuilt, an empty log without a .crc file gets one.  The .crc file is
        durable before any record is appended to the segment."""
        lpath, ipath = log_path(self.directory, base), idx_path(self.directory, base)
        crashpoint("applog.roll.before-create-log")
        lh = create_file(self._fs, lpath, encode_header(LOG_MAGIC, self.ttl_ns))
        ch: FileHandle | None = None
        try:
            crashpoint("applog.roll.before-create-crc")
            ch = create_file(self._fs, crc_path(self.directory, base), encode_header(CRC_MAGIC, 0))
            crashpoint("applog.roll.before-create-idx")
            ih = create_file(self._fs, ipath, encode_header(IDX_MAGIC, self.ttl_ns))
        except BaseException:
            lh.close()
            if ch is not None:
                ch.close()
            raise
        crashpoint("applog.roll.after-create-idx")
        return Segment(
            self.directory, base, self.ttl_ns, lh, ih, 0, HEADER_SIZE, None, None,
            bytearray(encode_header(IDX_MAGIC, self.ttl_ns)), crc=ch,
        )

    # ==================================================================================
    # writing
    # ==================================================================================
    def _check_writable(self) -> None:
        self._check_open()
        if self._failure is not None:
            raise PoisonedError(self.directory, self._failure)
        if self._periodic is not None:
            self._periodic.check()

    def _fail(self, exc: BaseException) -> None:
        # Under the lock (re-entrant; the syncer calls this from its fsync part,
        # outside it): an append re-arming the native appender either runs before
        # (and is disarmed here) or sees the failure and does not arm it.
        with self._lock:
            if self._failure is None:
                self._failure = exc
            if self._fast is not None:
                self._fast.armed = False  # every append now goes where the failure is raised

    def _settle(self) -> None:
        """Disarm the native appender and move its pending records into the
        writer's buffers and the active segment (under ``self._lock``).

        Called before any code reads or changes the log's state: from then on
        every append goes through the locked ``append`` until that re-arms it
        (:meth:`_arm`), so the fast path never runs while other code holds the
        state.  The bytes it produced are exactly what ``append`` would have
        buffered for the same records (tests/applog/test_applog_native.py)."""
        fast = self._fast
        if fast is None:
            return
        fast.armed = False
        if not fast.pending:
            return
        log_bytes, crc_bytes = self._take_fast()
        self._pend_log += log_bytes
        crcs = array("I")
        crcs.frombytes(crc_bytes)
        if _BIG_ENDIAN:  # pragma: no cover - the format is little-endian
            crcs.byteswap()
        self._pend_crc += crcs

    def _take_fast(self) -> tuple[bytes, bytes]:
        """Take the (disarmed) native appender's pending records into the active
        segment's state and in-memory index; return their log and ``.crc`` bytes,
        which the caller buffers or writes."""
        fast = self._fast
        n, first_t, log_bytes, crc_bytes, idx_bytes = fast.take()
        seg = self._segments[-1]
        assert seg.mem_idx is not None
        if not seg.count:
            seg.first_time = first_t
        seg.count += n
        seg.log_size = fast.log_size
        seg.last_time = fast.last_time
        self._last_time = fast.last_time
        seg.mem_idx += idx_bytes
        self._dirty = True
        assert fast.next_index == seg.end and fast.seg_count == seg.count, "appender out of step"
        return log_bytes, crc_bytes

    def _flush_direct(self) -> None:
        """:meth:`_flush_locked` when every buffered record is the native
        appender's (the common case under the fast path): its bytes are written
        as they come, without copying them through the Python buffers first.
        Same files, same order (log, ``.crc``, index) as the general path."""
        fast = self._fast
        fast.armed = False
        seg = self._segments[-1]
        assert seg.mem_idx is not None and seg.idx is not None and seg.crc is not None
        assert seg.end == self._flushed_end and len(seg.mem_idx) == self._flushed_idx
        log_bytes, crc_bytes = self._take_fast()
        try:
            seg.log.write_at(self._flushed_log, log_bytes)
            # Checksums after the records, index entries last (see _flush_locked).
            seg.crc.write_at(self._flushed_crc, crc_bytes)
            seg.idx.write_at(self._flushed_idx, bytes(memoryview(seg.mem_idx)[self._flushed_idx :]))
        except BaseException as exc:
            self._fail(exc)
            raise
        self._flushed_crc += len(crc_bytes)
        self._flushed_log = seg.log_size
        self._flushed_idx = len(seg.mem_idx)
        self._flushed_end = seg.end

    def _arm(self) -> None:
        """Let the native appender take appends again, from the current state
        (under ``self._lock``, with nothing pending in it)."""
        fast = self._fast
        # Disarmed since the state was last taken: nothing can be pending (else
        # the indexes below would be handed out twice).
        assert not fast.pending, "arming an appender that holds records"
        seg = self._segments[-1] if self._segments else None
        if (
            seg is None
            or self._closed
            or self._failure is not None
            or (self._periodic is not None and self._periodic.failure is not None)
            or seg.end >= INT64_MAX
        ):
            fast.armed = False
            return
        fast.next_index = seg.end
        fast.log_size = seg.log_size
        fast.seg_count = seg.count
        fast.last_time = self._last_time
        fast.segment_bytes = self.segment_bytes
        fast.flush_at = self.buffer_bytes - len(self._pend_log)
        fast.armed = True

    def _roll_locked(self) -> Segment:
        """Seal the active segment (flush + sync) and start a new one."""
        old = self._segments[-1]
        self._flush_locked()
        try:
            crashpoint("applog.roll.before-seal-fsync")
            old.log.fdatasync()
            if old.crc is not None:
                old.crc.fdatasync()
            old.idx.fdatasync() if old.idx is not None else None
            crashpoint("applog.roll.after-seal-fsync")
            seg = self._create_segment(old.end)
        except BaseException as exc:
            self._fail(exc)
            raise
        old.mem_idx = None  # sealed: read through the handle from now on
        self._segments.append(seg)
        self._bases.append(seg.base)
        self._flushed_log = HEADER_SIZE
        self._flushed_idx = HEADER_SIZE
        self._flushed_crc = HEADER_SIZE
        self._flushed_end = seg.base
        return seg

    def _stamp(self, time_ns: int | None) -> int:
        last = self._last_time
        if time_ns is None:
            now = time.time_ns()
            # The clock may step back (NTP); times in a log never do.
            return now if now >= last else last
        if isinstance(time_ns, bool) or not isinstance(time_ns, int):
            raise ConfigError(f"time_ns must be an int, not {time_ns!r}")
        if time_ns < last:
            raise ConfigError(
                f"time_ns {time_ns} is earlier than the log's newest record ({last}): times never go backwards"
            )
        if not -(1 << 63) <= time_ns < (1 << 63):
            raise ConfigError(f"time_ns {time_ns} does not fit an i64")
        return time_ns

    @staticmethod
    def _check_record(data: bytes, flags: int) -> None:
        if len(data) > MAX_RECORD_SIZE:
            raise ConfigError(f"a record holds at most {MAX_RECORD_SIZE} bytes, not {len(data)}")
        if isinstance(flags, bool) or not isinstance(flags, int) or not 0 <= flags <= MAX_FLAGS:
            raise ConfigError(f"flags must be a u32, not {flags!r}")

    def _append_locked(self, data: bytes, flags: int, t: int) -> int:
        """Buffer one validated record (``t`` already checked against the newest)."""
        size = len(data)
        seg = self._segments[-1]
        offset = seg.log_size
        if seg.count and offset + RECORD_HEADER_SIZE + size > self.segment_bytes:
            seg = self._roll_locked()
            offset = seg.log_size
        index = seg.base + seg.count
        pend = self._pend_log
        head = _pack_header(size, flags, t)
        pend += head
        pend += data
        self._pend_crc.append(_crc32(data, _crc32(head)))
        seg.mem_idx += _pack_entry(t, index, offset)  # type: ignore[operator]
        seg.count += 1
        seg.log_size = offset + RECORD_HEADER_SIZE + size
        if seg.first_time is None:
            seg.first_time = t
        seg.last_time = t
        self._last_time = t
        self._dirty = True
        if len(pend) >= self.buffer_bytes:
            self._flush_locked()
        return index

    def _append_batch(self, items: list[bytes], lens: list[int], flags: int, t: int) -> None:
        """Buffer many records sharing one time and flags, packed in bulk.

        ``lens`` is ``list(map(len, items))`` (already checked against the record
        limit).  Per chunk (the part that fits the active segment) the work is a
        handful of C-level calls, none per record in Python bytecode: the log bytes
        are one ``join`` when all records have the same size (the common case), the
        CRC-32s one ``map`` of ``zlib.crc32`` seeded with the header's CRC, and the
        index entries are filled into an ``array`` by slices from ``range``s.
        """
        if self._fast is not None:
            self._append_batch_native(items, flags, t)
            return
        n_total = len(items)
        done = 0
        tail = _FLAGS_TIME.pack(flags, t)
        segment_bytes = self.segment_bytes
        first_len = lens[0]
        uniform = lens.count(first_len) == n_total
        step = first_len + RECORD_HEADER_SIZE
        pend_log = self._pend_log
        pend_crc = self._pend_crc
        while done < n_total:
            seg = self._segments[-1]
            start = seg.log_size
            left = n_total - done
            ends: Sequence[int]
            if uniform:
                # Records of one size: their end offsets are an arithmetic range.
                fit = min(left, (segment_bytes - start) // step) if start + step <= segment_bytes else 0
                ends = range(start, start + step * (left + 1), step)
            else:
                sub = lens[done:] if done else lens
                # End offset of each record if the rest went into this segment.
                ends = list(accumulate([x + RECORD_HEADER_SIZE for x in sub], initial=start))
                fit = bisect.bisect_right(ends, segment_bytes, 1) - 1
            if fit == 0:
                if seg.count:
                    self._roll_locked()
                    pend_log = self._pend_log
                    pend_crc = self._pend_crc
                    continue
                fit = 1  # a record larger than a segment gets a segment of its own
            chunk = items[done : done + fit] if (done or fit < left) else items
            n = fit
            if uniform:
                head = _U32.pack(first_len) + tail
                pend_log += head
                pend_log += head.join(chunk)
                pend_crc += array("I", list(map(_crc32, chunk, repeat(_crc32(head), n))))
            else:
                heads = [_U32.pack(x) + tail for x in lens[done : done + n]]
                pend_log += b"".join([b for pair in zip(heads, chunk) for b in pair])
                pend_crc += array("I", list(map(_crc32, chunk, map(_crc32, heads))))
            first_index = seg.base + seg.count
            entries = array("q", bytes(ENTRY_SIZE * n))
            entries[0::3] = array("q", [t]) * n
            entries[1::3] = array("q", range(first_index, first_index + n))
            entries[2::3] = array("q", ends[:n])
            if _BIG_ENDIAN:  # pragma: no cover - the format is little-endian
                entries.byteswap()
            seg.mem_idx += entries.tobytes()  # type: ignore[operator]
            if not seg.count:
                seg.first_time = t
            seg.count += n
            seg.log_size = ends[n]
            seg.last_time = t
            self._last_time = t
            self._dirty = True
            done += n
            if len(pend_log) >= self.buffer_bytes:
                self._flush_locked()

    def _append_batch_native(self, items: list[bytes], flags: int, t: int) -> None:
        """:meth:`_append_batch` through the native appender: it buffers the records
        that fit the active segment (header, CRC and index entry per record in C),
        :meth:`_settle` moves them into the writer's buffers, and this rolls a new
        segment for the rest.  Same bytes as the pure-Python batch (tested)."""
        fast = self._fast
        assert not fast.armed and not fast.pending  # settled by append_many
        done, n_total = 0, len(items)
        while done < n_total:
            seg = self._segments[-1]
            fast.next_index = seg.end
            fast.log_size = seg.log_size
            fast.seg_count = seg.count
            fast.last_time = self._last_time
            fast.segment_bytes = self.segment_bytes
            done = fast.extend(items, flags, t, done)
            if done < n_total:
                self._roll_locked()  # flushes (and so takes) the records first
        # A full buffer is written now, straight from the appender; otherwise
        # its records join the writer's buffers.
        if fast.log_size - self._flushed_log >= self.buffer_bytes:
            self._flush_locked()
        else:
            self._settle()

    def append(self, data: bytes, flags: int = 0, time_ns: int | None = None) -> int:
        """Append one record and return its index.

        ``time_ns`` defaults to the wall clock (never earlier than the newest
        record); an explicit time earlier than the newest record raises ConfigError.
        Under ``sync="always"`` the record is durable when this returns.
        """
        if type(data) is not bytes:
            data = bytes(data)
        size = len(data)
        if type(flags) is not int or not 0 <= flags <= MAX_FLAGS or size > MAX_RECORD_SIZE:
            self._check_record(data, flags)
        with self._lock:
            if self._fast is not None:
                self._settle()
            if (
                self._closed
                or self._failure is not None
                or (self._periodic is not None and self._periodic.failure is not None)
            ):
                self._check_writable()
            last = self._last_time
            if time_ns is None:
                t = _time_ns()
                if t < last:  # the clock stepped back (NTP): times never do
                    t = last
            else:
                t = self._stamp(time_ns)
            # _append_locked, inlined for the common case (no rotation): a call
            # less per record is ~15% of the per-append cost in CPython.  Locals
            # only, one STORE_ATTR per changed field.
            seg = self._segments[-1]
            offset = seg.log_size
            end = offset + RECORD_HEADER_SIZE + size
            if end > self.segment_bytes and seg.count:
                index = self._append_locked(data, flags, t)
            else:
                count = seg.count
                index = seg.base + count
                pend = self._pend_log
                head = _pack_header(size, flags, t)
                pend += head
                pend += data
                self._pend_crc.append(_crc32(data, _crc32(head)))
                seg.mem_idx += _pack_entry(t, index, offset)  # type: ignore[operator]
                seg.count = count + 1
                seg.log_size = end
                if not count:
                    seg.first_time = t
                seg.last_time = t
                if t != last:
                    self._last_time = t
                self._dirty = True
                if len(pend) >= self.buffer_bytes:
                    self._flush_locked()
            if self._gc is None:
                if self._fast is not None:
                    self._arm()
                return index
            ticket = self._gc.ticket()
        self._gc.wait(ticket)
        return index

    def append_many(
        self,
        records: Iterable[bytes | tuple[bytes, int] | tuple[bytes, int, int | None]],
        flags: int = 0,
        time_ns: int | None = None,
    ) -> range:
        """Append several records in one go; returns the range of their indexes.

        Items are ``bytes`` (using ``flags`` and ``time_ns``, one clock reading when
        None) or ``(data, flags)`` / ``(data, flags, time_ns)`` tuples.  Every item
        is checked before any is appended, so a bad one appends nothing.  Under
        ``sync="always"`` one sync covers them all.
        """
        self._check_record(b"", flags)
        items = records if isinstance(records, list) else list(records)
        with self._lock:
            self._settle()
            self._check_writable()
            first = self._segments[-1].end
            if set(map(type, items)) <= _BYTES_ONLY:  # C-level check of every item
                t = _time_ns() if time_ns is None else self._stamp(time_ns)
                if t < self._last_time:
                    t = self._last_time
                lens = list(map(len, items))
                if lens and max(lens) > MAX_RECORD_SIZE:
                    raise ConfigError(f"a record holds at most {MAX_RECORD_SIZE} bytes")
                if items:
                    self._append_batch(items, lens, flags, t)  # type: ignore[arg-type]
            else:
                for data, fl, t in self._check_items(items, flags, time_ns):
                    self._append_locked(data, fl, t)
            end = self._segments[-1].end
            if self._gc is None:
                return range(first, end)
            ticket = self._gc.ticket()
        self._gc.wait(ticket)
        return range(first, end)

    def _check_items(
        self, items: list[Any], flags: int, time_ns: int | None
    ) -> list[tuple[bytes, int, int]]:
        """Validate mixed items (bytes or tuples) and give each its time."""
        fixed = None if time_ns is None else self._stamp(time_ns)
        now = _time_ns()  # one clock reading for the items without a time
        last = self._last_time
        batch: list[tuple[bytes, int, int]] = []
        for item in items:
            if isinstance(item, tuple):
                data, fl = bytes(item[0]), item[1]
                t = item[2] if len(item) > 2 else fixed
            else:
                data, fl, t = bytes(item), flags, fixed
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

    def _flush_locked(self) -> None:
        """Write the buffered records: log bytes first, then their index entries."""
        fast = self._fast
        if (
            fast is not None
            and fast.pending
            and not self._pend_log
            and self._failure is None
            and self._segments[-1].crc is not None
        ):
            self._flush_direct()
            return
        self._settle()
        seg = self._segments[-1]
        if seg.end == self._flushed_end:
            return
        if self._failure is not None:
            raise PoisonedError(self.directory, self._failure)
        assert seg.mem_idx is not None and seg.idx is not None
        try:
            seg.log.write_at(self._flushed_log, bytes(self._pend_log))
            # Checksums after the records, index entries last: a reader in another
            # process never meets an entry whose record or checksum is not written.
            if seg.crc is not None:
                crcs = self._pend_crc
                if _BIG_ENDIAN:  # pragma: no cover - the format is little-endian
                    crcs = array("I", crcs)
                    crcs.byteswap()
                seg.crc.write_at(self._flushed_crc, crcs.tobytes())
            seg.idx.write_at(self._flushed_idx, bytes(seg.mem_idx[self._flushed_idx :]))
        except BaseException as exc:
            self._fail(exc)
            raise
        self._pend_log.clear()
        self._flushed_crc += CRC_SIZE * len(self._pend_crc)
        del self._pend_crc[:]
        self._flushed_log = seg.log_size
        self._flushed_idx = len(seg.mem_idx)
        self._flushed_end = seg.end

    def flush(self) -> None:
        """Write buffered records to the files (visible to readers; not synced)."""
        with self._lock:
            self._settle()
            self._check_writable()
            self._flush_locked()

    def _sync_files(self) -> None:
        """Flush, then fdatasync the active log before its index (see module doc)."""
        with self._sync_lock:
            self._sync_files_locked()

    def _sync_files_locked(self) -> None:
        with self._lock:
            if self._failure is not None:
                raise PoisonedError(self.directory, self._failure)
            self._flush_locked()
            seg = self._segments[-1]
            self._dirty = False
        try:
            crashpoint("applog.sync.before-log-fsync")
            seg.log.fdatasync()
            # The checksums are synced in the same round: an acknowledged record
            # must verify after a crash, or recovery would cut it as torn.
            crashpoint("applog.sync.before-crc-fsync")
            if seg.crc is not None:
                seg.crc.fdatasync()
            crashpoint("applog.sync.before-idx-fsync")
            if seg.idx is not None:
                seg.idx.fdatasync()
            crashpoint("applog.sync.after-idx-fsync")
        except BaseException as exc:
            self._fail(exc)
            raise

    def sync(self) -> None:
        """Make every record appended so far durable (whatever the sync mode)."""
        self._check_writable()
        if self._gc is not None:
            self._gc.sync_now()
        else:
            self._sync_files()

    def _prepare_read(self, index: int | None) -> None:
        # Buffered records become readable by writing them out first (the native
        # appender's too).  A record already in the files needs neither: its
        # segment's state is the flushed one, which the appender never touches.
        if index is not None and index < self._flushed_end:
            return
        fast = self._fast
        if fast is not None and (fast.armed or fast.pending):
            self._settle()
        if (
            (index is None or index >= self._flushed_end)
            and self._failure is None
            and self._segments
            and self._segments[-1].end != self._flushed_end
        ):
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
                self._index_cache.pop(seg.base, None)
                seg.close()
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
            self._fail(exc)
            raise
        finally:
            del self._segments[: len(victims)]
            del self._bases[: len(victims)]
        return removed

    def expire(self, now: int | None = None) -> int:
        """Delete whole segments whose newest record has outlived its segment's TTL
        (``now > last_time + ttl``, the original's rule), oldest first; returns how
        many records went.  Segments with TTL <= 0 never expire, and expiry stops at
        the first segment that has not expired, so the log stays contiguous."""
        with self._sync_lock, self._lock:
            self._settle()
            self._check_writable()
            now = time.time_ns() if now is None else now
            victims: list[Segment] = []
            for seg in self._segments:
                if seg.ttl_ns > 0 and seg.count and seg.last_time is not None and now > seg.last_time + seg.ttl_ns:
                    victims.append(seg)
                else:
                    break
            if not victims:
                return 0
            before = self.first_index
            if victims[-1] is self._segments[-1]:
                self._roll_locked()  # keep next_index: an empty segment named after it
            self._delete_front(victims)
            self._start = max(self._start, self._segments[0].base)
            # Records hidden earlier by truncate_before() but still on disk went
            # with their segments too; they are not counted again.
            return self.first_index - before

    def truncate_before(self, index: int) -> int:
        """Drop every record below ``index``; returns how many were dropped.

        ``first_index`` becomes ``index`` at once (written to the ``log-start-index``
        checkpoint, ours); segments wholly below it are deleted, a segment that
        straddles it stays on disk until it is wholly below.
        """
        with self._sync_lock, self._lock:
            self._settle()
            self._check_writable()
            first, nxt = self.first_index, self.next_index
            if index > nxt:
                raise ConfigError(f"truncate_before({index}) is past the log's end {nxt}")
            if index <= first:
                return 0
            # The records up to ``index`` must be durable before the checkpoint that
            # names it, or a crash could leave a start beyond the log's end.
            self._sync_files_locked()
            crashpoint("applog.truncate.before-checkpoint")
            try:
                atomic_write(self._fs, f"{self.directory}/{START_FILE}", b"%d\n" % index)
            except BaseException as exc:
                self._fail(exc)
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
            self._settle()
            if self._failure is None:
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

    def _release(self) -> None:
        if self._fast is not None:
            self._fast.armed = False
        for seg in self._segments:
            seg.close()
        self._segments = []
        if self._lock_handle is not None:
            self._lock_handle.close()
            self._lock_handle = None

    def close(self) -> None:
        """Flush and (unless sync="never") sync, then release the files and lock."""
        # Stop the background syncer first: it takes _sync_lock itself.
        if self._periodic is not None:
            self._periodic.stop()
        with self._sync_lock:
            with self._lock:
                if self._closed:
                    return
            try:
                if self._failure is None:
                    if self.sync_policy.mode == "never":
                        with self._lock:
                            self._flush_locked()
                    else:
                        self._sync_files_locked()
            finally:
                with self._lock:
                    self._closed = True
                    self._release()

    def __enter__(self) -> AppendLog:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"[{self._start}, ...)"
        return f"<AppendLog {self.directory!r} {state} sync={self.sync_policy}>"


__all__ = ["AppendLog", "Record", "RecoveryReport"]
