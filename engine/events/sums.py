"""Checksums of the file journal's blocks: the side files ``data.crc`` and ``meta.crc``.

The file journal's ``data`` and ``meta`` have no checksum and no room for one
(the original akka-persistence-file-journal reader reads every byte of them), so
this implementation keeps them beside the files, as the append log keeps a
``.crc`` beside each LOG.  The original reader never opens them.  Pure bytes in,
bytes out (no ``os``); :mod:`engine.events.sumfiles` reads and writes the files.
:func:`batch_crcs_py` has a C twin (the only C here), chosen once at import.

``data.crc`` -- one entry per *batch* (the blocks one ``write`` appended, which
are adjacent), in file order; batches tile ``data`` from offset 8, so an entry's
start is the previous entry's end (8 for the first)::

    header  := magic "EJDC" | u32 version (1) | i32 synced            12 bytes
    entry   := i32 end | i32 last | u32 crc                           12 bytes

``synced`` is how many entries are known durable (written after the fdatasync
that made them so): those must match; the ones after it may be torn by a power
cut (recovery checks them against the blocks and rebuilds from the first bad one).

``end`` is where the batch ends in ``data`` (exclusive), ``last`` the offset of
its last block, ``crc`` the CRC-32 (zlib, IEEE) of the batch's bytes
``[start, end)`` without the 4 bytes of the last block's ``next`` field
(``[last + 12, last + 16)``): that field is the only byte of a batch that
changes after it is written (the next batch of the id links onto it; recovery
may reset it to 0), and it is checked by the link rules instead (the block it
leads to must sit at that offset, link back, and continue the sequence).
Recovery may rebuild entries one per block (``last`` = the block's start).

``meta.crc`` -- one entry per meta block, in meta-file order (entry ``i`` at
``8 + 12 i``)::

    header  := magic "EJMC" | u32 version (1)                          8 bytes
    entry   := i64 from | u32 crc                                     12 bytes

``from`` is the id's first live sequence number (``highest + 1`` when every
event was deleted): it changes only when ``delete_to`` moves it (a write after
everything was deleted starts at exactly that number).  ``crc`` is the CRC-32 of
the block's i16 size, ``from`` (i64) and the id's UTF-8 bytes.  The block's
``first`` must lead to the block numbered ``from``; ``last`` and ``highest`` are
a cache the chain in ``data`` settles (roll forward, checked blocks).
"""

from __future__ import annotations

import struct
import zlib
from array import array
from collections.abc import Callable

from engine.native import kernel

# Side-file header: magic[4] | u32 version (1).
SUMS_HEADER = struct.Struct(">4sI")
assert SUMS_HEADER.size == 8
SUMS_HEADER_SIZE = SUMS_HEADER.size
SUMS_VERSION = 1
DATA_SUMS_MAGIC = b"EJDC"
# data.crc header: the side-file header, then i32 synced (entries known durable).
DATA_SUMS_SYNCED = struct.Struct(">i")
assert DATA_SUMS_SYNCED.size == 4
DATA_SUMS_SYNCED_OFFSET = SUMS_HEADER_SIZE
DATA_SUMS_HEADER_SIZE = SUMS_HEADER_SIZE + DATA_SUMS_SYNCED.size
assert DATA_SUMS_HEADER_SIZE == 12
META_SUMS_MAGIC = b"EJMC"

# data.crc entry: i32 end | i32 last block offset | u32 crc32
BATCH_SUM = struct.Struct(">iiI")
assert BATCH_SUM.size == 12
BATCH_SUM_SIZE = BATCH_SUM.size

# meta.crc entry: i64 first live sequence number | u32 crc32
ID_SUM = struct.Struct(">qI")
assert ID_SUM.size == 12
ID_SUM_SIZE = ID_SUM.size

# What the meta checksum covers besides the id: i16 block size | i64 from.
_ID_FIXED = struct.Struct(">hq")
assert _ID_FIXED.size == 10

