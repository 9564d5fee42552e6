"""Encoding LOG/IDX records into a segment's pending buffers.

:func:`encode_batch` is the one encoder of records in the append log: the
writer's ``append`` and ``append_many`` and the Spark sink's shards all go
through it (via :meth:`engine.applog.writer.SegmentWriter.add`, whose lines
``append`` runs in its own frame).  It is a codec function (no I/O, no clock):
its inputs are the records and the segment's write state, its outputs are bytes
appended to the three buffers the state names and the state's new extent.

The write state of a segment is one small list of four bytearrays (``state``,
see :func:`new_state`), so that the encoder reads what it needs in one argument
and leaves the new extent there for the next call::

    state[LOG_OUT]  the log bytes not yet written to the file
    state[CRC_OUT]  their .crc entries
    state[IDX_OUT]  the segment's index (file header + entries): the writer
                    keeps all of it in memory for readers
    state[EXTENT]   the extent, six little-endian i64 (:data:`EXTENT`, 48
                    bytes), read and written in place (:func:`extent_field`,
                    :func:`set_extent_field`):

        BASE        index of the segment's first record
        NEXT_INDEX  index the next record gets (BASE: the segment is empty)
        LOG_AT      the log file offset of LOG_OUT's first byte (the log's size
                    at the last flush): the next record goes at
                    LOG_AT + len(LOG_OUT)
        LIMIT       the size a record may not push the log past (unless the
                    segment is empty: it then takes one record of any size)
        LAST_TIME   the newest record's time (INT64_MIN: none): the records
                    are stamped no earlier (see below)
        REPORT_AT   the size of LOG_OUT from which the encoder reports back (a
                    negative result, -1): the caller's buffer size, at which
                    it writes the pending bytes out, or 0 for a caller that
                    acts after every call (the store under ``sync="always"``:
                    a group-commit ticket); so the caller's common case is one
                    test of the result

The extent is bytes rather than Python ints so that the encoder reads and
writes it without an int object per field per call (the single ``append``'s
cost is mostly such per-call overhead; ``benchmarks.append_ceiling``).

``engine/applog/_native.c`` holds its compiled twin (``encode_batch``), chosen
once per process at import by :mod:`engine.applog.writer`; this function is the
reference, which ``ENGINE_PURE_PYTHON=1`` runs and which the parity tests
(``tests/applog/test_applog_native.py``) compare it against, on valid and
hostile arguments: same return value, same bytes, same state, same exception
type and message.

Per record (layouts in :mod:`engine.applog.codec`)::

    log_out += record header (u32 size, u32 flags, i64 time_ns; 16 bytes) + data
    crc_out += u32 CRC-32 of header + data                            (4 bytes)
    idx_out += index entry (i64 time_ns, u64 index, i64 offset)          (24 bytes)
"""

from __future__ import annotations

import struct
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

#: Positions in a segment's write state (see the module docstring).
LOG_OUT, CRC_OUT, IDX_OUT, EXTENT = range(4)
STATE_SIZE = 4
#: The fields of the extent, in its order.
BASE, NEXT_INDEX, LOG_AT, LIMIT, LAST_TIME, REPORT_AT = range(6)
#: The extent's layout: BASE, NEXT_INDEX, LOG_AT, LIMIT, LAST_TIME, REPORT_AT.
EXTENT_LAYOUT = struct.Struct("<6q")
EXTENT_SIZE = 48
assert EXTENT_LAYOUT.size == EXTENT_SIZE
_FIELD = struct.Struct("<q")  # one field of the extent
assert _FIELD.size == 8


def new_state(
    log_out: bytearray,
    crc_out: bytearray,
    idx_out: bytearray,
    base: int,
    next_index: int,
    log_at: int,
    limit: int,
    last_time: int,
    report_at: int = INT64_MAX,
) -> list[bytearray]:
    """A segment's write state, in the layout :func:`encode_batch` reads
    (``report_at``: INT64_MAX, the encoder never reports a full buffer).  The
    extent's fields must fit an i64 (``struct.error`` otherwise)."""
    extent = bytearray(EXTENT_LAYOUT.pack(base, next_index, log_at, limit, last_time, report_at))
    return [log_out, crc_out, idx_out, extent]


def extent_field(state: list[Any], field: int) -> int:
    """One field of the state's extent (``field``: BASE, NEXT_INDEX, ...)."""
    value: int = _FIELD.unpack_from(state[EXTENT], 8 * field)[0]
    return value


def set_extent_field(state: list[Any], field: int, value: int) -> None:
    """Write one field of the state's extent in place."""
    _FIELD.pack_into(state[EXTENT], 8 * field, value)


