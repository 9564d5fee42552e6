"""Writer files: the chunked record scanner, first ids, the tail scan, creation.

A queue's writer files ("segments") hold PUT records with increasing ids.  Nothing
here keeps items in memory: a :class:`RecordScanner` holds one read buffer (a chunk
of the file) and a byte offset; a :class:`Segment` only knows its number, path and
first id.  That is what makes opening a queue independent of its backlog.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from engine.errors import CorruptFileError, FormatError
from engine.fs import FileHandle, FileSystem, create_file
from engine.native import kernel
from engine.queue import codec, naming

log = logging.getLogger("engine.queue")

#: Bytes read per chunk by scanners (grows for records bigger than this).
CHUNK = 256 * 1024

#: The readers' decoder: the compiled twin of :func:`codec.decode_batch` when it is
#: built (``engine/queue/_native.c``), chosen once per process; the pure function
#: otherwise, and always with ``ENGINE_PURE_PYTHON=1``.
decode_batch = kernel("queue.decode_batch") or codec.decode_batch
#: The writer's CHECK record of each write (its CRC-32 over up to 64 KiB), chosen
#: the same way: the compiled twin of :func:`codec.encode_check` or the function.
encode_check = kernel("queue.encode_check") or codec.encode_check


@dataclass
class Segment:
    """One writer file: ``<queue>.<number>``, whose first PUT has ``first_id``."""

    number: int
    path: str
    first_id: int | None  # None while the file holds no PUT yet


class RecordScanner:
    """Sequential, resumable record reader over one open file, from its first record.

    ``next(limit)`` returns the next whole record that ends at or before ``limit``,
    or None, setting :attr:`stop` to ``"end"`` (exactly at ``limit``), ``"incomplete"``
    (a record starts before ``limit`` but does not end by it: torn, or still being
    written) or ``"marker"`` (the 0x00 end marker).  Malformed bytes raise
    :class:`codec.BadRecord` carrying the absolute offset.  ``limit`` may grow
    between calls (a tailing reader).  No size limit but the file's: a record's
    data length is trusted only as far as the file holds its bytes.

    :meth:`next_batch` (the readers' path) returns PUTs only once a CHECK record has
    vouched for them, in files that start with a CHECK (this engine's): a damaged
    byte is a :class:`codec.ChecksumMismatch`, never a delivered item.
    """

    def __init__(self, handle: FileHandle, offset: int, chunk: int = CHUNK) -> None:
        self.handle = handle
        self.offset = offset
        self.stop = ""
        self._chunk = chunk
        self._buf = b""
        self._buf_off = offset
        # next_batch's verification state: whether the file uses CHECKs (decided by
        # its first record; None until read), the PUTs decoded after the last CHECK
        # (not handed out yet) and the crc32 / length of their bytes.
        self.checked: bool | None = None if offset == codec.MAGIC_SIZE else False
        self._pending: list[codec.Put] = []
        self._crc = 0
        self._covered = 0
        self._foreign = False  # the records after the last CHECK were accepted as another program's

    @property
    def unverified(self) -> int:
        """Bytes decoded after the last CHECK (files with CHECKs): records that no
        CHECK has vouched for yet, and that :meth:`next_batch` has not returned."""
        return self._covered

    def span(self, start: int, end: int) -> bytes:
        """The raw bytes ``[start, end)`` of the file (from the buffer if there)."""
        if self._buf_off <= start and end <= self._buf_off + len(self._buf):
            return self._buf[start - self._buf_off : end - self._buf_off]
        return self.handle.read_at(start, end - start)

    def next_batch(self, limit: int, max_records: int = 4096) -> list[codec.Put]:
        """The next verified PUTs (up to about ``max_records`` records decoded) of
        records ending by ``limit`` (the readers' fast path).

        An empty list means nothing more now; :attr:`stop` says why, as for
        :meth:`next`, and :attr:`unverified` how many bytes after the last CHECK
        wait for theirs.  A malformed record or a CHECK that does not match is
        raised only once the verified records before it have been returned.
        """
        if self._foreign:
            self._foreign = False
            ready, self._pending, self._crc, self._covered = self._pending, [], 0, 0
            return ready
        while True:
            buf = self._buf
            pos = self.offset - self._buf_off
            if 0 <= pos < len(buf):
                if self.checked is None:
                    self.checked = self._uses_checks(buf, pos)
                pending = self._pending
                try:
                    end, stop, verified, self._crc, self._covered = decode_batch(
                        buf, pos, pending, self._crc if self.checked else None, self._covered, max_records=max_records
                    )
                except codec.BadRecord as exc:
                    raise exc.shifted(self._buf_off) from None
                self.offset = self._buf_off + end
                if verified == len(pending):
                    self._pending = []
                    ready = pending
                else:
                    ready = pending[:verified]
                    del pending[:verified]
                if ready:
                    return ready
                if stop == "marker":
                    self.stop = "marker"
                    if self.checked:
                        self._check_after_marker(limit)
                    return ready
                if stop == "more":
                    continue  # nothing vouched for yet, more records in the buffer
                # nothing whole (or verified) in the buffer from here: read more below
            if not self._read_more(self.offset, limit):
                return []

    def accept_foreign_tail(self, last_id: int | None, next_id: int | None) -> bool:
        """In a FINISHED file with CHECKs that ended (at its end, or at an end
        marker followed by zeros) after records no CHECK vouches for: accept them
        when they are whole PUTs whose ids continue from ``last_id`` (None: from
        the first one's) up to the id before ``next_id`` (the next file's first;
        None: unknown), what libkestrel appends to a queue this engine wrote
        before it starts a newer file (:func:`foreign_records`).  This engine
        fsyncs a file before it creates the next, so they are not a torn write
        of its own.  The next decode then returns them; False: they are damage."""
        if not self.checked or not self._covered or self.stop not in ("end", "marker"):
            return False
        start = self.offset - self._covered
        data = self.span(start, self.offset)
        if self.stop == "marker" and data[-1:] == b"\0":
            # The zero tail reaches back into the last record: a preallocated tail
            # starts where the records end, but damage that zeroed this engine's
            # last CHECK and the payload before it looks just like this (the
            # payload's zeros decode as bytes).  Never delivered as data.
            return False
        _, count, top, clean = foreign_records(data, last_id)
        if not (clean and count) or (next_id is not None and top + 1 != next_id):
            return False
        self._foreign = True
        return True

    def rewind_to(self, offset: int) -> None:
        """Forget what was decoded after the last CHECK (at ``offset``) and read the
        file again from there (see ``JournalCursor._reread``)."""
        self.offset = self._buf_off = offset
        self._buf = b""
        self._pending = []
        self._crc = 0
        self._covered = 0
        self._foreign = False
        self.stop = ""

    def _uses_checks(self, buf: bytes, pos: int) -> bool:
        """Whether the file (its first record at ``buf[pos]``) uses CHECK records.

        Files this engine writes start with an (empty) CHECK; libkestrel's have
        none.  A file whose first record is something else but which holds a
        valid CHECK in its first chunk is one this engine wrote, with a damaged start: read
        as a libkestrel file it would go unverified, so it is damage.
        """
        if buf[pos] == codec.CHECK_BYTE:
            return True
        if codec.find_valid_check(buf, pos, pos) is not None:
            raise codec.BadRecord(
                self._buf_off + pos, "the empty CHECK record files with CHECK records start with", f"{buf[pos]:#04x}"
            )
        return False

    def _check_after_marker(self, limit: int) -> None:
        """An end marker (0x00) in a file with CHECKs: the writer never writes one,
        and a zero tail (a crash's) is all zeros; data after it is damage."""
        rest = self.handle.read_at(self.offset, limit - self.offset)
        if rest.strip(b"\0"):
            raise codec.BadRecord(self.offset, "only zero bytes after an end marker", "data after it")

    def next(self, limit: int) -> codec.Record | None:
        while True:
            pos = self.offset - self._buf_off
            if 0 <= pos < len(self._buf):
                try:
                    record, end = codec.decode_record(self._buf, pos)
                except codec.Incomplete:
                    pass  # fall through and read more
                except codec.BadRecord as exc:
                    raise codec.BadRecord(self._buf_off + exc.offset, exc.expected, exc.found) from None
                else:
                    if record is None:
                        self.stop = "marker"
                        return None
                    self.offset = self._buf_off + end
                    return record
            if not self._read_more(self.offset, limit):
                return None

    def _read_more(self, start: int, limit: int) -> bool:
        """Buffer the file from ``start`` (where the bytes not yet used begin): a
        chunk, or twice what is buffered past ``start`` if more, up to ``limit``.
        False, with :attr:`stop` set, when there is nothing more to read now."""
        have_end = max(self._buf_off + len(self._buf), self.offset)
        if have_end >= limit:
            self.stop = "incomplete" if self.offset < limit else "end"
            return False
        pending = max(0, have_end - start)
        want = min(max(self._chunk, 2 * pending), limit - start)
        data = self.handle.read_at(start, want)
        self._buf, self._buf_off = data, start
        if len(data) <= pending:  # the file is shorter than limit said
            self.stop = "incomplete" if data else "end"
            return False
        return True


def is_half_created(head: bytes) -> bool:
    """A writer file cut short before its magic was durable (a crash in create)."""
    return len(head) < codec.MAGIC_SIZE and codec.WRITER_MAGIC.startswith(head)


#: How a file written by this engine starts: the magic and an empty CHECK record,
#: which says "every batch in this file is followed by a CHECK" (files written by
#: libkestrel have none, and are trusted record by record as before).
SEGMENT_HEADER = codec.WRITER_MAGIC + codec.encode_check(b"")


def open_segment_handle(fs: FileSystem, path: str, *, allow_short: bool = False) -> FileHandle:
    """Open a writer file for reading and check its magic (FormatError if foreign).

    ``allow_short``: accept a file still shorter than its magic (being created, or
    left so by a crash during creation; the writer rewrites it on open).
    """
    handle = fs.open(path)
    try:
        head = handle.read_at(0, codec.MAGIC_SIZE)
        if head != codec.WRITER_MAGIC and not (allow_short and is_half_created(head)):
            what = "truncated header" if len(head) < codec.MAGIC_SIZE else head.hex(" ")
            raise FormatError(path, 0, "writer journal magic 27 64 26 03", what)
    except BaseException:
        handle.close()
        raise
    return handle


_FIRST_READ = 64 * 1024 + 4096


def read_first_id(fs: FileSystem, path: str, *, finished: bool) -> int | None:
    """The id of the first PUT in ``path`` (None if it has none yet), once the CHECK
    after it has vouched for it (files with CHECKs).

    Reads only the first batch: this is what keeps open O(files), not O(items).
    In a ``finished`` file (not the newest) damage there raises CorruptFileError: a
    wrong or missing first id would move where readers start, and items would be
    skipped without a word.  In the newest file it may be a write in progress or a
    torn tail (the writer's open scans that file whole): None.
    """
    with open_segment_handle(fs, path, allow_short=True) as handle:
        # One read of the size of a writer's batch (64 KiB) and one decode of its
        # records: the first id needs the CHECK after the first batch.
        scanner = RecordScanner(handle, codec.MAGIC_SIZE, chunk=_FIRST_READ)
        size = handle.size()
        try:
            puts = scanner.next_batch(size)
        except codec.BadRecord as exc:
            if finished:
                raise corrupt(path, exc) from None
            return None
        if puts:
            return puts[0].xid
        if finished and (scanner.stop == "incomplete" or scanner.unverified):
            where = scanner.offset - scanner.unverified
            raise CorruptFileError(path, where, "a whole, checked first write", "the file ends inside it")
        return None


def list_segments(
    fs: FileSystem, directory: str, queue: str, *, strict: bool = True, known: list[Segment] | None = None
) -> list[Segment]:
    """The writer files of ``queue``, oldest first, with their first ids.

    ``known``: files listed before whose first ids are known (not read again).
    ``strict``: damage at the start of a finished file raises (see
    :func:`read_first_id`); ``engine queue repair`` lists leniently (None).  A
    writer file that is a symbolic link (dangling or not) is damage, never
    skipped (CorruptFileError)."""
    cached = {seg.number: seg for seg in known or () if seg.first_id is not None}
    numbered = sorted(
        (number, filename)
        for filename in fs.listdir(directory)
        if (number := naming.parse_writer(queue, filename)) is not None
    )
    newest = numbered[-1][0] if numbered else None
    found = []
    for number, filename in numbered:
        seg = cached.get(number)
        if seg is not None:
            found.append(seg)
            continue
        path = naming.join(directory, filename)
        try:
            found.append(Segment(number, path, read_first_id(fs, path, finished=strict and number != newest)))
        except FileNotFoundError:
            if fs.is_symlink(path):
                raise CorruptFileError(
                    path, 0, "a regular file (a queue's files are never symbolic links)", "a dangling symbolic link"
                ) from None
            continue  # retired meanwhile (by another producer): as if listed a moment later
    return found


@dataclass
class TailScan:
    """What a full scan of one writer file found."""

    last_id: int | None  # id of the last whole, valid PUT
    count: int  # PUTs found
    good_end: int  # offset just past the last good record
    size: int  # file size at the time of the scan
    problem: str | None  # why the scan stopped before ``size`` (None: clean end)
    #: Where the damage that stopped the scan starts (None: clean, or only an
    #: unverified batch at the very end).
    damage_offset: int | None = None
    #: Offset of a whole, matching CHECK record *after* the damage (files with
    #: CHECKs only).  Not None means the damage is in the middle of the file, not a
    #: torn tail: cutting there would drop checksummed data.
    valid_after: int | None = None
    #: The file starts with the empty CHECK (this engine wrote it), so every
    #: write in it ends with a CHECK.
    uses_checks: bool = False

    def mid_file_error(self, path: str) -> CorruptFileError:
        """The error for damage with valid data after it (see :attr:`valid_after`)."""
        assert self.damage_offset is not None and self.valid_after is not None
        return CorruptFileError(
            path,
            self.damage_offset,
            "a valid record (damage in the middle of the file: run `engine queue repair`)",
            f"{self.problem}; a valid check record follows at offset {self.valid_after}",
        )


def scan_file(handle: FileHandle, path: str, *, after_id: int = 0) -> TailScan:
    """Scan a whole writer file and say where its valid records end.

    Used on the newest file at open (to find the tail id and a torn tail) and by
    ``verify``.  Ids must strictly increase, starting above ``after_id``; within the
    file each PUT must be the previous id + 1 (the writer assigns tail + 1).

    In files this engine wrote (they start with a CHECK record), every batch of PUTs
    is followed by a CHECK with its crc32: a batch whose CHECK is missing or does not
    match was torn by a crash, and the valid part ends before it.  That is what
    catches a record whose header survived but whose data is zeros or garbage.
    """
    size = handle.size()
    scanner = RecordScanner(handle, codec.MAGIC_SIZE)
    last: int | None = None
    count = 0
    problem: str | None = None
    uses_checks = False
    batch_start = codec.MAGIC_SIZE
    verified: tuple[int | None, int] = (None, 0)
    first = True
    damage: int | None = None  # where the damage starts
    search_from = 0  # where a valid CHECK after the damage may start
    while True:
        start = scanner.offset
        try:
            record = scanner.next(size)
        except codec.BadRecord as exc:
            problem = f"bad record at offset {exc.offset}: expected {exc.expected}" + (
                f", found {exc.found}" if exc.found else ""
            )
            damage, search_from = exc.offset, exc.offset + 1
            break
        if record is None:
            if scanner.stop == "incomplete":
                problem = f"incomplete record at offset {scanner.offset}"
                damage, search_from = scanner.offset, scanner.offset + 1
            elif scanner.stop == "marker" and scanner.offset < size:
                problem = f"end marker at offset {scanner.offset} followed by {size - scanner.offset - 1} bytes"
                damage, search_from = scanner.offset, scanner.offset + 1
            break
        if isinstance(record, codec.Check):
            if first:
                uses_checks = True
            elif not codec.check_matches(record, scanner.span(batch_start, start)):
                problem = f"check record at offset {start} does not match the {start - batch_start} bytes before it"
                # The damage is somewhere in the batch this CHECK covers.
                damage, search_from = batch_start, start + 1
                scanner.offset = start
                break
            batch_start = scanner.offset
            verified = (last, count)
        elif isinstance(record, codec.Put):
            if (last is not None and record.xid != last + 1) or record.xid <= after_id:
                problem = f"out-of-sequence id {record.xid} at offset {start} (previous {last or after_id})"
                damage, search_from = start, start + 1
                scanner.offset = start
                break
            last = record.xid
            count += 1
        first = False
    good_end = scanner.offset
    if uses_checks and good_end > batch_start:
        # Records after the last CHECK were never vouched for: a torn batch.
        problem = problem or f"{good_end - batch_start} bytes after the last check record are unverified"
        good_end = batch_start
        last, count = verified
    valid_after = None
    if uses_checks and damage is not None and search_from < size:
        # Our writer ends every write with a CHECK, so a torn tail has nothing valid
        # after it.  A matching CHECK after the damage means the damage is in the
        # middle: the caller must not cut it off as if it were a torn tail.
        rest = handle.read_at(batch_start, size - batch_start)
        hit = codec.find_valid_check(rest, search_from - batch_start, 0)
        valid_after = None if hit is None else batch_start + hit
    return TailScan(last, count, good_end, size, problem, damage, valid_after, uses_checks)


def foreign_records(data: bytes, last_id: int | None) -> tuple[int, int, int, bool]:
    """The whole PUT records at the start of ``data`` (the bytes after a file's
    last CHECK) whose ids continue from ``last_id`` one by one (None: from the
    first one's): ``(end, count, last id, clean)``, ``end`` just past the last of
    them and ``clean`` when they end exactly at the end of ``data``.

    What libkestrel appends to the newest file of a queue this engine wrote (it
    writes no CHECK), or, at the end of a finished file, what it appended before
    it started a newer one.  A torn write of this engine never ends cleanly at
    the end of the data with whole records: its CHECK is missing, so the zeros
    or garbage after the tear are in the file too (see docs/formats/queue.md)."""
    pos, count, top = 0, 0, last_id
    while pos < len(data):
        try:
            record, end = codec.decode_record(data, pos)
        except (codec.Incomplete, codec.BadRecord):
            break
        if not isinstance(record, codec.Put) or (top is not None and record.xid != top + 1):
            break
        pos, count, top = end, count + 1, record.xid
    if count and codec.find_valid_check(data, 1, 0) is not None:
        # A CHECK that vouches for bytes in there: this engine's records, framed
        # anew by damage (a size swallowing what follows), not another program's.
        return 0, 0, last_id or 0, False
    return pos, count, top or 0, pos == len(data)


def ids_in_valid_batches(data: bytes, start: int) -> list[int]:
    """Ids of the PUTs in the checksummed batches found at or after ``start`` in
    ``data`` (a whole writer file): what a repair cutting at ``start`` drops."""
    ids: list[int] = []
    floor = start
    view = memoryview(data)
    while True:
        hit = codec.find_valid_check(data, floor, floor)
        if hit is None:
            return ids
        _, length = codec.CHECK.unpack_from(data, hit + 1)
        pos = hit - length
        batch = view[:hit]  # zero-copy: the batch's records end at its CHECK
        while pos < hit:
            try:
                record, end = codec.decode_record(batch, pos)
            except (codec.Incomplete, codec.BadRecord):
                break
            if record is None:
                break
            if isinstance(record, codec.Put):
                ids.append(record.xid)
            pos = end
        floor = hit + 1 + codec.CHECK.size


def find_tail(fs: FileSystem, segments: list[Segment]) -> int:
    """The id of the last PUT, from the newest file that holds one (read-only);
    0 when no file holds a PUT."""
    for index in range(len(segments) - 1, -1, -1):
        seg = segments[index]
        if seg.first_id is None:
            continue
        with open_segment_handle(fs, seg.path) as handle:
            scan = scan_file(handle, seg.path)
        if scan.last_id is not None:
            return scan.last_id
    return 0


def earliest_id(segments: list[Segment]) -> int | None:
    """The first id still in the journal (None when no file holds a PUT)."""
    for seg in segments:
        if seg.first_id is not None:
            return seg.first_id
    return None


def create_segment(fs: FileSystem, directory: str, queue: str, segments: list[Segment], now_ms: int) -> Segment:
    """Create the next writer file of ``queue`` (numbered by the ms clock, above
    every file in ``segments`` and every name taken) and return it.

    :func:`create_file` fsyncs the header and then the directory: the name never
    points at a file without its header once the directory entry is durable.
    """
    number = now_ms
    if segments:
        number = max(number, segments[-1].number + 1)
    while fs.exists(naming.join(directory, naming.writer_name(queue, number))):
        number += 1
    path = naming.join(directory, naming.writer_name(queue, number))
    create_file(fs, path, SEGMENT_HEADER).close()
    return Segment(number, path, None)


def corrupt(path: str, exc: codec.BadRecord) -> CorruptFileError:
    """A codec BadRecord as the typed error, with the file name."""
    return CorruptFileError(path, exc.offset, exc.expected, exc.found)