#: Offset of a block's ``next`` field (see engine.events.codec.BLOCK_NEXT_FIELD).
_NEXT = 12


def encode_header(magic: bytes) -> bytes:
    """The 8-byte header of a side file."""
    return SUMS_HEADER.pack(magic, SUMS_VERSION)


def encode_data_sums_header(synced: int) -> bytes:
    """The 12-byte header of ``data.crc``."""
    return encode_header(DATA_SUMS_MAGIC) + DATA_SUMS_SYNCED.pack(synced)


def batch_sum_offset(index: int) -> int:
    """Where the ``index``-th entry sits in ``data.crc``."""
    return DATA_SUMS_HEADER_SIZE + BATCH_SUM_SIZE * index


def header_ok(head: bytes, magic: bytes) -> bool:
    """Whether ``head`` is a version-1 side-file header with ``magic``."""
    return len(head) >= SUMS_HEADER_SIZE and SUMS_HEADER.unpack_from(head, 0) == (magic, SUMS_VERSION)


def batch_crc(buf: bytes | bytearray | memoryview, start: int, last: int, end: int) -> int:
    """CRC-32 of ``buf[start:end]`` (a batch) without the 4 bytes of the ``next``
    field of the block at ``last`` (``start <= last``, ``last + 24 <= end``)."""
    mv = memoryview(buf)
    return zlib.crc32(mv[last + _NEXT + 4 : end], zlib.crc32(mv[start : last + _NEXT]))


def batch_crcs_py(buf: bytes | bytearray | memoryview, base: int, ends: array[int], lasts: array[int],
                  i: int, j: int) -> bytes:
    """The :func:`batch_crc` of batches ``i..j-1`` of ``data.crc`` whose bytes are
    ``buf`` read at ``data`` offset ``base``, packed as native-order u32
    (``array("I")`` bytes, compared with the entries' in one go).

    ``ends``/``lasts`` (``array("q")``) hold the entries' fields; batch ``k``
    starts at ``ends[k - 1]`` (8 for ``k == 0``).  A batch not inside ``buf``, or
    whose ``last`` is not in ``[start, end - 24]``, is a ``ValueError``.  The
    reference of the C twin ``engine.events._native.batch_crcs`` (chosen once at
    import, see :data:`batch_crcs`).
    """
    n = len(ends)
    if len(lasts) != n or i < 0 or j < i or j > n:
        raise ValueError("batch_crcs: bad entry arrays or range")
    out = array("I")
    for k in range(i, j):
        s = ends[k - 1] if k else 8
        e, last = ends[k], lasts[k]
        if s < base or last < s or e - last < 24 or e - base > len(buf):
            raise ValueError(f"batch_crcs: batch {k} outside the buffer")
        out.append(batch_crc(buf, s - base, last - base, e - base))
    return out.tobytes()


#: :func:`batch_crcs_py`, or its C twin when built (``ENGINE_PURE_PYTHON=1``: never).
batch_crcs: Callable[..., bytes] = kernel("events.batch_crcs") or batch_crcs_py
assert array("I").itemsize == 4


def encode_batch_sum(end: int, last: int, crc: int) -> bytes:
    return BATCH_SUM.pack(end, last, crc)


def id_crc(raw_id: bytes, first_seq: int) -> int:
    """CRC-32 of a meta block's size, the id's first live sequence number and its id."""
    return zlib.crc32(raw_id, zlib.crc32(_ID_FIXED.pack(26 + len(raw_id), first_seq)))


def encode_id_sum(raw_id: bytes, first_seq: int) -> bytes:
    return ID_SUM.pack(first_seq, id_crc(raw_id, first_seq))


def id_sum_offset(index: int) -> int:
    """Where the ``index``-th meta block's entry sits in ``meta.crc``."""
    return SUMS_HEADER_SIZE + ID_SUM_SIZE * index
