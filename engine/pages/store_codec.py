"""Bytes in, bytes out: the ENGPAGES page store file (engine's own format;
``docs/formats/pagestore.md``) and its ENGSUMS page checksums.

Pure functions only (no I/O).  The store file is an array of equal pages::

    file      := page_0 page_1 ... page_N              (each page_size bytes)
    page_0    := header zero-padding                    (the header page, never allocated)
    header    := "ENGPAGES" u16 version u16 reserved u32 page_size
                 u64 page_count u64 free_head u32 flags u32 crc32   (40 bytes, little-endian)
    free page := u64 next_free_offset  (rest of the page: whatever it held)

Pages are addressed by byte offset (``page_id * page_size``), which is what the JRNL
journal records; page ids run from 1 to ``page_count`` so that offset 0 can mean
"none" in the free list, as it does in the journal.  The header is smaller than a
512-byte sector and written with one write at offset 0, so a crash leaves the old
or the new header; its CRC catches anything else.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass

from engine.pages import crc32c

MAGIC = b"ENGPAGES"
VERSION = 1
MIN_PAGE_SIZE = 512
MAX_PAGE_SIZE = 65536

# Header (40 bytes): magic "ENGPAGES" | u16 version | u16 reserved (0) | u32 page size |
#   u64 page count (data pages; ids 1..count) | u64 free-list head (byte offset, 0 = empty) |
#   u32 flags (bit 0 FLUSHING, bit 1 JOURNAL_LIVE) | u32 CRC-32 (zlib) of the 36 bytes before it.
HEADER = struct.Struct("<8sHHIQQI")
assert HEADER.size == 36
CRC = struct.Struct("<I")
assert CRC.size == 4
HEADER_SIZE = HEADER.size + CRC.size
assert HEADER_SIZE == 40

#: Header flag: the writer is writing pages into the store (like YeltsinDB's
#: ``TBL?`` while an operation was in flight).  Set before the page writes and cleared
#: after them, both under the writer's exclusive lock, so a reader that ever finds it
#: set is looking at a flush a crash interrupted: the journal must be replayed first.
FLUSHING = 0x1
#: Header flag: the store's latest commits may be only in its JRNL journal.  A
#: writer sets it (synced) when it opens the store, before its first commit, and
#: clears it only at a clean close, with the checkpoint that applied every commit.
#: A store file with it set and no journal beside it has lost commits: it must not
#: open as if nothing were missing.  Files written before the flag existed have it
#: clear and open as before.
JOURNAL_LIVE = 0x2

# Free page link: u64 byte offset of the next free page (0 = end of the list).
LINK = struct.Struct("<Q")
assert LINK.size == 8


@dataclass(frozen=True)
class StoreHeader:
    page_size: int
    page_count: int
    free_head: int
    version: int = VERSION
    flags: int = 0


def valid_page_size(page_size: int) -> bool:
    """Powers of two from 512 to 65,536 (the journal's u16 offsets cap it there)."""
    return MIN_PAGE_SIZE <= page_size <= MAX_PAGE_SIZE and page_size & (page_size - 1) == 0


def encode_header(header: StoreHeader) -> bytes:
    body = HEADER.pack(MAGIC, header.version, 0, header.page_size, header.page_count, header.free_head, header.flags)
    return body + CRC.pack(zlib.crc32(body))


def decode_header(data: bytes) -> StoreHeader:
    """Decode and check the header; raises ValueError(reason) (callers add path/offset).

    A foreign magic raises :class:`ForeignMagic` so the caller can raise FormatError.
    """
    if len(data) < HEADER_SIZE:
        raise ValueError(f"{HEADER_SIZE}-byte header, {len(data)} bytes")
    magic, version, _reserved, page_size, count, head, flags = HEADER.unpack_from(data, 0)
    if magic != MAGIC:
        raise ForeignMagic(f"magic {MAGIC!r}, {bytes(magic)!r}")
    (stored,) = CRC.unpack_from(data, HEADER.size)
    if zlib.crc32(bytes(data[: HEADER.size])) != stored:
        raise ValueError("header CRC to match")
    if version != VERSION:
        raise ForeignMagic(f"version {VERSION}, {version}")
    if not valid_page_size(page_size):
        raise ValueError(f"a page size that is a power of two in 512..65536, {page_size}")
    if head and (head % page_size or not 1 <= head // page_size <= count):
        raise ValueError(f"a free-list head inside pages 1..{count}, offset {head}")
    return StoreHeader(page_size, count, head, version, flags)


class ForeignMagic(ValueError):
    """Not a page store file (or a version this code does not read)."""


def encode_link(next_offset: int) -> bytes:
    return LINK.pack(next_offset)


def decode_link(page: bytes | bytearray) -> int:
    return int(LINK.unpack_from(page, 0)[0])


# ---------------------------------------------------------------------------
# The checksum file (engine's own): ``<store>-sums``, one CRC per page.
# ---------------------------------------------------------------------------

#: Checksum file magics: the entries are zlib CRC-32s ("ENGSUMS1", earlier
#: versions, still read and kept as they are) or CRC-32Cs ("ENGSUMS2", what every
#: new or rebuilt file gets, whatever computes the CRC: :mod:`engine.pages.crc32c`).
SUMS_MAGIC = b"ENGSUMS1"
SUMS_MAGIC_32C = b"ENGSUMS2"
SUMS_MAGIC_PREFIX = b"ENGSUMS"
# Sums header (16 bytes): magic "ENGSUMS1"/"ENGSUMS2" | u32 page size | u32 zlib CRC-32 of the 12 bytes before it.
SUMS_HEADER = struct.Struct("<8sI")
assert SUMS_HEADER.size == 12
SUMS_HEADER_SIZE = SUMS_HEADER.size + CRC.size
assert SUMS_HEADER_SIZE == 16
# Entry for page k (k >= 1) at 16 + 4 * (k - 1): u32 CRC-32 (zlib; CRC-32C for ENGSUMS2) of the page's bytes.
SUM = struct.Struct("<I")
assert SUM.size == 4


def encode_sums_header(page_size: int, crc32c: bool = False) -> bytes:
    body = SUMS_HEADER.pack(SUMS_MAGIC_32C if crc32c else SUMS_MAGIC, page_size)
    return body + CRC.pack(zlib.crc32(body))


def decode_sums_header(data: bytes) -> tuple[int, bool]:
    """(page size, entries are CRC-32C) of a sums file; ValueError(reason) if it is not one."""
    if len(data) < SUMS_HEADER_SIZE:
        raise ValueError(f"a {SUMS_HEADER_SIZE}-byte checksum header, {len(data)} bytes")
    magic, page_size = SUMS_HEADER.unpack_from(data, 0)
    (stored,) = CRC.unpack_from(data, SUMS_HEADER.size)
    if magic not in (SUMS_MAGIC, SUMS_MAGIC_32C) or zlib.crc32(bytes(data[: SUMS_HEADER.size])) != stored:
        raise ValueError(f"checksum file magic {SUMS_MAGIC!r} and header CRC, {bytes(data[:8])!r}")
    return int(page_size), magic == SUMS_MAGIC_32C


def sum_offset(page: int) -> int:
    """Where page ``page``'s checksum sits in the sums file."""
    return SUMS_HEADER_SIZE + SUM.size * (page - 1)


def page_sum(data: bytes | bytearray | memoryview) -> int:
    """A page's entry in an ENGSUMS1 file (zlib CRC-32)."""
    return zlib.crc32(data)


#: A page's entry in an ENGSUMS2 file (CRC-32C): the CRC function itself, no
#: wrapper (a bulk commit's flush sums hundreds of pages, a frame each).
page_sum_32c: Callable[[bytes | bytearray | memoryview], int] = crc32c.value


PageSum = Callable[[bytes | bytearray | memoryview], int]
_CRC32C: PageSum = crc32c.value


def sum_function(crc32c: bool) -> PageSum:
    """The entry function of a sums file: CRC-32C (ENGSUMS2) or zlib CRC-32 (ENGSUMS1).
    The CRC functions :func:`page_sum_32c` and :func:`page_sum` call, themselves:
    one Python frame less for every page checked."""
    return _CRC32C if crc32c else zlib.crc32
