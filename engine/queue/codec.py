"""Bytes in, bytes out: the libkestrel journal record format.

Pure functions only (no I/O, no clock): the store modules read and write files and
hand the bytes here.  Every layout is written beside its ``struct`` format.

File = magic (4 bytes) then records.  Record = command byte, header words, data::

    command byte = (command << 4) | header_words     header = 4 * header_words bytes
    commands 8..15 (bit 7 set) carry a data block; the first header i32 is its length
    command byte 0x00 = "no more records" (a preallocated or zeroed tail)

Decoding distinguishes three outcomes, because the callers treat them differently:

* a whole record (``Put``, ``ReadHead``, ``ReadDone``, ``Unknown``);
* :class:`Incomplete` -- the bytes end inside a record (a torn tail after a crash,
  or a record another process is still writing: tailing readers wait for the rest);
* :class:`BadRecord` -- bytes that can never be a valid record (the caller turns it
  into a :class:`~engine.errors.CorruptFileError` with its file name, or, at the end
  of the newest writer file, into a reported truncation).
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from itertools import pairwise
from typing import NamedTuple

# Magic bytes, in file order.
WRITER_MAGIC = b"\x27\x64\x26\x03"
READER_MAGIC = b"\x26\x3c\x26\x03"
MAGIC_SIZE = 4

CMD_READ_HEAD = 0
CMD_PUT = 8
CMD_READ_DONE = 9

#: Command byte 0x00 (command 0, no header) marks the end of the records.
END_MARKER = 0x00

# PUT without expiry: command byte 0x86 (8 << 4 | 6 words).
#   i32 data size | i32 error_count | i64 xid | i64 add_time (ms)
PUT_HEADER = struct.Struct("<iiqq")
assert PUT_HEADER.size == 24
# PUT with expiry: command byte 0x88 (8 << 4 | 8 words).
#   i32 data size | i32 error_count | i64 xid | i64 add_time (ms) | i64 expire_time (ms)
PUT_HEADER_EXPIRY = struct.Struct("<iiqqq")
assert PUT_HEADER_EXPIRY.size == 32
PUT_BYTE = (CMD_PUT << 4) | 6
PUT_BYTE_EXPIRY = (CMD_PUT << 4) | 8
assert (PUT_BYTE, PUT_BYTE_EXPIRY) == (0x86, 0x88)  # decode_batch inlines these

# READ_HEAD: command byte 0x02.  i64 id of the head (every id <= head is done).
READ_HEAD = struct.Struct("<q")
assert READ_HEAD.size == 8
READ_HEAD_BYTE = (CMD_READ_HEAD << 4) | 2
assert READ_HEAD_BYTE == 0x02

# READ_DONE: command byte 0x91.  i32 byte length of the id block (8 x count; the format
# description says "count", libkestrel writes the byte length -- FORMATS.md), then i64 ids.
READ_DONE_HEADER = struct.Struct("<i")
assert READ_DONE_HEADER.size == 4
READ_DONE_BYTE = (CMD_READ_DONE << 4) | 1
assert READ_DONE_BYTE == 0x91

# CHECK (this engine's addition to the libkestrel journal): command byte 0x22 (command 2, 2 header words, no data).
#   u32 crc32 of the record bytes since the previous CHECK (or the magic) | u32 their length
# libkestrel skips it as an unknown command.  It is what tells a whole batch of PUTs
# from one whose data a crash tore (the format has no checksum of its own).
CMD_CHECK = 2
CHECK = struct.Struct("<II")
assert CHECK.size == 8
CHECK_BYTE = (CMD_CHECK << 4) | 2
assert CHECK_BYTE == 0x22  # decode_batch inlines it

_I32 = struct.Struct("<i")
_U32 = struct.Struct("<I")
_I64 = struct.Struct("<q")
assert (_I32.size, _U32.size, _I64.size) == (4, 4, 8)

#: Sanity bound on error_count when judging a record (a torn tail is random bytes).
MAX_ERROR_COUNT = 1 << 24

#: The largest item a writer accepts by default (``QueueConfig.max_item_size``).  It
#: bounds what a *writer* takes, never what a reader reads: a valid file may hold
#: bigger items (a writer configured for more wrote them).  Decoders bound a
#: record's data only by the format (a non-negative i32) and by the bytes the file
#: really holds, so a reader never allocates more than the file's own size.
DEFAULT_MAX_ITEM_SIZE = 16 * 1024 * 1024
#: The largest item a writer may ever accept: libkestrel's ``LARGEST_DATA``.  Its
#: reader treats a bigger PUT as corruption ("item too large") and its open
#: erases the file, so a queue of this format never holds one.
LARGEST_ITEM = 16 * 1024 * 1024
assert DEFAULT_MAX_ITEM_SIZE <= LARGEST_ITEM


class Put(NamedTuple):
    """An item added to the queue (the only record in writer files).

    A NamedTuple rather than a dataclass: readers decode one per item delivered,
    and this is the cheapest immutable record Python has.  The fields are in the
    order of ``engine.queue.Item``'s, so a reader builds one with ``Item(*put)``
    (not the on-disk order).
    """

    xid: int
    data: bytes
    add_time: int  # ms since the epoch
    expire_time: int | None  # ms since the epoch, None = never
    error_count: int


@dataclass(frozen=True, slots=True)
class ReadHead:
    """A reader's head: every id <= ``xid`` is done."""

    xid: int


