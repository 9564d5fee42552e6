"""Opening a log directory for writing: finding its segments and repairing what a
crash can leave, recorded in the shared :class:`~engine.fs.RecoveryReport`.

What a crash can leave, given the write order of :mod:`engine.applog.writer` and
the deletion order of :class:`engine.applog.AppendLog` (each log before its
index and ``.crc`` file), and what opening does about it (the report's kinds):

* an index or ``.crc`` file without its log, or the temporary file of an
  interrupted ``log-start-index`` checkpoint: deleted (``removed``, files);
* a log, index or ``.crc`` header torn at creation (only in the newest segment,
  which holds no record then): written again (``reset``, bytes);
* a missing index: written again from the log (``rebuilt``, entries);
* a torn tail of the newest segment (:func:`engine.applog.recovery.scan_segment`
  decides): the log bytes past the last whole, checksummed record are cut
  (``cut``, bytes; the records among them failing their checksum: ``cut``,
  records), index entries naming records past it are dropped and those of
  records not yet indexed rebuilt (``dropped``/``rebuilt``, entries), as are a
  half-written entry and ``.crc`` entries past the kept records (``dropped``,
  bytes);
* a ``log-start-index`` past the log's end: clamped (``reset``, indexes).

Damage that no crash can produce (a disagreement in the middle, anything in a
*sealed* segment's log or ``.crc`` file: one with a newer segment after it, which
was synced before that one was created and must hold exactly the records up to
it) raises :class:`~engine.errors.CorruptFileError` naming that file and offset,
before anything is changed; the log is never "repaired" by cutting records that
were acknowledged.  A sealed segment's index (derived data) may still be rebuilt
from records that verify (``rebuilt``/``dropped``, entries).
"""

from __future__ import annotations

import logging

from engine.applog.codec import (
    CRC_MAGIC,
    CRC_SIZE,
    ENTRY_SIZE,
    HEADER_SIZE,
    IDX_MAGIC,
    LOG_MAGIC,
    check_header,
    crc_matches,
    decode_entry,
    encode_header,
    entry_count,
    parse_record,
    parse_segment_name,
)
from engine.applog.recovery import Mismatch, scan_sealed, scan_segment
from engine.applog.segment import Segment, crc_path, idx_path, log_path, no_file_behind
from engine.applog.view import START_FILE, parse_start
from engine.applog.writer import create_segment
from engine.errors import CorruptFileError, FormatError
from engine.fs import FileHandle, FileSystem, OpenMode, RecoveryReport, crashpoint, create_file

log = logging.getLogger("engine.applog")


class OpenedLog:
    """What :func:`open_segments` found: the segments (the newest one writable, with
    its index in memory and a ``.crc`` file), the start index and the TTL."""

    __slots__ = ("segments", "start", "ttl_ns")

    def __init__(self, segments: list[Segment], start: int, ttl_ns: int) -> None:
        self.segments = segments
        self.start = start
        self.ttl_ns = ttl_ns


