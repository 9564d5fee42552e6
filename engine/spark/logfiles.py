"""Read-only access to append-log directories for Spark: discovery, planning, reading.

A log directory holds segments named by their first index, Kafka style
(``<20 digits>.log`` + ``.idx``).  A *dataset* is either one log directory or a
directory written by the Spark sink, whose manifest (``_SHARDS.json``) lists the
log directories (shards) that make it up.

This module never writes: it works on whatever the writer has made visible.  The
index is the visibility bound (a record is visible once its index entry is
written, as the append-log store promises), and index entries whose record does
not fit in the log yet (a writer mid-append, or a torn tail the writer will cut
on its next open) are left out, never reported as corruption.  A disagreement in
the middle of a segment is a :class:`CorruptFileError`.
"""

from __future__ import annotations

import bisect
import dataclasses
import posixpath
from collections.abc import Iterator
from dataclasses import dataclass

from engine.applog.codec import (
    CRC_MAGIC,
    CRC_SIZE,
    ENTRY_SIZE,
    HEADER_SIZE,
    IDX_MAGIC,
    INDEX_ENTRY,
    LOG_MAGIC,
    RECORD_HEADER,
    RECORD_HEADER_SIZE,
    check_header,
    crc_offset,
)
from engine.applog.log import AppendLog
from engine.applog.view import START_FILE
from engine.errors import ConfigError, CorruptFileError
from engine.fs import FileHandle, FileSystem, resolve
from engine.spark import logcodec as lc
from engine.spark.manifest import MANIFEST, join, read_manifest
from engine.stores import SEGMENT_RE


@dataclass(frozen=True)
class Segment:
    """One visible segment: its files, the records it holds and where they end."""

    log_path: str
    idx_path: str
    first_index: int
    count: int  # visible records
    end_offset: int  # byte offset just past the last visible record
    ttl_ns: int
    first_time_ns: int | None
    last_time_ns: int | None
    min_pos: int = 0  # first visible position (records below were truncated away)
    #: The index as the store's reader rebuilt it in memory when its file is torn or
    #: damaged (see LogReader.rebuilt_index), read instead of the file; None: the file.
    rebuilt_index: bytes | None = None

    @property
    def stop_index(self) -> int:
        return self.first_index + self.count

    @property
    def visible(self) -> int:
        return self.count - self.min_pos


@dataclass(frozen=True)
class LogDir:
    """One append log taking part in a dataset: its display name and directory."""

    name: str
    path: str


#: How deep :func:`dataset_logs` looks for logs under a directory.
MAX_DEPTH = 6


def dataset_logs(path: str, fs: FileSystem | None = None) -> list[LogDir]:
    """The logs making up the dataset at ``path``.

    ``path`` is a log directory (named by its last component), a sink dataset
    (its manifest's shards, named as listed), or a directory holding such
    (every log and dataset under it, named by their path relative to ``path``;
    directories starting with ``_`` or ``.`` are not entered, and a directory
    holding only ``job-*`` directories is a sink dataset before its first
    commit: empty).  A fresh, empty
    directory is an empty dataset (a sink target); anything else without a log
    is a ConfigError.
    """
    fs = resolve(fs)
    if not fs.isdir(path):
        raise ConfigError(f"{path}: no append log here (not a directory)")
    found: list[LogDir] = []
    staging: list[str] = []

    def walk(directory: str, rel: str, depth: int) -> None:
        shards = read_manifest(fs, directory)
        if shards is not None:
            found.extend(LogDir(f"{rel}/{name}" if rel else name, join(directory, name)) for name in shards)
            return
        names = sorted(fs.listdir(directory))
        if any(SEGMENT_RE.match(n) for n in names):
            found.append(LogDir(rel or directory.rstrip("/").rsplit("/", 1)[-1], directory))
            return
        visible = [n for n in names if not n.startswith(("_", "."))]
        if visible and all(n.startswith("job-") for n in visible):
            staging.append(directory)  # a sink dataset whose first job is not published yet: empty
            return
        if depth >= MAX_DEPTH:
            return
        for name in visible:
            full = join(directory, name)
            if fs.isdir(full):
                walk(full, f"{rel}/{name}" if rel else name, depth + 1)

    walk(path, "", 0)
    if not found and not staging and any(not n.startswith(("_", ".")) for n in fs.listdir(path)):
        raise ConfigError(f"{path}: no append log here (no <index>.log segment or {MANIFEST}, "
                          "here or in a directory below)")
    return found


