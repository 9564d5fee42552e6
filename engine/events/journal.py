"""The event journal: Akka persistence's journal contract on the file-journal format.

A journal is a directory holding two files, named as in the original project:
``meta`` (one block per persistence id: first/last block offsets and highest
sequence number) and ``data`` (every id's event blocks, interleaved, each id a
doubly linked list).  The format has no checksum and no commit record, so the
commit protocol is ours (see ``docs/formats/events.md``): a batch is committed by
the link that joins it to its id's chain (the old last block's ``next``), and a
link is only written once what it points to is durable -- or, for a batch inside
one 512-byte sector, in the same fdatasync, since a sector cannot be torn.  So:
one fdatasync for such a batch, two (blocks, then link) for anything else,
three for a new id's first batch (its meta block is its commit).

``meta`` caches where each chain ends; its updates are written in place (only
the changed bytes, never across a sector boundary) and synced in rounds.  On
open, each id is rolled forward along the links from meta's last block; the
committed end of ``data`` is the end of the furthest chain tip, and what lies
past it is zeros we reserved (ignored) or a torn or uncommitted batch (cut off
and reported, provided it looks like what one crash leaves; more is damage).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from itertools import chain

from engine.errors import ClosedError, ConfigError, CorruptFileError, FormatError, FullError, PoisonedError
from engine.events.blocks import DEFAULT_READAHEAD, BlockReader
from engine.events.codec import (
    BLOCK_HEADER_SIZE,
    BLOCK_NEXT_FIELD,
    DATA_HEADER_SIZE,
    DATA_LENGTH_FIELD,
    I32,
    MAX_DATA_SIZE,
    META_BLOCK_FIXED_SIZE,
    META_FIELDS_OFFSET,
    META_HEADER_SIZE,
    META_MAGIC,
    META_SIZE_FIELD,
    BlockHeader,
    MetaBlock,
    decode_data_header,
    decode_meta_blocks,
    decode_meta_header,
    encode_batch,
    encode_data_header,
    encode_id,
    encode_meta_block,
    encode_meta_fields,
    encode_meta_header,
    sector_crossing,
)
from engine.events.runs import (
    ANY_PREVIOUS,
    MIN_WINDOW,
    RUN_DONE,
    RUN_MORE,
    Event,
    RunResult,
    read_runs,
    run_error,
)
from engine.fs import FileHandle, FileSystem, OpenMode, SyncPolicy, atomic_write, crashpoint, create_file, resolve
from engine.fs.durable import make_dirs

log = logging.getLogger("engine.events")

#: File names inside a journal directory (the original project's names).
META_NAME = "meta"
DATA_NAME = "data"
#: Deferred meta writes are synced after this many (bounds recovery's roll-forward).
META_SYNC_EVERY = 256
#: Zero bytes reserved past the end of ``data`` at a time (ours; trimmed on close).
DEFAULT_PREALLOCATE = 256 * 1024
#: Temporary name used while the meta file is rewritten atomically (ours).
META_TMP_NAME = "meta.tmp"
#: Replay decodes at most this many events ahead of its consumer.
RUN_CHUNK = 1024


class SequenceNumberError(ConfigError):
    """A batch's sequence numbers do not continue the id's sequence by one."""


@dataclass(frozen=True)
class IdInfo:
    """What the journal knows about one persistence id.

    ``lowest`` is the first sequence number still replayable (``highest + 1`` when
    everything was deleted); ``highest`` survives deletion.
    """

    persistence_id: str
    lowest: int
    highest: int
    first_offset: int
    last_offset: int

    @property
    def live(self) -> int:
        """How many events replay would return."""
        return max(0, self.highest - self.lowest + 1)


@dataclass
class _Entry:
    """In-memory copy of one meta block plus the cached first live sequence number."""

    pid: str
    meta_offset: int
    first: int
    last: int
    highest: int
    first_seq: int

    def info(self) -> IdInfo:
        return IdInfo(self.pid, self.first_seq, self.highest, self.first, self.last)


def _join(directory: str, name: str) -> str:
    """``directory/name`` without doubling a trailing slash."""
    if directory == "/":
        return "/" + name
    return directory.rstrip("/") + "/" + name if directory else name


class EventJournal:
    """An event-sourcing journal in one directory; see the module docstring.

    Open with :meth:`open` (writer: takes an exclusive lock on ``data`` and repairs
    a torn tail) or :meth:`open_read_only` (no lock, no repair: a snapshot of what
    was committed when it was opened; :meth:`refresh` takes a new one).
    """

    def __init__(
        self,
        fs: FileSystem,
        directory: str,
        data: FileHandle,
        meta: FileHandle,
        *,
        read_only: bool,
        sync: SyncPolicy,
        max_data_size: int,
        readahead: int,
    ) -> None:
        self._fs = fs
        self.directory = directory
        self.data_path = _join(directory, DATA_NAME)
        self.meta_path = _join(directory, META_NAME)
        self._data = data
        self._meta = meta
        self.read_only = read_only
        self.sync = sync
        self.max_data_size = max_data_size
        self.readahead = readahead
        self.preallocate = 0
        self.salvage = False
        # End of the zero-filled space reserved past the committed end (see write()).
        self._allocated = DATA_HEADER_SIZE
        self._lock = threading.RLock()
        self._entries: dict[str, _Entry] = {}
        # The meta file as it should be (logical) and as last written to the file
        # (possibly not yet synced); they differ for ids whose update was deferred.
        self._meta_image = bytearray()
        self._meta_disk = bytearray()
        self._meta_deferred: set[str] = set()
        self._unsynced_meta = 0  # meta writes since the last meta fdatasync
        self._meta_magic = META_MAGIC
        self._end = DATA_HEADER_SIZE
        self._closed = False
        self._failure: BaseException | None = None
        #: Bytes of uncommitted or torn tail cut off (writer) or ignored (reader) on open.
        self.recovered_bytes = 0
        #: What recovery found and did, one sentence each (also logged as warnings).
        self.repairs: list[str] = []
        #: Counters for tests and benchmarks.
        self.batches_written = 0
        self.meta_rewrites = 0
        self.single_sync_batches = 0
        #: Ids whose last block recovery found further along the links than meta said.
        self.rolled_forward = 0

    # -- opening ----------------------------------------------------------------------
    @classmethod
    def open(
        cls,
        directory: str,
        *,
        create: bool = True,
        sync: object = "always",
        max_data_size: int = MAX_DATA_SIZE,
        readahead: int = DEFAULT_READAHEAD,
        preallocate: int = DEFAULT_PREALLOCATE,
        salvage: bool = False,
        fs: FileSystem | None = None,
    ) -> EventJournal:
        """Open (creating if allowed) the journal in ``directory`` for writing.

        ``sync`` is ``"always"`` (every write/delete is durable when it returns: one
        fdatasync for a batch inside one 512-byte sector, two ordered ones otherwise)
        or ``"never"`` (left to the OS and to :meth:`close`; a crash may then lose
        recent batches).
        ``max_data_size`` lowers the 2 GiB cap of the data file (tests use it).
        ``preallocate`` is how many zero bytes to reserve past the end of ``data`` at
        a time (0 = none), so that most batches overwrite allocated space and their
        fdatasync need not journal a size change; :meth:`close` trims the file.

        Recovery cuts an uncommitted tail only when it looks like what one crash
        leaves (one batch, one meta block); more is reported as damage.  After a
        crash of a ``sync="never"`` writer several batches may be uncommitted:
        ``salvage=True`` then cuts whatever is past the committed end.
        """
        fs = resolve(fs)
        policy = SyncPolicy.parse(sync)
        if policy.mode == "periodic":
            raise ConfigError("EventJournal supports sync='always' or 'never'")
        if not 0 < max_data_size <= MAX_DATA_SIZE:
            raise ConfigError(f"max_data_size must be in (0, {MAX_DATA_SIZE}]")
        if not fs.isdir(directory):
            if not create:
                raise ConfigError(f"{directory}: no such journal directory")
            make_dirs(fs, directory)
        data_path = _join(directory, DATA_NAME)
        meta_path = _join(directory, META_NAME)
        _create_missing(fs, directory, data_path, meta_path, create)
        data = fs.open(data_path, OpenMode.WRITE)
        try:
            data.lock(exclusive=True, blocking=False)
            meta = fs.open(meta_path, OpenMode.WRITE)
        except BaseException:
            data.close()
            raise
        journal = cls(fs, directory, data, meta, read_only=False, sync=policy,
                      max_data_size=max_data_size, readahead=readahead)
        journal.preallocate = max(0, preallocate)
        journal.salvage = salvage
        try:
            tmp = _join(directory, META_TMP_NAME)
            if fs.exists(tmp):
                # A crash during an atomic meta rewrite; the old meta file is intact.
                fs.unlink(tmp)
                fs.fsync_dir(directory)
                journal._note(f"removed stray {tmp} (interrupted meta rewrite)")
            journal._load(repair=True)
        except BaseException:
            journal._release()
            raise
        return journal

    @classmethod
    def open_read_only(
        cls,
        directory: str,
        *,
        readahead: int = DEFAULT_READAHEAD,
        fs: FileSystem | None = None,
    ) -> EventJournal:
        """Open without the writer lock and without repairing anything.

        The reader sees what was committed when it opened (or last called
        :meth:`refresh`), even while a writer keeps appending: committed blocks
        never change, and the reader never looks past the committed length.
        """
        fs = resolve(fs)
        data_path = _join(directory, DATA_NAME)
        meta_path = _join(directory, META_NAME)
        for path in (meta_path, data_path):
            if not fs.exists(path):
                raise ConfigError(f"{directory}: not an event journal ({path} is missing)")
        data = fs.open(data_path, OpenMode.READ)
        try:
            meta = fs.open(meta_path, OpenMode.READ)
        except BaseException:
            data.close()
            raise
        journal = cls(fs, directory, data, meta, read_only=True, sync=SyncPolicy("never"),
                      max_data_size=MAX_DATA_SIZE, readahead=readahead)
        try:
            journal._load_snapshot()
        except BaseException:
            journal._release()
            raise
        return journal

    def refresh(self) -> None:
        """Reader only: take a new snapshot of what is committed now."""
        with self._lock:
            self._check_open()
            if not self.read_only:
                return
            # The writer may have replaced ``meta`` (atomic rewrite): open it anew.
            self._meta.close()
            self._meta = self._fs.open(self.meta_path, OpenMode.READ)
            self._load_snapshot()

    def _load_snapshot(self) -> None:
        # A writer updating meta while we read it can be seen half-way; a few
        # retries give a consistent picture (each retry re-reads the whole file).
        attempts = 5
        for attempt in range(attempts):
            try:
                self._load(repair=False)
                return
            except FormatError:
                raise  # a foreign file does not change by re-reading it
            except CorruptFileError:
                if attempt == attempts - 1:
                    raise

    # -- loading and recovery -----------------------------------------------------------
    def _note(self, text: str) -> None:
        self.repairs.append(text)
        log.warning("%s: %s", self.directory, text)

    def _load(self, *, repair: bool) -> None:
        """Read meta, check every id's anchors in data, and find the committed end."""
        meta_bytes = self._meta.read_all()
        magic, blocks_size = decode_meta_header(meta_bytes[:META_HEADER_SIZE], self.meta_path)
        committed_meta = META_HEADER_SIZE + blocks_size
        if len(meta_bytes) < committed_meta:
            raise CorruptFileError(self.meta_path, len(meta_bytes),
                                   f"{blocks_size} bytes of meta blocks (header's size)", "end of file")
        blocks = decode_meta_blocks(meta_bytes[META_HEADER_SIZE:committed_meta], self.meta_path)
        stale_meta = len(meta_bytes) - committed_meta

        header_length = decode_data_header(self._data.read_at(0, DATA_HEADER_SIZE), self.data_path)
        # No limit from the size just read: a writer may append and link while we
        # walk, and a link we see was written after the blocks it leads to (the file
        # size read before it could cut a batch in half).  Reads past the end come
        # back short, which the block reader reports like any broken link.
        reader = BlockReader(self._data, self.data_path, MAX_DATA_SIZE, readahead=4096)
        entries: dict[str, _Entry] = {}
        end = DATA_HEADER_SIZE
        dangling: list[int] = []
        rolled: list[str] = []
        for block in blocks:
            first_seq = block.highest + 1
            if block.last == 0:
                if block.first != 0:
                    raise CorruptFileError(self.meta_path, block.offset + META_FIELDS_OFFSET,
                                           "first offset 0 when the last offset is 0", str(block.first))
            else:
                last = reader.header(block.last)
                if last.sequence_nr != block.highest:
                    raise CorruptFileError(self.data_path, block.last,
                                           f"sequence number {block.highest} (meta's highest for "
                                           f"{block.persistence_id!r})", str(last.sequence_nr))
                # Meta may lag behind the chain (its updates are synced in rounds):
                # follow the links.  A link is only written once what it points to
                # is durable (or cannot be torn), so every block reached is whole.
                tip, grown = _roll_forward(reader, last)
                first_seq = tip.sequence_nr + 1
                if block.first != 0:
                    first = reader.header(block.first)
                    if not 1 <= first.sequence_nr <= tip.sequence_nr:
                        raise CorruptFileError(self.data_path, block.first,
                                               f"a sequence number in [1, {tip.sequence_nr}] for "
                                               f"{block.persistence_id!r}", str(first.sequence_nr))
                    first_seq = first.sequence_nr
                if grown:
                    rolled.append(block.persistence_id)
                    if block.first == 0:
                        first_seq = last.sequence_nr + 1
                        block = MetaBlock(block.persistence_id, last.next, tip.offset, tip.sequence_nr,
                                          block.offset)
                    else:
                        block = MetaBlock(block.persistence_id, block.first, tip.offset, tip.sequence_nr,
                                          block.offset)
                if tip.next != 0:
                    dangling.append(tip.offset)
                end = max(end, tip.end)
            entries[block.persistence_id] = _Entry(block.persistence_id, block.offset, block.first,
                                                   block.last, block.highest, first_seq)
        # Past the committed end there may be zeros we reserved (not news) and the
        # bytes of a batch that never committed (reported and cut off).
        # (A reader only skips the tail, whatever it holds.)
        data_size = self._data.size()
        if data_size < end:
            raise CorruptFileError(self.data_path, data_size, f"data up to the end of the last blocks, {end}",
                                   "end of file")
        tail = data_size - end
        if repair and _all_zero(self._data, end, data_size):
            tail = 0
        self.recovered_bytes = tail
        if repair and not self.salvage:
            # Before cutting anything, make sure it looks like what a crash leaves:
            # at most one uncommitted batch / one uncommitted meta block.  More means
            # the meta file lost entries (damage), and cutting would destroy data.
            if stale_meta:
                _check_meta_tail(meta_bytes, committed_meta, self.meta_path)
            if tail:
                lasts = {e.last for e in entries.values() if e.last}
                _check_data_tail(self._data, end, data_size, lasts, self.data_path)
        if repair:
            if stale_meta:
                self._note(f"cut {stale_meta} uncommitted bytes off the end of {self.meta_path}")
                self._meta.truncate(committed_meta)
                self._meta.fdatasync()
            if tail or header_length != end - DATA_HEADER_SIZE or dangling:
                # Blocks past the committed end belong to a batch whose meta update
                # never became durable: it is not part of the journal.  Cut it, point
                # every last block's ``next`` back to 0, and fix the header length.
                if tail:
                    self._note(f"cut {tail} bytes of uncommitted or torn batch off {self.data_path} "
                               f"(committed end {end})")
                    self._data.truncate(end)
                for offset in dangling:
                    self._data.write_at(offset + BLOCK_NEXT_FIELD, I32.pack(0))
                if dangling:
                    self._note(f"reset the next link of {len(dangling)} last block(s) left by an "
                               "uncommitted batch")
                if header_length != end - DATA_HEADER_SIZE:
                    self._note(f"data header length {header_length} corrected to {end - DATA_HEADER_SIZE}")
                self._data.write_at(DATA_LENGTH_FIELD, I32.pack(end - DATA_HEADER_SIZE))
                crashpoint("events.recover.before-fsync")
                self._data.fdatasync()
                crashpoint("events.recover.after-fsync")
        self._meta_magic = magic
        self._meta_disk = bytearray(meta_bytes[:committed_meta])
        self._meta_image = bytearray(self._meta_disk)
        self._meta_deferred = set()
        self._unsynced_meta = 0
        self._entries = entries
        self._end = end
        self._allocated = max(end, self._data.size())
        self.rolled_forward = len(rolled)
        if repair and rolled:
            # Bring meta up to the chains (normal after a crash: not a repair).
            log.info("%s: meta rolled forward for %d id(s)", self.directory, len(rolled))
            for pid in rolled:
                e = entries[pid]
                self._set_meta_fields(e, e.first, e.last, e.highest, durable=False)
            self._sync_meta()

    # -- state checks ---------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError(f"{self.directory}: event journal is closed")

    def _check_writable(self) -> None:
        self._check_open()
        if self.read_only:
            raise ConfigError(f"{self.directory}: journal was opened read-only")
        if self._failure is not None:
            raise PoisonedError(self.directory, self._failure)

    # -- writing ----------------------------------------------------------------------
    def write(self, persistence_id: str, events: Iterable[tuple[int, bytes]]) -> None:
        """Append one atomic batch of ``(sequence_nr, payload)`` events for one id.

        Sequence numbers must continue the id's sequence by one (the first event of
        a new id is 1).  After a crash the batch is there whole or not at all; with
        ``sync="always"`` it is durable when this returns.
        """
        batch = list(events)
        if not batch:
            return
        try:
            raw_id = encode_id(persistence_id)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        # (The checks run in C-level comprehensions and comparisons: they are on
        # every write's path, and a per-item Python loop costs ~0.3 us an event.)
        payloads = [item[1] for item in batch]
        if set(map(type, payloads)) != {bytes}:
            converted: list[bytes] = []
            for payload in payloads:
                if not isinstance(payload, (bytes, bytearray, memoryview)):
                    raise ConfigError(f"event payloads must be bytes, not {type(payload).__name__}")
                converted.append(bytes(payload))
            payloads = converted
        seqs = [item[0] for item in batch]
        with self._lock:
            self._check_writable()
            entry = self._entries.get(persistence_id)
            expected = (entry.highest if entry is not None else 0) + 1
            if seqs != list(range(expected, expected + len(seqs))):
                for i, seq in enumerate(seqs):
                    if seq != expected + i:
                        raise SequenceNumberError(
                            f"{persistence_id!r}: event {i} of the batch has sequence number {seq!r}, "
                            f"expected {expected + i} (sequence numbers continue the highest, "
                            f"{expected - 1}, by one)")
            start = self._end
            blob, offsets = encode_batch(start, entry.last if entry is not None else 0, expected, payloads)
            new_end = start + len(blob)
            if new_end > self.max_data_size:
                raise FullError(
                    f"{self.data_path}: a batch of {len(blob)} bytes would end at {new_end}, past the "
                    f"format's i32 offset limit of {self.max_data_size} bytes; start a new journal "
                    "directory (see docs/guide/events.md)")
            if entry is None and len(self._meta_image) + len(raw_id) + 26 > MAX_DATA_SIZE:
                raise FullError(f"{self.meta_path}: the meta file would pass its i32 size limit")
            highest = expected + len(batch) - 1
            linked = entry is not None and entry.last != 0
            # One sync suffices for a batch whose blocks all lie inside one 512-byte
            # sector and that links onto an existing chain: a sector cannot be torn,
            # so the link never leads to half a batch.  Everything else links only
            # after its blocks are durable.
            single = linked and not sector_crossing(start, len(blob))
            try:
                self._data.write_at(start, blob)
                self._data.write_at(DATA_LENGTH_FIELD, I32.pack(new_end - DATA_HEADER_SIZE))
                if new_end > self._allocated and self.preallocate:
                    # Reserve zeros past the batch: later batches then overwrite
                    # allocated blocks, and their fdatasync has no size change to log.
                    target = min(self.max_data_size, new_end + self.preallocate)
                    self._data.write_at(new_end, bytes(target - new_end))
                    self._allocated = target
                if single:
                    assert entry is not None
                    self._link(entry.last, offsets[0])
                    self._sync_data("events.write.single")
                    self.single_sync_batches += 1
                else:
                    # The blocks must be durable before anything points at them: the
                    # format has no checksum to recognise a torn batch by.
                    self._sync_data("events.write.blocks")
                    if linked:
                        assert entry is not None
                        self._link(entry.last, offsets[0])
                        # The commit point of an existing id: its chain now ends here.
                        self._sync_data("events.write.link")
                if entry is None:
                    # A new id has no chain to link onto: its meta block is the commit.
                    meta_offset = self._append_meta_block(persistence_id, offsets[0], offsets[-1], highest)
                    entry = _Entry(persistence_id, meta_offset, offsets[0], offsets[-1], highest, expected)
                    self._entries[persistence_id] = entry
                else:
                    first = entry.first if entry.first else offsets[0]
                    # Committed already (by the link) unless the id had no chain.
                    self._set_meta_fields(entry, first, offsets[-1], highest, durable=not linked)
                    if not entry.first:
                        entry.first_seq = expected
                    entry.first, entry.last, entry.highest = first, offsets[-1], highest
            except BaseException as exc:
                self._failure = exc
                raise
            self._end = new_end
            self._allocated = max(self._allocated, new_end)
            self.batches_written += 1

    def delete_to(self, persistence_id: str, sequence_nr: int) -> None:
        """Delete the id's events up to and including ``sequence_nr``.

        Replay no longer returns them; :meth:`highest_sequence_nr` is unchanged.
        Space is not reclaimed (the format has no free list).  Deleting past the
        highest deletes everything; an unknown id is a no-op.
        """
        with self._lock:
            self._check_writable()
            entry = self._entries.get(persistence_id)
            if entry is None or entry.first == 0 or sequence_nr < entry.first_seq:
                return
            to = min(sequence_nr, entry.highest)
            if to >= entry.highest:
                new_first, new_first_seq = 0, entry.highest + 1
            else:
                reader = BlockReader(self._data, self.data_path, self._end, self.readahead)
                offset = entry.first
                header = reader.header(offset)
                while header.sequence_nr <= to:
                    offset = header.next
                    header = reader.header(offset)
                new_first, new_first_seq = offset, header.sequence_nr
                if new_first_seq != to + 1:
                    raise CorruptFileError(self.data_path, offset, f"sequence number {to + 1}",
                                           str(new_first_seq))
            try:
                self._set_meta_fields(entry, new_first, entry.last, entry.highest, durable=True)
            except BaseException as exc:
                self._failure = exc
                raise
            entry.first, entry.first_seq = new_first, new_first_seq

    def _link(self, last: int, first: int) -> None:
        """Point the id's last block's ``next`` at the first block of a new batch."""
        self._data.write_at(last + BLOCK_NEXT_FIELD, I32.pack(first))

    def _sync_data(self, what: str) -> None:
        if self.sync.always:
            crashpoint(f"{what}.before-fsync")
            self._data.fdatasync()
            crashpoint(f"{what}.after-fsync")

    def _set_meta_fields(self, entry: _Entry, first: int, last: int, highest: int, *, durable: bool) -> None:
        """Record new (first, last, highest) for one id in ``meta``.

        ``durable``: the meta write is the commit (deletes, an id without a chain)
        and is synced before returning.  Otherwise the batch was committed by its
        link in ``data`` and meta only caches where the chain ends: the write is
        synced later (every :data:`META_SYNC_EVERY` writes, on close), and recovery
        rolls a stale entry forward along the links.

        Only the bytes that differ from the file are written (offsets are below
        2^31, so the high bytes of ``first``/``last`` and usually of ``highest``
        never change): the shorter the write, the rarer it straddles a sector.
        A straddling write could be torn into a mix of old and new fields, so it
        is never made in place: a deferred one waits for the next sync, which then
        replaces the whole file atomically.
        """
        fields = encode_meta_fields(first, last, highest)
        pos = entry.meta_offset + META_FIELDS_OFFSET
        self._meta_image[pos : pos + len(fields)] = fields
        old = bytes(self._meta_disk[pos : pos + len(fields)])
        if old != fields:
            a = next(i for i in range(len(fields)) if fields[i] != old[i])
            b = next(i for i in range(len(fields), 0, -1) if fields[i - 1] != old[i - 1])
            if self.sync.always and sector_crossing(pos + a, b - a):
                self._meta_deferred.add(entry.pid)
            else:
                if durable and self._unsynced_meta and self.sync.always:
                    # Earlier deferred-sync writes may sit in another sector of this
                    # very block: they must be on disk before this commit can be, or
                    # a crash could keep the new ``first`` beside an old ``last``.
                    self._sync_meta()
                self._meta.write_at(pos + a, fields[a:b])
                self._meta_disk[pos + a : pos + b] = fields[a:b]
                self._meta_deferred.discard(entry.pid)
                self._unsynced_meta += 1
        if durable or self._unsynced_meta >= META_SYNC_EVERY:
            self._sync_meta()

    def _sync_meta(self) -> None:
        """Make the meta file durable as it should be (atomically if deferred ids)."""
        if not self.sync.always:
            return
        if self._meta_deferred:
            self._rewrite_meta()
        elif self._unsynced_meta:
            crashpoint("events.meta.before-fsync")
            self._meta.fdatasync()
            crashpoint("events.meta.after-fsync")
        self._unsynced_meta = 0

    def _append_meta_block(self, pid: str, first: int, last: int, highest: int) -> int:
        """Add a new id's meta block; returns its offset in the meta file."""
        block = encode_meta_block(MetaBlock(pid, first, last, highest))
        offset = len(self._meta_image)
        self._meta.write_at(offset, block)
        if self.sync.always:
            # The block is invisible until the header's size covers it; it must be
            # durable before that size is, or the size could cover garbage.
            crashpoint("events.new-id.before-block-fsync")
            self._meta.fdatasync()
        self._meta_image += block
        self._meta_disk += block
        blocks_size = len(self._meta_image) - META_HEADER_SIZE
        self._meta_image[META_SIZE_FIELD : META_SIZE_FIELD + 4] = I32.pack(blocks_size)
        self._meta_disk[META_SIZE_FIELD : META_SIZE_FIELD + 4] = I32.pack(blocks_size)
        self._meta.write_at(META_SIZE_FIELD, I32.pack(blocks_size))
        if self.sync.always:
            crashpoint("events.new-id.before-size-fsync")
            self._meta.fdatasync()
            crashpoint("events.new-id.after-size-fsync")
            self._unsynced_meta = 0  # those syncs covered the deferred writes too
        return offset

    def _rewrite_meta(self) -> None:
        """Replace ``meta`` with the in-memory image, atomically, and reopen it."""
        atomic_write(self._fs, self.meta_path, bytes(self._meta_image),
                     tmp_path=_join(self.directory, META_TMP_NAME))
        self._meta.close()
        self._meta = self._fs.open(self.meta_path, OpenMode.WRITE)
        self._meta_disk = bytearray(self._meta_image)
        self._meta_deferred.clear()
        self._unsynced_meta = 0
        self.meta_rewrites += 1

    # -- reading ----------------------------------------------------------------------
    def replay(
        self,
        persistence_id: str,
        from_seq: int = 1,
        to_seq: int | None = None,
        max: int | None = None,  # Akka's parameter name (shadows the builtin here)
    ) -> Iterator[Event]:
        """Yield the id's events with ``from_seq <= sequence_nr <= to_seq``, in order,
        at most ``max`` of them.  Only that id's blocks are read (following its links
        from the nearer end, with read-ahead)."""
        with self._lock:
            self._check_open()
            entry = self._entries.get(persistence_id)
            if entry is None or entry.first == 0:
                return iter(())
            first, last, first_seq, highest = entry.first, entry.last, entry.first_seq, entry.highest
            limit = self._end
        lo = max_(from_seq, first_seq)
        hi = highest if to_seq is None else min(to_seq, highest)
        if max is not None:
            if max <= 0:
                return iter(())
            hi = min(hi, lo + max - 1)
        if lo > hi:
            return iter(())
        if lo != first_seq:
            return chain.from_iterable(self._locate(first, last, first_seq, highest, lo, hi, limit))
        # From the first live block (the usual replay): no separate walk to find
        # ``lo``.  That block's ``previous`` is not checked (after a delete it
        # points at deleted blocks); everything else is, as in _runs.  The first
        # chunk is walked now: most replays are done in one call of the walker
        # and need no generator at all.
        cap = max_(self.readahead, BLOCK_HEADER_SIZE)
        walked = read_runs(self._data.read_at, first, ANY_PREVIOUS, lo, hi, limit, cap, min(MIN_WINDOW, cap),
                           RUN_CHUNK)
        if walked[5] == RUN_DONE:
            return iter(walked[0])
        return chain.from_iterable(self._runs(first, ANY_PREVIOUS, lo, hi, limit, walked))

    def _locate(self, first: int, last: int, first_seq: int, highest: int, lo: int, hi: int,
                limit: int) -> Iterator[list[Event]]:
        """Find the block with sequence number ``lo`` (eagerly: a broken link raises
        here) and return the runs from it."""
        # Small windows while locating ``lo``: the run loop does the read-ahead.
        reader = BlockReader(self._data, self.data_path, limit, 4096)
        path = self.data_path
        # Walk from whichever end is nearer.
        if lo - first_seq <= highest - lo:
            offset, header = first, reader.header(first)
            while header.sequence_nr < lo:
                if offset == last:
                    raise CorruptFileError(path, offset, f"a link onward to sequence number {lo}", "the last block")
                nxt = header.next
                expected_seq = header.sequence_nr + 1
                header = reader.header(nxt)
                if header.sequence_nr != expected_seq or header.previous != offset:
                    raise CorruptFileError(path, nxt, f"sequence number {expected_seq} linked back to {offset}",
                                           f"{header.sequence_nr} linked back to {header.previous}")
                offset = nxt
        else:
            offset, header = last, reader.header(last)
            while header.sequence_nr > lo:
                prv = header.previous
                expected_seq = header.sequence_nr - 1
                header = reader.header(prv)
                if header.sequence_nr != expected_seq or header.next != offset:
                    raise CorruptFileError(path, prv, f"sequence number {expected_seq} linked to {offset}",
                                           f"{header.sequence_nr} linked to {header.next}")
                offset = prv
        if header.sequence_nr != lo:
            raise CorruptFileError(path, offset, f"sequence number {lo}", str(header.sequence_nr))
        return self._runs(offset, header.previous, lo, hi, limit)

    def _runs(self, offset: int, prev: int, expected: int, hi: int, limit: int,
              walked: RunResult | None = None) -> Iterator[list[Event]]:
        """Yield blocks ``expected..hi`` following ``next`` links from ``offset``, as
        lists of Events (up to :data:`RUN_CHUNK` per list); ``walked`` is the result
        of a first walker call already made from that state.

        The walk, the read-ahead and every check of a block (own offset, sequence
        number, previous link, size within the committed ``limit``) are
        :func:`engine.events.runs.read_runs`, in C when built; it reads through
        this journal's file handle.  This loop hands out the events and raises the
        typed error where the walk stopped at a broken block.  The first window is
        4 KiB (block sizes are not known yet).
        """
        read_at = self._data.read_at
        walk = read_runs
        cap = max_(self.readahead, BLOCK_HEADER_SIZE)
        want = min(MIN_WINDOW, cap)
        while True:
            if walked is None:
                walked = walk(read_at, offset, prev, expected, hi, limit, cap, want, RUN_CHUNK)
            events, offset, prev, expected, want, status, detail = walked
            walked = None
            if events:
                yield events
            if status == RUN_DONE:
                return
            if status != RUN_MORE:
                raise run_error(status, detail, offset, prev, expected, limit, self.data_path)

    def highest_sequence_nr(self, persistence_id: str) -> int:
        """The highest sequence number ever written for the id (0 if none); deletion
        does not lower it."""
        with self._lock:
            self._check_open()
            entry = self._entries.get(persistence_id)
            return 0 if entry is None else entry.highest

    def lowest_sequence_nr(self, persistence_id: str) -> int:
        """The first sequence number replay would return (``highest + 1`` if none)."""
        with self._lock:
            self._check_open()
            entry = self._entries.get(persistence_id)
            return 1 if entry is None else entry.first_seq

    def persistence_ids(self) -> list[str]:
        """Every id that has ever been written, in meta-file order."""
        with self._lock:
            self._check_open()
            return list(self._entries)

    def id_info(self, persistence_id: str) -> IdInfo | None:
        """Range and offsets of one id, or ``None`` if unknown."""
        with self._lock:
            self._check_open()
            entry = self._entries.get(persistence_id)
            return None if entry is None else entry.info()

    def ids(self) -> list[IdInfo]:
        """Every id with its replayable range (for listings and the Spark reader)."""
        with self._lock:
            self._check_open()
            return [e.info() for e in self._entries.values()]

    def stats(self) -> dict[str, object]:
        """Counts and sizes, for ``engine events stats``."""
        with self._lock:
            self._check_open()
            infos = [e.info() for e in self._entries.values()]
            return {
                "directory": self.directory,
                "meta magic": self._meta_magic.decode("ascii"),
                "persistence ids": len(infos),
                "live events": sum(i.live for i in infos),
                "events ever written": sum(i.highest for i in infos),
                "data bytes (committed)": self._end,
                "data capacity used": f"{100.0 * self._end / MAX_DATA_SIZE:.4f}%",
                "meta bytes": len(self._meta_image),
                "read only": self.read_only,
                # A reader skips what lies past the committed end (a writer's reserved
                # zeros or batch in progress); a writer reports what recovery cut.
                ("bytes past the committed end" if self.read_only else "recovered bytes"): self.recovered_bytes,
            }

    @property
    def committed_size(self) -> int:
        """The data file's committed length (header included)."""
        return self._end

    def verify(self) -> list[str]:
        """Check every invariant of both files; raises CorruptFileError on a problem
        and returns notes (for example what recovery repaired on open)."""
        from engine.events.verify import verify_journal

        with self._lock:
            self._check_open()
            return list(self.repairs) + verify_journal(
                self._data, self.data_path, self._end, self.meta_path,
                [(e.pid, e.first, e.last, e.highest) for e in self._entries.values()],
                strict_links=not self.read_only)

    # -- closing ----------------------------------------------------------------------
    def close(self) -> None:
        """Make everything durable (with ``sync="never"``) and release the lock."""
        with self._lock:
            if self._closed:
                return
            try:
                if not self.read_only and self._failure is None:
                    if self._data.size() > self._end:
                        # Leave exactly what the original would: no reserved zeros.
                        self._data.truncate(self._end)
                        self._data.fdatasync()
                    elif not self.sync.always:
                        self._data.fdatasync()
                    if self.sync.always:
                        self._sync_meta()  # the deferred meta writes
                    else:
                        self._meta.fdatasync()
            finally:
                self._closed = True
                self._release()

    def _release(self) -> None:
        for handle in (self._meta, self._data):
            try:
                handle.close()
            except Exception:  # closing must release everything it can
                log.exception("closing %s", handle.path)

    def __enter__(self) -> EventJournal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        mode = "read-only" if self.read_only else "writer"
        return f"<EventJournal {self.directory!r} {mode} ids={len(self._entries)} end={self._end}>"