def open_segments(fs: FileSystem, directory: str, ttl_arg: int | None, report: RecoveryReport) -> OpenedLog:
    """Open and repair every segment of ``directory`` (the writer's lock held).

    ``ttl_arg`` is the TTL the caller asked for (None: keep the newest segment's);
    it goes into the headers of segments created from now on.
    """
    names = fs.listdir(directory)
    logs: list[int] = []
    idxs: set[int] = set()
    crcs: set[int] = set()
    removed = False
    for name in names:
        parsed = parse_segment_name(name)
        if parsed is None:
            if name.startswith(START_FILE) and name != START_FILE:  # an interrupted atomic_write
                fs.unlink(f"{directory}/{name}")
                report.add("removed", f"{directory}/{name}", 1, "files", detail="an interrupted checkpoint")
                removed = True
            continue
        if parsed[1] == ".log":
            logs.append(parsed[0])
        else:
            (idxs if parsed[1] == ".idx" else crcs).add(parsed[0])
    logs.sort()
    # A checksum or index file without its log: left by an interrupted deletion
    # (the log is unlinked first) or creation.  The log is the truth, so they go.
    for base in sorted(crcs - set(logs)):
        fs.unlink(crc_path(directory, base))
        report.add("removed", crc_path(directory, base), 1, "files", detail="a .crc file without its log")
        removed = True
    for base in sorted(idxs - set(logs)):
        fs.unlink(idx_path(directory, base))
        report.add("removed", idx_path(directory, base), 1, "files", detail="an index without its log")
        removed = True
    # A listed segment file that opens nothing (a dangling symbolic link) is
    # damage: opening it would fail with a bare FileNotFoundError (a log), take it
    # for a missing file to create (an index: through the link) or for a segment
    # of the original format without checksums (a .crc file).
    for base in logs:
        for path, listed in ((log_path(directory, base), True), (idx_path(directory, base), base in idxs),
                             (crc_path(directory, base), base in crcs)):
            if listed and not fs.exists(path):
                try:  # what opening it raises: a loop of links is the OSError it is
                    fs.open(path).close()
                except FileNotFoundError:
                    raise no_file_behind(path) from None
    start = 0
    start_path = f"{directory}/{START_FILE}"
    if fs.exists(start_path):
        with fs.open(start_path) as h:
            start = parse_start(h.read_all(), start_path)
    opener = _SegmentOpener(fs, directory, ttl_arg, report)
    segments: list[Segment] = []
    try:
        if not logs:
            ttl = ttl_arg if ttl_arg is not None else 0
            segments.append(create_segment(fs, directory, start, ttl))
        else:
            prev_time: int | None = None
            for n, base in enumerate(logs):
                last = n == len(logs) - 1
                expected = None if last else logs[n + 1] - base
                seg = opener.open(base, expected=expected, prev_time=prev_time)
                if segments and segments[-1].end != base:
                    prev = segments[-1]
                    seg.close()
                    raise CorruptFileError(
                        seg.log_path, 0, f"a segment starting at index {prev.end} (after {prev.log_path})", str(base)
                    )
                segments.append(seg)
                if seg.last_time is not None:
                    prev_time = seg.last_time
            ttl = ttl_arg if ttl_arg is not None else (segments[-1].ttl_ns or 0)
        if removed or opener.dir_dirty:
            fs.fsync_dir(directory)
        active = segments[-1]
        if start > active.end:
            report.add("reset", start_path, start - active.end, "indexes", offset=0,
                       detail=f"start index {start} beyond the log's end {active.end}: clamped")
            start = active.end
        if active.crc is None:
            # A segment without a .crc file (the original LOG/IDX writer's, or an
            # older engine's) gets no new records: new ones must be checksummed.
            # An empty one gets its .crc file now; one holding records is sealed
            # and a new segment starts.
            if active.count == 0:
                crashpoint("applog.recover.before-create-crc")
                active.crc = create_file(fs, active.crc_path, encode_header(CRC_MAGIC, 0))
                active.mem_crc = bytearray(encode_header(CRC_MAGIC, 0))
                log.info("%s: created the .crc file of an empty segment without one", active.crc_path)
            else:
                crashpoint("applog.roll.before-seal-fsync")
                active.log.fdatasync()
                if active.idx is not None:
                    active.idx.fdatasync()
                crashpoint("applog.roll.after-seal-fsync")
                segments.append(create_segment(fs, directory, active.end, ttl))
                active.mem_idx = None
                log.info("%s: has no .crc file: sealed, new records go to a new segment", active.log_path)
    except BaseException:
        for seg in segments:
            seg.close()
        raise
    return OpenedLog(segments, start, ttl)