@dataclass(frozen=True, slots=True)
class ReadDone:
    """Ids above the head confirmed out of order."""

    xids: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Check:
    """This engine's addition: crc32 and length of the records written since the previous CHECK."""

    crc: int
    length: int


@dataclass(frozen=True, slots=True)
class Unknown:
    """A command this version does not know; kept only so callers can count it."""

    command: int
    header: bytes
    data: bytes


Record = Put | ReadHead | ReadDone | Check | Unknown


class Incomplete(Exception):
    """The buffer ends inside a record that starts at ``offset``."""

    def __init__(self, offset: int) -> None:
        super().__init__(f"record at offset {offset} is incomplete")
        self.offset = offset


class BadRecord(Exception):
    """The bytes at ``offset`` cannot be a valid record."""

    def __init__(self, offset: int, expected: str, found: str | None = None) -> None:
        super().__init__(f"offset {offset}: expected {expected}" + (f", found {found}" if found else ""))
        self.offset = offset
        self.expected = expected
        self.found = found

    def shifted(self, delta: int) -> BadRecord:
        """The same error with its offsets moved by ``delta`` (buffer -> file)."""
        return BadRecord(self.offset + delta, self.expected, self.found)


class ChecksumMismatch(BadRecord):
    """The CHECK record at ``check_offset`` does not match the bytes it covers,
    which start at ``offset`` (the damage is somewhere in ``[offset, check_offset)``)."""

    def __init__(self, offset: int, check_offset: int, covered: int, length: int) -> None:
        super().__init__(
            offset,
            f"records matching the CHECK record at offset {check_offset}",
            f"a crc32 mismatch over {covered} bytes"
            + ("" if covered == length else f" (the CHECK covers {length} bytes)"),
        )
        self.check_offset = check_offset
        self.covered = covered
        self.length = length

    def shifted(self, delta: int) -> BadRecord:
        return ChecksumMismatch(self.offset + delta, self.check_offset + delta, self.covered, self.length)


# -- encoding ---------------------------------------------------------------------


#: A whole PUT record's fixed part, command byte included: 1 + 24 bytes (0x86)
#: and 1 + 32 bytes (0x88).  :func:`encode_put` is the one encoder of PUT records
#: (the writer's staging, burnt ids, the tools and the tests all call it).
PUT_RECORD = struct.Struct("<Biiqq")
PUT_RECORD_EXPIRY = struct.Struct("<Biiqqq")
assert PUT_RECORD.size == 1 + PUT_HEADER.size and PUT_RECORD_EXPIRY.size == 1 + PUT_HEADER_EXPIRY.size
_pack_put = PUT_RECORD.pack
_pack_put_expiry = PUT_RECORD_EXPIRY.pack


def encode_put(
    xid: int,
    add_time: int,
    data: bytes,
    expire_time: int | None = None,
    error_count: int = 0,
    *,
    _pack: Callable[..., bytes] = _pack_put,
    _pack_expiry: Callable[..., bytes] = _pack_put_expiry,
) -> bytes:
    """One PUT record (0x86, or 0x88 when the item expires): the only encoder of
    a PUT, one pack and one concatenation (the writer calls it once per item;
    the packs are bound as defaults, local lookups on that path)."""
    if xid <= 0:
        raise ValueError("item ids are non-zero positive i64")
    if expire_time is None:
        return _pack(0x86, len(data), error_count, xid, add_time) + data
    return _pack_expiry(0x88, len(data), error_count, xid, add_time, expire_time) + data