def _roll_forward(reader: BlockReader, last: BlockHeader) -> tuple[BlockHeader, bool]:
    """Follow ``next`` from ``last`` while it leads to the id's next block."""
    tip, grown = last, False
    while tip.next > tip.offset:
        try:
            nxt = reader.header(tip.next)
        except CorruptFileError:
            break  # a link to bytes that never became durable: the batch in flight
        if nxt.previous != tip.offset or nxt.sequence_nr != tip.sequence_nr + 1:
            break
        if nxt.end > reader.handle.size():
            break  # a header whose block never fully arrived (damage; a crash cannot)
        tip, grown = nxt, True
    return tip, grown


def _check_meta_tail(meta_bytes: bytes, committed: int, path: str) -> None:
    """Refuse a meta tail holding more than the one block a crash can leave."""
    pos, whole = committed, 0
    while pos + META_BLOCK_FIXED_SIZE <= len(meta_bytes):
        size = int.from_bytes(meta_bytes[pos : pos + 2], "big", signed=True)
        if size <= META_BLOCK_FIXED_SIZE or pos + size > len(meta_bytes):
            break
        whole += 1
        pos += size
    if whole > 1:
        raise CorruptFileError(path, committed, "at most one uncommitted meta block past the header's size",
                               f"{whole} whole blocks (the size field looks damaged; open with "
                               "salvage=True to cut them anyway)")


