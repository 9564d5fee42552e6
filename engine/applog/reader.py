"""The lock-free reader: :class:`LogReader` reads a log another process writes.

A reader never takes the writer's lock and never changes a file.  It lists the
segments, and for each one trusts only index entries that agree with the log (the
entry names record ``base + position``, the log holds a whole record at its offset
with its time, and, in a segment with a ``.crc`` file, the record matches its
checksum).  An entry at the end that does not agree yet is one the writer is
still writing, or a crash tail the writer's next open will cut: either way the
reader stops before it, so it never returns a record whose entry is not written.

The directory is re-read when a lookup goes past the known end, on
:meth:`LogReader.refresh`, and on every poll of ``follow``.  Segments deleted by
``expire`` stay readable through handles already open (POSIX semantics); a lookup
below the new first index raises IndexError.
"""

from __future__ import annotations

from types import TracebackType

from engine.applog.codec import (
    CRC_SIZE,
    ENTRY_SIZE,
    HEADER_SIZE,
    IDX_MAGIC,
    RECORD_HEADER,
    RECORD_HEADER_SIZE,
    check_header,
    crc_offset,
    entry_count,
    parse_segment_name,
    record_crc,
)
from engine.applog.segment import Segment, crc_path, idx_path, log_path
from engine.applog.view import START_FILE, LogView, parse_start, read_headers
from engine.errors import CorruptFileError, FormatError
from engine.fs import FileHandle, FileSystem, OpenMode, RecoveryReport, resolve

#: How far back from the index's end the reader looks for an agreeing entry before
#: deciding the index is damaged rather than mid-write.
MAX_TAIL_STEPS = 4096