# BURNT (this engine's, since 0.2): an id that reader checkpoints mention but a
# crash took out of the journal (see docs/formats/queue.md, "Ids after a crash").
# The writer keeps ids contiguous by writing one of these per such id, where an
# earlier version left a gap between two files (libkestrel's reader stops at a
# gap).  It is a PUT with expiry, no data, added and expiring at the epoch:
#   88 | size 0 | error_count 0 | id | add_time 0 | expire_time 0      (33 bytes)
# No real item is added at the epoch, and every field is one decoders accept.
# Readers of this engine skip it (not an item: never delivered, counted as done,
# not expired, not moved); libkestrel's see an item that expired in 1970 and
# discard it.
BURNT_SIZE = PUT_RECORD_EXPIRY.size
assert BURNT_SIZE == 33


def encode_burnt(xid: int) -> bytes:
    """The BURNT record of id ``xid``."""
    return encode_put(xid, 0, b"", 0)


def is_burnt(put: Put) -> bool:
    """Whether ``put`` is a BURNT record (an id, not an item)."""
    return put.add_time == 0 and put.expire_time == 0 and not put.data


def encode_check(records: bytes) -> bytes:
    """The CHECK record covering ``records`` (the bytes since the previous CHECK)."""
    return bytes((CHECK_BYTE,)) + CHECK.pack(zlib.crc32(records), len(records))


def check_matches(check: Check, covered: bytes) -> bool:
    """Whether ``covered`` (the bytes before the CHECK) is what it vouches for."""
    return check.length == len(covered) and zlib.crc32(covered) == check.crc


def find_valid_check(buf: bytes, start: int, floor: int) -> int | None:
    """Offset of the first CHECK at or after ``start`` that vouches for real data.

    A hit is a 0x22 byte followed by ``crc32, length`` with ``length > 0``, whose
    covered bytes ``buf[pos - length:pos]`` lie at or after ``floor`` and have that
    crc32.  Used after damage in a writer file to tell mid-file corruption (a whole,
    checksummed batch follows the damage) from a torn tail (nothing valid after it).
    A false hit in garbage needs a 0x22 byte, a length that fits and a matching
    crc32: about 2**-32 per candidate.
    """
    view = memoryview(buf)
    pos = buf.find(CHECK_BYTE.to_bytes(1, "little"), start)
    while pos != -1 and pos + 1 + CHECK.size <= len(buf):
        crc, length = CHECK.unpack_from(buf, pos + 1)
        if 0 < length <= pos - floor and zlib.crc32(view[pos - length : pos]) == crc:
            return pos
        pos = buf.find(b"\x22", pos + 1)
    return None


def put_size(data_len: int, has_expiry: bool) -> int:
    """Bytes a PUT record of ``data_len`` data bytes takes on disk."""
    return 1 + (PUT_HEADER_EXPIRY.size if has_expiry else PUT_HEADER.size) + data_len


def encode_read_head(xid: int) -> bytes:
    """One READ_HEAD record (0x02)."""
    return bytes((READ_HEAD_BYTE,)) + READ_HEAD.pack(xid)


def encode_read_done(xids: Iterable[int]) -> bytes:
    """One READ_DONE record (0x91) holding ``xids`` in the given order."""
    ids = list(xids)
    return bytes((READ_DONE_BYTE,)) + READ_DONE_HEADER.pack(8 * len(ids)) + struct.pack(f"<{len(ids)}q", *ids)


#: An empty CHECK record (9 bytes): first in every file this engine writes, it says
#: "every run of records in this file is followed by a CHECK that covers it".
EMPTY_CHECK = bytes((CHECK_BYTE,)) + CHECK.pack(0, 0)
assert len(EMPTY_CHECK) == 1 + CHECK.size and zlib.crc32(b"") == 0


