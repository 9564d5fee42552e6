"""Bytes in, bytes out: the LOG/IDX append-log format.

Pure functions only (no I/O, no clock).  The segment and reader modules read the
files and hand the bytes here.  Every layout is written beside its ``struct``.

A segment is a pair of files, ``<first index>.log`` and ``<first index>.idx``::

    log file = file header ("LOG") , { record }
    record   = u32 size , u32 flags , i64 time_ns , size bytes of data
    idx file = file header ("IDX") , { entry }
    entry    = i64 time_ns , u64 record index , i64 absolute offset of the record

All integers are little-endian.  Entry ``i`` of a segment whose first record has
index ``base`` sits at byte ``16 + 24 * i`` and names record ``base + i``.

An extension of the LOG/IDX format, not written by the original LOG/IDX writer:
``<first index>.crc`` beside each pair::

    crc file = file header ("CRC", i64 field reserved = 0) , { u32 crc32 }

entry ``i`` at ``16 + 4 * i`` is the CRC-32 of record ``base + i`` (header + data).
Segments without it (the original LOG/IDX writer's, or older engines') keep the
weaker rule below.

The LOG format carries no checksum, so the index is the cross-check: a record is
"committed" once its index entry agrees with it (same time, same offset).  Past the
last indexed record, a record header whose size is zero means "end of the log"
(the original left zero bytes behind after a crash; FORMATS.md).
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

from engine.errors import CorruptFileError, FormatError

# File header, 16 bytes, the same for all three files except the signature:
#   3 bytes signature ("LOG" / "IDX" / "CRC") | u8 version | u32 flags
#   | i64 TTL in ns (<= 0: never; reserved, written as 0, in a .crc file)
FILE_HEADER = struct.Struct("<3sBIq")
assert FILE_HEADER.size == 16
HEADER_SIZE = 16

LOG_MAGIC = b"LOG"
IDX_MAGIC = b"IDX"
#: An extension of the LOG/IDX format (not in the original LOG/IDX writer): the
#: per-segment checksum side file.  Its header
#: uses the same 16-byte layout; the i64 field is reserved (written as 0).
CRC_MAGIC = b"CRC"
VERSION = 1

# CRC entry, 4 bytes, dense: entry ``i`` at ``16 + 4 * i`` is
#   u32 CRC-32 (zlib.crc32, the IEEE polynomial) of record i's 16-byte header + data
CRC_ENTRY = struct.Struct("<I")
assert CRC_ENTRY.size == 4
CRC_SIZE = 4

# Record header, 16 bytes, followed by ``size`` bytes of data:
#   u32 size | u32 flags | i64 time in ns since the epoch
RECORD_HEADER = struct.Struct("<IIq")
assert RECORD_HEADER.size == 16
RECORD_HEADER_SIZE = 16

# Index entry, 24 bytes:
#   i64 time in ns | u64 record index (0-based, across the whole log) | i64 byte offset
#   of the record's header in the log file (the file header included)
INDEX_ENTRY = struct.Struct("<qQq")
assert INDEX_ENTRY.size == 24
ENTRY_SIZE = 24

#: The largest payload one record can carry (the size field is a u32).
MAX_RECORD_SIZE = 0xFFFFFFFF
#: Flags are a u32.
MAX_FLAGS = 0xFFFFFFFF
INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1


@dataclass(frozen=True)
class FileHeader:
    """The 16-byte header of a ``.log`` or ``.idx`` file."""

    magic: bytes
    version: int
    flags: int
    ttl_ns: int


class HeaderError(ValueError):
    """The header bytes are not the expected signature/version (no path: the
    caller adds it and raises :class:`~engine.errors.FormatError`)."""

    def __init__(self, expected: str, found: str) -> None:
        super().__init__(f"expected {expected}, found {found}")
        self.expected = expected
        self.found = found


def encode_header(magic: bytes, ttl_ns: int, flags: int = 0) -> bytes:
    """The 16-byte file header for ``magic`` (``LOG_MAGIC`` or ``IDX_MAGIC``)."""
    return FILE_HEADER.pack(magic, VERSION, flags, ttl_ns)


def decode_header(data: bytes, magic: bytes) -> FileHeader:
    """Parse a file header, checking the signature and version.

    Raises :class:`HeaderError` for a short header, a foreign signature or an
    unknown version.
    """
    if len(data) < HEADER_SIZE:
        raise HeaderError(f"a {HEADER_SIZE}-byte {magic.decode()} header", f"{len(data)} bytes")
    found_magic, version, flags, ttl = FILE_HEADER.unpack_from(data, 0)
    if found_magic != magic:
        raise HeaderError(f"signature {magic.decode()}", repr(bytes(found_magic)))
    if version != VERSION:
        raise HeaderError(f"version {VERSION}", str(version))
    return FileHeader(found_magic, version, flags, ttl)


def check_header(data: bytes, magic: bytes, path: str) -> FileHeader:
    """:func:`decode_header` for the file at ``path``, with the file and offset in
    the error: a short header is a CorruptFileError where the file ends (a
    truncated file); a foreign signature (offset 0) or version (offset 3) is a
    FormatError."""
    try:
        return decode_header(data, magic)
    except HeaderError as exc:
        if len(data) < HEADER_SIZE:
            raise CorruptFileError(path, len(data), exc.expected, f"{exc.found} (truncated file)") from None
        offset = 3 if exc.expected.startswith("version") else 0
        raise FormatError(path, offset, exc.expected, exc.found) from None


def encode_record(data: bytes, flags: int, time_ns: int) -> bytes:
    """One log record: header then data."""
    return RECORD_HEADER.pack(len(data), flags, time_ns) + data


def record_crc(header: bytes | bytearray | memoryview, data: bytes | bytearray | memoryview) -> int:
    """The CRC-32 of one record (its 16-byte header, then its data)."""
    return zlib.crc32(data, zlib.crc32(header))


def encode_crc(value: int) -> bytes:
    """One 4-byte ``.crc`` entry."""
    return CRC_ENTRY.pack(value)


def crc_offset(position: int) -> int:
    """Byte offset of the ``position``-th ``.crc`` entry (0-based, within the segment)."""
    return HEADER_SIZE + CRC_SIZE * position


def crc_count(crc_size: int) -> int:
    """How many whole entries a ``.crc`` file of ``crc_size`` bytes holds."""
    if crc_size <= HEADER_SIZE:
        return 0
    return (crc_size - HEADER_SIZE) // CRC_SIZE


def crc_matches(
    log: bytes | bytearray | memoryview, rec: RecordHeader, crc: bytes | bytearray | memoryview, position: int
) -> bool:
    """Whether the ``.crc`` file ``crc`` (header included) holds entry ``position``
    and it is the checksum of the whole record ``rec`` of ``log``."""
    if crc_offset(position) + CRC_SIZE > len(crc):
        return False
    want: int = CRC_ENTRY.unpack_from(crc, crc_offset(position))[0]
    mv = memoryview(log)
    body = rec.offset + RECORD_HEADER_SIZE
    return record_crc(mv[rec.offset : body], mv[body : rec.end]) == want


def crc_failures(log: bytes, crcs: bytes, count: int) -> list[int]:
    """The positions of the records, among the first ``count`` back-to-back
    records at the start of ``log``, whose CRC-32 (header + data, as
    :func:`record_crc`) differs from their entry in ``crcs`` (u32 little-endian,
    entry ``i`` at byte ``4 * i``: a run of a ``.crc`` file, no file header).

    The batch form of :func:`record_crc` for readers that check a whole run of
    records at once (the Spark source); ``engine/applog/_native.c`` holds its
    compiled twin.  Records are walked by their own size fields, each bounded by
    ``log`` before it is read.  ``TypeError`` unless ``log`` and ``crcs`` are
    ``bytes`` and ``count`` an ``int``; ``ValueError`` for a negative ``count``,
    fewer than ``count`` entries in ``crcs``, or a record running past the end
    of ``log``.
    """
    if type(log) is not bytes or type(crcs) is not bytes:
        raise TypeError("crc_failures: log and crcs must be bytes")
    if type(count) is not int:
        raise TypeError("crc_failures: count must be an int")
    if count < 0:
        raise ValueError("crc_failures: count must be >= 0")
    if len(crcs) // CRC_SIZE < count:
        raise ValueError(f"crc_failures: {len(crcs) // CRC_SIZE} checksums, fewer than count")
    mv, want = memoryview(log), memoryview(crcs)
    end_of_log = len(log)
    failing: list[int] = []
    pos = 0
    for i in range(count):
        if pos + RECORD_HEADER_SIZE > end_of_log:
            raise ValueError(f"crc_failures: record {i} at byte {pos}: its header runs past the end "
                             f"({end_of_log} bytes)")
        end = pos + RECORD_HEADER_SIZE + int.from_bytes(mv[pos : pos + 4], "little")
        if end > end_of_log:
            raise ValueError(f"crc_failures: record {i} at byte {pos}: its data runs past the end "
                             f"({end_of_log} bytes)")
        if zlib.crc32(mv[pos:end]) != int.from_bytes(want[CRC_SIZE * i : CRC_SIZE * i + CRC_SIZE], "little"):
            failing.append(i)
        pos = end
    return failing


def encode_entry(time_ns: int, index: int, offset: int) -> bytes:
    """One 24-byte index entry."""
    return INDEX_ENTRY.pack(time_ns, index, offset)


def entry_offset(position: int) -> int:
    """Byte offset of the ``position``-th entry (0-based, within the segment)."""
    return HEADER_SIZE + ENTRY_SIZE * position


def entry_count(idx_size: int) -> int:
    """How many whole entries an index file of ``idx_size`` bytes holds."""
    if idx_size <= HEADER_SIZE:
        return 0
    return (idx_size - HEADER_SIZE) // ENTRY_SIZE


@dataclass(frozen=True)
class RecordHeader:
    """A parsed record header at ``offset``; ``end`` is where the next record starts."""

    offset: int
    size: int
    flags: int
    time_ns: int

    @property
    def end(self) -> int:
        return self.offset + RECORD_HEADER_SIZE + self.size


def parse_record(buf: bytes | bytearray | memoryview, offset: int) -> RecordHeader | None:
    """The record header at ``offset`` of ``buf`` if the whole record (header and
    data) lies inside ``buf``; ``None`` if the bytes end first (a torn or
    still-being-written tail)."""
    if offset + RECORD_HEADER_SIZE > len(buf):
        return None
    size, flags, time_ns = RECORD_HEADER.unpack_from(buf, offset)
    if offset + RECORD_HEADER_SIZE + size > len(buf):
        return None
    return RecordHeader(offset, size, flags, time_ns)


def decode_entry(buf: bytes | bytearray | memoryview, position: int) -> tuple[int, int, int]:
    """``(time_ns, index, offset)`` of entry ``position`` of a whole index file."""
    result: tuple[int, int, int] = INDEX_ENTRY.unpack_from(buf, entry_offset(position))
    return result


def bisect_time(buf: bytes | bytearray | memoryview, count: int, t0: int) -> int:
    """The position of the first of ``count`` entries whose time is >= ``t0``
    (``count`` if none is): a binary search, valid because times never go down."""
    lo, hi = 0, count
    unpack = struct.Struct("<q").unpack_from
    while lo < hi:
        mid = (lo + hi) // 2
        if unpack(buf, HEADER_SIZE + ENTRY_SIZE * mid)[0] < t0:
            lo = mid + 1
        else:
            hi = mid
    return lo


def segment_name(first_index: int, suffix: str) -> str:
    """Kafka-style name: the first index zero-padded to 20 digits, then ``suffix``."""
    return f"{first_index:020d}{suffix}"


def parse_segment_name(name: str) -> tuple[int, str] | None:
    """``(first_index, ".log" | ".idx" | ".crc")`` for a segment file name, else ``None``."""
    for suffix in (".log", ".idx", ".crc"):
        if name.endswith(suffix):
            stem = name[: -len(suffix)]
            if len(stem) == 20 and stem.isdigit():
                return int(stem), suffix
    return None
