"""Vectorised LOG/IDX codec (seed 004) for the Spark source and sink: bytes in, arrays out.

The append-log store decodes one record at a time, which is right for ``get`` and
``scan``.  Spark wants whole columns, so this module decodes a run of records with
numpy and pyarrow in a handful of C-level passes instead of a Python loop per row:

* the index entries of a range are one ``np.frombuffer`` with a structured dtype;
* the record headers are gathered from the log bytes with fancy indexing;
* the payload column is built *without copying per row*: the log bytes of a run of
  records are contiguous (header, payload, header, payload, ...), so an Arrow
  ``binary`` array whose offsets are the record offsets holds ``header + payload``
  per value, and one ``binary_slice(..., 16)`` drops the 16 header bytes.

Pure bytes-in/bytes-out: no file access (that is :mod:`engine.spark.logfiles`).
Every problem becomes a :class:`CorruptFileError` naming the file and the offset.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from engine.applog import codec as _applog
from engine.errors import ConfigError, CorruptFileError

# The 16-byte file header and its checks are the append log's own
# (engine.applog.codec: "<3sBIq" = signature, version, flags, TTL in ns).
HEADER_FMT = _applog.FILE_HEADER.format
HEADER_SIZE = _applog.HEADER_SIZE
FileHeader = _applog.FileHeader

# Log record header, followed by ``size`` payload bytes:
#   I  size   u32 payload length
#   I  flags  u32
#   q  time   i64 nanoseconds since the epoch
RECORD_FMT = "<IIq"
RECORD_HEADER = 16
assert struct.calcsize(RECORD_FMT) == RECORD_HEADER

# Index entry i sits at 16 + 24 * i:
#   q  time    i64 nanoseconds (same as the record's)
#   Q  index   u64 the record's index (global across segments: segments are ours)
#   q  offset  i64 absolute offset of the record's header in the .log file
INDEX_FMT = "<qQq"
INDEX_ENTRY = 24
assert struct.calcsize(INDEX_FMT) == INDEX_ENTRY

#: numpy view of one index entry; same layout as INDEX_FMT.
INDEX_DTYPE = np.dtype([("time", "<i8"), ("index", "<u8"), ("offset", "<i8")])
assert INDEX_DTYPE.itemsize == INDEX_ENTRY

LOG_MAGIC = _applog.LOG_MAGIC
IDX_MAGIC = _applog.IDX_MAGIC
VERSION = _applog.VERSION

#: Arrow binary arrays use int32 offsets: one batch's log bytes must stay below this.
MAX_BATCH_BYTES = (1 << 31) - 1


def encode_header(magic: bytes, ttl_ns: int = 0, flags: int = 0) -> bytes:
    """The 16-byte header of a log (``b"LOG"``) or index (``b"IDX"``) file."""
    return _applog.encode_header(magic, ttl_ns, flags)


def decode_header(data: bytes, path: str, magic: bytes) -> FileHeader:
    """Parse and check a file header (FormatError naming file and offset)."""
    return _applog.check_header(data, magic, path)


def decode_index(data: bytes) -> np.ndarray:
    """Index entries from raw entry bytes (no header); a partial trailing entry is ignored."""
    whole = len(data) - len(data) % INDEX_ENTRY
    return np.frombuffer(data, dtype=INDEX_DTYPE, count=whole // INDEX_ENTRY)


def encode_index(times: np.ndarray, indexes: np.ndarray, offsets: np.ndarray) -> bytes:
    """Index entry bytes for parallel arrays of times, indexes and offsets."""
    out = np.empty(len(times), dtype=INDEX_DTYPE)
    out["time"] = times
    out["index"] = indexes
    out["offset"] = offsets
    return out.tobytes()


@dataclass
class DecodedRun:
    """A run of consecutive records decoded into columns (numpy + one Arrow array)."""

    index: np.ndarray  # int64
    time_ns: np.ndarray  # int64
    flags: np.ndarray  # int64 (u32 on disk)
    data: pa.Array  # binary
    sizes: np.ndarray  # int64 payload sizes


def decode_run(
    log_bytes: bytes,
    base_offset: int,
    entries: np.ndarray,
    path: str,
    first_index: int,
    idx_base: int = HEADER_SIZE,
) -> DecodedRun:
    """Decode the records named by ``entries`` from ``log_bytes``.

    ``log_bytes`` is the log file from absolute offset ``base_offset`` (the first
    entry's offset) to at least the end of the last record.  ``first_index`` is
    the index the first entry must carry.  The index and the log must agree:
    indexes dense from ``first_index``, offsets back to back, times equal, and
    every record inside ``log_bytes``.  The first disagreement is reported with
    its absolute offset in ``path`` (the .log file) or in the .idx file (whose
    first entry here sits at ``idx_base``).
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
        raise CorruptFileError(idx_path, idx_base + INDEX_ENTRY * i + 8,
                               f"index entry for record {first_index + i}",
                               f"index {int(entries['index'][i])}")
    if offsets[0] != 0 or np.any(offsets[1:] <= offsets[:-1]):
        i = 0 if offsets[0] != 0 else int(np.flatnonzero(offsets[1:] <= offsets[:-1])[0]) + 1
        raise CorruptFileError(idx_path, idx_base + INDEX_ENTRY * i + 16,
                               f"back-to-back log offsets at record {first_index + i}",
                               f"offset {int(entries['offset'][i])}")
    buf = np.frombuffer(log_bytes, dtype=np.uint8)
    if int(offsets[-1]) + RECORD_HEADER > len(buf):
        raise CorruptFileError(path, base_offset + int(offsets[-1]), "a whole record header",
                               "end of file")
    # Gather the 16 header bytes of every record in one fancy-indexing pass, then
    # reinterpret them as (u32 size, u32 flags, i64 time).
    header_bytes = buf[offsets[:, None] + np.arange(RECORD_HEADER)]
    headers = np.ascontiguousarray(header_bytes).view(np.dtype([("size", "<u4"), ("flags", "<u4"),
                                                                 ("time", "<i8")])).reshape(n)
    sizes = headers["size"].astype(np.int64)
    ends = offsets + RECORD_HEADER + sizes
    # Records are back to back: each record ends where the next one starts.
    gaps = np.flatnonzero(ends[:-1] != offsets[1:])
    if gaps.size:
        i = int(gaps[0])
        raise CorruptFileError(path, base_offset + int(offsets[i]),
                               f"a record of {int(offsets[i + 1] - offsets[i]) - RECORD_HEADER} bytes "
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
    data = _payload_column(buf[: int(ends[-1])], offsets, sizes)
    return DecodedRun(
        index=expected_index.astype(np.int64),
        time_ns=entries["time"].astype(np.int64),
        flags=headers["flags"].astype(np.int64),
        data=data,
        sizes=sizes,
    )


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
        width = RECORD_HEADER + int(sizes[0])
        payload = np.ascontiguousarray(buf.reshape(n, width)[:, RECORD_HEADER:]).reshape(-1)
    else:
        keep = np.ones(len(buf), dtype=bool)
        keep[(offsets[:, None] + np.arange(RECORD_HEADER)).ravel()] = False
        payload = buf[keep]
    return pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(value_offsets), pa.py_buffer(payload)])


