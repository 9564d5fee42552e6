"""Bytes in, bytes out: the journald version 2 file format.

Pure functions only (no I/O, no clock, no threads): :mod:`engine.streams.reader`
and :mod:`engine.streams.journal` read and write the file and hand bytes here.
Every layout is written beside its ``struct`` format.  Integers are 4 bytes,
**MSB first**; check codes are CRC-64 (see :func:`crc64`) stored as 8
**little-endian** bytes (the original journald server copied the host integer; see FORMATS.md).

File::

    page 0      file header (32 bytes) + NUL padding to the page end
    page 1..    transactions; the first transaction starts at page 1
    transaction = record+ , a 0 type word, NUL padding to the page end
    record      = type|flags, global record number, stream number,
                  per-stream record number, data length, data, check code

A transaction whose first type word is 0 (a zero page) is the end of the journal.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import crcmod

from engine.errors import CorruptFileError, FormatError
from engine.native import kernel

MAGIC = b"journald"
VERSION = 2

# File header, 24 bytes + 8-byte check code = 32 bytes, at offset 0:
#   8s magic "journald" | u32 version (2) | u32 page size | u32 first global
#   record number | u32 option length (always 0)           -- all MSB first
FILE_HEADER = struct.Struct(">8sIIII")
assert FILE_HEADER.size == 24

# Check code: CRC-64 value as 8 bytes, least significant byte first.
CHECK = struct.Struct("<Q")
assert CHECK.size == 8
CHECK_SIZE = CHECK.size
FILE_HEADER_SIZE = FILE_HEADER.size + CHECK_SIZE
assert FILE_HEADER_SIZE == 32

# Record header, 20 bytes, then ``length`` data bytes, then the check code over
# header + data:
#   u32 type|flags | u32 global record number | u32 stream number |
#   u32 per-stream record number | u32 data length          -- all MSB first
RECORD_HEADER = struct.Struct(">IIIII")
assert RECORD_HEADER.size == 20
RECORD_HEADER_SIZE = RECORD_HEADER.size
#: Bytes a record takes besides its data.
RECORD_OVERHEAD = RECORD_HEADER_SIZE + CHECK_SIZE
assert RECORD_OVERHEAD == 28

# One type word, used to peek for the end of a transaction.
WORD = struct.Struct(">I")
assert WORD.size == 4

# INFO record data: u32 bytes of the stream already journaled (MSB first), then
# the identifier (the rest of the data; no length prefix).
INFO_OFFSET = struct.Struct(">I")
assert INFO_OFFSET.size == 4

TYPE_MASK = 0x0F
EOT = 0x00  # a type word of 0 ends a transaction (never a record of its own)
INFO = 0x01
DATA = 0x02
EOS = 0x04
ABORT = 0x08

#: All 32-bit counters (global record numbers, stream offsets) wrap modulo 2**32.
U32_MASK = 0xFFFFFFFF

#: The smallest page size we write or accept (the header must fit in page 0).
MIN_PAGE_SIZE = 64
#: A journal file holds at least this many pages (header, one transaction, the
#: zero page after it, and room to wrap), as the original journald server requires.
MIN_PAGES = 4

# CRC-64/GO-ISO: polynomial x^64 + x^4 + x^3 + x + 1, reflected, initial value all
# ones, final complement.  crcmod computes the reference (pinned by a test):
# ``crc64_reference(data, crc=0)``, any bytes-like ``data``, ``crc`` chaining.
crc64_reference = crcmod.mkCrcFun(0x1000000000000001B, rev=True, initCrc=0, xorOut=0xFFFFFFFFFFFFFFFF)
assert crc64_reference(b"123456789") == 0xB90956C775A41001

#: The check code function every record goes through: the compiled twin
#: (``engine/streams/_native.c``, 15-30x crcmod, which works a byte at a time) when
#: it is built and ``ENGINE_PURE_PYTHON`` is not set, else crcmod; chosen once,
#: here.  Same arguments, results and errors (tests/streams/test_streams_native.py).
crc64 = kernel("streams.crc64") or crc64_reference
assert crc64(b"123456789") == 0xB90956C775A41001


def check_code(data: bytes | bytearray | memoryview) -> bytes:
    """The 8 stored bytes of the check code over ``data``."""
    return CHECK.pack(crc64(data))


@dataclass(frozen=True)
class FileHeader:
    """The decoded file header (page 0)."""

    version: int
    page_size: int
    first_global: int
    option_length: int


def encode_file_header(page_size: int, first_global: int) -> bytes:
    """The 32 header bytes (magic, version 2, page size, first record, no options)."""
    body = FILE_HEADER.pack(MAGIC, VERSION, page_size, first_global & U32_MASK, 0)
    return body + check_code(body)


# Writer mark (engine only; the original journald server writes NULs there and
# its reader never looks), 16 bytes right after the file header, at offset 32:
#   8s tag "engine/j" | 8-byte check code over the 32 header bytes + the tag
# It says "this lap was written by engine's writer", whose every open scrubs
# stale records numbered ahead of the end; the reader then treats an intact
# record ahead of the end as damage.  The original server rewrites page 0 whole
# at each start (no mark) and leaves stale records behind: without the mark the
# reader reads as the original does, to the first zero type word.
MARK_TAG = b"engine/j"
MARK_SIZE = len(MARK_TAG) + CHECK_SIZE
assert MARK_SIZE == 16
#: Bytes of page 0 to read for the header and the mark.
HEAD_SIZE = FILE_HEADER_SIZE + MARK_SIZE
assert HEAD_SIZE == 48 <= 64  # fits the smallest page (MIN_PAGE_SIZE)


def encode_mark(header: bytes) -> bytes:
    """The 16 mark bytes that follow the 32 ``header`` bytes."""
    return MARK_TAG + check_code(bytes(header[:FILE_HEADER_SIZE]) + MARK_TAG)


def has_mark(head: bytes) -> bool:
    """Whether page 0 (its first :data:`HEAD_SIZE` bytes) carries engine's mark.

    Any non-zero byte where the mark goes counts (a damaged mark must not turn
    damage detection off); only the original server's NULs do not.
    """
    area = head[FILE_HEADER_SIZE:HEAD_SIZE]
    return area.count(0) != len(area)


def encode_header_page(page_size: int, first_global: int) -> bytes:
    """Page 0: the header and engine's mark, padded with NULs to ``page_size`` bytes."""
    header = encode_file_header(page_size, first_global)
    head = header + encode_mark(header)
    return head + bytes(page_size - len(head))