def encode_reader_file(head: int, done: Iterable[int]) -> bytes:
    """A whole reader checkpoint file: magic, an empty CHECK, READ_HEAD, one sorted
    READ_DONE, and the CHECK (crc32, length) of those two records.

    The CHECKs are this engine's addition (the libkestrel reader logs "skipping
    unknown entry" for each and ignores it); :func:`decode_reader_file` verifies
    them and still reads files without them (the previous version's, libkestrel's).
    """
    records = encode_read_head(head) + encode_read_done(sorted(done))
    return READER_MAGIC + EMPTY_CHECK + records + encode_check(records)


# -- decoding ---------------------------------------------------------------------


def decode_record(buf: bytes | memoryview, pos: int) -> tuple[Record | None, int]:
    """Decode the record at ``buf[pos:]``; returns ``(record, end)``.

    ``(None, pos)`` means the end marker (command byte 0x00) or the end of ``buf``
    exactly at a record boundary.  Raises :class:`Incomplete` when ``buf`` ends
    inside the record and :class:`BadRecord` for impossible field values.  A data
    length is bounded by the format only (a non-negative i32): one that runs past
    ``buf`` is :class:`Incomplete`, so nothing is allocated beyond ``buf``.
    """
    size = len(buf)
    if pos >= size:
        return None, pos
    cmd_byte = buf[pos]
    if cmd_byte == END_MARKER:
        return None, pos
    command = cmd_byte >> 4
    words = cmd_byte & 0x0F
    header_end = pos + 1 + 4 * words
    if header_end > size:
        raise Incomplete(pos)
    if command == CMD_PUT:
        if words == 6:
            length, errors, xid, add_time = PUT_HEADER.unpack_from(buf, pos + 1)
            expire: int | None = None
        elif words == 8:
            length, errors, xid, add_time, expire = PUT_HEADER_EXPIRY.unpack_from(buf, pos + 1)
        else:
            raise BadRecord(pos, "PUT with 6 or 8 header words", f"{words}")
        if length < 0:
            raise BadRecord(pos, "a PUT data size >= 0", str(length))
        if xid <= 0:
            raise BadRecord(pos, "a positive item id", str(xid))
        if errors < 0 or errors > MAX_ERROR_COUNT:
            raise BadRecord(pos, "a plausible error count", str(errors))
        end = header_end + length
        if end > size:
            raise Incomplete(pos)
        return Put(xid, bytes(buf[header_end:end]), add_time, expire, errors), end
    if command == CMD_READ_HEAD and words == 2:
        (xid,) = READ_HEAD.unpack_from(buf, pos + 1)
        if xid < 0:
            raise BadRecord(pos, "a READ_HEAD id >= 0", str(xid))
        return ReadHead(xid), header_end
    if command == CMD_READ_DONE and words == 1:
        (length,) = READ_DONE_HEADER.unpack_from(buf, pos + 1)
        if length < 0 or length % 8:
            raise BadRecord(pos, "a READ_DONE byte length that is a multiple of 8", str(length))
        end = header_end + length
        if end > size:
            raise Incomplete(pos)
        ids = struct.unpack_from(f"<{length // 8}q", buf, header_end)
        return ReadDone(tuple(ids)), end
    if command == CMD_CHECK and words == 2:
        crc, length = CHECK.unpack_from(buf, pos + 1)
        return Check(crc, length), header_end
    if command in (CMD_READ_HEAD, CMD_READ_DONE):
        raise BadRecord(pos, f"command {command} with its fixed header size", f"{words} words")
    # Unknown command: skip its header words and, if bit 7 is set, its data block.
    end = header_end
    if command & 0x8:
        if words == 0:
            raise BadRecord(pos, "a data-carrying command with a length word")
        (length,) = _I32.unpack_from(buf, pos + 1)
        if length < 0:
            raise BadRecord(pos, "a data length >= 0", str(length))
        end += length
        if end > size:
            raise Incomplete(pos)
    return Unknown(command, bytes(buf[pos + 1 : header_end]), bytes(buf[header_end:end])), end


_new_tuple = tuple.__new__
_crc32 = zlib.crc32
_unpack_check = CHECK.unpack_from


def _check_mismatch(
    buf: bytes | memoryview, view: memoryview, pos: int, since: int, covered: int, running: int
) -> ChecksumMismatch | None:
    """The batch decoders' test of the CHECK record at ``pos`` (its 9 bytes are in
    ``buf``): None when it vouches for the ``covered`` bytes before ``since``
    (their crc32 so far: ``running``) and the bytes ``[since, pos)``; else the
    error to raise."""
    want, length = _unpack_check(buf, pos + 1)
    total = covered + pos - since
    if length == total and _crc32(view[since:pos], running) == want:
        return None
    return ChecksumMismatch(pos - total, pos, total, length)


