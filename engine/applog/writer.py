"""The one segment writer: how records reach a LOG/IDX segment and its ``.crc`` file.

Both writers of LOG/IDX segments use it: the store (:class:`engine.applog.AppendLog`,
for its active segment) and the Spark sink (``engine.spark.sink.ShardWriter``,
one shard per task).  So every segment on disk, whoever wrote it, has its
``.crc`` checksum side file and was written in the same order:

1. :meth:`SegmentWriter.add` encodes records (:func:`encode_batch`) into memory:
   log bytes and ``.crc`` entries into pending buffers, index entries into the
   in-memory copy of the segment's index;
2. :meth:`SegmentWriter.flush` writes the pending log bytes, then the checksums,
   then the index entries, so another process never meets an index entry whose
   record or checksum is not in the files yet;
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

from collections.abc import Callable, Sequence

from engine.applog.batch import encode_batch as encode_batch_reference
from engine.applog.codec import CRC_MAGIC, HEADER_SIZE, IDX_MAGIC, LOG_MAGIC, encode_header
from engine.applog.segment import Segment, crc_path, idx_path, log_path
from engine.fs import FileHandle, FileSystem, crashpoint, create_file
from engine.native import load as load_native

_native = load_native("engine.applog._native")

#: The record encoder of this process: the compiled twin when built, else the
#: pure-Python reference (same arguments, results, bytes and errors).
encode_batch: Callable[..., int] = _native.encode_batch if _native is not None else encode_batch_reference


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
        bytearray(encode_header(IDX_MAGIC, ttl_ns)), crc=ch,
    )


class SegmentWriter:
    """The write side of one segment (see the module docstring).

    ``seg`` must have its three files open and its index in memory
    (``seg.mem_idx``); its ``count``, ``log_size`` and times include the records
    added but not yet flushed, which is what readers in this process see.
    ``segment_bytes`` is the size a record may not push the log past (unless the
    segment is empty: it then takes one record of any size).

    The owner (the store, or the Spark sink) says what happens when the segment
    is full and when the buffer is: ``roll()`` seals this segment (:meth:`seal`),
    creates the next one (:func:`create_segment`) and returns its writer;
    ``on_full()`` flushes (the store also poisons itself if that fails).
    """

    __slots__ = ("buffer_bytes", "flushed_crc", "flushed_end", "flushed_idx", "flushed_log", "on_full", "pend_crc",
                 "pend_log", "roll", "seg", "segment_bytes")

    def __init__(
        self,
        seg: Segment,
        segment_bytes: int,
        buffer_bytes: int,
        roll: Callable[[], SegmentWriter],
        on_full: Callable[[], object],
    ) -> None:
        if seg.mem_idx is None or seg.idx is None or seg.crc is None:
            raise ValueError(f"{seg.log_path}: a segment writer needs the index in memory and a .crc file")
        self.seg = seg
        self.segment_bytes = segment_bytes
        self.buffer_bytes = buffer_bytes
        self.roll = roll
        self.on_full = on_full
        self.pend_log = bytearray()  # log bytes of the records not yet written
        self.pend_crc = bytearray()  # their .crc entries
        self.flushed_log = seg.log_size  # bytes of the log in the file
        self.flushed_crc = seg.crc.size()  # bytes of the .crc file in the file
        self.flushed_idx = len(seg.mem_idx)  # bytes of the index in the file
        self.flushed_end = seg.end  # records in the files

    @property
    def unflushed(self) -> bool:
        """Whether records were added since the last flush."""
        return self.seg.end != self.flushed_end

    def add(self, items: Sequence[bytes], flags: int, time_ns: int) -> int:
        """Encode ``items`` (exact ``bytes``, all with ``flags`` and ``time_ns``,
        which the caller has checked: not earlier than the newest record) as the
        log's next records and return the index of the first.

        Records that do not fit this segment go to the next ones (``roll()``);
        once the pending bytes reach ``buffer_bytes``, ``on_full()`` is called.
        This is the one path by which records are written: the store's ``append``
        and ``append_many`` and the Spark sink all come here.  One loop turn per
        segment the items span, one :func:`encode_batch` call in each.
        """
        writer = self
        seg = self.seg
        count = seg.count
        first = index = seg.base + count
        start = 0
        n = len(items)
        while True:
            pend = writer.pend_log
            before = len(pend)
            stop: int = encode_batch(
                items, start, flags, time_ns, index, seg.log_size, writer.segment_bytes, count,
                pend, writer.pend_crc, seg.mem_idx,
            )
            if stop != start:
                if not count:
                    seg.first_time = time_ns
                seg.count = count + stop - start
                seg.log_size += len(pend) - before
                seg.last_time = time_ns
            if stop == n:
                break
            writer = writer.roll()
            seg = writer.seg
            count = seg.count
            index = seg.base + count
            start = stop
        if len(pend) >= writer.buffer_bytes:
            writer.on_full()
        return first

    def flush(self) -> None:
        """Write the added records: log bytes, then checksums, then index entries."""
        seg = self.seg
        if seg.end == self.flushed_end:
            return
        assert seg.mem_idx is not None and seg.idx is not None and seg.crc is not None
        # write_parts_at writes the buffers themselves (no copy on the OS; the
        # crash simulator keeps its own).  Checksums after the records, index
        # entries last: a reader in another process never meets an entry whose
        # record or checksum is not written.
        seg.log.write_parts_at(self.flushed_log, (self.pend_log,))
        seg.crc.write_parts_at(self.flushed_crc, (self.pend_crc,))
        with memoryview(seg.mem_idx) as mem:
            seg.idx.write_parts_at(self.flushed_idx, (mem[self.flushed_idx :],))
        self.flushed_crc += len(self.pend_crc)
        self.pend_log.clear()
        self.pend_crc.clear()
        self.flushed_log = seg.log_size
        self.flushed_idx = len(seg.mem_idx)
        self.flushed_end = seg.end

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
