"""One segment at run time: its files, its extent, and reads by position.

A :class:`Segment` is shared by the writer (:class:`~engine.applog.log.AppendLog`)
and the lock-free reader (:class:`~engine.applog.reader.LogReader`).  It knows how
many records of the segment are *visible* (``count``: records whose index entry is
written and agrees with the log) and reads them by position inside the segment.

The index is read through the file handle (one ``pread`` of 48 bytes per lookup,
one per binary-search probe) unless ``mem_idx`` holds the whole index file in
memory, which the writer does for its active segment.
"""

from __future__ import annotations

import bisect
import datetime
import struct
import sys
import zlib
from array import array
from collections.abc import Iterator
from typing import Any, NamedTuple

from engine.applog.codec import (
    CRC_SIZE,
    ENTRY_SIZE,
    HEADER_SIZE,
    INDEX_ENTRY,
    RECORD_HEADER,
    RECORD_HEADER_SIZE,
    crc_offset,
    entry_offset,
    segment_name,
)
from engine.conventions import Serializer, datetime_from_ns, decoding_class
from engine.errors import CorruptFileError
from engine.fs import FileHandle

_TIME = struct.Struct("<q")
_CRC = struct.Struct("<I")  # one .crc entry: u32 (4 bytes)
assert _CRC.size == CRC_SIZE
_TWO_ENTRIES = struct.Struct("<qQqqQq")
assert _TWO_ENTRIES.size == 2 * ENTRY_SIZE

assert array("I").itemsize == CRC_SIZE  # .crc entries are read as an array of u32

#: Every SPARSE-th index entry's time is kept in memory for binary search.
SPARSE = 64
_BIG_ENDIAN = sys.byteorder == "big"

#: How many bytes of log a scan reads at once.
SCAN_CHUNK = 1 << 20


class Record(NamedTuple):
    """One record of an append log: ``(index, time_ns, flags, data)``.

    ``time_ns`` is exact (nanoseconds since the epoch); ``time`` is the same
    instant as an aware UTC datetime (to the microsecond).  ``data`` is the
    stored bytes; ``value`` is what was appended (``data`` itself unless the log
    was opened with ``serializer=``: then its ``loads(data)``, see
    :func:`record_class`).
    """

    index: int  # type: ignore[assignment]  # shadows tuple.index on purpose: the record's position
    time_ns: int
    flags: int
    data: bytes

    @property
    def time(self) -> datetime.datetime:
        """The record's time as an aware UTC datetime (``time_ns`` is exact)."""
        return datetime_from_ns(self.time_ns)

    @property
    def value(self) -> Any:
        """The record as appended: ``data`` (no serializer)."""
        return self.data


def record_class(serializer: Serializer | None) -> type[Record] | None:
    """The class a log built with ``serializer`` returns its records as: None
    without one (records stay plain :class:`Record` s, at no cost), else
    :func:`engine.conventions.decoding_class` of ``Record`` over ``data``."""
    return None if serializer is None else decoding_class(Record, serializer, "data")


# Bound once: the lookups below run once per record read.
_unpack_header = RECORD_HEADER.unpack_from
_crc32 = zlib.crc32
_new_record = tuple.__new__  # Record(...) without the Python-level __new__ of a NamedTuple


def log_path(directory: str, base: int) -> str:
    return f"{directory.rstrip('/')}/{segment_name(base, '.log')}"


def idx_path(directory: str, base: int) -> str:
    return f"{directory.rstrip('/')}/{segment_name(base, '.idx')}"


def crc_path(directory: str, base: int) -> str:
    """The segment's checksum side file (an extension of the LOG/IDX format; see
    docs/formats/applog.md)."""
    return f"{directory.rstrip('/')}/{segment_name(base, '.crc')}"


def no_file_behind(path: str) -> CorruptFileError:
    """The error for a segment file whose name the directory lists but that opens
    no file (a dangling symbolic link): damage, never a deleted segment (whose
    name is gone), so never a log shown or opened with records missing."""
    return CorruptFileError(
        path, 0, "a segment file (its name is listed in the directory)",
        "no file behind the name (a dangling symbolic link?)",
    )