def logs_of(paths: list[str], fs: FileSystem | None = None) -> list[LogDir]:
    """The logs of several paths (as :func:`dataset_logs`), each named uniquely:
    when two paths give the same name, every log is named by its path relative
    to the paths' common parent directory."""
    fs = resolve(fs)
    logs: list[LogDir] = []
    for p in paths:
        seen = {x.path for x in logs}
        logs.extend(ld for ld in dataset_logs(p, fs) if ld.path not in seen)
    names = [ld.name for ld in logs]
    if len(set(names)) == len(names):
        return logs
    parent = posixpath.dirname(posixpath.commonpath([p.rstrip("/") or "/" for p in paths]))
    return [LogDir(posixpath.relpath(ld.path, parent) if parent else ld.path, ld.path) for ld in logs]


class _IndexInMemory:
    """A segment's index rebuilt in memory (``Segment.rebuilt_index``), read as its file is."""

    def __init__(self, path: str, raw: bytes) -> None:
        self.path = path
        self._raw = raw

    def read_at(self, offset: int, n: int) -> bytes:
        return self._raw[offset : offset + n]

    def __enter__(self) -> _IndexInMemory:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


def _open_index(fs: FileSystem, seg: Segment) -> FileHandle | _IndexInMemory:
    """``seg``'s index for reading: its file, or the index the store's reader rebuilt."""
    if seg.rebuilt_index is not None:
        return _IndexInMemory(seg.idx_path, seg.rebuilt_index)
    return fs.open(seg.idx_path)


def _entry_at(h: FileHandle | _IndexInMemory, pos: int) -> tuple[int, int, int]:
    raw = h.read_at(HEADER_SIZE + ENTRY_SIZE * pos, ENTRY_SIZE)
    if len(raw) < ENTRY_SIZE:
        raise CorruptFileError(h.path, HEADER_SIZE + ENTRY_SIZE * pos, "a whole index entry",
                               f"{len(raw)} bytes")
    t, i, o = INDEX_ENTRY.unpack(raw)
    return t, i, o


def _record_end(log: FileHandle, offset: int, log_size: int) -> int | None:
    """Where the record at ``offset`` ends, or None if it does not fit (yet)."""
    if offset < HEADER_SIZE or offset + RECORD_HEADER_SIZE > log_size:
        return None
    size, _flags, _t = RECORD_HEADER.unpack(log.read_at(offset, RECORD_HEADER_SIZE))
    end = offset + RECORD_HEADER_SIZE + size
    return end if end <= log_size else None