def _check_data_tail(handle: FileHandle, end: int, size: int, lasts: set[int], path: str) -> None:
    """Refuse a data tail that is more than one uncommitted batch.

    A crash leaves at most the batch in flight: adjacent blocks, each linking to
    the next, the first one linked back to some id's last block (or to nothing, for
    a new id), the last one with ``next`` 0; then zeros or torn bytes.  Several
    such batches past the committed end mean meta lost track of committed data.
    """
    reader = BlockReader(handle, path, size, readahead=1 << 16)
    pos, batches, first = end, 0, True
    while pos + BLOCK_HEADER_SIZE <= size:
        if sector_crossing(pos, BLOCK_HEADER_SIZE):
            # A tear at the sector boundary could have garbled the header's later
            # fields while keeping its own offset: such a header proves nothing.
            return
        try:
            header = reader.header(pos)
        except CorruptFileError:
            return  # torn bytes, zeros: the end of what the crash left
        # A header inside one sector with the right own offset is what was written.
        if first and header.previous not in lasts and header.previous != 0:
            raise CorruptFileError(path, pos, "an uncommitted batch linked to an id's last block",
                                   f"a block linked back to {header.previous}")
        first = False
        if header.next == 0:
            batches += 1
            if batches > 1:
                raise CorruptFileError(path, end, "at most one uncommitted batch past the committed end",
                                       "several whole batches (the meta file looks damaged, or a sync='never' "
                                       "writer crashed: open with salvage=True to cut them)")
        elif header.next != header.end:
            raise CorruptFileError(path, pos, "adjacent blocks in an uncommitted batch",
                                   f"a link to {header.next}")
        pos = header.end