class _SegmentOpener:
    """Opens one segment at a time, checking it (fully for the newest, whose tail
    may be torn) and repairing what a crash can leave."""

    def __init__(self, fs: FileSystem, directory: str, ttl_arg: int | None, report: RecoveryReport) -> None:
        self.fs = fs
        self.directory = directory
        self.ttl_arg = ttl_arg
        self.report = report
        self.dir_dirty = False  # a file was created: the directory needs an fsync

    def _rewrite_header(self, handle: FileHandle, path: str, found: bytes, header: bytes, what: str) -> bytes:
        """Write again a header torn at creation (its segment holds no record: the
        header is fsynced before any record is added); anything else that is not
        a prefix of the header or zeros is a FormatError."""
        if found and not (header.startswith(found) or not any(found)):
            raise FormatError(path, 0, f"a 16-byte {what} header", f"{len(found)} bytes")
        handle.truncate(0)
        handle.write_at(0, header)
        handle.fdatasync()
        self.report.add("reset", path, HEADER_SIZE, "bytes", offset=0, detail="a header torn at creation")
        return header

    def open(self, base: int, *, expected: int | None, prev_time: int | None) -> Segment:
        """Open segment ``base``: the newest if ``expected`` is None, else a sealed
        one that must hold exactly ``expected`` records (see
        :func:`engine.applog.recovery.scan_sealed`: only its index may be repaired)."""
        fs, report = self.fs, self.report
        last = expected is None
        lpath, ipath, cpath = log_path(self.directory, base), idx_path(self.directory, base), crc_path(
            self.directory, base
        )
        lh = fs.open(lpath, OpenMode.WRITE)
        ih: FileHandle | None = None
        ch: FileHandle | None = None
        try:
            log_bytes = lh.read_all()
            if len(log_bytes) < HEADER_SIZE:
                # Only the newest segment can be half-created (its name survived,
                # its header did not).
                if not last:
                    raise FormatError(lpath, 0, "a 16-byte LOG header", f"{len(log_bytes)} bytes")
                log_bytes = self._rewrite_header(lh, lpath, log_bytes, encode_header(LOG_MAGIC, self.ttl_arg or 0),
                                                 "LOG")
            ttl = check_header(log_bytes, LOG_MAGIC, lpath).ttl_ns
            ih = fs.open(ipath, OpenMode.CREATE)
            idx_bytes = ih.read_all()
            if len(idx_bytes) >= HEADER_SIZE:
                check_header(idx_bytes, IDX_MAGIC, ipath)
            else:
                # Missing or torn at creation: the index is derived data; its
                # entries are rebuilt from the log below.
                header = encode_header(IDX_MAGIC, ttl)
                if idx_bytes and not (header.startswith(idx_bytes) or not any(idx_bytes)):
                    raise FormatError(ipath, 0, "a 16-byte IDX header", f"{len(idx_bytes)} bytes")
                ih.truncate(0)
                ih.write_at(0, header)
                ih.fdatasync()
                idx_bytes = header
                self.dir_dirty = True  # the new name must survive too
            crc_bytes: bytes | None = None
            if fs.exists(cpath):
                ch = fs.open(cpath, OpenMode.WRITE)
                crc_bytes = ch.read_all()
                if len(crc_bytes) >= HEADER_SIZE:
                    check_header(crc_bytes, CRC_MAGIC, cpath)
                else:
                    crc_bytes = self._rewrite_header(ch, cpath, crc_bytes, encode_header(CRC_MAGIC, 0), "CRC")
            if expected is not None and _sealed_ok(log_bytes, idx_bytes, base, crc_bytes, expected):
                n = expected
                first_t = decode_entry(idx_bytes, 0)[0] if n else None
                last_t = decode_entry(idx_bytes, n - 1)[0] if n else None
                return Segment(self.directory, base, ttl, lh, ih, n, len(log_bytes), first_t, last_t, crc=ch)
            try:
                if expected is None:
                    scan = scan_segment(log_bytes, idx_bytes, base, prev_time, crc_bytes)
                else:
                    scan = scan_sealed(log_bytes, idx_bytes, base, expected, prev_time, crc_bytes)
            except Mismatch as exc:
                where = {"log": lpath, "idx": ipath, "crc": cpath}[exc.where]
                raise CorruptFileError(where, exc.offset, exc.expected, exc.found) from None
            if not scan.clean:
                # A sealed segment was synced before the next one was created, so a
                # crash cannot leave it torn: scan_sealed raised for anything but
                # its index (derived data, rebuilt from records that verify).
                sealed = "" if last else " of a sealed segment"
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
                report.cut(lpath, scan.log_end, scan.log_cut, f"a torn or zeroed tail{sealed}")
                report.add("cut", lpath, scan.torn_records, "records", offset=scan.log_end,
                           detail=f"torn: checksum missing or wrong{sealed}")
                report.add("dropped", ipath, scan.idx_dropped, "entries", offset=keep_end,
                           detail=f"naming records past the log's end{sealed}")
                report.add("dropped", ipath, scan.idx_partial, "bytes", offset=keep_end,
                           detail="a half-written entry")
                report.add("rebuilt", ipath, len(scan.rebuilt), "entries", offset=keep_end,
                           detail=f"from the log{sealed}")
                report.add("dropped", cpath, scan.crc_dropped, "bytes", offset=scan.crc_end,
                           detail="checksums past the kept records")
                idx_bytes = idx_bytes[:keep_end] + b"".join(scan.rebuilt)
            mem = bytearray(idx_bytes) if last else None
            mem_crc = bytearray(crc_bytes[: scan.crc_end]) if last and crc_bytes is not None else None
            return Segment(
                self.directory, base, ttl, lh, ih, scan.count, scan.log_end, scan.first_time, scan.last_time, mem,
                crc=ch, mem_crc=mem_crc,
            )
        except BaseException:
            lh.close()
            if ih is not None:
                ih.close()
            if ch is not None:
                ch.close()
            raise


def _sealed_ok(log_bytes: bytes, idx_bytes: bytes, base: int, crc_bytes: bytes | None, expected: int) -> bool:
    """Cheap check of a sealed segment: ``expected`` whole entries (and checksums),
    first and last entries agree with the log (and their checksums), the last
    record ends the file.  Records in between are checked when read (every read
    checks the record's checksum) and by ``verify()``."""
    if (len(idx_bytes) - HEADER_SIZE) % ENTRY_SIZE:
        return False
    n = entry_count(len(idx_bytes))
    if n != expected:
        return False
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
