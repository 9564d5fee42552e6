"""Bytes in, bytes out: the JRNL write-ahead log format (YeltsinDB's journal).

Pure functions and value types only (no I/O, no clock, no ``os``): the journal and
store modules read and write the file and hand the bytes here.  Every integer is
little-endian.  Grammar (see ``docs/formats/jrnl.md``)::

    file        := file_header transaction*
    file_header := "JRNL" u64 first_tx_offset u64 last_tx_offset      (20 bytes; 0 = none)
    transaction := u64 prev u64 next i64 created_unix_s u8 flags op*   (25-byte header)
    op          := u8 type u32 size data[size]
    types       := 0x01 ALLOC | 0x02 MODIFY | 0x03 REMOVE | 0xFE ROLLBACK | 0xFF COMPLETE

A transaction's op list ends with COMPLETE (0xFF).  The format lets COMPLETE carry
data, and a JRNL reader skips it by its size (as the original YeltsinDB reader
does); engine's writer puts a checksum of the transaction there.  It lets
recovery tell a torn tail from a whole one even if the disk reordered unsynced
writes.  The forms, told apart by the data's size (anything else, e.g. the
original YeltsinDB writer's empty COMPLETE, is not checked):

* 16 bytes, the one form engine writes: ``"C32L"``, u64 chain salt, u32 CRC-32C
  (Castagnoli, :mod:`engine.pages.crc32c`: the same values whatever library
  computes them).  The salt is drawn afresh each time the journal is reset; every
  transaction of one chain carries the same one, and the CRC covers it.  It is
  what lets a reader follow a chain whose header ``last`` lags behind (see
  ``journal.scan``): a leftover transaction from before the reset, in the space
  being reused, carries another salt;
* 8 bytes, written by earlier versions: ``"C32C"`` then u32 CRC-32C (still read);
* 4 bytes, written by earlier versions: u32 zlib CRC-32 (still read).

All cover ``prev``, ``created`` (as unsigned 64-bit) and every op before COMPLETE
(the 16-byte form also its salt); ``next`` and ``flags`` are excluded because they
are rewritten in place.  The encoders of the two older forms stay for tests and
tools that build journals of earlier versions.

Decoding distinguishes a whole transaction from one that ends early
(:attr:`ParsedTx.problem` says why), because recovery cuts an unfinished *last*
transaction off but treats damage anywhere else as corruption.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field

from engine.pages import crc32c

MAGIC = b"JRNL"

# File header (20 bytes): magic "JRNL" | u64 first transaction offset | u64 last one.
FILE_HEADER = struct.Struct("<4sQQ")
assert FILE_HEADER.size == 20
FILE_HEADER_SIZE = FILE_HEADER.size

# Transaction header (25 bytes): u64 prev | u64 next | i64 created (Unix seconds) | u8 flags.
TX_HEADER = struct.Struct("<QQqB")
assert TX_HEADER.size == 25
TX_HEADER_SIZE = TX_HEADER.size
#: Where ``next`` and ``flags`` sit inside a transaction header (rewritten in place).
TX_NEXT_OFFSET = 8
TX_FLAGS_OFFSET = 24

#: Transaction flag bit 0: the transaction reached the storage file (applied and synced).
JRNL_COMPLETE = 0x01

# Operation header (5 bytes): u8 type | u32 data size.
OP_HEADER = struct.Struct("<BI")
assert OP_HEADER.size == 5

OP_ALLOC = 0x01
OP_MODIFY = 0x02
OP_REMOVE = 0x03
OP_ROLLBACK = 0xFE
OP_COMPLETE = 0xFF
OP_NAMES = {
    OP_ALLOC: "alloc",
    OP_MODIFY: "modify",
    OP_REMOVE: "remove",
    OP_ROLLBACK: "rollback",
    OP_COMPLETE: "complete",
}

# ALLOC data (24 bytes): u64 page offset | u64 free-list head before | u64 head after.
ALLOC = struct.Struct("<QQQ")
assert ALLOC.size == 24
# MODIFY data: u64 page offset | u16 offset in page | u16 size, then before and after images.
MODIFY_HEAD = struct.Struct("<QHH")
assert MODIFY_HEAD.size == 12
#: Largest image one MODIFY can carry (u16 size); longer writes are split.
MAX_MODIFY = 0xFFFF
# REMOVE data (16 bytes): u64 page offset | u64 free-list head before.
REMOVE = struct.Struct("<QQ")
assert REMOVE.size == 16
# COMPLETE data written by earlier versions (4 bytes): u32 CRC-32 (zlib) of the transaction (see above).
COMPLETE_CRC = struct.Struct("<I")
assert COMPLETE_CRC.size == 4
# COMPLETE data written now (8 bytes): 4s tag "C32C" | u32 CRC-32C of the transaction (see above).
COMPLETE_CRC32C = struct.Struct("<4sI")
assert COMPLETE_CRC32C.size == 8
CRC32C_TAG = b"C32C"
# COMPLETE data of a linked chain (16 bytes): 4s tag "C32L" | u64 chain salt | u32 CRC-32C
# of the transaction and the salt (see above).
COMPLETE_LINKED = struct.Struct("<4sQI")
assert COMPLETE_LINKED.size == 16
LINKED_TAG = b"C32L"

#: Checksum kinds of the two older COMPLETE forms (``algorithm`` arguments of
#: :func:`encode_transaction`, which builds journals of earlier versions).
CRC_ZLIB = "crc32"
CRC_32C = "crc32c"

U64 = struct.Struct("<Q")
assert U64.size == 8

#: Bytes-like pieces the encoders accept and return (joined without extra copies).
Buffer = bytes | bytearray | memoryview


# ---------------------------------------------------------------------------
# Value types
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Alloc:
    """Page allocation: pop the free-list head (or append when the list is empty)."""

    page_offset: int
    head_before: int
    head_after: int


@dataclass(frozen=True)
class Modify:
    """Bytes ``[offset, offset + len(after))`` of a page changed from ``before`` to ``after``.

    Decoded images are read-only memoryviews into the journal buffer (no copy: a
    100 MB journal is replayed without duplicating it); they compare equal to bytes.
    """

    page_offset: int
    offset: int
    before: bytes | memoryview
    after: bytes | memoryview


@dataclass(frozen=True)
class Remove:
    """Page removal: push the page on the free list (its next = ``head_before``)."""

    page_offset: int
    head_before: int


@dataclass(frozen=True)
class Marker:
    """ROLLBACK (0xFE), COMPLETE (0xFF) or an unknown op type, with its raw data."""

    type: int
    data: bytes = b""


Op = Alloc | Modify | Remove | Marker


@dataclass(frozen=True)
class FileHeader:
    first: int
    last: int


@dataclass
class ParsedTx:
    """One transaction as found at ``offset``; ``end`` is the offset just past it.

    ``problem`` is ``None`` for a whole transaction, else why it is not whole (the
    bytes end early, an op is malformed, no COMPLETE, or the CRC does not match).
    ``problem_offset`` is where that was noticed.
    """

    offset: int
    prev: int
    next: int
    created: int
    flags: int
    ops: list[Op] = field(default_factory=list)
    op_offsets: list[int] = field(default_factory=list)
    end: int = 0
    problem: str | None = None
    problem_offset: int = 0
    crc_checked: bool = False
    #: The chain salt of a 16-byte ("C32L") COMPLETE, else ``None``.
    salt: int | None = None

    @property
    def rolled_back(self) -> bool:
        return any(isinstance(op, Marker) and op.type == OP_ROLLBACK for op in self.ops)

    @property
    def applied(self) -> bool:
        return bool(self.flags & JRNL_COMPLETE)


# ---------------------------------------------------------------------------
# Encoding
# ---------------------------------------------------------------------------


def encode_file_header(first: int, last: int) -> bytes:
    return FILE_HEADER.pack(MAGIC, first, last)


def decode_file_header(data: bytes) -> FileHeader:
    """Raise ValueError on a short buffer or a foreign magic (callers add the path)."""
    if len(data) < FILE_HEADER_SIZE:
        raise ValueError(f"{FILE_HEADER_SIZE}-byte JRNL header, {len(data)} bytes")
    magic, first, last = FILE_HEADER.unpack_from(data, 0)
    if magic != MAGIC:
        raise ValueError(f"magic {MAGIC!r}, {bytes(magic)!r}")
    return FileHeader(first, last)


def encode_tx_header(prev: int, next_: int, created: int, flags: int = 0) -> bytes:
    return TX_HEADER.pack(prev, next_, created, flags)


def encode_op(op_type: int, data: bytes = b"") -> bytes:
    return OP_HEADER.pack(op_type, len(data)) + data


def encode_alloc(page_offset: int, head_before: int, head_after: int) -> bytes:
    return encode_op(OP_ALLOC, ALLOC.pack(page_offset, head_before, head_after))


def encode_remove(page_offset: int, head_before: int) -> bytes:
    return encode_op(OP_REMOVE, REMOVE.pack(page_offset, head_before))


def encode_modify(page_offset: int, offset: int, before: Buffer, after: Buffer) -> list[Buffer]:
    """MODIFY ops for one write, split so that each image is at most 65,535 bytes."""
    if len(before) != len(after):
        raise ValueError("before and after images differ in length")
    out: list[Buffer] = []
    pos = 0
    while pos < len(after):
        size = min(MAX_MODIFY, len(after) - pos)
        off = offset + pos
        if off > 0xFFFF:
            raise ValueError(f"offset {off} in page does not fit in u16")
        head = MODIFY_HEAD.pack(page_offset, off, size)
        data = head + before[pos : pos + size] + after[pos : pos + size]
        out.append(OP_HEADER.pack(OP_MODIFY, len(data)) + data)
        pos += size
    return out


def transaction_crc(prev: int, created: int, ops_bytes: bytes | memoryview) -> int:
    """CRC-32 over prev, created and the op bytes before COMPLETE (``next``/``flags`` excluded)."""
    crc = zlib.crc32(U64.pack(prev))
    crc = zlib.crc32(U64.pack(created & 0xFFFFFFFFFFFFFFFF), crc)
    return zlib.crc32(ops_bytes, crc)


def modify_parts(page_offset: int, offset: int, before: Buffer, after: Buffer) -> list[Buffer]:
    """One MODIFY op as pieces (header, before, after) to be joined later.

    The commit path joins every op of a transaction once; building each op's
    bytes first would copy every image twice.  Images over 65,535 bytes are
    split like :func:`encode_modify`.
    """
    size = len(after)
    if size > MAX_MODIFY or size != len(before):
        return encode_modify(page_offset, offset, before, after)
    return [_MODIFY_OP_HEAD.pack(OP_MODIFY, MODIFY_HEAD.size + 2 * size, page_offset, offset, size), before, after]


# An op header and MODIFY's fixed part in one: u8 type | u32 size | u64 page | u16 offset | u16 size.
_MODIFY_OP_HEAD = struct.Struct("<BIQHH")
assert _MODIFY_OP_HEAD.size == OP_HEADER.size + MODIFY_HEAD.size == 17


# The CRC's prefix (16 bytes): u64 prev | u64 created (as unsigned), the header
# fields both checksums cover.
_CRC_PREFIX = struct.Struct("<QQ")
assert _CRC_PREFIX.size == 16
# The older COMPLETE op with a zlib CRC (9 bytes): u8 0xFF | u32 size 4 | u32 CRC-32.
_COMPLETE_OP = struct.Struct("<BII")
assert _COMPLETE_OP.size == OP_HEADER.size + COMPLETE_CRC.size == 9
# The older COMPLETE op with a CRC-32C (13 bytes): u8 0xFF | u32 size 8 | 4s "C32C" | u32 CRC-32C.
_COMPLETE_OP_32C = struct.Struct("<BI4sI")
assert _COMPLETE_OP_32C.size == OP_HEADER.size + COMPLETE_CRC32C.size == 13


# The linked form's CRC prefix (24 bytes): u64 prev | u64 created (as unsigned) | u64 salt.
_CRC_PREFIX_LINKED = struct.Struct("<QQQ")
assert _CRC_PREFIX_LINKED.size == 24
# The COMPLETE op of a linked chain (21 bytes): u8 0xFF | u32 size 16 | 4s "C32L" | u64 salt | u32 CRC-32C.
_COMPLETE_OP_LINKED = struct.Struct("<BI4sQI")
assert _COMPLETE_OP_LINKED.size == OP_HEADER.size + COMPLETE_LINKED.size == 21


def encode_linked_transaction_parts(
    offset: int, prev: int, created: int, ops: Iterable[Buffer], salt: int
) -> tuple[bytes, list[bytes], bytes, int]:
    """A whole transaction of a linked chain, to be written at ``offset``: the
    25-byte header, the op pieces, the 21-byte COMPLETE (``"C32L"``, ``salt``,
    CRC-32C) and the total size, to be written back to back.

    Its ``next`` already points just past its own end, where the following
    transaction will go: a commit then writes one contiguous range and touches
    neither the previous transaction nor the file header (``journal.Journal``).
    ``flags`` = 0.  Nothing is joined: the checksum runs over the pieces one by
    one, and the writer hands them to one vectored write (for a 100-page
    transaction that saves copying 820 KB once).  Pieces that are not ``bytes``
    (``google-crc32c`` reads only ``bytes``) are copied.
    """
    pieces = [op if type(op) is bytes else bytes(op) for op in ops]
    crc = transaction_crc_linked(prev, created, salt, pieces)
    size = TX_HEADER_SIZE + sum(map(len, pieces)) + _COMPLETE_OP_LINKED.size
    head = TX_HEADER.pack(prev, offset + size, created, 0)
    return head, pieces, _COMPLETE_OP_LINKED.pack(OP_COMPLETE, COMPLETE_LINKED.size, LINKED_TAG, salt, crc), size


def transaction_crc_linked(prev: int, created: int, salt: int, ops: Iterable[bytes]) -> int:
    """CRC-32C over ``prev``, ``created`` (as unsigned), ``salt`` and the op bytes
    before COMPLETE, given as consecutive pieces (the writer's, or the one slice
    the reader has)."""
    crc = crc32c.value(_CRC_PREFIX_LINKED.pack(prev, created & 0xFFFFFFFFFFFFFFFF, salt))
    # extend_all: the loop over the pieces (300 for a 100-page transaction) runs in C
    return crc32c.extend_all(crc, ops)


def encode_transaction_parts(
    prev: int, created: int, ops: Iterable[Buffer], algorithm: str
) -> tuple[bytes, bytes, bytes]:
    """A whole transaction (next = 0, flags = 0) as three pieces written back to
    back: the 25-byte header, the op bytes, and COMPLETE with its checksum.

    The commit path: ``ops`` (op bytes or pieces of ops, e.g. the header, before
    and after image of :func:`modify_parts`) are copied once, into one ``bytes``
    (``google-crc32c`` reads only immutable buffers), and one checksum pass runs
    over it.  Pieces instead of one buffer: the checksum is known only after the
    join, and adding the header and COMPLETE would copy the whole ops again.
    """
    head = TX_HEADER.pack(prev, 0, created, 0)
    body = b"".join(ops)
    if algorithm == CRC_32C:
        crc = transaction_crc32c(prev, created, body)
        return head, body, _COMPLETE_OP_32C.pack(OP_COMPLETE, COMPLETE_CRC32C.size, CRC32C_TAG, crc)
    if algorithm != CRC_ZLIB:
        raise ValueError(f"unknown checksum algorithm {algorithm!r}")
    return head, body, _COMPLETE_OP.pack(OP_COMPLETE, COMPLETE_CRC.size, transaction_crc(prev, created, body))


def transaction_crc32c(prev: int, created: int, ops_bytes: bytes) -> int:
    """CRC-32C over ``prev``, ``created`` (as unsigned) and the op bytes before COMPLETE."""
    return crc32c.extend(crc32c.value(_CRC_PREFIX.pack(prev, created & 0xFFFFFFFFFFFFFFFF)), ops_bytes)


def encode_transaction(
    prev: int, created: int, ops: Iterable[Buffer], *, with_crc: bool = True, algorithm: str = CRC_ZLIB
) -> bytes:
    """A whole transaction (next = 0, flags = 0) ending with COMPLETE.

    ``ops`` are op bytes, or pieces of ops, in order; they are joined once.
    The form of earlier versions (and, ``with_crc=False``, the original
    YeltsinDB writer's COMPLETE without data), for tests and tools that build such
    journals; ``algorithm`` picks the checksum (zlib CRC-32 by default: the
    hand-written hex tests).  engine's writer uses
    :func:`encode_linked_transaction_parts`.
    """
    if with_crc:
        return b"".join(encode_transaction_parts(prev, created, ops, algorithm))
    parts: list[Buffer] = [encode_tx_header(prev, 0, created, 0)]
    parts.extend(ops)
    parts.append(encode_op(OP_COMPLETE))
    return b"".join(parts)


# ---------------------------------------------------------------------------
# Decoding
# ---------------------------------------------------------------------------


def _decode_op(op_type: int, data: bytes | memoryview) -> Op:
    """One op's data; raises ValueError when its size does not fit its type."""
    if op_type == OP_ALLOC:
        if len(data) != ALLOC.size:
            raise ValueError(f"ALLOC data of {ALLOC.size} bytes, {len(data)}")
        return Alloc(*ALLOC.unpack(data))
    if op_type == OP_REMOVE:
        if len(data) != REMOVE.size:
            raise ValueError(f"REMOVE data of {REMOVE.size} bytes, {len(data)}")
        return Remove(*REMOVE.unpack(data))
    if op_type == OP_MODIFY:
        if len(data) < MODIFY_HEAD.size:
            raise ValueError(f"MODIFY data of at least {MODIFY_HEAD.size} bytes, {len(data)}")
        page_offset, offset, size = MODIFY_HEAD.unpack_from(data, 0)
        if len(data) != MODIFY_HEAD.size + 2 * size:
            raise ValueError(f"MODIFY data of {MODIFY_HEAD.size + 2 * size} bytes (size {size}), {len(data)}")
        start = MODIFY_HEAD.size
        view = memoryview(data).toreadonly()
        return Modify(page_offset, offset, view[start : start + size], view[start + size :])
    return Marker(op_type, bytes(data))


def parse_transaction(buf: bytes | memoryview, offset: int) -> ParsedTx:
    """Decode the transaction at ``offset`` of the journal bytes ``buf``.

    Never raises for bad bytes: the result's ``problem`` says what was wrong.
    The op list is read up to and including COMPLETE.  Unknown op types are kept
    as :class:`Marker` (their data skipped by size), like the original YeltsinDB reader.
    """
    view = memoryview(buf)
    total = len(view)
    if offset + TX_HEADER_SIZE > total:
        tx = ParsedTx(offset, 0, 0, 0, 0, end=total)
        tx.problem, tx.problem_offset = "transaction header cut short by end of file", offset
        return tx
    prev, next_, created, flags = TX_HEADER.unpack_from(view, offset)
    tx = ParsedTx(offset, prev, next_, created, flags)
    pos = offset + TX_HEADER_SIZE
    body_start = pos
    while True:
        if pos + OP_HEADER.size > total:
            tx.problem, tx.problem_offset = "operation header cut short (no COMPLETE)", pos
            tx.end = total
            return tx
        op_type, size = OP_HEADER.unpack_from(view, pos)
        data_at = pos + OP_HEADER.size
        if data_at + size > total:
            tx.problem, tx.problem_offset = f"operation 0x{op_type:02x} of {size} bytes cut short", pos
            tx.end = total
            return tx
        try:
            op = _decode_op(op_type, view[data_at : data_at + size])
        except ValueError as exc:
            tx.problem, tx.problem_offset = f"malformed operation: {exc}", pos
            tx.end = data_at + size
            return tx
        tx.ops.append(op)
        tx.op_offsets.append(pos)
        if op_type == OP_COMPLETE:
            tx.end = data_at + size
            if size == COMPLETE_CRC.size:
                (stored,) = COMPLETE_CRC.unpack(bytes(view[data_at : data_at + size]))
                tx.crc_checked = True
                if transaction_crc(prev, created, view[body_start:pos]) != stored:
                    tx.problem, tx.problem_offset = "transaction CRC mismatch", data_at
            elif size == COMPLETE_LINKED.size:
                tag, salt, stored = COMPLETE_LINKED.unpack(bytes(view[data_at : data_at + size]))
                tx.crc_checked = True
                if tag != LINKED_TAG:
                    tx.problem, tx.problem_offset = f"COMPLETE checksum tag {LINKED_TAG!r}, found {tag!r}", data_at
                elif transaction_crc_linked(prev, created, salt, (bytes(view[body_start:pos]),)) != stored:
                    tx.problem, tx.problem_offset = "transaction CRC mismatch", data_at
                else:
                    tx.salt = salt
            elif size == COMPLETE_CRC32C.size:
                tag, stored = COMPLETE_CRC32C.unpack(bytes(view[data_at : data_at + size]))
                tx.crc_checked = True
                if tag != CRC32C_TAG:
                    # Only engine's earlier writer put 8 bytes here: a damaged tag is a torn write.
                    tx.problem, tx.problem_offset = f"COMPLETE checksum tag {CRC32C_TAG!r}, found {tag!r}", data_at
                # google-crc32c reads only ``bytes``: one copy of the ops (memcpy speed).
                elif transaction_crc32c(prev, created, bytes(view[body_start:pos])) != stored:
                    tx.problem, tx.problem_offset = "transaction CRC mismatch", data_at
            return tx
        pos = data_at + size


def op_page_offsets(op: Op) -> list[int]:
    """The page offsets an op refers to (for range checks)."""
    if isinstance(op, Alloc):
        return [o for o in (op.page_offset, op.head_before, op.head_after) if o]
    if isinstance(op, Remove):
        return [o for o in (op.page_offset, op.head_before) if o]
    if isinstance(op, Modify):
        return [op.page_offset]
    return []


def describe_op(op: Op) -> str:
    """One line for ``engine pages journal``."""
    if isinstance(op, Alloc):
        return f"alloc page@{op.page_offset} free head {op.head_before} -> {op.head_after}"
    if isinstance(op, Remove):
        return f"remove page@{op.page_offset} (next free {op.head_before})"
    if isinstance(op, Modify):
        return f"modify page@{op.page_offset} [{op.offset}:{op.offset + len(op.after)}] ({len(op.after)} bytes)"
    name = OP_NAMES.get(op.type, f"unknown 0x{op.type:02x}")
    return f"{name}" + (f" ({len(op.data)} data bytes)" if op.data else "")
