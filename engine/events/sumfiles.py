"""The checksum side files ``data.crc`` and ``meta.crc`` (layouts: :mod:`engine.events.sums`).

Durable order (the commit protocol of ``docs/formats/events.md``): a batch's
``data.crc`` entry is written after its blocks and before the link that commits
it, a new id's ``meta.crc`` entry before the meta size that commits the id, so a
reader that sees something committed sees its entry.  Entries are synced in
rounds (every :data:`SUMS_SYNC_EVERY` appends, on ``delete_to`` and on close);
after a crash the writer's recovery drops entries past the committed end and
rebuilds the missing ones from the committed blocks (the commit protocol
guarantees those are whole).  A journal written before the side files existed
gets them the same way the first time a writer opens it.

Checking is lazy and remembered: a batch is checked the first time a read of the
journal instance touches it (replay's windows, ``delete_to``'s walk, ``verify``)
and not again (committed bytes never change).
"""

from __future__ import annotations

import errno
import logging
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Callable

from engine.errors import CorruptFileError, DiskFullError, FormatError
from engine.events.blocks import BlockReader
from engine.events.codec import DATA_HEADER_SIZE
from engine.events.sums import (
    BATCH_SUM,
    BATCH_SUM_SIZE,
    DATA_SUMS_MAGIC,
    ID_SUM,
    ID_SUM_SIZE,
    META_SUMS_MAGIC,
    SUMS_HEADER_SIZE,
    batch_crc,
    batch_crcs,
    encode_batch_sum,
    encode_header,
    encode_id_sum,
    header_ok,
    id_sum_offset,
)
from engine.fs import FileHandle, FileSystem, OpenMode, RecoveryReport, crashpoint, create_file

log = logging.getLogger("engine.events")

#: ``data.crc`` appends between two of its fdatasyncs (bounds what recovery rebuilds).
SUMS_SYNC_EVERY = 256

ReadAt = Callable[[int, int], bytes]


def _open(fs: FileSystem, path: str, magic: bytes, writer: bool) -> FileHandle | None:
    """The side file's handle (a writer creates a missing or headerless one), or
    ``None`` for a reader when it does not exist.  A name that cannot be opened
    as a file (a symlink loop, a directory in its place) is damage: a typed
    :class:`CorruptFileError`, not the operating system's error."""
    try:
        return _open_file(fs, path, magic, writer)
    except (FileNotFoundError, PermissionError, DiskFullError):
        raise
    except OSError as exc:
        if exc.errno not in (errno.ELOOP, errno.EISDIR, errno.ENOTDIR, errno.EEXIST, errno.ENXIO):
            raise
        raise CorruptFileError(path, 0, "a checksum side file that opens as a file",
                               exc.strerror or str(exc)) from exc


def _open_file(fs: FileSystem, path: str, magic: bytes, writer: bool) -> FileHandle | None:
    if not writer:
        try:
            handle = fs.open(path, OpenMode.READ)
        except FileNotFoundError:
            return None
    elif not fs.exists(path):
        return create_file(fs, path, encode_header(magic))
    else:
        handle = fs.open(path, OpenMode.WRITE)
    try:
        head = handle.read_at(0, SUMS_HEADER_SIZE)
        if len(head) < SUMS_HEADER_SIZE and head == encode_header(magic)[: len(head)] and writer:
            handle.write_at(0, encode_header(magic))  # a creation cut short
            handle.truncate(SUMS_HEADER_SIZE)
            handle.fsync()
        elif not header_ok(head, magic):
            if len(head) < SUMS_HEADER_SIZE and head == encode_header(magic)[: len(head)]:
                return handle  # a reader sees a side file being created: no entries
            raise FormatError(path, 0, f"a {magic.decode()} version 1 checksum file", head[:8].hex())
    except BaseException:
        handle.close()
        raise
    return handle


