"""The one segment writer: how records reach a LOG/IDX segment and its ``.crc`` file.

Both writers of LOG/IDX segments use it: the store (:class:`engine.applog.AppendLog`,
for its active segment) and the Spark sink (``engine.spark.sink.ShardWriter``,
one shard per task).  So every segment on disk, whoever wrote it, has its
``.crc`` checksum side file and was written in the same order:

1. :meth:`SegmentWriter.add` encodes records (:func:`encode_batch`) into memory:
   log bytes and ``.crc`` entries into pending buffers, index entries into the
   in-memory copy of the segment's index, the new extent into the writer's
   state (one small list the encoder reads and updates);
2. :meth:`SegmentWriter.flush` writes the pending log bytes, then the checksums,
   then the index entries, so another process never meets an index entry whose
   record or checksum is not in the files yet; then the segment object takes
   the new extent, so readers in this process see what readers elsewhere see;
3. :meth:`SegmentWriter.sync` fdatasyncs the log, the ``.crc`` file, **then** the
   index: a durable index entry always names a durable, checksummed record, which
   is what lets recovery tell a torn tail from damage in the middle (see
   :mod:`engine.applog.recovery`).

:func:`create_segment` creates a segment's three files durably (each file's
header fsynced, then the directory): log first, then ``.crc``, then index.  An
index or ``.crc`` file without its log is an orphan that recovery deletes; a log
without an index gets one rebuilt; an empty log without a ``.crc`` file gets one.

The encoder is chosen once per process, here, at import: the compiled
``engine.applog._native.encode_batch`` when it is built (and
``ENGINE_PURE_PYTHON`` is not set), else the pure-Python reference
:func:`engine.applog.batch.encode_batch`.  Callers hold their own lock around
every method (the writer has none of its own); failures are raised, and the
caller decides what they poison.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

from engine.applog.batch import (
    CRC_OUT,
    LAST_TIME,
    LOG_AT,
    LOG_OUT,
    NEXT_INDEX,
    extent_field,
    new_state,
    set_extent_field,
)
from engine.applog.batch import encode_batch as encode_batch_reference
from engine.applog.codec import CRC_MAGIC, HEADER_SIZE, IDX_MAGIC, INT64_MIN, LOG_MAGIC, encode_header
from engine.applog.segment import Segment, crc_path, idx_path, log_path
from engine.fs import FileHandle, FileSystem, crashpoint, create_file
from engine.native import kernel

_TIME = struct.Struct("<q")  # an index entry's first field: i64 time_ns (8 bytes)
assert _TIME.size == 8

#: The record encoder of this process: the compiled twin when built, else the
#: pure-Python reference (same arguments, results, bytes, state and errors).
#: Any arguments: what is not what it takes is refused (TypeError, ValueError),
#: which the store's ``append`` relies on (its write state is None once the log
#: takes no record).
encode_batch: Callable[[Any, Any, Any, Any], int] = kernel("applog.encode_batch") or encode_batch_reference


def create_segment(fs: FileSystem, directory: str, base: int, ttl_ns: int) -> Segment:
    """Create the segment whose first record is ``base`` durably (see the module
    docstring for the order) and return it, empty, with its index in memory."""
    crashpoint("applog.roll.before-create-log")
    lh = create_file(fs, log_path(directory, base), encode_header(LOG_MAGIC, ttl_ns))
    ch: FileHandle | None = None
    try:
        crashpoint("applog.roll.before-create-crc")
        ch = create_file(fs, crc_path(directory, base), encode_header(CRC_MAGIC, 0))
        crashpoint("applog.roll.before-create-idx")
        ih = create_file(fs, idx_path(directory, base), encode_header(IDX_MAGIC, ttl_ns))
    except BaseException:
        lh.close()
        if ch is not None:
            ch.close()
        raise
    crashpoint("applog.roll.after-create-idx")
    return Segment(
        directory, base, ttl_ns, lh, ih, 0, HEADER_SIZE, None, None,
        bytearray(encode_header(IDX_MAGIC, ttl_ns)), crc=ch, mem_crc=bytearray(encode_header(CRC_MAGIC, 0)),
    )


class SegmentWriter:
    """The write side of one segment (see the module docstring).

    ``seg`` must have its three files open and its index in memory
    (``seg.mem_idx``).  The segment object describes what is in its files (its
    ``count``, ``log_size`` and times are those of the flushed records, which
    readers see); the writer's ``state`` (:func:`engine.applog.batch.new_state`)
    describes what was added, flushed or not: the encoder reads it and moves it
    on, and :meth:`flush` publishes it to the segment once the bytes are written.
    ``segment_bytes`` is the size a record may not push the log past (unless the
    segment is empty: it then takes one record of any size).  ``last_time``: the
    newest time of the records before this segment (INT64_MIN: none); the
    encoder stamps records no earlier.

    The owner (the store, or the Spark sink) says what happens when the segment
    is full and when the buffer is: ``roll()`` seals this segment (:meth:`seal`),
    creates the next one (:func:`create_segment`) and returns its writer;
    ``on_full()`` flushes (the store also poisons itself if that fails).  A
    writer flushes (``on_full()``) before it calls ``roll()``, so the owner sees
    the segment's final extent.

    ``report_each``: the encoder reports back after every call (its result is
    negative, so the caller's rare path runs every time), not only when the
    pending bytes reach ``buffer_bytes``: the store under ``sync="always"``
    takes a group-commit ticket there after every append, and its common path
    (every other sync policy) keeps one test of the encoder's result.
    """

    __slots__ = ("buffer_bytes", "flushed_crc", "flushed_idx", "on_full", "roll", "seg", "state")

    def __init__(
        self,
        seg: Segment,
        segment_bytes: int,
        buffer_bytes: int,
        roll: Callable[[], SegmentWriter],
        on_full: Callable[[], object],
        last_time: int | None = None,
        *,
        report_each: bool = False,
    ) -> None:
        if seg.mem_idx is None or seg.idx is None or seg.crc is None:
            raise ValueError(f"{seg.log_path}: a segment writer needs the index in memory and a .crc file")
        self.seg = seg
        self.buffer_bytes = buffer_bytes
        self.roll = roll
        self.on_full = on_full
        if last_time is None:
            last_time = INT64_MIN if seg.last_time is None else seg.last_time
        elif seg.last_time is not None:
            last_time = max(last_time, seg.last_time)
        # Log bytes and .crc entries of the records not yet written go to two
        # pending buffers; index entries go straight to the in-memory index.
        # The encoder says when the pending log bytes reach ``buffer_bytes``
        # (or after every call: report_each).
        self.state = new_state(
            bytearray(), bytearray(), seg.mem_idx, seg.base, seg.end, seg.log_size, segment_bytes, last_time,
            0 if report_each else buffer_bytes,
        )
        self.flushed_crc = seg.crc.size()  # bytes of the .crc file in the file
        self.flushed_idx = len(seg.mem_idx)  # bytes of the index in the file

    @property
    def next_index(self) -> int:
        """The index the next record added gets."""
        return extent_field(self.state, NEXT_INDEX)

    @property
    def last_time(self) -> int:
        """The newest record's time (INT64_MIN: none yet)."""
        return extent_field(self.state, LAST_TIME)

    @property
    def unflushed(self) -> bool:
        """Whether records were added since the last flush."""
        return extent_field(self.state, NEXT_INDEX) != self.seg.end

    def add(self, items: bytes | list[bytes] | tuple[bytes, ...], flags: int, time_ns: int) -> int:
        """Encode ``items`` (one record as exact ``bytes``, or a list or tuple of
        them, all with ``flags`` and ``time_ns``) as the log's next records and
        return the index of the first.  The records get ``time_ns`` or, if that
        is earlier, the newest record's time: callers refuse explicit times that
        go backwards themselves; a clock reading is passed as it is.

        This is the one path by which records are written: the store's
        ``append_many`` and the Spark sink call it, and the store's ``append``
        runs these same lines in its own frame (one Python call less per
        record).  One :func:`encode_batch` call encodes what fits the segment;
        when records are left over or the pending bytes reach ``buffer_bytes``
        (the encoder's result is negative), :meth:`settle` does the rest.  The
        encoder's ``TypeError`` or ``ValueError`` (bad arguments) changes nothing.
        """
        state = self.state
        first = extent_field(state, NEXT_INDEX)
        reported = encode_batch(items, flags, time_ns, state)
        if reported < 0:
            self.settle(items, reported, flags, time_ns)
        return first

    def settle(
        self, items: bytes | list[bytes] | tuple[bytes, ...], reported: int, flags: int, time_ns: int
    ) -> SegmentWriter:
        """What follows an :func:`encode_batch` call of ``items`` that
        reported back (``reported``, its negative result, ``~left``): put the
        ``left`` last of them in the next segments, flushing this one
        (``on_full()``) and then ``roll()`` for each segment they fill; then
        flush if the pending bytes reached ``buffer_bytes``.  Returns the writer
        of the segment the last record went to.  The one definition of both,
        for :meth:`add` and the store's ``append``."""
        writer = self
        left = ~reported
        while left > 0:
            if type(items) is not bytes:
                items = items[len(items) - left :]
            writer.on_full()
            writer = writer.roll()
            reported = encode_batch(items, flags, time_ns, writer.state)
            left = ~reported if reported < 0 else 0
        if len(writer.state[LOG_OUT]) >= writer.buffer_bytes:
            writer.on_full()
        return writer

    def flush(self) -> None:
        """Write the added records (log bytes, then checksums, then index
        entries), then publish them: the segment's extent becomes the state's."""
        seg = self.seg
        state = self.state
        end = extent_field(state, NEXT_INDEX)
        if end == seg.end:
            return
        assert seg.mem_idx is not None and seg.idx is not None and seg.crc is not None
        pend_log: bytearray = state[LOG_OUT]
        pend_crc: bytearray = state[CRC_OUT]
        # write_parts_at writes the buffers themselves (no copy on the OS; the
        # crash simulator keeps its own).  Checksums after the records, index
        # entries last: a reader in another process never meets an entry whose
        # record or checksum is not written.
        seg.log.write_parts_at(seg.log_size, (pend_log,))
        seg.crc.write_parts_at(self.flushed_crc, (pend_crc,))
        with memoryview(seg.mem_idx) as mem:
            seg.idx.write_parts_at(self.flushed_idx, (mem[self.flushed_idx :],))
        self.flushed_crc += len(pend_crc)
        self.flushed_idx = len(seg.mem_idx)
        if seg.mem_crc is not None:  # reads of this segment check records against it
            seg.mem_crc += pend_crc
        log_size = seg.log_size + len(pend_log)
        set_extent_field(state, LOG_AT, log_size)
        pend_log.clear()
        pend_crc.clear()
        if not seg.count:
            seg.first_time = _TIME.unpack_from(seg.mem_idx, HEADER_SIZE)[0]
        seg.count = end - seg.base
        seg.log_size = log_size
        seg.last_time = extent_field(state, LAST_TIME)

    def sync(self) -> None:
        """fdatasync what :meth:`flush` wrote: the log, the checksums, then the
        index (an acknowledged record must verify after a crash, or recovery would
        cut it as torn)."""
        seg = self.seg
        crashpoint("applog.sync.before-log-fsync")
        seg.log.fdatasync()
        crashpoint("applog.sync.before-crc-fsync")
        if seg.crc is not None:
            seg.crc.fdatasync()
        crashpoint("applog.sync.before-idx-fsync")
        if seg.idx is not None:
            seg.idx.fdatasync()
        crashpoint("applog.sync.after-idx-fsync")

    def seal(self) -> None:
        """Flush and sync the segment before the next one is created (segments are
        contiguous on disk), and stop keeping its index in memory."""
        seg = self.seg
        self.flush()
        crashpoint("applog.roll.before-seal-fsync")
        seg.log.fdatasync()
        if seg.crc is not None:
            seg.crc.fdatasync()
        if seg.idx is not None:
            seg.idx.fdatasync()
        crashpoint("applog.roll.after-seal-fsync")
        seg.mem_idx = None  # sealed: read through the handle from now on
        seg.mem_crc = None