@dataclass
class EncodedRun:
    """Bytes for appending a run of records to a segment, and its index entries."""

    log: bytes
    index: bytes
    count: int


def encode_run(
    payloads: pa.Array,
    times_ns: np.ndarray,
    flags: np.ndarray,
    first_index: int,
    log_offset: int,
) -> EncodedRun:
    """Encode records (payloads as an Arrow binary array) for a log at ``log_offset``.

    Vectorised like :func:`decode_run`: a byte mask marks where each record's header
    goes, the payload bytes are scattered into the rest in one assignment, and the
    headers in another.
    """
    n = len(payloads)
    if n == 0:
        return EncodedRun(b"", b"", 0)
    if payloads.null_count:
        raise ConfigError("record data must not be null")
    if not (pa.types.is_binary(payloads.type) or pa.types.is_large_binary(payloads.type)):
        payloads = payloads.cast(pa.binary())
    sizes = pc.binary_length(payloads).to_numpy(zero_copy_only=False).astype(np.int64)
    if np.any(sizes > 0xFFFFFFFF):
        raise ConfigError("a record's data is larger than the format's 4 GiB limit")
    rec_starts = np.zeros(n, dtype=np.int64)
    np.cumsum(sizes[:-1] + RECORD_HEADER, out=rec_starts[1:])
    total = int(rec_starts[-1] + RECORD_HEADER + sizes[-1])
    out = np.empty(total, dtype=np.uint8)
    header_mask = np.zeros(total, dtype=bool)
    header_pos = (rec_starts[:, None] + np.arange(RECORD_HEADER)).ravel()
    header_mask[header_pos] = True
    # The concatenated payload bytes, straight from the Arrow buffers.
    flat = payloads if payloads.offset == 0 else pa.concat_arrays([payloads])
    bufs = flat.buffers()
    off_dtype = np.int64 if pa.types.is_large_binary(flat.type) else np.int32
    value_offsets = np.frombuffer(bufs[1], dtype=off_dtype, count=n + 1)
    raw = np.frombuffer(bufs[2], dtype=np.uint8) if bufs[2] is not None else np.empty(0, np.uint8)
    out[~header_mask] = raw[int(value_offsets[0]):int(value_offsets[n])]
    headers = np.empty(n, dtype=np.dtype([("size", "<u4"), ("flags", "<u4"), ("time", "<i8")]))
    headers["size"] = sizes
    headers["flags"] = flags
    headers["time"] = times_ns
    out[header_pos] = headers.view(np.uint8)
    index = encode_index(times_ns, np.arange(first_index, first_index + n, dtype=np.uint64),
                         rec_starts + log_offset)
    return EncodedRun(out.tobytes(), index, n)


def encode_record(data: bytes, time_ns: int, flags: int = 0) -> bytes:
    """One log record (header + payload); used by tests and small writers."""
    return struct.pack(RECORD_FMT, len(data), flags, time_ns) + data