class DataSums:
    """``data.crc``: one checksum per batch of ``data``, looked up by offset."""

    def __init__(self, path: str, handle: FileHandle | None) -> None:
        self.path = path
        self.handle = handle
        self.ends: array[int] = array("q")
        self.lasts: array[int] = array("q")
        self.crcs: array[int] = array("I")
        self.checked = bytearray()  # per entry: 1 once its batch checked good, 2 if it failed
        self.failures: dict[int, CorruptFileError] = {}  # entry -> its checksum error
        self.unsynced = 0

    @property
    def present(self) -> bool:
        return self.handle is not None

    @property
    def covered(self) -> int:
        """End of the last entry: data below it is checksummed."""
        return self.ends[-1] if self.ends else DATA_HEADER_SIZE

    def _parse(self, raw: bytes, limit: int) -> int:
        """Take the entries up to the committed end ``limit``; returns the file
        offset after the last entry taken."""
        pos = SUMS_HEADER_SIZE
        start = DATA_HEADER_SIZE
        while start < limit and pos + BATCH_SUM_SIZE <= len(raw):
            end, last, crc = BATCH_SUM.unpack_from(raw, pos)
            if end == 0 and raw.count(0, pos) == len(raw) - pos:
                break  # zeros to the end: appends a crash left unwritten (cut by a writer)
            if not start <= last <= end - 24 or end > limit:
                if end > limit and start <= last <= end - 24:
                    break  # a batch past the committed end (not committed, or a writer's newer one)
                raise CorruptFileError(self.path, pos, f"a batch entry starting at {start} (end > last + 23)",
                                       f"end {end}, last {last}")
            self.ends.append(end)
            self.lasts.append(last)
            self.crcs.append(crc)
            start = end
            pos += BATCH_SUM_SIZE
        self.checked = bytearray(len(self.ends))
        return pos

    def append(self, start: int, end: int, last: int, crc: int) -> None:
        """Record a batch just written at ``[start, end)`` (writer)."""
        assert self.handle is not None and start == self.covered
        self.handle.write_at(SUMS_HEADER_SIZE + BATCH_SUM_SIZE * len(self.ends), encode_batch_sum(end, last, crc))
        self.ends.append(end)
        self.lasts.append(last)
        self.crcs.append(crc)
        self.checked.append(1)
        self.unsynced += 1

    def sync(self) -> None:
        if self.handle is not None and self.unsynced:
            crashpoint("events.sums.before-fsync")
            self.handle.fdatasync()
            crashpoint("events.sums.after-fsync")
        self.unsynced = 0

    def check(self, read_at: ReadAt, lo: int, hi: int, data_path: str) -> bytes | None:
        """Check every batch overlapping ``[lo, hi)`` of ``data`` not checked yet.

        Returns ``data[lo:hi]`` when it had to read (one read covers the window
        and the batches), ``None`` when everything there was checked before and
        is good.  A batch whose bytes differ from its checksum is remembered
        (:meth:`failure_at` gives its error) and handed out as zeros, which no
        walk mistakes for blocks: an id whose blocks it holds stops there (the
        caller then raises its error), other ids sharing the window read on.
        """
        ends = self.ends
        n = len(ends)
        i = bisect_right(ends, lo)  # the batch holding lo
        if i >= n:
            return None
        checked = self.checked
        if ends[i] >= hi:  # inside one batch: replay's usual window (a run of one id's batch)
            if checked[i] == 1:
                return None
            j = i + 1
        else:
            j = bisect_left(ends, hi) + 1  # past the batch holding hi - 1
            if j > n:
                j = n
            if checked.count(1, i, j) == j - i:
                return None
        start = ends[i - 1] if i else DATA_HEADER_SIZE
        base = start if start < lo else lo
        last_end = ends[j - 1]
        stop = last_end if last_end > hi else hi
        buf = read_at(base, stop - base)
        if len(buf) < last_end - base:
            raise CorruptFileError(data_path, base + len(buf), f"{last_end - base} bytes of checksummed batches",
                                   "end of file")
        got = batch_crcs(buf, base, ends, self.lasts, i, j)
        if got == self.crcs[i:j].tobytes():
            checked[i:j] = b"\1" * (j - i)  # the usual case: all good, one comparison
            return buf if base == lo and stop == hi else buf[lo - base : hi - base]
        sums = array("I", got)
        crcs = self.crcs
        bad: list[int] = []
        for k in range(i, j):
            if checked[k] == 1:
                continue
            s = ends[k - 1] if k else DATA_HEADER_SIZE
            if not checked[k]:
                if sums[k - i] == crcs[k]:
                    checked[k] = 1
                    continue
                checked[k] = 2
                self.failures[k] = CorruptFileError(
                    data_path, s, f"bytes matching their checksum {crcs[k]:08x} ({self.path} entry {k}, batch "
                    f"[{s}, {ends[k]}))", f"checksum {sums[k - i]:08x}")
            bad.append(k)
        if bad:
            out = bytearray(buf)
            for k in bad:
                s = (ends[k - 1] if k else DATA_HEADER_SIZE) - base
                out[s : ends[k] - base] = bytes(ends[k] - base - s)
            buf = bytes(out)
        return buf[lo - base : hi - base]

    def failure_at(self, offset: int) -> CorruptFileError | None:
        """The checksum error of the batch holding ``offset``, if it failed."""
        if not self.failures:
            return None
        return self.failures.get(bisect_right(self.ends, offset))

    def check_all(self, read_at: ReadAt, end: int, data_path: str) -> None:
        """Check every batch below ``end`` (``verify``), 1 MiB of batches at a
        time; raises the first failure."""
        pos = DATA_HEADER_SIZE
        while pos < end:
            nxt = min(end, pos + (1 << 20))
            self.check(read_at, pos, nxt, data_path)
            pos = nxt
        if self.failures:
            raise self.failures[min(self.failures)]

    def close(self) -> None:
        if self.handle is not None:
            self.handle.close()