def _int(value: Any, name: str) -> int:
    if type(value) is not int:
        raise TypeError(f"encode_batch: {name} must be an int")
    return value


def encode_batch(items: Any, flags: Any, time_ns: Any, state: Any) -> int:
    """Encode ``items`` (one record as ``bytes``, or a list or tuple of them, all
    with ``flags`` and ``time_ns``) as the segment's next records while they fit
    the extent's LIMIT; return the index of the first (the extent's NEXT_INDEX
    as it was) when all were encoded (or there were none) and the pending log
    bytes stay below REPORT_AT.  Otherwise the result is negative, ``~left``
    (``-1 - left``): -1 when all were encoded and the pending bytes reached
    REPORT_AT (the caller writes them out, or does what it does after every
    call), ``~left`` when the last ``left`` did not fit the segment.  So a
    caller's common case, nothing left and nothing to do, is one test (the
    result is >= 0), and the result is what ``append`` returns.

    A record fits when its end is at most the limit or the segment holds no
    record yet.  The encoded records' bytes go to the state's buffers, and the
    extent's NEXT_INDEX and LAST_TIME move past them (LOG_AT moves when the
    caller writes LOG_OUT out).

    The records get ``max(time_ns, LAST_TIME)``: times in a LOG/IDX log never go
    down (readers binary-search the index by time), whatever the clock does (an
    NTP step back).  Callers that take explicit times from their users refuse
    earlier ones before they get here, so for them this changes nothing;
    ``append`` hands its clock reading as it is.

    Every argument is checked before anything changes: a ``TypeError`` or
    ``ValueError`` leaves the buffers and the extent as they were (the buffers
    are grown together, so a failure to grow one leaves all three unchanged).
    """
    records: list[bytes] | tuple[bytes, ...]
    if type(items) is bytes:
        records = (items,)
    elif type(items) is list or type(items) is tuple:
        records = items
    else:
        raise TypeError("encode_batch: items must be bytes, a list or a tuple")
    flags = _int(flags, "flags")
    time_ns = _int(time_ns, "time_ns")
    if type(state) is not list or len(state) != STATE_SIZE:
        raise TypeError(f"encode_batch: state must be a list of {STATE_SIZE}")
    log_out, crc_out, idx_out, extent = state
    if any(type(buf) is not bytearray for buf in state):
        raise TypeError("encode_batch: the state's buffers must be bytearrays")
    if len({id(buf) for buf in state}) != STATE_SIZE:
        raise ValueError("encode_batch: the state's buffers must be four different bytearrays")
    if len(extent) != EXTENT_SIZE:
        raise ValueError(f"encode_batch: the state's extent must be {EXTENT_SIZE} bytes")
    base, index, log_at, limit, last_time, report_at = EXTENT_LAYOUT.unpack(extent)
    n = len(records)
    if not 0 <= flags <= MAX_FLAGS:
        raise ValueError("encode_batch: flags must be a u32")
    if not INT64_MIN <= time_ns <= INT64_MAX:
        raise ValueError("encode_batch: time_ns must be an i64")
    if not 0 <= base <= index <= INT64_MAX - n:
        raise ValueError("encode_batch: index out of range (BASE, NEXT_INDEX)")
    if not 0 <= log_at <= INT64_MAX - len(log_out):
        raise ValueError("encode_batch: the log offset (LOG_AT, with the pending bytes) must be >= 0 and fit an i64")
    if report_at < 0:
        raise ValueError("encode_batch: the report size (REPORT_AT) must be >= 0")
    offset = log_at + len(log_out)
    if time_ns < last_time:
        time_ns = last_time  # times never go backwards
    total = 0
    for i in range(n):
        item = records[i]
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
    i = 0
    while i < n:
        data = records[i]
        end = pos + RECORD_HEADER_SIZE + len(data)
        if end > limit and (index > base or i):
            break  # the caller starts a new segment for the rest
        head = RECORD_HEADER.pack(len(data), flags, time_ns)
        log_part += head
        log_part += data
        crc_part += CRC_ENTRY.pack(zlib.crc32(data, zlib.crc32(head)))
        idx_part += INDEX_ENTRY.pack(time_ns, index + i, pos)
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
    if i:
        _FIELD.pack_into(extent, 8 * NEXT_INDEX, index + i)
        _FIELD.pack_into(extent, 8 * LAST_TIME, time_ns)
    if i == n and len(log_out) < report_at:
        result: int = index
        return result
    return ~(n - i)
