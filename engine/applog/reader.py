"""The lock-free reader: :class:`LogReader` reads a log another process writes.

A reader never takes the writer's lock and never changes a file.  It lists the
segments.  A *sealed* segment (a newer one follows it) must hold exactly the
records up to the next segment's first index: it is checked once (counts, first
and last entries against their records and checksums) and otherwise raises
CorruptFileError naming the damaged file and offset, never a silent cut.  In the
newest segment the reader trusts only index entries that agree with the log (the
entry names record ``base + position``, the log holds a whole record at its
offset with its time, and, in a segment with a ``.crc`` file, the record matches
its checksum).  A partial entry at the end is one the writer is still writing.
Whole entries that do not agree, or whole records the newest log holds past the
last entry, while no writer holds the log's lock (a live writer writes a record
before its entry), are a crash tail or a damaged index: the reader shows the
segment as the writer's next open will make it, through the writer's recovery
(:func:`engine.applog.recovery.scan_segment`) applied to an index kept in memory
(it never writes), and reports what that open will cut or rebuild in
``recovery`` and as a warning; damage that is not a torn tail is
CorruptFileError, as for the writer.  With a live writer they are not shown, and
reported.  An index missing or shorter than its header while the log holds
records is CorruptFileError (the writer creates it before any record).
Every record returned is checked again when read
(:meth:`engine.applog.segment.Segment.read`, ``iter_range``).

The directory is re-read when a lookup goes past the known end, on
:meth:`LogReader.refresh`, and on every poll of ``follow``.  Segments deleted by
``expire`` stay readable through handles already open (POSIX semantics); a lookup
below the new first index raises IndexError.

The writer deletes segments oldest first (``expire``, ``truncate_before``: each
log before its index and ``.crc`` file), so what a listing shows can be gone by
the time the reader opens or checks it, always a prefix of the listing.  A
segment whose check fails because a file is missing, or because the segment
after it in the listing is not the next one, is looked up in a fresh listing:
gone from it, it was deleted meanwhile (it and every segment before it are
dropped, and the start checkpoint says where the log now begins); still listed,
it is damage (CorruptFileError).  A name that stays listed but opens no file (a
dangling symbolic link) is damage too, never a deletion: records are never
missing without an error.
"""

from __future__ import annotations

import logging
import os
from types import TracebackType

from engine.applog.codec import (
    CRC_MAGIC,
    CRC_SIZE,
    ENTRY_SIZE,
    HEADER_SIZE,
    IDX_MAGIC,
    RECORD_HEADER,
    RECORD_HEADER_SIZE,
    check_header,
    crc_offset,
    entry_count,
    entry_offset,
    parse_segment_name,
    record_crc,
)
from engine.applog.recovery import Mismatch, scan_sealed, scan_segment
from engine.applog.segment import Record, Segment, crc_path, idx_path, log_path, no_file_behind, record_class
from engine.applog.view import LOCK_FILE, START_FILE, LogView, parse_start, read_headers
from engine.conventions import serializer as parse_serializer
from engine.errors import CorruptFileError, FormatError
from engine.fs import FileHandle, FileSystem, OpenMode, as_path, no_such, probe_lock, resolve
from engine.fs.core import StoreCore

log = logging.getLogger("engine.applog")

#: How far back from the index's end the reader looks for an agreeing entry before
#: deciding the index is damaged rather than mid-write.
MAX_TAIL_STEPS = 4096