def decode_file_header(data: bytes, path: str = "<journal>") -> FileHeader:
    """Decode and check page 0's header; typed errors name ``path`` and the offset.

    Order of checks: length, magic (foreign file), version, check code, then the
    fields the reader cannot handle (zero page size, options).
    """
    if len(data) < FILE_HEADER_SIZE:
        if data[: len(MAGIC)] != MAGIC[: len(data)]:
            raise FormatError(path, 0, "journald signature", found=data[:8].hex(" ") or "empty file")
        raise CorruptFileError(
            path, len(data), f"a {FILE_HEADER_SIZE}-byte journald header", found=f"{len(data)} bytes"
        )
    magic, version, page_size, first_global, option_length = FILE_HEADER.unpack_from(data, 0)
    if magic != MAGIC:
        raise FormatError(path, 0, "journald signature", found=repr(magic))
    if version != VERSION:
        raise FormatError(path, 8, f"journald version {VERSION}", found=f"version {version}")
    stored = data[FILE_HEADER.size : FILE_HEADER_SIZE]
    computed = check_code(data[: FILE_HEADER.size])
    if stored != computed:
        raise CorruptFileError(path, FILE_HEADER.size, f"header check code {computed.hex()}", found=stored.hex())
    if page_size == 0:
        raise FormatError(path, 12, "a non-zero page size", found="0")
    if page_size < MIN_PAGE_SIZE:
        raise FormatError(path, 12, f"a page size of at least {MIN_PAGE_SIZE}", found=str(page_size))
    if option_length != 0:
        raise FormatError(path, 20, "option length 0 (options are not supported)", found=str(option_length))
    return FileHeader(version, page_size, first_global, option_length)


@dataclass(frozen=True)
class RecordHeader:
    """The five words in front of a record's data."""

    type: int
    global_record: int
    stream: int
    record: int
    length: int


def encode_record(rtype: int, global_record: int, stream: int, record: int, data: bytes | bytearray = b"") -> bytes:
    """One whole record: header, data, check code over both."""
    head = RECORD_HEADER.pack(rtype, global_record & U32_MASK, stream & U32_MASK, record & U32_MASK, len(data))
    crc = crc64(data, crc64(head)) if data else crc64(head)
    return b"".join((head, data, CHECK.pack(crc)))


def append_record(
    out: bytearray, rtype: int, global_record: int, stream: int, record: int,
    data: bytes | bytearray | memoryview = b"",
) -> None:
    """Append one whole record to ``out`` (what :func:`encode_record` returns)."""
    head = RECORD_HEADER.pack(rtype, global_record & U32_MASK, stream & U32_MASK, record & U32_MASK, len(data))
    out += head
    out += data
    out += CHECK.pack(crc64(data, crc64(head)) if data else crc64(head))


def decode_record_header(data: bytes | bytearray | memoryview, offset: int = 0) -> RecordHeader:
    """The header at ``offset`` of ``data`` (which must hold 20 bytes there)."""
    return RecordHeader(*RECORD_HEADER.unpack_from(data, offset))


def record_check_ok(data: bytes | bytearray | memoryview, offset: int, length: int) -> bool:
    """Whether the record at ``offset`` (header + ``length`` data bytes + check) is intact."""
    end = offset + RECORD_HEADER_SIZE + length
    view = memoryview(data)
    return CHECK.pack(crc64(view[offset:end])) == bytes(view[end : end + CHECK_SIZE])


def encode_info(offset: int, ident: bytes) -> bytes:
    """INFO record data: the stream's journaled byte count, then the identifier."""
    return INFO_OFFSET.pack(offset & U32_MASK) + ident


def decode_info(data: bytes) -> tuple[int, bytes]:
    """(stream offset, identifier) from INFO record data (at least 4 bytes)."""
    if len(data) < INFO_OFFSET.size:
        raise ValueError("INFO data shorter than 4 bytes")
    return INFO_OFFSET.unpack_from(data, 0)[0], bytes(data[INFO_OFFSET.size :])


def page_ceil(position: int, page_size: int) -> int:
    """``position`` rounded up to a page boundary."""
    return -(-position // page_size) * page_size


def padding(length: int, page_size: int) -> bytes:
    """The NULs that pad ``length`` bytes of a transaction to the page end."""
    return bytes(page_ceil(length, page_size) - length)


def describe_type(rtype: int) -> str:
    """``INFO``, ``DATA|EOS``, ... for messages."""
    names = [name for bit, name in ((INFO, "INFO"), (DATA, "DATA"), (EOS, "EOS"), (ABORT, "ABORT")) if rtype & bit]
    flags = rtype & ~TYPE_MASK
    if flags:
        names.append(f"flags 0x{flags:x}")
    return "|".join(names) or "EOT"