def _other_record(buf: bytes | memoryview, pos: int, after_good: bool) -> tuple[int, str]:
    """The batch decoders' step over a record that is not a (valid) PUT: ``(end,
    "")`` past it, or ``(pos, stop)`` where decoding stops: "incomplete", "marker",
    or "more" for a malformed record after good ones (``after_good``: they are
    handed out first, the error comes on the next call).  A malformed record
    with nothing good before it raises :class:`BadRecord`."""
    try:
        record, end = decode_record(buf, pos)
    except Incomplete:
        return pos, "incomplete"
    except BadRecord:
        if after_good:
            return pos, "more"
        raise
    if record is None:
        return pos, "marker"
    return end, ""


def decode_batch(
    buf: bytes, pos: int, out: list[Put], crc: int | None = None, covered: int = 0, *, max_records: int = 4096
) -> tuple[int, str, int, int, int]:
    """Append the PUTs of consecutive records from ``buf[pos:]`` to ``out`` quickly
    (the readers' hot loop), verifying the CHECK records it passes.

    ``crc`` is None for a file without CHECK records (written by libkestrel): every
    PUT counts as verified.  Otherwise ``out`` may already hold PUTs decoded after
    the last CHECK (not yet vouched for), ``crc``/``covered`` are the crc32 and
    length of their bytes (0, 0 at a CHECK boundary), and each CHECK met must match
    the bytes since the previous one, or :class:`ChecksumMismatch` is raised
    (offsets relative to ``buf``, negative when the batch began before it).

    Returns ``(end, stop, verified, crc, covered)``: only ``out[:verified]`` are
    vouched for by a CHECK; the rest await the CHECK after them, and ``crc`` /
    ``covered`` describe the bytes after the last CHECK up to ``end``.  ``stop`` is
    ``"end"`` (the buffer ended at a record boundary), ``"incomplete"`` (it ended
    inside one, at ``end``), ``"marker"`` (0x00 at ``end``) or ``"more"``
    (``max_records`` reached, or a bad record or a CHECK that does not match at
    ``end``, after records a CHECK vouched for in this call: those go out first,
    and the next call raises :class:`BadRecord` / :class:`ChecksumMismatch`).
    PUTs take an inlined path; other records go through :func:`decode_record`
    and are skipped (only PUTs are items).
    """
    if pos < 0:
        raise ValueError("pos must be >= 0")
    append = out.append
    size = len(buf)
    unpack6 = PUT_HEADER.unpack_from
    unpack8 = PUT_HEADER_EXPIRY.unpack_from
    new, put_cls, max_errors = _new_tuple, Put, MAX_ERROR_COUNT  # locals: this loop is hot
    checked = crc is not None
    running = 0 if crc is None else crc
    view = memoryview(buf)
    since = pos  # where the bytes not yet folded into ``crc`` start
    verified = 0
    stop = "more"
    for _ in range(max_records):
        if pos >= size:
            stop = "end"
            break
        cmd = buf[pos]
        if cmd == 0x86:  # PUT without expiry: by far the most common record
            start = pos + 25
            if start > size:
                stop = "incomplete"
                break
            length, errors, xid, add_time = unpack6(buf, pos + 1)
            end = start + length
            if length >= 0 and xid > 0 and 0 <= errors <= max_errors:
                if end > size:
                    stop = "incomplete"
                    break
                # tuple.__new__ skips NamedTuple's Python-level __new__ (same object).
                append(new(put_cls, (xid, buf[start:end], add_time, None, errors)))
                pos = end
                continue
        elif cmd == 0x88:
            start = pos + 33
            if start > size:
                stop = "incomplete"
                break
            length, errors, xid, add_time, expire = unpack8(buf, pos + 1)
            end = start + length
            if length >= 0 and xid > 0 and 0 <= errors <= max_errors:
                if end > size:
                    stop = "incomplete"
                    break
                append(new(put_cls, (xid, buf[start:end], add_time, expire, errors)))
                pos = end
                continue
        elif cmd == 0x22:
            if pos + 9 > size:
                stop = "incomplete"
                break
            if checked:
                mismatch = _check_mismatch(buf, view, pos, since, covered, running)
                if mismatch is not None:
                    if verified:
                        break  # "more": the records vouched for first, the mismatch on the next call
                    raise mismatch
                running, covered, since = 0, 0, pos + 9
                verified = len(out)
            pos += 9
            continue
        # Anything else (and PUTs with impossible fields, to get the right error).
        end, halt = _other_record(buf, pos, verified > 0)
        if halt:
            stop = halt
            break
        pos = end  # not a PUT (a valid one takes the paths above): skipped
    if not checked:
        return pos, stop, len(out), 0, 0
    return pos, stop, verified, _crc32(view[since:pos], running), covered + pos - since