class LogReader(LogView):
    """Read-only access to an append log directory, safe alongside a live writer.

    Same queries as :class:`~engine.applog.AppendLog`: ``get``, ``scan``,
    ``between``, ``index_at_time``, ``follow``, ``segments()``, ``first_index``,
    ``next_index``, ``verify()``.  Use :meth:`open`; close it when done.
    """

    def __init__(self, core: StoreCore, decoded: type[Record] | None) -> None:
        super().__init__(core, decoded)
        # A reader repairs nothing (the writer's next open does); what it does
        # not show of a torn tail of the newest segment is reported in
        # ``recovery`` (``dropped`` index entries or log bytes) and logged once
        # on ``engine.applog``: what was reported, per segment.
        self._hidden: dict[int, tuple[int, int]] = {}  # base -> (kept, entries) reported
        self._hidden_log: dict[int, tuple[int, int]] = {}  # base -> (shown end, log size) reported
        # The newest segment shown through an index rebuilt in memory (see
        # _reconcile): base -> the sizes of its files then.
        self._reconciled: dict[int, tuple[int, int, int]] = {}

    @classmethod
    def open(
        cls,
        directory: str | os.PathLike[str],
        *,
        serializer: object = None,
        fs: FileSystem | None = None,
    ) -> LogReader:
        """Open the log in ``directory`` for reading (it must exist): no lock, no
        repair (:meth:`AppendLog.open_reader <engine.applog.log.AppendLog.open_reader>`
        is the same).

        ``serializer``: as the writer's (``"json"``, ``"pickle"``, a ``(dumps,
        loads)`` pair): records give ``record.value`` decoded.  Raises
        FileNotFoundError (no log there), CorruptFileError / FormatError
        (damaged or foreign files)."""
        directory = as_path(directory, "directory").rstrip("/") or "/"
        decoded = record_class(parse_serializer(serializer))
        fsys = resolve(fs)
        if not fsys.isdir(directory):
            raise no_such(fsys, directory, "append log directory")
        core = StoreCore(fsys, directory, "append log", writer=False)
        with core.opening():
            reader = cls(core, decoded)
            reader.refresh()
        core.opened(reader)
        return reader

    # -- keeping current ---------------------------------------------------------------
    def refresh(self) -> None:
        """Re-read the directory listing, the start checkpoint and index sizes."""
        with self._lock:
            self._refresh_locked()

    def _refresh_locked(self) -> None:
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
                seg = self._open_segment(base)
                if seg is None:
                    continue  # deleted between listdir and open
            keep.append(seg)
        for gone in known.values():
            self._drop(gone)
        self._segments = [s for s in self._segments if s.base not in known]
        try:
            self._check_segments(keep)
        except BaseException:
            # Segments opened here are not yet the reader's: close them (a
            # reader that keeps refreshing a damaged log must not leak handles).
            old = {id(s) for s in self._segments}
            for seg in keep:
                if id(seg) not in old:
                    self._drop(seg)
            raise

    def _listed(self, path: str) -> bool:
        """Whether ``path`` is in a fresh listing of the log's directory."""
        return path.rsplit("/", 1)[-1] in self._fs.listdir(self.directory)

    def _open_listed(self, path: str) -> FileHandle | None:
        """``path`` opened for reading, or None when no file of that name is
        there (not created yet, or deleted).  Listed while it opens nothing: it
        may have been created since, so it is opened once more; listed and
        opening nothing twice (a file is created once and deleted once, and a
        name never comes back) is CorruptFileError: a dangling symbolic link."""
        for _ in range(2):
            try:
                return self._fs.open(path, OpenMode.READ)
            except FileNotFoundError:
                if not self._listed(path):
                    return None
        raise no_file_behind(path)

    def _check_segments(self, keep: list[Segment]) -> None:
        """Check the listed segments (sealed ones once, the newest's count) and make
        them the reader's; then re-read the start checkpoint.  A segment deleted
        meanwhile is dropped with every one before it (see the module docstring)."""
        fs = self._fs
        prev_time: int | None = None
        checked: list[Segment] = []
        for n, seg in enumerate(keep):
            try:
                if n + 1 < len(keep):
                    self._check_sealed(seg, keep[n + 1], prev_time)
                else:  # the newest as listed (deleted meanwhile if a newer one came first)
                    self._update_count(seg, prev_time)
            except (FileNotFoundError, CorruptFileError) as exc:
                self._drop_deleted(seg, checked, exc)
                checked, prev_time = [], None
                continue
            checked.append(seg)
            if seg.last_time is not None:
                prev_time = seg.last_time
        keep = checked
        self._segments = keep
        self._bases = [s.base for s in keep]
        start_path = f"{self.directory}/{START_FILE}"
        try:
            with fs.open(start_path) as h:
                self._start = parse_start(h.read_all(), start_path)
        except FileNotFoundError:
            self._start = keep[0].base if keep else 0

    def _drop_deleted(self, seg: Segment, before: list[Segment], exc: Exception) -> None:
        """``seg``'s check failed with ``exc``: if the writer deleted it meanwhile
        (its log is gone from a fresh listing), close it and ``before`` (deleted
        first: the writer deletes oldest first); else raise: damage."""
        names = set(self._fs.listdir(self.directory))
        gone = [s for s in (*before, seg) if s.log_path.rsplit("/", 1)[-1] not in names]
        if len(gone) != len(before) + 1:
            if isinstance(exc, CorruptFileError):
                raise exc
            missing = getattr(exc, "filename", None) or seg.idx_path
            raise CorruptFileError(missing, 0, "a file of a sealed segment", "no file") from None
        for old in gone:
            self._drop(old)

    def _prepare_read(self, index: int | None) -> None:
        # Lookups inside the known range need no directory listing: sealed
        # segments never change and the newest only grows.
        if index is None or not self._segments or index >= self._segments[-1].end:
            self._refresh_locked()

    def _open_segment(self, base: int) -> Segment | None:
        """Segment ``base`` with what of its files are there (None: its log is
        gone, deleted since it was listed)."""
        lpath = log_path(self.directory, base)
        lh = self._open_listed(lpath)
        if lh is None:
            return None
        ih: FileHandle | None = None
        ch: FileHandle | None = None
        try:
            head = lh.read_at(0, HEADER_SIZE)
            ttl = read_headers(head, lpath) if len(head) == HEADER_SIZE else 0
            if 0 < len(head) < HEADER_SIZE and not head.startswith(b"LOG"[: len(head)]):
                raise FormatError(lpath, 0, "a LOG header", repr(head))
            # None: being created, deleted, or lost in a crash: no visible records
            # yet (checked when the log holds some).
            ih = self._open_listed(idx_path(self.directory, base))
            # None: the original LOG/IDX writer's segment, or being created
            # (looked for again later) or deleted.
            ch = self._open_listed(crc_path(self.directory, base))
        except BaseException:
            lh.close()
            if ih is not None:
                ih.close()
            raise
        return self._keep(Segment(self.directory, base, ttl, lh, ih, 0, HEADER_SIZE, None, None, crc=ch))

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

    def _check_sealed(self, seg: Segment, nxt: Segment, prev_time: int | None) -> None:
        """Make ``seg``, which a newer segment follows, visible in full: it must
        hold exactly the records up to ``nxt.base`` (a sealed segment never
        changes, so this is checked once).  A cheap check (entry and checksum
        counts, the first and last entries agree with the log, the log ends with
        the last record) else the full one, which raises CorruptFileError naming
        the damaged file and offset (never a silent cut: a sealed segment holds
        acknowledged records only).  FileNotFoundError if its index is gone."""
        expected = nxt.base - seg.base
        if seg.mem_idx is not None:
            # Shown reconciled while it was the newest: a writer has opened (and
            # repaired it) since; check it as the files now are.
            self._forget_reconciled(seg)
        if seg.sealed == expected:
            return
        if seg.idx is None:
            seg.idx = self._fs.open(seg.idx_path, OpenMode.READ)
        if seg.crc is None:
            # First seen before its .crc file was created (the writer creates it
            # before the index), and sealed since: look again (None: the
            # original LOG/IDX writer's segment).
            seg.crc = self._open_listed(seg.crc_path)
        idx_size = seg.idx.size()
        log_size = seg.log.size()
        if idx_size >= HEADER_SIZE:
            check_header(seg.idx.read_at(0, HEADER_SIZE), IDX_MAGIC, seg.idx_path)
        first = last = None
        if expected == 0 and idx_size == HEADER_SIZE and log_size == HEADER_SIZE:
            seg.count, seg.log_size, seg.first_time, seg.last_time = 0, HEADER_SIZE, None, None
            seg.sealed = 0
            return
        if (
            idx_size == HEADER_SIZE + ENTRY_SIZE * expected
            and (seg.crc is None or seg.crc.size() == HEADER_SIZE + CRC_SIZE * expected)
            and expected > 0
        ):
            first = self._entry_agrees(seg, 0, log_size)
            last = self._entry_agrees(seg, expected - 1, log_size)
        if first is None or last is None or last[1] != log_size or first[0] > last[0]:
            self._full_check(seg, expected, prev_time, nxt)
            raise AssertionError("unreachable: _full_check raises")  # pragma: no cover
        seg.count, seg.log_size, seg.first_time, seg.last_time = expected, log_size, first[0], last[0]
        seg.sealed = expected

    def _full_check(self, seg: Segment, expected: int, prev_time: int | None, nxt: Segment) -> None:
        """Pinpoint why sealed segment ``seg`` failed the cheap check, and raise."""
        assert seg.idx is not None
        log_bytes, idx_bytes = seg.log.read_all(), seg.idx.read_all()
        crc_bytes = seg.crc.read_all() if seg.crc is not None else None
        paths = {"log": seg.log_path, "idx": seg.idx_path, "crc": seg.crc_path}
        check_header(idx_bytes, IDX_MAGIC, seg.idx_path)
        if crc_bytes is not None:
            check_header(crc_bytes, CRC_MAGIC, seg.crc_path)
        try:
            scan = scan_sealed(log_bytes, idx_bytes, seg.base, expected, prev_time, crc_bytes)
        except Mismatch as exc:
            raise CorruptFileError(paths[exc.where], exc.offset, exc.expected, exc.found) from None
        if scan.count < expected:
            raise CorruptFileError(nxt.log_path, 0, f"a segment starting at index {seg.base + scan.count} "
                                   f"(after {seg.log_path})", str(nxt.base))
        offset = entry_offset(scan.idx_keep)
        raise CorruptFileError(
            seg.idx_path, offset,
            f"{expected} index entries agreeing with the log (the writer's next open rebuilds them from it)",
            f"{scan.idx_dropped} wrong, {len(scan.rebuilt)} missing, a partial entry of {scan.idx_partial} bytes",
        )

    def _update_count(self, seg: Segment, prev_time: int | None) -> None:
        """Bring the newest segment's visible count up to date: the entries at
        the index's end that agree with the log (see the module docstring), then
        :meth:`_check_unindexed` for records the log holds past them.

        Where the index and the log disagree (entries that do not agree, whole
        records past the last entry) while no writer holds the log's lock, the
        segment is shown as the writer's next open will make it
        (:meth:`_reconcile`): a reader never returns other data than the writer.
        With a live writer they are its records being written (or damage its
        running writer does not repair): not shown, and reported."""
        if seg.mem_idx is not None:
            if self._reconciled.get(seg.base) == _sizes(seg):
                return
            self._forget_reconciled(seg)  # the files changed (a writer opened): count them again
        hidden = self._count_entries(seg)
        if (
            (hidden is not None or self._unindexed(seg))
            and seg.idx is not None
            and seg.idx.size() >= HEADER_SIZE
            and not probe_lock(self._fs, f"{self.directory}/{LOCK_FILE}")
        ):
            self._reconcile(seg, prev_time)
            return
        if hidden is not None:
            self._report_hidden(seg, *hidden)
        self._check_unindexed(seg)

    def _reconcile(self, seg: Segment, prev_time: int | None) -> None:
        """Show the newest segment as the writer's next open will make it: its
        recovery's reconciliation of the index with the log
        (:func:`engine.applog.recovery.scan_segment`, the one rule), applied to an
        index kept in memory (a reader never writes).  Damage that is not a torn
        tail raises CorruptFileError naming the file and offset, as the writer's
        open does; what the writer would cut or rebuild is reported in
        ``recovery`` and logged once."""
        assert seg.idx is not None
        log_bytes, idx_bytes = seg.log.read_all(), seg.idx.read_all()
        crc_bytes = seg.crc.read_all() if seg.crc is not None else None
        check_header(idx_bytes, IDX_MAGIC, seg.idx_path)
        if crc_bytes is not None:
            check_header(crc_bytes, CRC_MAGIC, seg.crc_path)
        try:
            scan = scan_segment(log_bytes, idx_bytes, seg.base, prev_time, crc_bytes)
        except Mismatch as exc:
            where = {"log": seg.log_path, "idx": seg.idx_path, "crc": seg.crc_path}[exc.where]
            raise CorruptFileError(where, exc.offset, exc.expected, exc.found) from None
        keep_end = entry_offset(scan.idx_keep)
        seg.drop_cache()
        seg.mem_idx = bytearray(idx_bytes[:keep_end]) + b"".join(scan.rebuilt)
        seg.count, seg.log_size = scan.count, scan.log_end
        seg.first_time, seg.last_time = scan.first_time, scan.last_time
        self._reconciled[seg.base] = (len(log_bytes), len(idx_bytes), -1 if crc_bytes is None else len(crc_bytes))
        report, words = self._core.report, "(the writer's next open does the same on disk)"
        report.cut(seg.log_path, scan.log_end, scan.log_cut, f"a torn or zeroed tail, not shown {words}")
        report.add("dropped", seg.idx_path, scan.idx_dropped, "entries", offset=keep_end,
                   detail=f"disagreeing with the log, not used {words}")
        report.add("rebuilt", seg.idx_path, len(scan.rebuilt), "entries", offset=keep_end,
                   detail=f"from the log, in memory {words}")
        if scan.log_cut or scan.idx_dropped or scan.rebuilt:
            log.warning(
                "%s: the index disagrees with the log: shown as the writer's next open repairs it (%d entries "
                "dropped, %d rebuilt from the log; not shown: %d bytes of a torn tail from record %d on)",
                seg.idx_path, scan.idx_dropped, len(scan.rebuilt), scan.log_cut, seg.base + scan.count,
            )

    def rebuilt_index(self, first_index: int) -> bytes | None:
        """The index of segment ``first_index`` as this reader shows it, when that
        is not its file: rebuilt in memory from the log (see the module docstring;
        the writer's next open writes the same); None when the file is what it
        shows.  For readers of the files themselves (the Spark log source), so that
        they show the same records, never a shorter log."""
        with self._lock:
            for seg in self._segments:
                if seg.base == first_index and seg.base in self._reconciled and seg.mem_idx is not None:
                    return bytes(seg.mem_idx)
            return None

    def _forget_reconciled(self, seg: Segment) -> None:
        """Back to the files' own index for ``seg`` (they changed since :meth:`_reconcile`)."""
        self._reconciled.pop(seg.base, None)
        seg.mem_idx = None
        seg.drop_cache()
        seg.count, seg.log_size, seg.first_time, seg.last_time = 0, HEADER_SIZE, None, None

    def _count_entries(self, seg: Segment) -> tuple[int, int] | None:
        """Count the newest segment's entries that agree with the log; ``(kept,
        entries)`` when whole entries at the index's end do not agree (None when
        every entry does)."""
        if seg.idx is None:
            seg.idx = self._open_listed(seg.idx_path)
            if seg.idx is None:
                return None
        if seg.crc is None and seg.count == 0:
            seg.crc = self._open_listed(seg.crc_path)
        idx_size = seg.idx.size()
        if seg.ttl_ns == 0 and seg.count == 0:
            head = seg.log.read_at(0, HEADER_SIZE)
            if len(head) == HEADER_SIZE:
                seg.ttl_ns = read_headers(head, seg.log_path)
        if idx_size >= HEADER_SIZE and seg.count == 0:
            check_header(seg.idx.read_at(0, HEADER_SIZE), IDX_MAGIC, seg.idx_path)
        n = entry_count(idx_size)
        if n == seg.count:
            return None
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
                return (position + 1, n) if position + 1 < n else None
            position -= 1
            steps += 1
            if steps > MAX_TAIL_STEPS:
                raise CorruptFileError(
                    seg.idx_path, HEADER_SIZE + ENTRY_SIZE * position,
                    "index entries that agree with the log", f"{steps} disagreeing entries at the end",
                )
        if floor == 0:
            seg.count, seg.log_size, seg.first_time, seg.last_time = 0, HEADER_SIZE, None, None
        return (seg.count, n)

    def _check_unindexed(self, seg: Segment) -> None:
        """Never hide records of the newest segment silently.  The writer creates
        the index (header included) before it writes any record, so an index
        that is missing or shorter than its header while the log holds a record
        is damage: CorruptFileError naming the index (the writer's next open
        rebuilds it from the log).  A whole record past the last one shown, while
        no writer holds the log's lock (a live writer writes a record before its
        entry), is a torn tail or a cut index: reported in ``recovery``
        (``dropped`` log bytes) and logged once, not shown."""
        if not self._unindexed(seg):
            return
        shown = seg.log_size if seg.idx is not None and seg.count else HEADER_SIZE
        log_size = seg.log.size()
        if seg.idx is None:
            # Looked for before the log was read: the writer may have created it
            # (and written records) since.  Count again; the next refresh checks.
            seg.idx = self._open_listed(seg.idx_path)
            if seg.idx is not None:
                self._count_entries(seg)
                return
        idx_size = seg.idx.size() if seg.idx is not None else -1
        if idx_size < HEADER_SIZE:
            found = "no file" if idx_size < 0 else f"{idx_size} bytes (truncated file)"
            raise CorruptFileError(
                seg.idx_path, max(idx_size, 0),
                f"a 16-byte IDX header (the log {seg.log_path} holds records; the writer's next open rebuilds it)",
                found,
            )
        if self._hidden_log.get(seg.base) == (shown, log_size) or probe_lock(
            self._fs, f"{self.directory}/{LOCK_FILE}"
        ):
            return
        self._hidden_log[seg.base] = (shown, log_size)
        detail = (f"the newest segment's log holds {log_size - shown} bytes of records past the {seg.count} "
                  f"shown without index entries in {seg.idx_path}: "
                  "a torn tail or a cut index (the writer's next open cuts or re-indexes them); not shown")
        self._core.report.add("dropped", seg.log_path, log_size - shown, "bytes", offset=shown, detail=detail)
        log.warning("%s: %s", seg.log_path, detail)

    def _unindexed(self, seg: Segment) -> bool:
        """Whether the newest segment's log holds a whole record past the last one shown."""
        shown = seg.log_size if seg.idx is not None and seg.count else HEADER_SIZE
        log_size = seg.log.size()
        if log_size < shown + RECORD_HEADER_SIZE:
            return False
        head = seg.log.read_at(shown, RECORD_HEADER_SIZE)
        if len(head) < RECORD_HEADER_SIZE:
            return False
        size = RECORD_HEADER.unpack(head)[0]
        # Not when it is the zero-filled tail the original LOG/IDX writer leaves, or a record being written.
        return bool(size) and shown + RECORD_HEADER_SIZE + size <= log_size

    def _report_hidden(self, seg: Segment, kept: int, n: int) -> None:
        """Report whole index entries at the newest segment's end that do not agree
        with the log (or their checksums): the writer writes a record and its
        checksum before its entry, so a live writer never shows one; they are a
        torn tail (the writer's next open cuts it) or damage.  The reader does
        not show their records: in ``recovery`` (``dropped`` entries) and one
        warning on ``engine.applog`` per state seen."""
        if kept >= n or self._hidden.get(seg.base) == (kept, n):
            return
        self._hidden[seg.base] = (kept, n)
        detail = (f"records {seg.base + kept}..{seg.base + n - 1} of the newest segment do not agree with the log "
                  "or their checksums: a torn tail (the writer's next open cuts it) or damage; not shown")
        self._core.report.add("dropped", seg.idx_path, n - kept, "entries", offset=entry_offset(kept), detail=detail)
        log.warning("%s: %s", seg.idx_path, detail)

    # -- self-check and closing -----------------------------------------------------------
    def verify(self) -> list[str]:
        """Check every invariant of the files as they are now.  A torn tail of the
        newest segment is a note (the writer's next open cuts it), anything else
        an error."""
        with self._lock:
            self._refresh_locked()
            contents = {}
            for seg in self._segments:
                idx = seg.idx.read_all() if seg.idx is not None else b""
                crc = seg.crc.read_all() if seg.crc is not None else None
                contents[seg.base] = (seg.log.read_all(), idx, crc)
            return self._verify_segments(contents, tail_ok=True)

    def close(self) -> None:
        """Close the files (the reader takes no lock and writes nothing; the
        store core's close, once)."""
        core = self._core
        with self._lock:
            if not core.begin_close():
                return
            self._segments = []
            self._bases = []
            self._index_cache.clear()
            core.finish_close()

    def __enter__(self) -> LogReader:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def _sizes(seg: Segment) -> tuple[int, int, int]:
    """The sizes of ``seg``'s log, index and ``.crc`` files (-1: none)."""
    assert seg.idx is not None
    return seg.log.size(), seg.idx.size(), -1 if seg.crc is None else seg.crc.size()
