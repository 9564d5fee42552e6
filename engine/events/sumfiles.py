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

Checking is lazy and remembered (``DataSums.checked``): replay's walker
(:func:`engine.events.runs.walk_runs_py`, in C when built) checks the batch of
each block it decodes the first time the journal instance reaches it, ``verify``
checks them all (:meth:`DataSums.check_all`), and no batch is checked again
(committed bytes never change).
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
    DATA_SUMS_HEADER_SIZE,
    DATA_SUMS_MAGIC,
    DATA_SUMS_SYNCED,
    DATA_SUMS_SYNCED_OFFSET,
    ID_SUM,
    ID_SUM_SIZE,
    META_SUMS_MAGIC,
    SUMS_HEADER_SIZE,
    batch_crc,
    batch_crcs,
    batch_sum_offset,
    encode_data_sums_header,
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
_pack_batch_sum = BATCH_SUM.pack


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
    initial = encode_data_sums_header(0) if magic == DATA_SUMS_MAGIC else encode_header(magic)
    if not writer:
        try:
            handle = fs.open(path, OpenMode.READ)
        except FileNotFoundError:
            return None
    elif not fs.exists(path):
        return create_file(fs, path, initial)
    else:
        handle = fs.open(path, OpenMode.WRITE)
    try:
        head = handle.read_at(0, len(initial))
        if len(head) < len(initial) and head == initial[: len(head)] and writer:
            handle.write_at(0, initial)  # a creation cut short
            handle.truncate(len(initial))
            handle.fsync()
        elif not header_ok(head, magic) or len(head) < len(initial):
            if len(head) < len(initial) and head == initial[: len(head)]:
                return handle  # a reader sees a side file being created: no entries
            raise FormatError(path, 0, f"a {magic.decode()} version 1 checksum file", head[:12].hex())
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
        self.synced = 0  # the header's count: entries known durable

    @property
    def present(self) -> bool:
        return self.handle is not None

    @property
    def covered(self) -> int:
        """End of the last entry: data below it is checksummed."""
        return self.ends[-1] if self.ends else DATA_HEADER_SIZE

    def parse(self, raw: bytes, limit: int, *, writer: bool) -> int:
        """Take the entries up to the committed end ``limit``; returns the file
        offset after the last entry taken.

        The first ``synced`` entries (the header's count) are durable: each must
        be well formed, and for a ``writer`` end by ``limit`` (a reader's
        snapshot may be older than what a live writer has synced since).  The
        ones after may be what a power cut left of unsynced appends: taking
        stops at the first that is not well formed or ends past ``limit``.
        """
        self.synced = DATA_SUMS_SYNCED.unpack_from(raw, DATA_SUMS_SYNCED_OFFSET)[0] if len(raw) >= 12 else 0
        pos = DATA_SUMS_HEADER_SIZE
        start = DATA_HEADER_SIZE
        while pos + BATCH_SUM_SIZE <= len(raw):
            index = len(self.ends)
            end, last, crc = BATCH_SUM.unpack_from(raw, pos)
            if not start <= last <= end - 24 or end > limit:
                if index >= self.synced or (end > limit and start <= last <= end - 24 and not writer):
                    break
                raise CorruptFileError(self.path, pos, f"entry {index} (of {self.synced} synced) of a batch "
                                       f"starting at {start}, ending by {limit} (the committed end of data)",
                                       f"end {end}, last {last}")
            self.ends.append(end)
            self.lasts.append(last)
            self.crcs.append(crc)
            start = end
            pos += BATCH_SUM_SIZE
        self.checked = bytearray(len(self.ends))
        return pos

    def append(self, start: int, end: int, last: int, crc: int) -> None:
        """Record a batch just written at ``[start, end)`` (writer).  On every
        write's path: :func:`~engine.events.sums.batch_sum_offset` and
        :func:`~engine.events.sums.encode_batch_sum` inlined."""
        ends = self.ends
        assert self.handle is not None and start == (ends[-1] if ends else DATA_HEADER_SIZE)
        self.handle.write_at(DATA_SUMS_HEADER_SIZE + BATCH_SUM_SIZE * len(ends), _pack_batch_sum(end, last, crc))
        ends.append(end)
        self.lasts.append(last)
        self.crcs.append(crc)
        self.checked.append(1)
        self.unsynced += 1

    def sync(self, *, final: bool = False) -> None:
        """Make the entries durable, then record how many are (the header's
        ``synced``, itself durable with the next sync; ``final`` syncs it now)."""
        if self.handle is None:
            return
        if self.unsynced:
            crashpoint("events.sums.before-fsync")
            self.handle.fdatasync()
            crashpoint("events.sums.after-fsync")
            self.unsynced = 0
        if self.synced != len(self.ends):
            self.synced = len(self.ends)
            self.handle.write_at(DATA_SUMS_SYNCED_OFFSET, DATA_SUMS_SYNCED.pack(self.synced))
            self.unsynced = 1  # the count itself
        if final and self.unsynced:
            self.handle.fdatasync()
            self.unsynced = 0

    def check(self, read_at: ReadAt, lo: int, hi: int, data_path: str) -> bytes | None:
        """Check every batch overlapping ``[lo, hi)`` of ``data`` not checked yet.

        Returns ``data[lo:hi]`` when it had to read (one read covers the window
        and the batches), ``None`` when everything there was checked before and
        is good.  A batch whose bytes differ from its checksum is remembered
        (in :attr:`failures`) and handed out as zeros, which no
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

    @property
    def walk_sums(self) -> tuple[array[int], array[int], array[int], bytearray] | None:
        """The entries as replay's walker checks them (``sums`` of
        :func:`engine.events.runs.walk_runs_py`), ``None`` without ``data.crc``."""
        if self.handle is None:
            return None
        return self.ends, self.lasts, self.crcs, self.checked

    def failure(self, k: int, got: int | None, data_path: str) -> CorruptFileError:
        """The error of batch ``k`` that the walker found bad: ``got`` is the
        CRC-32 it computed, ``-1`` if the file ends inside the batch, ``None`` if
        it failed before (its error is remembered)."""
        start = self.ends[k - 1] if k else DATA_HEADER_SIZE
        end = self.ends[k]
        if got is None:
            known = self.failures.get(k)
            if known is not None:
                return known
            return CorruptFileError(data_path, start, f"bytes matching their checksum {self.crcs[k]:08x} "
                                    f"({self.path} entry {k}, batch [{start}, {end}))", "a checksum failure")
        if got < 0:
            return CorruptFileError(data_path, start, f"{end - start} bytes of checksummed batches", "end of file")
        error = CorruptFileError(
            data_path, start, f"bytes matching their checksum {self.crcs[k]:08x} ({self.path} entry {k}, batch "
            f"[{start}, {end}))", f"checksum {got:08x}")
        self.failures[k] = error
        self.checked[k] = 2
        return error

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
                   report: RecoveryReport | None, *, salvage: bool = False) -> DataSums:
    """Open ``data.crc`` for a journal whose committed end is ``end``.

    A writer (``report`` given) cuts entries past ``end`` and rebuilds missing
    ones, one per block (recorded in ``report``); a reader takes the entries
    below ``end`` and warns about committed data they do not cover.  A synced
    entry past ``end`` is damage for a writer, unless ``salvage`` cut ``data``.
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
        taken = sums.parse(raw, end, writer=writer and not salvage)
        if writer:
            assert report is not None
            # Entries past the synced count may be torn (a power cut during their
            # unsynced append): keep those that match their batches.
            good = _first_mismatch(sums, data, data_path, sums.synced)
            if good < len(sums.ends):
                del sums.ends[good:], sums.lasts[good:], sums.crcs[good:], sums.checked[good:]
                taken = batch_sum_offset(good)
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
            sums.sync(final=True)  # the synced count: everything checked or rebuilt
        elif sums.covered < end:
            log.warning("event journal %s: %d committed bytes of data past offset %d have no checksum in %s "
                        "(a writer crashed before syncing them; a writer's open rebuilds them)",
                        data_path, end - sums.covered, sums.covered, path)
    except BaseException:
        sums.close()
        raise
    return sums


def _first_mismatch(sums: DataSums, data: FileHandle, data_path: str, start: int) -> int:
    """Index of the first entry from ``start`` on whose batch does not match it
    (``len(sums.ends)`` if none); reads the batches 1 MiB at a time."""
    ends, n = sums.ends, len(sums.ends)
    i = max(0, min(start, n))
    while i < n:
        base = ends[i - 1] if i else DATA_HEADER_SIZE
        j = i + 1
        while j < n and ends[j] - base <= 1 << 20:
            j += 1
        buf = data.read_at(base, ends[j - 1] - base)
        if len(buf) < ends[j - 1] - base:
            return i
        got = array("I", batch_crcs(buf, base, ends, sums.lasts, i, j))
        for k in range(i, j):
            if got[k - i] != sums.crcs[k]:
                return k
            sums.checked[k] = 1
        i = j
    return n


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
