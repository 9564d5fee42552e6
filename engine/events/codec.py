"""Byte layouts of the file journal (akka-persistence-file-journal): pure bytes in, bytes out.

Two files, both big-endian:

* ``meta`` – an 8-byte header (magic ``APFM`` or ``AKFM``, i32 total size of the
  blocks after the header) followed by one variable-size block per persistence id;
* ``data`` – an 8-byte header (magic ``AKFD``, i32 total length of the blocks after
  the header) followed by the event blocks of every id, interleaved, each id's
  blocks forming a doubly linked list by absolute file offsets (0 = none).

This module knows nothing about files: decoders take the bytes and, for their
error messages, the path and the absolute offset the bytes came from.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any, NamedTuple

from engine.errors import CorruptFileError, FormatError

# -- meta file -----------------------------------------------------------------------
#: The seed's magic (written by us for new journals).
META_MAGIC = b"APFM"
#: The magic the original akka-persistence-file-journal Scala code wrote; read as an equal alternative.
META_MAGIC_ORIGINAL = b"AKFM"
META_MAGICS = (META_MAGIC, META_MAGIC_ORIGINAL)

# Meta header: magic[4] | i32 size of all meta blocks (header excluded)
META_HEADER = struct.Struct(">4si")
assert META_HEADER.size == 8
META_HEADER_SIZE = META_HEADER.size
#: Offset of the meta header's size field (rewritten when an id is added).
META_SIZE_FIELD = 4

# Meta block, fixed part:
#   i16 block size (26 + id bytes) | i64 first block offset | i64 last block offset
#   | i64 highest sequence number | then the persistence id in UTF-8 (length implied)
META_BLOCK_FIXED = struct.Struct(">hqqq")
assert META_BLOCK_FIXED.size == 26
META_BLOCK_FIXED_SIZE = META_BLOCK_FIXED.size
# The three mutable fields (first, last, highest) start 2 bytes into the block.
META_FIELDS = struct.Struct(">qqq")
assert META_FIELDS.size == 24
META_FIELDS_OFFSET = 2
#: The i16 block size caps the UTF-8 id at this many bytes.
MAX_ID_BYTES = 0x7FFF - META_BLOCK_FIXED_SIZE

# -- data file -----------------------------------------------------------------------
DATA_MAGIC = b"AKFD"
# Data header: magic[4] | i32 total length of the blocks (header excluded)
DATA_HEADER = struct.Struct(">4si")
assert DATA_HEADER.size == 8
DATA_HEADER_SIZE = DATA_HEADER.size
#: Offset of the data header's length field.
DATA_LENGTH_FIELD = 4

# Data block header:
#   i32 block size (24 + payload) | i32 own offset | i32 previous | i32 next
#   | i64 sequence number | then the payload (size - 24 bytes)
BLOCK_HEADER = struct.Struct(">iiiiq")
assert BLOCK_HEADER.size == 24
BLOCK_HEADER_SIZE = BLOCK_HEADER.size
#: Offset of the ``next`` field inside a block (patched when the id grows).
BLOCK_NEXT_FIELD = 12
I32 = struct.Struct(">i")
assert I32.size == 4

#: i32 offsets: no block may start or end past this (2 GiB - 1).
MAX_DATA_SIZE = 0x7FFFFFFF
I64_MAX = 0x7FFFFFFFFFFFFFFF


@dataclass(frozen=True)
class MetaBlock:
    """One persistence id's entry in the meta file.

    ``first``/``last`` are absolute data-file offsets of the first live and the
    last written block (0 = none); ``highest`` is the highest sequence number ever
    written, which deletion never lowers.  ``offset`` is where the block sits in
    the meta file (filled in by :func:`decode_meta_blocks`).
    """

    persistence_id: str
    first: int
    last: int
    highest: int
    offset: int = 0

    @property
    def size(self) -> int:
        return META_BLOCK_FIXED_SIZE + len(self.persistence_id.encode("utf-8"))


@dataclass(frozen=True)
class BlockHeader:
    """The 24-byte header of one data block (payload not included)."""

    size: int
    offset: int
    previous: int
    next: int
    sequence_nr: int

    @property
    def end(self) -> int:
        return self.offset + self.size

    @property
    def payload_size(self) -> int:
        return self.size - BLOCK_HEADER_SIZE


# -- meta encoding -------------------------------------------------------------------
def encode_meta_header(blocks_size: int, magic: bytes = META_MAGIC) -> bytes:
    """The 8-byte meta header."""
    return META_HEADER.pack(magic, blocks_size)


def decode_meta_header(head: bytes, path: str) -> tuple[bytes, int]:
    """(magic, size of the blocks) from the first 8 bytes of a meta file."""
    if len(head) < META_HEADER_SIZE:
        if head and not META_MAGIC.startswith(head[:4]) and not META_MAGIC_ORIGINAL.startswith(head[:4]):
            raise FormatError(path, 0, "meta magic APFM or AKFM", repr(head[:4]))
        raise CorruptFileError(path, len(head), "an 8-byte meta header", f"{len(head)} bytes (file truncated)")
    magic, size = META_HEADER.unpack_from(head, 0)
    if magic not in META_MAGICS:
        raise FormatError(path, 0, "meta magic APFM or AKFM", repr(magic))
    if size < 0:
        raise CorruptFileError(path, META_SIZE_FIELD, "a non-negative meta size", str(size))
    return magic, size


def encode_id(persistence_id: str) -> bytes:
    """The UTF-8 id, refused if the i16 block size cannot hold it."""
    raw = persistence_id.encode("utf-8")
    if not raw:
        raise ValueError("a persistence id must not be empty")
    if len(raw) > MAX_ID_BYTES:
        raise ValueError(f"persistence id is {len(raw)} UTF-8 bytes; the format allows {MAX_ID_BYTES}")
    return raw


def encode_meta_block(block: MetaBlock) -> bytes:
    """One meta block: fixed 26 bytes then the id."""
    raw = encode_id(block.persistence_id)
    return META_BLOCK_FIXED.pack(META_BLOCK_FIXED_SIZE + len(raw), block.first, block.last, block.highest) + raw


def encode_meta_fields(first: int, last: int, highest: int) -> bytes:
    """The 24 mutable bytes of a meta block (written at block offset + 2)."""
    return META_FIELDS.pack(first, last, highest)


def encode_meta(blocks: list[MetaBlock], magic: bytes = META_MAGIC) -> bytes:
    """A whole meta file."""
    body = b"".join(encode_meta_block(b) for b in blocks)
    return encode_meta_header(len(body), magic) + body


def decode_meta_blocks(body: bytes, path: str, base: int = META_HEADER_SIZE) -> list[MetaBlock]:
    """Parse the blocks region (exactly the header's size); ``base`` = its file offset."""
    blocks: list[MetaBlock] = []
    pos = 0
    seen: set[str] = set()
    while pos < len(body):
        at = base + pos
        if len(body) - pos < META_BLOCK_FIXED_SIZE:
            raise CorruptFileError(path, at, "a 26-byte meta block header", f"{len(body) - pos} bytes left")
        size, first, last, highest = META_BLOCK_FIXED.unpack_from(body, pos)
        if size <= META_BLOCK_FIXED_SIZE:
            raise CorruptFileError(path, at, "a meta block size > 26", str(size))
        if pos + size > len(body):
            raise CorruptFileError(path, at, f"a meta block of {size} bytes", f"{len(body) - pos} bytes left")
        try:
            pid = body[pos + META_BLOCK_FIXED_SIZE : pos + size].decode("utf-8")
        except UnicodeDecodeError as exc:
            raise CorruptFileError(path, at + META_BLOCK_FIXED_SIZE, "a UTF-8 persistence id", str(exc)) from None
        if pid in seen:
            raise CorruptFileError(path, at, "each persistence id once", f"{pid!r} again")
        if first < 0 or last < 0 or highest < 0:
            raise CorruptFileError(path, at + 2, "non-negative offsets and sequence number",
                                   f"first={first} last={last} highest={highest}")
        seen.add(pid)
        blocks.append(MetaBlock(pid, first, last, highest, at))
        pos += size
    return blocks


# -- data encoding -------------------------------------------------------------------
def encode_data_header(blocks_length: int) -> bytes:
    """The 8-byte data header."""
    return DATA_HEADER.pack(DATA_MAGIC, blocks_length)


def decode_data_header(head: bytes, path: str) -> int:
    """The blocks length from the first 8 bytes of a data file."""
    if len(head) < DATA_HEADER_SIZE:
        if head and not DATA_MAGIC.startswith(head[:4]):
            raise FormatError(path, 0, "data magic AKFD", repr(head[:4]))
        raise CorruptFileError(path, len(head), "an 8-byte data header", f"{len(head)} bytes (file truncated)")
    magic, length = DATA_HEADER.unpack_from(head, 0)
    if magic != DATA_MAGIC:
        raise FormatError(path, 0, "data magic AKFD", repr(magic))
    if length < 0:
        raise CorruptFileError(path, DATA_LENGTH_FIELD, "a non-negative data length", str(length))
    return int(length)


def encode_block(offset: int, previous: int, next_: int, sequence_nr: int, payload: bytes) -> bytes:
    """One data block."""
    return BLOCK_HEADER.pack(BLOCK_HEADER_SIZE + len(payload), offset, previous, next_, sequence_nr) + payload


def encode_batch(start: int, previous: int, first_seq: int, payloads: list[bytes]) -> tuple[bytes, list[int]]:
    """Blocks for consecutive sequence numbers laid end to end from offset ``start``.

    Block i links back to block i-1 (the first one to ``previous``) and forward to
    block i+1; the last one's ``next`` is 0.  Returns the bytes and the offsets.
    """
    # One pass, no per-block objects beyond the packed header (this is on every
    # write's path; a batch of 100 costs about as much CPU as a tenth of a sync).
    offsets: list[int] = []
    parts: list[bytes] = []
    add_offset, add_part = offsets.append, parts.append
    pack = BLOCK_HEADER.pack
    last_index = len(payloads) - 1
    pos, prev, seq = start, previous, first_seq
    for i, payload in enumerate(payloads):
        size = BLOCK_HEADER_SIZE + len(payload)
        add_offset(pos)
        add_part(pack(size, pos, prev, pos + size if i < last_index else 0, seq))
        add_part(payload)
        prev = pos
        pos += size
        seq += 1
    return b"".join(parts), offsets


def decode_block_header(buf: bytes, at: int, offset: int, path: str) -> BlockHeader:
    """The header of the block expected at file ``offset`` (``buf[at:]`` holds it).

    Checks what the header alone can tell: enough bytes, size >= 24, and the
    own-offset field equal to where the block was found (a link pointing into the
    middle of something else is caught here).
    """
    if len(buf) - at < BLOCK_HEADER_SIZE:
        found = f"{max(0, len(buf) - at)} bytes (truncated)"
        raise CorruptFileError(path, offset, "a 24-byte data block header", found)
    size, own, previous, next_, seq = BLOCK_HEADER.unpack_from(buf, at)
    if own != offset:
        raise CorruptFileError(path, offset, f"a block whose own-offset field is {offset}", str(own))
    if size < BLOCK_HEADER_SIZE:
        raise CorruptFileError(path, offset, "a block size >= 24", str(size))
    if previous < 0 or next_ < 0:
        raise CorruptFileError(path, offset, "non-negative links", f"previous={previous} next={next_}")
    return BlockHeader(size, own, previous, next_, seq)


def sector_crossing(offset: int, length: int, sector: int = 512) -> bool:
    """Whether bytes [offset, offset+length) span two ``sector``-sized units.

    A write inside one sector is assumed atomic (the disk's promise and the crash
    simulator's model); the journal uses this to decide how to update meta fields.
    """
    return offset // sector != (offset + length - 1) // sector


class Event(NamedTuple):
    """One replayed event: its sequence number and its payload as stored (bytes).

    ``data`` is the payload too (the queue's name for the stored bytes); ``value``
    is the event as written: the journal's ``serializer=`` ``loads(data)`` when it
    has one (see :func:`engine.events.payloads.event_class`), else ``data``.
    """

    sequence_nr: int
    payload: bytes

    @property
    def data(self) -> bytes:
        """The payload as stored (bytes)."""
        return self.payload

    @property
    def value(self) -> Any:
        """The event as written (``data`` itself when the journal has no serializer)."""
        return self.payload