class PutColumns(NamedTuple):
    """The PUTs of a run of records as columns (:func:`decode_columns`).

    Each column is little-endian machine data in a ``bytes`` object, ready to be
    wrapped without a copy (``numpy.frombuffer``, ``pyarrow.py_buffer``): ``ids``,
    ``add_times`` and ``expire_times`` are ``items`` i64 (ms; ``expire_times`` is 0
    where ``has_expiry`` is 0), ``has_expiry`` ``items`` bytes of 0 or 1,
    ``error_counts`` ``items`` i32, ``offsets`` ``items + 1`` i64 (Arrow style:
    item ``k``'s data is ``data[offsets[k]:offsets[k + 1]]``, ``offsets[0] == 0``).
    """

    end: int  #: offset just past the last record the columns cover (a CHECK, in files with CHECKs)
    scanned: int  #: where decoding stopped (bytes in ``[end, scanned)`` await a CHECK)
    stop: str  #: why it stopped: "end", "incomplete", "marker" or "more" (see decode_columns)
    items: int  #: PUTs in the columns
    ascending: bool  #: each id is above the one before it (the cursor's rule; checked by the caller)
    ids: bytes
    add_times: bytes
    expire_times: bytes
    has_expiry: bytes
    error_counts: bytes
    offsets: bytes
    data: bytes