def _all_zero(handle: FileHandle, start: int, end: int) -> bool:
    """Whether bytes [start, end) of the file are all zero (read 1 MiB at a time)."""
    chunk = 1 << 20
    while start < end:
        data = handle.read_at(start, min(chunk, end - start))
        if not data or data.count(0) != len(data):
            return not data
        start += len(data)
    return True


max_ = max  # ``replay`` has a parameter named ``max`` (Akka's name)


def _create_missing(fs: FileSystem, directory: str, data_path: str, meta_path: str, create: bool) -> None:
    """Create the files of a new journal, or finish a creation a crash interrupted.

    ``data`` is created first, then ``meta`` (each fsynced with its directory).  A
    lone file is only completed when it holds no committed blocks; otherwise the
    missing partner means real damage.
    """
    has_data, has_meta = fs.exists(data_path), fs.exists(meta_path)
    if has_data and has_meta and fs.file_size(data_path) and fs.file_size(meta_path):
        return
    for path, exists in ((data_path, has_data), (meta_path, has_meta)):
        if exists and fs.file_size(path) == 0 and create:
            # An empty file is a creation cut short before its header was written
            # (a real file system may keep the name without the data): start over.
            fs.unlink(path)
            fs.fsync_dir(directory)
    has_data, has_meta = fs.exists(data_path), fs.exists(meta_path)
    if has_data and has_meta:
        return
    if not has_data and not has_meta and not create:
        raise ConfigError(f"{directory}: no event journal here (create=False)")
    if has_meta and not has_data:
        with fs.open(meta_path) as handle:
            _magic, size = decode_meta_header(handle.read_at(0, META_HEADER_SIZE), meta_path)
        if size:
            raise CorruptFileError(data_path, 0, "the data file the meta file points into", "missing")
    if has_data and not has_meta:
        with fs.open(data_path) as handle:
            if decode_data_header(handle.read_at(0, DATA_HEADER_SIZE), data_path):
                raise CorruptFileError(meta_path, 0, "the meta file describing the data file", "missing")
    if not has_data:
        create_file(fs, data_path, encode_data_header(0)).close()
    if not has_meta:
        create_file(fs, meta_path, encode_meta_header(0)).close()