def load_data_sums(fs: FileSystem, path: str, data: FileHandle, data_path: str, end: int,
                   report: RecoveryReport | None) -> DataSums:
    """Open ``data.crc`` for a journal whose committed end is ``end``.

    A writer (``report`` given) cuts entries past ``end`` and rebuilds missing
    ones, one per block (recorded in ``report``); a reader takes the entries
    below ``end`` and warns about committed data they do not cover.
    """
    writer = report is not None
    sums = DataSums(path, _open(fs, path, DATA_SUMS_MAGIC, writer))
    if sums.handle is None:
        if end > DATA_HEADER_SIZE:
            log.warning("event journal %s has no %s: its blocks are not checked against checksums "
                        "(open it once with a writer to add them)", data_path, path)
        return sums
    try:
        raw = sums.handle.read_all()
        taken = sums._parse(raw, end)
        if writer:
            assert report is not None
            if len(raw) > taken:
                sums.handle.truncate(taken)
                report.cut(path, taken, len(raw) - taken, "checksums of uncommitted batches")
            covered = sums.covered
            if covered < end:
                count = _rebuild(sums, data, data_path, covered, end)
                report.add("rebuilt", path, count, "entries", offset=taken,
                           detail=f"checksums of committed blocks [{covered}, {end}) of data")
            if len(raw) > taken or covered < end:
                sums.handle.fsync()  # a size change: fsync, not fdatasync
                sums.unsynced = 0
        elif sums.covered < end:
            log.warning("event journal %s: %d committed bytes of data past offset %d have no checksum in %s "
                        "(a writer crashed before syncing them; a writer's open rebuilds them)",
                        data_path, end - sums.covered, sums.covered, path)
    except BaseException:
        sums.close()
        raise
    return sums


def _rebuild(sums: DataSums, data: FileHandle, data_path: str, start: int, end: int) -> int:
    """Append one entry per committed block in ``[start, end)``; returns how many."""
    reader = BlockReader(data, data_path, end, readahead=1 << 20)
    pos, count = start, 0
    while pos < end:
        header = reader.header(pos)
        buf = data.read_at(pos, header.size)
        sums.append(pos, header.end, pos, batch_crc(buf, 0, 0, header.size))
        pos = header.end
        count += 1
    return count


class MetaSums:
    """``meta.crc``: each meta block's first live sequence number and checksum."""

    def __init__(self, path: str, handle: FileHandle | None, entries: list[tuple[int, int]]) -> None:
        self.path = path
        self.handle = handle
        self.entries = entries  # (first live sequence number, crc) per meta block
        self.unsynced = False  # entries written since the last fdatasync

    @property
    def present(self) -> bool:
        return self.handle is not None

    def reload(self) -> list[tuple[int, int]]:
        """Read the entries again (after meta: see :func:`engine.events.recovery.load`)."""
        if self.handle is not None:
            raw = self.handle.read_all()
            self.entries = [ID_SUM.unpack_from(raw, pos)
                            for pos in range(SUMS_HEADER_SIZE, len(raw) - ID_SUM_SIZE + 1, ID_SUM_SIZE)]
        return self.entries

    def clear(self) -> None:
        """Drop every entry (writer, ``salvage``: rebuilt from meta afterwards)."""
        assert self.handle is not None
        self.handle.truncate(SUMS_HEADER_SIZE)
        self.entries = []

    def put(self, index: int, raw_id: bytes, first_seq: int) -> None:
        """Write the ``index``-th meta block's entry (writer; not synced)."""
        assert self.handle is not None
        entry = encode_id_sum(raw_id, first_seq)
        self.handle.write_at(id_sum_offset(index), entry)
        self.unsynced = True
        value = ID_SUM.unpack(entry)
        if index == len(self.entries):
            self.entries.append(value)
        else:
            self.entries[index] = value

    def sync(self) -> None:
        if self.handle is not None and self.unsynced:
            crashpoint("events.meta-sums.before-fsync")
            self.handle.fdatasync()
            crashpoint("events.meta-sums.after-fsync")
        self.unsynced = False

    def close(self) -> None:
        if self.handle is not None:
            self.handle.close()


def open_meta_sums(fs: FileSystem, path: str, *, writer: bool) -> MetaSums:
    """Open ``meta.crc`` (a writer creates it when missing); entries are read by
    :meth:`MetaSums.reload`."""
    return MetaSums(path, _open(fs, path, META_SUMS_MAGIC, writer), [])