def open_segment(fs: FileSystem, log_path: str, first_index: int) -> Segment:
    """Check a segment's headers and find how many of its records are visible."""
    idx_path = log_path[:-4] + ".idx"
    with fs.open(log_path) as log:
        log_size = log.size()
        header = check_header(log.read_at(0, HEADER_SIZE), LOG_MAGIC, log_path)
        if not fs.exists(idx_path):
            return Segment(log_path, idx_path, first_index, 0, HEADER_SIZE, header.ttl_ns, None, None)
        with fs.open(idx_path) as idx:
            check_header(idx.read_at(0, HEADER_SIZE), IDX_MAGIC, idx_path)
            n = max(0, (idx.size() - HEADER_SIZE) // ENTRY_SIZE)

            def fits(pos: int) -> int | None:
                return _record_end(log, _entry_at(idx, pos)[2], log_size)

            # Entries past the log's end (the writer appends the log first, then the
            # index, but a crash may leave either torn): the visible prefix is the
            # longest one whose last record fits.  Offsets increase, so "fits" is
            # monotone and a binary search finds the boundary.
            end = fits(n - 1) if n else None
            if n and end is None:
                lo, hi = 0, n - 1  # entry hi does not fit; find the first that does not
                while lo < hi:
                    mid = (lo + hi) // 2
                    if fits(mid) is None:
                        hi = mid
                    else:
                        lo = mid + 1
                n = lo
                end = fits(n - 1) if n else None
            first_t = _entry_at(idx, 0)[0] if n else None
            last_t = _entry_at(idx, n - 1)[0] if n else None
    return Segment(log_path, idx_path, first_index, n, end if end is not None else HEADER_SIZE,
                   header.ttl_ns, first_t, last_t)


def start_index(fs: FileSystem, path: str) -> int:
    """The log's first live index from its ``log-start-index`` file (0 if none)."""
    spath = join(path, START_FILE)
    if not fs.exists(spath):
        return 0
    with fs.open(spath) as h:
        raw = h.read_all()
    text = raw.decode("ascii", "replace").strip()
    if not text.isdigit():
        raise CorruptFileError(spath, 0, "a decimal record index", repr(raw[:32]))
    return int(text)


def list_segments(path: str, fs: FileSystem | None = None, *, use_store: bool = True) -> list[Segment]:
    """The segments of the log directory ``path``, oldest first, past its start index.

    With ``use_store`` the store's own lock-free reader
    (:meth:`engine.applog.AppendLog.open_reader`) decides what is visible, so
    Spark sees exactly what ``AppendLog``/``LogReader`` readers see: index
    entries that agree with the log, a torn tail left out.  Otherwise this
    module's own check is used (entries whose records fit in the log; the decode
    then checks that they agree).
    """
    fs = resolve(fs)
    if use_store:
        return _store_segments(path, fs)
    found = sorted((int(m.group(1)), n) for n in fs.listdir(path) if (m := SEGMENT_RE.match(n)))
    start = start_index(fs, path)
    out = []
    for first, name in found:
        seg = open_segment(fs, join(path, name), first)
        trimmed = _from_start(fs, seg, start)
        if trimmed is not None:
            out.append(trimmed)
    return out


def _from_start(fs: FileSystem, seg: Segment, start: int) -> Segment | None:
    """``seg`` as read from the log's first live index ``start`` on: None when all
    of it is below ``start`` (expired), else trimmed to begin there."""
    if not seg.count or start <= seg.first_index:
        return seg
    if start >= seg.stop_index:
        return None
    pos = start - seg.first_index
    with _open_index(fs, seg) as idx:
        t0 = _entry_at(idx, pos)[0]
    return dataclasses.replace(seg, min_pos=pos, first_time_ns=t0)


def _store_segments(path: str, fs: FileSystem) -> list[Segment]:
    """Segments as the append-log store's read-only reader sees them."""
    reader = AppendLog.open_reader(path, fs=fs)
    try:
        infos = reader.segments()
        start = reader.first_index if infos else 0
        # A newest segment the reader shows through an index rebuilt in memory (a
        # torn or damaged index, no writer live): read through that index too.
        rebuilt = {info.first_index: reader.rebuilt_index(info.first_index) for info in infos}
    finally:
        reader.close()
    out = []
    for info in infos:
        seg = Segment(info.log_path, info.idx_path, info.first_index, info.next_index - info.first_index,
                      info.log_bytes, info.ttl_ns, info.first_time_ns, info.last_time_ns,
                      rebuilt_index=rebuilt[info.first_index])
        trimmed = _from_start(fs, seg, start)
        if trimmed is not None:
            out.append(trimmed)
    return out


def position_at_time(fs: FileSystem, seg: Segment, t_ns: int) -> int:
    """First position in ``seg`` whose time is >= ``t_ns``: a binary search over the IDX.

    Times never go backwards within a log, so the entries are sorted by time; this
    reads about log2(count) entries.
    """
    with _open_index(fs, seg) as idx:

        class _Times:
            def __len__(self) -> int:
                return seg.count

            def __getitem__(self, pos: int) -> int:
                return _entry_at(idx, pos)[0]

        return bisect.bisect_left(_Times(), t_ns)  # type: ignore[arg-type]


def positions_for(
    fs: FileSystem, seg: Segment, index_lo: int | None, index_hi: int | None,
    time_lo: int | None, time_hi: int | None,
) -> tuple[int, int]:
    """The position range ``[a, b)`` of ``seg`` inside the index and time ranges."""
    a, b = seg.min_pos, seg.count
    if index_lo is not None:
        a = max(a, index_lo - seg.first_index)
    if index_hi is not None:
        b = min(b, index_hi - seg.first_index)
    if a >= b:
        return a, a
    if time_lo is not None or time_hi is not None:
        if seg.first_time_ns is None or seg.last_time_ns is None:
            return a, a
        if time_lo is not None and time_lo > seg.last_time_ns:
            return b, b
        if time_hi is not None and time_hi <= seg.first_time_ns:
            return a, a
        if time_lo is not None and time_lo > seg.first_time_ns:
            a = max(a, position_at_time(fs, seg, time_lo))
        if time_hi is not None and time_hi <= seg.last_time_ns:
            b = min(b, position_at_time(fs, seg, time_hi))
    return a, max(a, b)


def entry_offsets(fs: FileSystem, seg: Segment, start: int, stop: int) -> list[int]:
    """The log offsets the index entries ``[start, stop)`` of ``seg`` hold (fewer
    when the index ends first)."""
    if start >= stop:
        return []
    with _open_index(fs, seg) as idx:
        entries = lc.decode_index(idx.read_at(HEADER_SIZE + ENTRY_SIZE * start, ENTRY_SIZE * (stop - start)))
    return [int(o) for o in entries["offset"]]


def crc_path(seg: Segment) -> str:
    """The segment's ``.crc`` side file (the append log's per-record checksums)."""
    return seg.log_path[:-4] + ".crc"


def read_index_range(
    fs: FileSystem, seg: Segment, start: int, stop: int, batch_records: int = 65536,
) -> Iterator[lc.IndexRun]:
    """Index and time columns of positions ``[start, stop)`` of ``seg``, from the
    IDX file alone (one read per run of ``batch_records``), each run checked by
    :func:`engine.spark.logcodec.decode_index_run`; the LOG is not read."""
    if start >= stop:
        return
    with _open_index(fs, seg) as idx:
        pos = start
        prev_offset: int | None = None
        prev_time: int | None = None
        while pos < stop:
            n = min(batch_records, stop - pos)
            idx_off = HEADER_SIZE + ENTRY_SIZE * pos
            entries = lc.decode_index(idx.read_at(idx_off, ENTRY_SIZE * n))
            if len(entries) < n:
                raise CorruptFileError(seg.idx_path, idx_off + ENTRY_SIZE * len(entries),
                                       "an index entry (the file shrank while being read)")
            run = lc.decode_index_run(entries, seg.idx_path, seg.first_index + pos, idx_off, seg.end_offset,
                                      prev_offset, prev_time)
            prev_offset, prev_time = run.last_offset, int(run.time_ns[-1])
            yield run
            pos += n


def read_range(
    fs: FileSystem, seg: Segment, start: int, stop: int, batch_records: int = 65536, payload: bool = True,
) -> Iterator[lc.DecodedRun]:
    """Decode positions ``[start, stop)`` of ``seg`` in runs of ``batch_records``.

    Each run is two reads (index entries, then the log bytes they cover), a third
    for the checksums when the segment has a ``.crc`` file (every record is
    checked against it: ``DecodedRun.bad``), and a vectorised decode; memory
    stays bounded by the batch size.  Without ``payload`` the data column is not
    built (every check still runs).
    """
    if start >= stop:
        return
    crc_file = crc_path(seg)
    crc = fs.open(crc_file) if fs.exists(crc_file) else None
    try:
        with _open_index(fs, seg) as idx, fs.open(seg.log_path) as log:
            if crc is not None:
                check_header(crc.read_at(0, HEADER_SIZE), CRC_MAGIC, crc_file)
            pos = start
            while pos < stop:
                n = min(batch_records, stop - pos)
                idx_off = HEADER_SIZE + ENTRY_SIZE * pos
                # One entry more than needed, when there is one, says where the last record ends.
                extra = 1 if pos + n < seg.count else 0
                raw = idx.read_at(idx_off, ENTRY_SIZE * (n + extra))
                entries = lc.decode_index(raw)
                if len(entries) < n + extra:
                    raise CorruptFileError(seg.idx_path, idx_off + ENTRY_SIZE * len(entries),
                                           "an index entry (the file shrank while being read)")
                base = int(entries["offset"][0])
                end = int(entries["offset"][n]) if extra else seg.end_offset
                if not HEADER_SIZE <= base < seg.end_offset:
                    # An index entry no checksum covers: bound it by the log before
                    # reading, so garbage is a typed error, never a huge allocation.
                    raise CorruptFileError(seg.idx_path, idx_off + 16,
                                           f"a log offset in [{HEADER_SIZE}, {seg.end_offset})", str(base))
                if not base < end <= seg.end_offset:
                    raise CorruptFileError(seg.idx_path, idx_off + ENTRY_SIZE * n + 16,
                                           f"a log offset in ({base}, {seg.end_offset}]", str(end))
                log_bytes = log.read_at(base, end - base)
                crcs = crc.read_at(crc_offset(pos), CRC_SIZE * n) if crc is not None else None
                if crcs is not None and len(crcs) < CRC_SIZE * n:
                    raise CorruptFileError(crc_file, crc_offset(pos) + len(crcs), f"{n} checksums", "end of file")
                yield lc.decode_run(log_bytes, base, entries[:n], seg.log_path, seg.first_index + pos, idx_off,
                                    crcs, payload)
                pos += n
    finally:
        if crc is not None:
            crc.close()


def visible_count(segments: list[Segment]) -> int:
    """How many records the segments make visible in total."""
    return sum(s.visible for s in segments)