class Segment:
    """A segment's files and visible extent (see the module docstring)."""

    # Slots: the append path reads and writes several of these per record, and
    # slot access is cheaper than an instance dict's.
    __slots__ = (
        "_sparse",
        "_sparse_count",
        "base",
        "cached",
        "cached_count",
        "cached_crc",
        "count",
        "crc",
        "crc_path",
        "first_time",
        "idx",
        "idx_path",
        "last_time",
        "log",
        "log_path",
        "log_size",
        "mem_crc",
        "mem_idx",
        "misses",
        "sealed",
        "ttl_ns",
    )

    def __init__(
        self,
        directory: str,
        base: int,
        ttl_ns: int,
        log: FileHandle,
        idx: FileHandle | None,
        count: int,
        log_size: int,
        first_time: int | None,
        last_time: int | None,
        mem_idx: bytearray | None = None,
        crc: FileHandle | None = None,
        mem_crc: bytearray | None = None,
    ) -> None:
        self.base = base
        self.ttl_ns = ttl_ns
        self.log_path = log_path(directory, base)
        self.idx_path = idx_path(directory, base)
        self.crc_path = crc_path(directory, base)
        self.log = log
        self.idx = idx
        self.crc = crc  # the .crc side file; None for a segment without one
        self.count = count
        self.log_size = log_size  # end of the last visible record
        self.first_time = first_time
        self.last_time = last_time
        self.mem_idx = mem_idx
        # The writer's active segment keeps its .crc file in memory too (header
        # included), so that reading a record there checks it without a read.
        self.mem_crc = mem_crc
        self.cached: array[int] | None = None  # every record's offset (see load_cache)
        self.cached_crc: array[int] | None = None  # every record's checksum (see load_cache)
        self.cached_count = 0
        self.sealed = -1  # the reader: record count its sealed-segment check confirmed
        self.misses = 0  # uncached lookups since the view last considered caching it
        self._sparse: array[int] | None = None  # times of entries 0, SPARSE, 2*SPARSE...
        self._sparse_count = 0

    @property
    def end(self) -> int:
        """One past the index of the last visible record."""
        return self.base + self.count

    def close(self) -> None:
        self.log.close()
        if self.idx is not None:
            self.idx.close()
        if self.crc is not None:
            self.crc.close()

    # -- the index -------------------------------------------------------------------
    def _idx_bytes(self, position: int, n: int) -> bytes | bytearray | memoryview:
        start = entry_offset(position)
        if self.mem_idx is not None:
            return memoryview(self.mem_idx)[start : start + n]
        if self.idx is None:
            return b""
        return self.idx.read_at(start, n)

    def _all_entries(self) -> array[int]:
        """Every index entry as native int64s (time, offset, ... three per entry)."""
        raw = self._idx_bytes(0, self.count * ENTRY_SIZE)
        if len(raw) < self.count * ENTRY_SIZE:
            raise CorruptFileError(self.idx_path, HEADER_SIZE, f"{self.count} index entries", f"{len(raw)} bytes")
        entries = array("q")
        entries.frombytes(bytes(raw))
        if _BIG_ENDIAN:  # pragma: no cover
            entries.byteswap()
        return entries

    def load_cache(self) -> None:
        """Keep the segment's record offsets in memory (8 bytes per record) so that
        a lookup here reads only the log; the view decides which segments."""
        entries = self._all_entries()
        crcs: array[int] | None = None
        if self.crc is not None:
            raw_crc = self.crc.read_at(crc_offset(0), self.count * CRC_SIZE)
            if len(raw_crc) < self.count * CRC_SIZE:
                raise CorruptFileError(self.crc_path, crc_offset(len(raw_crc) // CRC_SIZE),
                                       f"{self.count} checksums", f"{len(raw_crc)} bytes")
            crcs = array("I")
            crcs.frombytes(raw_crc)
            if _BIG_ENDIAN:  # pragma: no cover
                crcs.byteswap()
        self.cached = entries[2::3]
        self.cached_crc = crcs
        self.cached_count = self.count

    def drop_cache(self) -> None:
        self.cached = None
        self.cached_crc = None
        self.cached_count = 0

    def crc_at(self, position: int) -> int | None:
        """The checksum the ``.crc`` file holds for record ``position`` (None: the
        segment has no ``.crc`` file); CorruptFileError if the file ends before it."""
        mem = self.mem_crc
        if mem is not None and crc_offset(position) + CRC_SIZE <= len(mem):
            value: int = _CRC.unpack_from(mem, crc_offset(position))[0]
            return value
        if self.crc is None:
            return None
        raw = self.crc.read_at(crc_offset(position), CRC_SIZE)
        if len(raw) < CRC_SIZE:
            raise CorruptFileError(self.crc_path, crc_offset(position),
                                   f"the checksum of record {self.base + position}", "end of file")
        value = _CRC.unpack_from(raw, 0)[0]
        return value

    def _bad_crc(self, position: int, offset: int) -> CorruptFileError:
        """The error for record ``position`` (at ``offset`` of the log) failing its
        checksum: the record or its ``.crc`` entry is damaged (the CRC cannot say
        which); both are named."""
        return CorruptFileError(
            self.log_path, offset,
            f"record {self.base + position} matching its checksum ({self.crc_path} offset {crc_offset(position)})",
            "a record that does not",
        )

    def entry(self, position: int) -> tuple[int, int, int, int]:
        """``(time, index, offset, end)`` of the record at ``position`` (checked)."""
        want = 2 * ENTRY_SIZE if position + 1 < self.count else ENTRY_SIZE
        raw = self._idx_bytes(position, want)
        if len(raw) < want:
            raise CorruptFileError(self.idx_path, entry_offset(position), f"{want} index bytes", f"{len(raw)}")
        if want == ENTRY_SIZE:
            time_ns, index, offset = INDEX_ENTRY.unpack_from(raw, 0)
            end = self.log_size
        else:
            time_ns, index, offset, _, _, end = _TWO_ENTRIES.unpack_from(raw, 0)
        if not offset < end <= self.log_size:
            end = self.log_size  # a damaged next entry: read() trusts the header instead
        if index != self.base + position or not HEADER_SIZE <= offset < self.log_size:
            raise CorruptFileError(
                self.idx_path,
                entry_offset(position),
                f"entry for record {self.base + position} within the log's {self.log_size} bytes",
                f"index {index}, offset {offset}, next offset {end}",
            )
        return time_ns, index, offset, end


    def bisect_time(self, t0: int) -> int:
        """Position of the first visible record with time >= ``t0`` (``count`` if
        none): binary search over the index, valid because times never go down."""
        lo, hi = 0, self.count
        if self.mem_idx is not None:
            buf = self.mem_idx
            unpack = _TIME.unpack_from
            while lo < hi:
                mid = (lo + hi) >> 1
                if unpack(buf, HEADER_SIZE + ENTRY_SIZE * mid)[0] < t0:
                    lo = mid + 1
                else:
                    hi = mid
            return lo
        if hi == 0:
            return 0
        # Through the file: a binary search over every SPARSE-th entry's time, kept
        # in memory, narrows the answer to one block; one read of that block's
        # entries finishes the search.  O(log n) work, two reads at most.
        sparse = self._sparse
        if sparse is None or self._sparse_count != self.count:
            sparse = self._load_sparse()
        j = bisect.bisect_left(sparse, t0)
        if j == 0:
            return 0
        lo = (j - 1) * SPARSE
        hi = min(j * SPARSE, self.count)
        raw = self._idx_bytes(lo, (hi - lo) * ENTRY_SIZE)
        if len(raw) < (hi - lo) * ENTRY_SIZE:
            raise CorruptFileError(self.idx_path, entry_offset(lo), f"{hi - lo} index entries", "end of file")
        block = array("q")
        block.frombytes(bytes(raw))
        if _BIG_ENDIAN:  # pragma: no cover - the format is little-endian
            block.byteswap()
        return lo + bisect.bisect_left(block[0::3], t0)

    def _load_sparse(self) -> array[int]:
        """Every SPARSE-th entry's time, read from the index in one go."""
        entries = self._all_entries()
        self._sparse = entries[0 :: 3 * SPARSE]
        self._sparse_count = self.count
        return self._sparse

    # -- the log ---------------------------------------------------------------------
    def read(self, position: int) -> Record:
        """The record at ``position`` (0 <= position < count), checked against its
        index entry and, if the segment has a ``.crc`` file, its checksum
        (CorruptFileError naming the file and offset if not)."""
        cached = self.cached
        if cached is not None and position + 1 < self.cached_count:
            # Offsets from memory: one read.  The record must fill exactly the
            # gap to the next one and match its checksum, else the checked path
            # below says why not.
            offset = cached[position]
            end = cached[position + 1]
            if HEADER_SIZE <= offset < end <= self.log_size:
                raw = self.log.read_at(offset, end - offset)
                if len(raw) >= RECORD_HEADER_SIZE:
                    size, flags, rec_time = _unpack_header(raw, 0)
                    crcs = self.cached_crc
                    if RECORD_HEADER_SIZE + size == len(raw) == end - offset and (
                        crcs is None or crcs[position] == _crc32(raw)
                    ):
                        return _new_record(Record, (self.base + position, rec_time, flags, raw[RECORD_HEADER_SIZE:]))
        mem_idx = self.mem_idx
        if mem_idx is not None and position + 1 < self.count:
            # The writer's active segment: this entry and the next from memory.
            time_ns, index, offset, _, _, end = _TWO_ENTRIES.unpack_from(mem_idx, HEADER_SIZE + ENTRY_SIZE * position)
            if index != self.base + position or not HEADER_SIZE <= offset < end <= self.log_size:
                return self._read_checked(position)
        else:
            time_ns, index, offset, end = self.entry(position)
        raw = self.log.read_at(offset, end - offset)
        if len(raw) >= RECORD_HEADER_SIZE:
            size, flags, rec_time = _unpack_header(raw, 0)
            if RECORD_HEADER_SIZE + size == len(raw) == end - offset and rec_time == time_ns:
                mem = self.mem_crc
                at = HEADER_SIZE + CRC_SIZE * position
                want = _CRC.unpack_from(mem, at)[0] if mem is not None and at < len(mem) else self.crc_at(position)
                if want is None or want == _crc32(raw):
                    return _new_record(Record, (index, time_ns, flags, raw[RECORD_HEADER_SIZE:]))
        return self._read_checked(position)

    def _read_checked(self, position: int) -> Record:
        """:meth:`read` when the record does not simply agree with its entries and
        checksum: what it is, or a CorruptFileError naming the file at fault."""
        time_ns, index, offset, end = self.entry(position)
        raw = self.log.read_at(offset, end - offset)
        if len(raw) < RECORD_HEADER_SIZE:
            raise CorruptFileError(self.log_path, offset, f"record {index}", "end of file")
        size, flags, rec_time = RECORD_HEADER.unpack_from(raw, 0)
        if RECORD_HEADER_SIZE + size != len(raw) and offset + RECORD_HEADER_SIZE + size <= self.log_size:
            # The next entry disagrees with this record's size (verify() reports
            # that); this record's own entry and header decide what it is.
            end = offset + RECORD_HEADER_SIZE + size
            raw = self.log.read_at(offset, end - offset)
        want = self.crc_at(position)
        whole = RECORD_HEADER_SIZE + size == end - offset and len(raw) == end - offset
        if want is not None and whole and zlib.crc32(raw) == want:
            if rec_time != time_ns:
                # The record verifies: its index entry is what is wrong.
                raise CorruptFileError(self.idx_path, entry_offset(position),
                                       f"entry for record {index} with its time {rec_time}", f"time {time_ns}")
            return Record(index, time_ns, flags, raw[RECORD_HEADER_SIZE:])
        if rec_time != time_ns or not whole:
            raise CorruptFileError(
                self.log_path,
                offset,
                f"record {index} of {end - offset - RECORD_HEADER_SIZE} bytes at time {time_ns} (from the index)",
                f"size {size}, time {rec_time}, {len(raw)} bytes readable",
            )
        if want is not None:
            raise self._bad_crc(position, offset)
        return Record(index, time_ns, flags, raw[RECORD_HEADER_SIZE:])

    def _disagreement(
        self, position: int, offset: int, time_ns: int, rec_time: int, rec_end: int, next_offset: int, verified: bool
    ) -> None:
        """Raise for record ``position`` (at ``offset``) whose header disagrees with
        its entry (time) or with the next entry's offset, naming the file at
        fault: a record that matches its checksum is right, so its entry (or the
        next one) is what is damaged; otherwise the log is."""
        index = self.base + position
        if self.crc is not None and not verified:
            self.read(position)  # raises for the record (or its entry) if it is at fault
            verified = True
        if verified and rec_time != time_ns:
            raise CorruptFileError(self.idx_path, entry_offset(position),
                                   f"entry for record {index} with its time {rec_time}", f"time {time_ns}")
        if verified and position + 1 < self.count:
            raise CorruptFileError(self.idx_path, entry_offset(position + 1),
                                   f"entry for record {index + 1} at offset {rec_end}", f"offset {next_offset}")
        raise CorruptFileError(
            self.log_path, offset, f"record {index} at time {time_ns} ending at {next_offset}",
            f"time {rec_time}, ending at {rec_end}",
        )

    def iter_range(self, start: int, stop: int) -> Iterator[Record]:
        """Records at positions ``start <= p < stop``, read in large chunks, each
        header checked against its index entry and, if the segment has a ``.crc``
        file, each record against its checksum (CorruptFileError if not)."""
        position = start
        while position < stop:
            # Entries for this chunk: find how many records fit in SCAN_CHUNK bytes.
            n = min(stop - position, max(1, SCAN_CHUNK // 128))
            raw_idx = self._idx_bytes(position, n * ENTRY_SIZE)
            if len(raw_idx) < n * ENTRY_SIZE:
                raise CorruptFileError(self.idx_path, entry_offset(position), f"{n} index entries", "end of file")
            entries = list(INDEX_ENTRY.iter_unpack(raw_idx))
            first_off = entries[0][2]
            last_end = self.entry(position + n - 1)[3]
            if not HEADER_SIZE <= first_off < last_end <= self.log_size:
                # Index entries are not checksummed: bound them by the log before
                # reading, so garbage there is a typed error, never a huge read.
                raise CorruptFileError(
                    self.idx_path, entry_offset(position),
                    f"entries with increasing offsets within the log's {self.log_size} bytes",
                    f"offsets {first_off}..{last_end}",
                )
            chunk = self.log.read_at(first_off, last_end - first_off)
            crcs: array[int] | None = None
            if self.crc is not None:
                raw_crc = self.crc.read_at(crc_offset(position), n * CRC_SIZE)
                if len(raw_crc) < n * CRC_SIZE:
                    raise CorruptFileError(self.crc_path, crc_offset(position), f"{n} checksums", "end of file")
                crcs = array("I")
                crcs.frombytes(raw_crc)
                if _BIG_ENDIAN:  # pragma: no cover - the format is little-endian
                    crcs.byteswap()
            view = memoryview(chunk)
            for k, (time_ns, index, offset) in enumerate(entries):
                rel = offset - first_off
                if index != self.base + position + k or rel < 0 or rel + RECORD_HEADER_SIZE > len(chunk):
                    raise CorruptFileError(
                        self.idx_path, entry_offset(position + k), f"entry for record {self.base + position + k}",
                        f"index {index}, offset {offset}",
                    )
                size, flags, rec_time = RECORD_HEADER.unpack_from(chunk, rel)
                data_end = rel + RECORD_HEADER_SIZE + size
                next_rel = entries[k + 1][2] - first_off if k + 1 < len(entries) else len(chunk)
                if rec_time != time_ns or data_end != next_rel:
                    self._disagreement(position + k, offset, time_ns, rec_time, first_off + data_end,
                                       first_off + next_rel, crcs is not None and data_end <= len(chunk)
                                       and crcs[k] == zlib.crc32(view[rel:data_end]))
                if crcs is not None and crcs[k] != zlib.crc32(view[rel:data_end]):
                    raise self._bad_crc(position + k, offset)
                yield Record(index, time_ns, flags, chunk[rel + RECORD_HEADER_SIZE : data_end])
            position += n
