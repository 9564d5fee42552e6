"""Vectorised decoding of LOG/IDX records for the Spark source: bytes in, arrays out.

The append-log store decodes one record at a time, which is right for ``get`` and
``scan``.  Spark wants whole columns, so this module decodes a run of records with
numpy and pyarrow in a handful of C-level passes instead of a Python loop per row:

* the index entries of a range are one ``np.frombuffer`` with a structured dtype;
* the record headers are gathered from the log bytes with fancy indexing;
* the payload column is built *without copying per row*: the log bytes of a run of
  records are contiguous (header, payload, header, payload, ...), so the payload
  bytes are the log bytes minus every record's 16-byte header.

Only what is Spark-specific lives here (numpy views of the layouts and Arrow
column building).  The layouts themselves, the file header and its checks are
the append log's (:mod:`engine.applog.codec`), imported, never restated; records
are written only by the store's segment writer (:mod:`engine.applog.writer`,
which the Spark sink uses too).

Pure bytes-in/bytes-out: no file access (that is :mod:`engine.spark.logfiles`).
Every problem becomes a :class:`CorruptFileError` naming the file and the offset.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from engine.applog.codec import (
    CRC_SIZE,
    ENTRY_SIZE,
    HEADER_SIZE,
    INDEX_ENTRY,
    RECORD_HEADER,
    RECORD_HEADER_SIZE,
)
from engine.applog.codec import crc_failures as _crc_failures_reference
from engine.errors import ConfigError, CorruptFileError
from engine.native import kernel

#: The batch ``.crc`` check: the compiled twin when it is built (and not
#: ``ENGINE_PURE_PYTHON``), else the pure reference; chosen once, here.
crc_failures = kernel("applog.crc_failures") or _crc_failures_reference

#: numpy view of one index entry (:data:`engine.applog.codec.INDEX_ENTRY`, "<qQq":
#: i64 time, u64 record index, i64 offset of the record in the .log file).
INDEX_DTYPE = np.dtype([("time", "<i8"), ("index", "<u8"), ("offset", "<i8")])
assert INDEX_ENTRY.format == "<qQq" and INDEX_DTYPE.itemsize == ENTRY_SIZE == INDEX_ENTRY.size

#: numpy view of one record header (:data:`engine.applog.codec.RECORD_HEADER`,
#: "<IIq": u32 payload size, u32 flags, i64 time).
RECORD_DTYPE = np.dtype([("size", "<u4"), ("flags", "<u4"), ("time", "<i8")])
assert RECORD_HEADER.format == "<IIq" and RECORD_DTYPE.itemsize == RECORD_HEADER_SIZE == RECORD_HEADER.size

#: Arrow binary arrays use int32 offsets: one batch's log bytes must stay below this.
MAX_BATCH_BYTES = (1 << 31) - 1


def decode_index(data: bytes) -> np.ndarray:
    """Index entries from raw entry bytes (no header); a partial trailing entry is ignored."""
    whole = len(data) - len(data) % ENTRY_SIZE
    return np.frombuffer(data, dtype=INDEX_DTYPE, count=whole // ENTRY_SIZE)


@dataclass
class DecodedRun:
    """A run of consecutive records decoded into columns (numpy + one Arrow array)."""

    index: np.ndarray  # int64
    time_ns: np.ndarray  # int64
    flags: np.ndarray  # int64 (u32 on disk)
    data: pa.Array  # binary
    sizes: np.ndarray  # int64 payload sizes
    #: Positions in the run whose record fails its ``.crc`` checksum (empty when
    #: every record matches, or the segment has no ``.crc`` file).
    bad: np.ndarray | None = None
    #: Absolute offsets of the records in the .log file.
    offsets: np.ndarray | None = None


def decode_run(
    log_bytes: bytes,
    base_offset: int,
    entries: np.ndarray,
    path: str,
    first_index: int,
    idx_base: int = HEADER_SIZE,
    crcs: bytes | None = None,
    payload: bool = True,
) -> DecodedRun:
    """Decode the records named by ``entries`` from ``log_bytes``.

    ``log_bytes`` is the log file from absolute offset ``base_offset`` (the first
    entry's offset) to at least the end of the last record.  ``first_index`` is
    the index the first entry must carry.  The index and the log must agree:
    indexes dense from ``first_index``, offsets back to back, times equal, and
    every record inside ``log_bytes``.  The first disagreement is reported with
    its absolute offset in ``path`` (the .log file) or in the .idx file (whose
    first entry here sits at ``idx_base``).

    ``crcs`` is the run's part of the segment's ``.crc`` file (one u32 per
    record), or None for a segment without one: each record is checked with the
    append log's batch check :func:`engine.applog.codec.crc_failures`, and the positions
    that fail are returned in ``bad`` (what to do about them is the caller's
    choice: Spark's ``mode`` option).  Without ``payload`` the ``data`` column
    is left empty (a read whose schema does not ask for it); every check still runs.
    """
    n = len(entries)
    if n == 0:
        empty = np.empty(0, dtype=np.int64)
        return DecodedRun(empty, empty, empty, pa.array([], type=pa.binary()), empty)
    if len(log_bytes) > MAX_BATCH_BYTES:
        raise ConfigError(f"{path}: a batch of {len(log_bytes)} bytes is too large; use smaller batches")
    offsets = entries["offset"].astype(np.int64) - base_offset
    idx_path = path[:-4] + ".idx" if path.endswith(".log") else path
    expected_index = np.arange(first_index, first_index + n, dtype=np.uint64)
    bad = np.flatnonzero(entries["index"] != expected_index)
    if bad.size:
        i = int(bad[0])
        raise CorruptFileError(idx_path, idx_base + ENTRY_SIZE * i + 8,
                               f"index entry for record {first_index + i}",
                               f"index {int(entries['index'][i])}")
    if offsets[0] != 0 or np.any(offsets[1:] <= offsets[:-1]):
        i = 0 if offsets[0] != 0 else int(np.flatnonzero(offsets[1:] <= offsets[:-1])[0]) + 1
        raise CorruptFileError(idx_path, idx_base + ENTRY_SIZE * i + 16,
                               f"back-to-back log offsets at record {first_index + i}",
                               f"offset {int(entries['offset'][i])}")
    buf = np.frombuffer(log_bytes, dtype=np.uint8)
    if int(offsets[-1]) + RECORD_HEADER_SIZE > len(buf):
        raise CorruptFileError(path, base_offset + int(offsets[-1]), "a whole record header",
                               "end of file")
    # The 16 header bytes of every record, reinterpreted as (u32 size, u32 flags,
    # i64 time): when the index spaces the records evenly (same-size records, the
    # common case) they are a column of the bytes seen as an (n, width) array;
    # otherwise one fancy-indexing gather.
    width = int(offsets[1]) if n > 1 else 0
    if n > 1 and width >= RECORD_HEADER_SIZE and width * n <= len(buf) and bool(np.all(np.diff(offsets) == width)):
        header_bytes = buf[: width * n].reshape(n, width)[:, :RECORD_HEADER_SIZE]
    else:
        header_bytes = buf[offsets[:, None] + np.arange(RECORD_HEADER_SIZE)]
    headers = np.ascontiguousarray(header_bytes).view(RECORD_DTYPE).reshape(n)
    sizes = headers["size"].astype(np.int64)
    ends = offsets + RECORD_HEADER_SIZE + sizes
    # Records are back to back: each record ends where the next one starts.
    gaps = np.flatnonzero(ends[:-1] != offsets[1:])
    if gaps.size:
        i = int(gaps[0])
        raise CorruptFileError(path, base_offset + int(offsets[i]),
                               f"a record of {int(offsets[i + 1] - offsets[i]) - RECORD_HEADER_SIZE} bytes "
                               "(the index's spacing)", f"size {int(sizes[i])}")
    if int(ends[-1]) > len(buf):
        raise CorruptFileError(path, base_offset + int(offsets[-1]), "a whole record",
                               f"{len(buf) - int(offsets[-1])} bytes before the end")
    mism = np.flatnonzero(headers["time"] != entries["time"])
    if mism.size:
        i = int(mism[0])
        raise CorruptFileError(path, base_offset + int(offsets[i]) + 8,
                               f"time {int(entries['time'][i])} (from the index)",
                               str(int(headers["time"][i])))
    failing: np.ndarray | None = None
    if crcs is not None:
        failing = failing_checksums(log_bytes, n, crcs, path, base_offset)
    data = _payload_column(buf[: int(ends[-1])], offsets, sizes) if payload else pa.nulls(0, pa.binary())
    return DecodedRun(
        index=expected_index.astype(np.int64),
        time_ns=entries["time"].astype(np.int64),
        flags=headers["flags"].astype(np.int64),
        data=data,
        sizes=sizes,
        bad=failing,
        offsets=offsets + base_offset,
    )


@dataclass
class IndexRun:
    """A run of consecutive records' index entries, checked, as columns."""

    index: np.ndarray  # int64
    time_ns: np.ndarray  # int64
    last_offset: int  # the run's last entry's log offset (the next run starts above it)


def decode_index_run(entries: np.ndarray, idx_path: str, first_index: int, idx_base: int, log_end: int,
                     prev_offset: int | None = None, prev_time: int | None = None) -> IndexRun:
    """The index and time columns of a run, from its index entries alone.

    For reads that need no LOG bytes (a schema of only the IDX's columns), so
    every check is the index entries' own: indexes dense from ``first_index``,
    log offsets inside the visible log (``[HEADER_SIZE, log_end)``) and at
    least a record header apart (from ``prev_offset``, the entry before the
    run, too), the last one leaving room for a whole record header, and times
    never going backwards (from ``prev_time``).  The records themselves (and
    their ``.crc`` checksums) are not read, so not checked.  The first
    disagreement is a :class:`CorruptFileError` naming the entry's offset in
    ``idx_path`` (the run's first entry sits at ``idx_base``).
    """
    n = len(entries)
    if n == 0:
        empty = np.empty(0, dtype=np.int64)
        return IndexRun(empty, empty, -1 if prev_offset is None else prev_offset)
    expected = np.arange(first_index, first_index + n, dtype=np.uint64)
    bad = np.flatnonzero(entries["index"] != expected)
    if bad.size:
        i = int(bad[0])
        raise CorruptFileError(idx_path, idx_base + ENTRY_SIZE * i + 8, f"index entry for record {first_index + i}",
                               f"index {int(entries['index'][i])}")
    offsets = entries["offset"].astype(np.int64)
    lowest = HEADER_SIZE if prev_offset is None else prev_offset + RECORD_HEADER_SIZE
    steps = np.diff(offsets)
    wrong = np.flatnonzero(steps < RECORD_HEADER_SIZE)
    if offsets[0] < lowest or wrong.size or offsets[-1] > log_end - RECORD_HEADER_SIZE:
        if offsets[0] < lowest:
            i, want = 0, f"a log offset >= {lowest}"
        elif wrong.size:
            i = int(wrong[0]) + 1
            want = f"a log offset >= {int(offsets[i - 1]) + RECORD_HEADER_SIZE} (a record header past the last)"
        else:
            i, want = n - 1, f"a log offset <= {log_end - RECORD_HEADER_SIZE} (a record inside the visible log)"
        raise CorruptFileError(idx_path, idx_base + ENTRY_SIZE * i + 16, want, f"offset {int(offsets[i])}")
    times = entries["time"].astype(np.int64)
    back = np.flatnonzero(times[1:] < times[:-1])
    if (prev_time is not None and times[0] < prev_time) or back.size:
        i = 0 if prev_time is not None and times[0] < prev_time else int(back[0]) + 1
        before = prev_time if i == 0 else int(times[i - 1])
        raise CorruptFileError(idx_path, idx_base + ENTRY_SIZE * i, f"a time >= {before} (times never go back)",
                               str(int(times[i])))
    return IndexRun(expected.astype(np.int64), times, int(offsets[-1]))


def failing_checksums(log_bytes: bytes, n: int, crcs: bytes, path: str, base_offset: int) -> np.ndarray:
    """Positions of the first ``n`` back-to-back records of ``log_bytes`` whose
    CRC-32 differs from their entry in ``crcs`` (u32 little-endian, one per record).

    One call of the append log's batch check (:func:`engine.applog.codec.crc_failures`,
    or its compiled twin, chosen once at import) for the whole run."""
    if len(crcs) < n * CRC_SIZE:
        raise CorruptFileError(path[:-4] + ".crc" if path.endswith(".log") else path, base_offset,
                               f"{n} checksums", f"{len(crcs) // CRC_SIZE}")
    try:
        bad = crc_failures(bytes(log_bytes), bytes(crcs), n)
    except ValueError as exc:  # the run's structure was checked already: a record no longer fits
        raise CorruptFileError(path, base_offset, "whole records", str(exc)) from None
    return np.asarray(bad, dtype=np.int64)


def _payload_column(buf: np.ndarray, offsets: np.ndarray, sizes: np.ndarray) -> pa.Array:
    """The payloads of back-to-back records in ``buf`` as one Arrow binary array.

    Two C-level passes, no Python loop per row: when every record has the same size
    (the common case for machine-written logs) the bytes are a 2-D array whose
    first 16 columns are headers; otherwise a byte mask drops the header bytes.
    (pyarrow's ``binary_slice`` would do this in one call, but pyarrow 26 computes a
    negative buffer size for some lengths, so it is not used.)
    """
    n = len(sizes)
    value_offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(sizes, out=value_offsets[1:])
    if n and np.all(sizes == sizes[0]):
        width = RECORD_HEADER_SIZE + int(sizes[0])
        payload = np.ascontiguousarray(buf.reshape(n, width)[:, RECORD_HEADER_SIZE:]).reshape(-1)
    else:
        keep = np.ones(len(buf), dtype=bool)
        keep[(offsets[:, None] + np.arange(RECORD_HEADER_SIZE)).ravel()] = False
        payload = buf[keep]
    return pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(value_offsets), pa.py_buffer(payload)])