def decode_columns(buf: bytes, pos: int, checked: bool, max_items: int = 65536) -> PutColumns:
    """The PUTs of the records from ``buf[pos:]`` as columns: the batch readers'
    decoder (the Spark queue source), with every check :func:`decode_batch` makes.

    ``checked``: the file uses CHECK records (this engine's); ``pos`` must then be
    a CHECK boundary (just after a CHECK, or the file's first record), and only
    PUTs a matching CHECK vouches for are returned: ``end`` is just past that
    CHECK, ``scanned - end`` bytes after it were decoded but wait for theirs (the
    caller decodes them again from ``end`` once it has more bytes).  Without CHECKs
    (libkestrel's files) every whole PUT counts, and ``end == scanned``.

    ``stop`` is "end" (the buffer ended at a record boundary, at ``scanned``),
    "incomplete" (inside the record at ``scanned``), "marker" (0x00 at ``scanned``)
    or "more": ``max_items`` PUTs were reached (at a CHECK: batches are never
    split), or a bad record or a CHECK that does not match follows the PUTs
    returned, which the next call (from ``end``) raises.  Raises :class:`BadRecord`
    (:class:`ChecksumMismatch`) only when it has no PUT to return first, with the
    offset :func:`decode_batch` gives it (a mismatch: where the bytes the CHECK
    covers start).  Records other than PUT and CHECK are skipped, as the cursor
    does.  Data lengths are bounded by the buffer, so nothing is allocated beyond
    it.
    """
    if pos < 0:
        raise ValueError("pos must be >= 0")
    if max_items < 1:
        raise ValueError("max_items must be >= 1")
    size = len(buf)
    view = memoryview(buf)
    ids: list[int] = []
    adds: list[int] = []
    expires: list[int] = []
    has: list[int] = []
    errs: list[int] = []
    datas: list[bytes] = []
    since = end = pos  # start of the bytes since the last CHECK; end of the records vouched for
    vouched = 0  # PUTs vouched for (all of them in a file without CHECKs)
    stop = "more"
    while vouched < max_items:
        if pos >= size:
            stop = "end"
            break
        cmd = buf[pos]
        if cmd in (PUT_BYTE, PUT_BYTE_EXPIRY):
            start = pos + (25 if cmd == PUT_BYTE else 33)
            if start > size:
                stop = "incomplete"
                break
            if cmd == PUT_BYTE:
                length, errors, xid, add_time = PUT_HEADER.unpack_from(buf, pos + 1)
                expire = None
            else:
                length, errors, xid, add_time, expire = PUT_HEADER_EXPIRY.unpack_from(buf, pos + 1)
            if length >= 0 and xid > 0 and 0 <= errors <= MAX_ERROR_COUNT:
                if start + length > size:
                    stop = "incomplete"
                    break
                ids.append(xid)
                adds.append(add_time)
                expires.append(0 if expire is None else expire)
                has.append(expire is not None)
                errs.append(errors)
                datas.append(buf[start : start + length])
                pos = start + length
                if not checked:
                    vouched, end = len(ids), pos
                continue
        elif cmd == CHECK_BYTE:
            if pos + 9 > size:
                stop = "incomplete"
                break
            if checked:
                mismatch = _check_mismatch(buf, view, pos, since, 0, 0)
                if mismatch is not None:
                    if vouched:
                        break  # "more": the PUTs vouched for first, the error on the next call
                    raise mismatch
                vouched, since = len(ids), pos + 9
            pos += 9
            if not checked:
                end = pos
            continue
        # Anything else (and PUTs with impossible fields, to get the right error).
        record_end, halt = _other_record(buf, pos, vouched > 0)
        if halt:
            stop = halt
            break
        pos = record_end  # not a PUT (a valid one takes the path above): skipped
        if not checked:
            end = pos
    if checked:
        end = since
    del ids[vouched:], adds[vouched:], expires[vouched:], has[vouched:], errs[vouched:], datas[vouched:]
    offsets = [0]
    total = 0
    for data in datas:
        total += len(data)
        offsets.append(total)
    return PutColumns(
        end,
        pos,
        stop,
        vouched,
        all(a < b for a, b in pairwise(ids)),
        struct.pack(f"<{vouched}q", *ids),
        struct.pack(f"<{vouched}q", *adds),
        struct.pack(f"<{vouched}q", *expires),
        bytes(has),
        struct.pack(f"<{vouched}i", *errs),
        struct.pack(f"<{vouched + 1}q", *offsets),
        b"".join(datas),
    )


def check_magic(head: bytes, magic: bytes) -> bool:
    """Whether ``head`` starts with ``magic``."""
    return bytes(head[:MAGIC_SIZE]) == magic


def decode_reader_file(data: bytes) -> tuple[int, list[int]]:
    """``(head, done ids)`` of a whole reader file (magic already checked by caller).

    Later READ_HEAD / READ_DONE records replace earlier ones, as in libkestrel.
    Every CHECK record must match the bytes since the previous one (or the magic),
    and a file that starts with an (empty) CHECK must end with a CHECK covering its
    records: truncating it, or damaging either CHECK, is then detected too.  Files
    without CHECKs (the previous version's, libkestrel's) are read as before.  A
    reader file always holds a READ_HEAD.  Raises :class:`Incomplete` /
    :class:`BadRecord` (reader files are written whole and renamed into place, so
    any damage is corruption).
    """
    pos = since = MAGIC_SIZE
    head: int | None = None
    done: list[int] = []
    checked = vouched = False
    while True:
        record, end = decode_record(data, pos)
        if record is None:
            if end < len(data) and any(data[end:]):
                raise BadRecord(end, "only zero bytes after the end marker")
            break
        if isinstance(record, ReadHead):
            head = record.xid
        elif isinstance(record, ReadDone):
            done = list(record.xids)
        elif isinstance(record, Check):
            if not check_matches(record, data[since:pos]):
                raise ChecksumMismatch(since, pos, pos - since, record.length)
            checked = checked or pos == MAGIC_SIZE
            vouched, since = record.length > 0, end
        elif isinstance(record, Put):
            raise BadRecord(pos, "READ_HEAD or READ_DONE in a reader file", "PUT")
        pos = end
    if checked and (since != pos or not vouched):
        raise BadRecord(since, "a CHECK record covering the reader records", "the file ends without one")
    if head is None:
        raise BadRecord(MAGIC_SIZE, "a READ_HEAD record", "none in the file")
    return head, done
