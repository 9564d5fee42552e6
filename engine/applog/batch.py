"""Encoding a batch of LOG/IDX records into a segment's pending buffers.

:func:`encode_batch` is the one encoder of records in the append log: the
writer's ``append`` and ``append_many`` and the Spark sink's shards all go
through it (via :class:`engine.applog.writer.SegmentWriter`).  It is a pure codec
function (no I/O, no clock, no state): its inputs are the records and where they
go, its outputs are bytes appended to three caller-owned ``bytearray`` buffers.

``engine/applog/_native.c`` holds its compiled twin (``encode_batch``), chosen
once per process at import by :mod:`engine.applog.writer`; this function is the
reference, which ``ENGINE_PURE_PYTHON=1`` runs and which the parity tests
(``tests/applog/test_applog_native.py``) compare it against, on valid and
hostile arguments: same return value, same bytes, same exception type and
message.

Per record (layouts in :mod:`engine.applog.codec`)::

    log_out += record header (u32 size, u32 flags, i64 time_ns; 16 bytes) + data
    crc_out += u32 CRC-32 of header + data                            (4 bytes)
    idx_out += index entry (i64 time_ns, u64 index, i64 offset)          (24 bytes)
"""

from __future__ import annotations

import zlib
from typing import Any

from engine.applog.codec import (
    CRC_ENTRY,
    CRC_SIZE,
    ENTRY_SIZE,
    INDEX_ENTRY,
    INT64_MAX,
    INT64_MIN,
    MAX_FLAGS,
    MAX_RECORD_SIZE,
    RECORD_HEADER,
    RECORD_HEADER_SIZE,
)

assert CRC_ENTRY.size == CRC_SIZE and INDEX_ENTRY.size == ENTRY_SIZE and RECORD_HEADER.size == RECORD_HEADER_SIZE


def _int(value: Any, name: str) -> int:
    if type(value) is not int:
        raise TypeError(f"encode_batch: {name} must be an int")
    return value


def encode_batch(
    items: list[bytes] | tuple[bytes, ...],
    start: int,
    flags: int,
    time_ns: int,
    index: int,
    offset: int,
    limit: int,
    seg_count: int,
    log_out: bytearray,
    crc_out: bytearray,
    idx_out: bytearray,
) -> int:
    """Encode ``items[start:]`` (all with ``flags`` and ``time_ns``) as records
    ``index, index + 1, ...`` of a segment whose log is ``offset`` bytes long and
    already holds ``seg_count`` records, while they fit ``limit`` (the segment's
    size limit); return the position in ``items`` of the first record not encoded
    (``len(items)`` when all were).

    A record fits when its end is at most ``limit`` or the segment holds no record
    yet (an empty segment takes one record of any size).

    Every argument is checked before anything is appended: a ``TypeError`` or
    ``ValueError`` leaves the buffers as they were (the buffers are grown together,
    so a failure to grow one leaves all three unchanged).
    """
    if type(items) is not list and type(items) is not tuple:
        raise TypeError("encode_batch: items must be a list or a tuple")
    start = _int(start, "start")
    flags = _int(flags, "flags")
    time_ns = _int(time_ns, "time_ns")
    index = _int(index, "index")
    offset = _int(offset, "offset")
    limit = _int(limit, "limit")
    seg_count = _int(seg_count, "seg_count")
    if type(log_out) is not bytearray or type(crc_out) is not bytearray or type(idx_out) is not bytearray:
        raise TypeError("encode_batch: the output buffers must be bytearrays")
    if log_out is crc_out or log_out is idx_out or crc_out is idx_out:
        raise ValueError("encode_batch: the output buffers must be three different bytearrays")
    n = len(items)
    if not 0 <= start <= n:
        raise ValueError("encode_batch: start is out of range")
    if not 0 <= flags <= MAX_FLAGS:
        raise ValueError("encode_batch: flags must be a u32")
    if not INT64_MIN <= time_ns <= INT64_MAX or not INT64_MIN <= limit <= INT64_MAX:
        raise ValueError("encode_batch: time_ns and limit must be i64")
    if not 0 <= offset <= INT64_MAX or not 0 <= seg_count <= INT64_MAX:
        raise ValueError("encode_batch: offset and seg_count must be i64 >= 0")
    if not 0 <= index <= INT64_MAX - (n - start):
        raise ValueError("encode_batch: index out of range")
    total = 0
    for i in range(start, n):
        item = items[i]
        if type(item) is not bytes:
            raise TypeError(f"encode_batch: item {i} is not bytes")
        if len(item) > MAX_RECORD_SIZE:
            raise ValueError(f"encode_batch: item {i} is larger than {MAX_RECORD_SIZE} bytes")
        total += RECORD_HEADER_SIZE + len(item)
    if total > INT64_MAX - offset:
        raise ValueError("encode_batch: the log would pass 2**63 - 1 bytes")
    log_part = bytearray()
    crc_part = bytearray()
    idx_part = bytearray()
    pos = offset
    i = start
    while i < n:
        data = items[i]
        end = pos + RECORD_HEADER_SIZE + len(data)
        if end > limit and (seg_count or i > start):
            break  # the caller starts a new segment for the rest
        head = RECORD_HEADER.pack(len(data), flags, time_ns)
        log_part += head
        log_part += data
        crc_part += CRC_ENTRY.pack(zlib.crc32(data, zlib.crc32(head)))
        idx_part += INDEX_ENTRY.pack(time_ns, index + (i - start), pos)
        pos = end
        i += 1
    lens = (len(log_out), len(crc_out), len(idx_out))
    try:
        log_out += log_part
        crc_out += crc_part
        idx_out += idx_part
    except BaseException:
        for buf, size in zip((log_out, crc_out, idx_out), lens, strict=True):
            if len(buf) > size:
                del buf[size:]
        raise
    return i