class LogReader(LogView):
    """Read-only access to an append log directory, safe alongside a live writer.

    Same queries as :class:`~engine.applog.AppendLog`: ``get``, ``scan``,
    ``between``, ``index_at_time``, ``follow``, ``segments()``, ``first_index``,
    ``next_index``, ``verify()``.  Use :meth:`open`; close it when done.
    """

    def __init__(self, fs: FileSystem, directory: str) -> None:
        super().__init__(directory)
        self._fs = fs
        #: Always empty: a reader repairs nothing (the writer's next open does).
        self.recovery = RecoveryReport(self.directory)

    @classmethod
    def open(cls, directory: str, *, fs: FileSystem | None = None) -> LogReader:
        """Open the log in ``directory`` for reading (it must exist)."""
        fsys = resolve(fs)
        if not fsys.isdir(directory):
            raise FileNotFoundError(f"{directory}: no such append log directory")
        self = cls(fsys, directory)
        try:
            self.refresh()
        except BaseException:
            self.close()
            raise
        return self

    # -- keeping current ---------------------------------------------------------------
    def refresh(self) -> None:
        """Re-read the directory listing, the start checkpoint and index sizes."""
        with self._lock:
            self._check_open()
            fs = self._fs
            bases = sorted(
                p[0] for p in map(parse_segment_name, fs.listdir(self.directory)) if p is not None and p[1] == ".log"
            )
            known = {s.base: s for s in self._segments}
            keep: list[Segment] = []
            for base in bases:
                seg = known.pop(base, None)
                if seg is None:
                    try:
                        seg = self._open_segment(base)
                    except FileNotFoundError:
                        continue  # deleted between listdir and open
                keep.append(seg)
            for gone in known.values():
                self._index_cache.pop(gone.base, None)
                gone.close()
            for seg in keep:
                self._update_count(seg)
            self._segments = keep
            self._bases = [s.base for s in keep]
            start_path = f"{self.directory}/{START_FILE}"
            try:
                with fs.open(start_path) as h:
                    self._start = parse_start(h.read_all(), start_path)
            except FileNotFoundError:
                self._start = keep[0].base if keep else 0

    def _prepare_read(self, index: int | None) -> None:
        # Lookups inside the known range need no directory listing: sealed
        # segments never change and the newest only grows.
        if index is None or not self._segments or index >= self._segments[-1].end:
            self.refresh()

    def _open_segment(self, base: int) -> Segment:
        lpath = log_path(self.directory, base)
        lh = self._fs.open(lpath, OpenMode.READ)
        ih: FileHandle | None = None
        ch: FileHandle | None = None
        try:
            head = lh.read_at(0, HEADER_SIZE)
            ttl = read_headers(head, lpath) if len(head) == HEADER_SIZE else 0
            if 0 < len(head) < HEADER_SIZE and not head.startswith(b"LOG"[: len(head)]):
                raise FormatError(lpath, 0, "a LOG header", repr(head))
            try:
                ih = self._fs.open(idx_path(self.directory, base), OpenMode.READ)
            except FileNotFoundError:
                ih = None  # being created, or lost in a crash: no visible records yet
            try:
                ch = self._fs.open(crc_path(self.directory, base), OpenMode.READ)
            except FileNotFoundError:
                ch = None  # the original LOG/IDX writer's segment, or being created (looked for again later)
        except BaseException:
            lh.close()
            if ih is not None:
                ih.close()
            raise
        return Segment(self.directory, base, ttl, lh, ih, 0, HEADER_SIZE, None, None, crc=ch)

    def _entry_agrees(self, seg: Segment, position: int, log_size: int) -> tuple[int, int] | None:
        """``(time, end)`` of the record entry ``position`` names, if they agree."""
        assert seg.idx is not None
        raw = seg.idx.read_at(HEADER_SIZE + ENTRY_SIZE * position, ENTRY_SIZE)
        if len(raw) < ENTRY_SIZE:
            return None
        time_ns = int.from_bytes(raw[0:8], "little", signed=True)
        index = int.from_bytes(raw[8:16], "little")
        offset = int.from_bytes(raw[16:24], "little", signed=True)
        if index != seg.base + position or not HEADER_SIZE <= offset <= log_size - RECORD_HEADER_SIZE:
            return None
        head = seg.log.read_at(offset, RECORD_HEADER_SIZE)
        if len(head) < RECORD_HEADER_SIZE:
            return None
        size, _flags, rec_time = RECORD_HEADER.unpack(head)
        end = offset + RECORD_HEADER_SIZE + size
        if rec_time != time_ns or end > log_size:
            return None
        if seg.crc is not None:
            # The writer writes the checksum before the entry: a missing or
            # wrong one means a torn record (the next open cuts it), never data.
            raw_crc = seg.crc.read_at(crc_offset(position), CRC_SIZE)
            if len(raw_crc) < CRC_SIZE:
                return None
            data = seg.log.read_at(offset + RECORD_HEADER_SIZE, size)
            if len(data) != size or record_crc(head, data) != int.from_bytes(raw_crc, "little"):
                return None
        return time_ns, end

    def _update_count(self, seg: Segment) -> None:
        if seg.idx is None:
            try:
                seg.idx = self._fs.open(seg.idx_path, OpenMode.READ)
            except FileNotFoundError:
                return
        if seg.crc is None and seg.count == 0:
            try:
                seg.crc = self._fs.open(seg.crc_path, OpenMode.READ)
            except FileNotFoundError:
                pass
        idx_size = seg.idx.size()
        if seg.ttl_ns == 0 and seg.count == 0:
            head = seg.log.read_at(0, HEADER_SIZE)
            if len(head) == HEADER_SIZE:
                seg.ttl_ns = read_headers(head, seg.log_path)
        if idx_size >= HEADER_SIZE and seg.count == 0:
            check_header(seg.idx.read_at(0, HEADER_SIZE), IDX_MAGIC, seg.idx_path)
        n = entry_count(idx_size)
        if n == seg.count:
            return
        log_size = seg.log.size()
        floor = 0 if n < seg.count else seg.count  # the writer cut a tail: look again
        position = n - 1
        steps = 0
        while position >= floor:
            found = self._entry_agrees(seg, position, log_size)
            if found is not None:
                seg.count = position + 1
                seg.log_size = found[1]
                seg.last_time = found[0]
                if seg.first_time is None or floor == 0:
                    first = self._entry_agrees(seg, 0, log_size)
                    seg.first_time = first[0] if first is not None else None
                return
            position -= 1
            steps += 1
            if steps > MAX_TAIL_STEPS:
                raise CorruptFileError(
                    seg.idx_path, HEADER_SIZE + ENTRY_SIZE * position,
                    "index entries that agree with the log", f"{steps} disagreeing entries at the end",
                )
        if floor == 0:
            seg.count, seg.log_size, seg.first_time, seg.last_time = 0, HEADER_SIZE, None, None

    # -- self-check and closing -----------------------------------------------------------
    def verify(self) -> list[str]:
        """Check every invariant of the files as they are now.  A torn tail of the
        newest segment is a note (the writer's next open cuts it), anything else
        an error."""
        with self._lock:
            self.refresh()
            contents = {}
            for seg in self._segments:
                idx = seg.idx.read_all() if seg.idx is not None else b""
                crc = seg.crc.read_all() if seg.crc is not None else None
                contents[seg.base] = (seg.log.read_all(), idx, crc)
            return self._verify_segments(contents, tail_ok=True)

    def close(self) -> None:
        with self._lock:
            for seg in self._segments:
                seg.close()
            self._segments = []
            self._bases = []
            self._closed = True

    def __enter__(self) -> LogReader:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
