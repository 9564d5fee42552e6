"""The event journal: Akka persistence's journal contract on the file-journal format.

A journal is a directory holding two files, named as in akka-persistence-file-journal:
``meta`` (one block per persistence id: first/last block offsets and highest
sequence number) and ``data`` (every id's event blocks, interleaved, each id a
doubly linked list), plus the writer lock ``.lock`` and the checksum side files
``data.crc`` / ``meta.crc`` (:mod:`engine.events.sums`: the format has no room for
a checksum; every read path checks them).  The format has no commit record, so
this implementation adds a commit protocol (see
``docs/formats/events.md``): a batch is committed by the link that joins it to
its id's chain (the old last block's ``next``), and a link is only written once
what it points to is durable -- or, for a batch inside one 512-byte sector, in the
same fdatasync, since a sector cannot be torn.  So: one fdatasync for such a
batch, two (blocks, then link) for anything else, four for a new id's first
batch (its meta.crc entry, then its meta block, which is its commit).

This module is the store: opening (the writer lock from :mod:`engine.fs`, then
:mod:`engine.events.recovery`), the write path, replay and the queries.  The meta
file's cache updates are :mod:`engine.events.metafile`; replay's walk is
:mod:`engine.events.runs` (in C when built).
"""

from __future__ import annotations

import datetime as _dt
import errno
import logging
import threading
from collections.abc import Iterable, Iterator
from functools import partial
from itertools import chain
from os import PathLike
from typing import Any

from engine.conventions import Serializer
from engine.conventions import serializer as parse_serializer
from engine.errors import (
    ClosedError,
    ConfigError,
    CorruptFileError,
    DiskFullError,
    FormatError,
    FullError,
    PoisonedError,
    SequenceNumberError,
)
from engine.events.blocks import DEFAULT_READAHEAD, BlockReader, locate
from engine.events.codec import (
    BLOCK_HEADER_SIZE,
    BLOCK_NEXT_FIELD,
    DATA_HEADER_SIZE,
    DATA_LENGTH_FIELD,
    I32,
    MAX_DATA_SIZE,
    encode_batch,
    encode_id,
    sector_crossing,
)
from engine.events.layout import (
    DATA_NAME,
    DATA_SUMS_NAME,
    LOCK_NAME,
    META_NAME,
    META_SUMS_NAME,
    META_TMP_NAME,
    Entry,
    IdInfo,
    join,
)
from engine.events.metafile import MetaFile
from engine.events.payloads import batch_error, event_class, payload_error, sequence_number_error
from engine.events.recovery import (
    Loaded,
    complete_meta_sums,
    load,
    open_files,
    remove_stray_tmp,
    roll_meta_forward,
)
from engine.events.runs import (
    ANY_PREVIOUS,
    MIN_WINDOW,
    RUN_DONE,
    RUN_MORE,
    RUN_SUM,
    Event,
    ReadAt,
    RunResult,
    Sums,
    read_runs,
    run_error,
)
from engine.events.sumfiles import SUMS_SYNC_EVERY, DataSums, MetaSums, load_data_sums, open_meta_sums
from engine.events.sums import batch_crc
from engine.events.verify import verify_journal, verify_sums
from engine.fs import (
    FileHandle,
    FileSystem,
    HeldLock,
    OpenMode,
    RecoveryReport,
    SyncPolicy,
    as_path,
    crashpoint,
    make_dirs,
    no_such,
    resolve,
    take_lock,
)
from engine.lifetime import ClosedWhenDropped

log = logging.getLogger("engine.events")

#: Zero bytes reserved past the end of ``data`` at a time (trimmed on close).
DEFAULT_PREALLOCATE = 256 * 1024
#: Replay decodes at most this many events ahead of its consumer.
RUN_CHUNK = 1024


class EventJournal(ClosedWhenDropped):
    """An event-sourcing journal in one directory; see the module docstring.

    Open with :meth:`open` (writer: takes the writer lock ``<dir>/.lock`` and
    repairs a torn tail, reported in :attr:`recovery`) or :meth:`open_read_only`
    (no lock, no repair: a snapshot of what was committed when it was opened;
    :meth:`refresh` takes a new one).
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
        lock: HeldLock | None = None,
        serializer: Serializer | None = None,
    ) -> None:
        self.directory = directory
        self.data_path = join(directory, DATA_NAME)
        self.meta_path = join(directory, META_NAME)
        self._fs = fs
        self._data = data
        self._dsums = DataSums(join(directory, DATA_SUMS_NAME), None)
        self._msums = MetaSums(join(directory, META_SUMS_NAME), None, [])
        # Bound once: replay's walker reads through it (the engine/fs seam).
        self._raw_read: ReadAt = data.read_at
        self._meta = MetaFile(fs, self.meta_path, join(directory, META_TMP_NAME), meta,
                              durable=sync.always and not read_only)
        self._writer_lock = lock
        self.read_only = read_only
        self.sync = sync
        self.max_data_size = max_data_size
        self.readahead = readahead
        self.preallocate = 0
        # End of the zero-filled space reserved past the committed end (see write()).
        self._allocated = DATA_HEADER_SIZE
        self._lock = threading.RLock()
        self._entries: dict[str, Entry] = {}
        self._end = DATA_HEADER_SIZE
        self._past_end = 0  # bytes past the committed end when loaded (a reader skips them)
        self._closed = False
        self._failure: BaseException | None = None
        #: What opening repaired (empty when the journal was closed cleanly, and
        #: always for a reader).
        self.recovery = RecoveryReport(directory)
        #: Counters for tests and benchmarks.
        self.batches_written = 0
        self.single_sync_batches = 0
        #: The ``serializer=`` given to open (None: payloads are bytes).
        self.serializer = serializer
        # Replay re-types its events to the serializer's Event class (None: as built).
        self._decoded = None if serializer is None else partial(tuple.__new__, event_class(serializer))

    # -- opening ----------------------------------------------------------------------
    @classmethod
    def open(
        cls,
        directory: str | PathLike[str],
        *,
        create: bool = True,
        sync: object = "always",
        max_data_size: int = MAX_DATA_SIZE,
        readahead: int = DEFAULT_READAHEAD,
        preallocate: int = DEFAULT_PREALLOCATE,
        salvage: bool = False,
        serializer: object = None,
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

        The writer lock (``<dir>/.lock``) is taken before anything is created, so
        of two processes opening (or creating) the same journal one gets
        :class:`~engine.errors.LockedError`.

        Recovery cuts an uncommitted tail only when it looks like what one crash
        leaves (one batch, one meta block); more is reported as damage.  After a
        crash of a ``sync="never"`` writer several batches may be uncommitted:
        ``salvage=True`` then cuts whatever is past the committed end.

        ``serializer``: None (payloads are bytes), ``"json"``, ``"pickle"`` (only
        for files you trust) or a ``(dumps, loads)`` pair: ``write`` then takes
        objects and replay's ``event.value`` gives them back (``event.data`` is
        the stored bytes).  The files hold the bytes either way.

        ``directory`` is a ``str`` or any ``os.PathLike``.  Close the journal
        (or use ``with``): one left open is closed when it is garbage-collected
        or at interpreter exit, with a ResourceWarning.
        """
        directory = as_path(directory, "directory")
        fs = resolve(fs)
        codec = parse_serializer(serializer)
        policy = None if isinstance(sync, _dt.timedelta) else SyncPolicy.parse(sync)
        if policy is None or policy.mode == "periodic":  # a period: there is no periodic sync here
            raise ConfigError(f"sync must be 'always' or 'never' for an event journal, not {sync!r} (no "
                              "periodic sync: use sync='never' and close(), or batch your writes)")
        if not 0 < max_data_size <= MAX_DATA_SIZE:
            raise ConfigError(f"max_data_size must be in (0, {MAX_DATA_SIZE}]")
        data_path = join(directory, DATA_NAME)
        meta_path = join(directory, META_NAME)
        if not fs.isdir(directory):
            if not create:
                raise no_such(fs, directory, "event journal")
            make_dirs(fs, directory)
        elif not create and not fs.exists(data_path) and not fs.exists(meta_path):
            raise no_such(fs, directory, "event journal", probe=meta_path)
        lock = take_lock(fs, join(directory, LOCK_NAME), what="writer lock of the event journal")
        try:
            data, meta = open_files(fs, directory, data_path, meta_path, create)
        except BaseException:
            lock.release()
            raise
        journal = cls(fs, directory, data, meta, read_only=False, sync=policy,
                      max_data_size=max_data_size, readahead=readahead, lock=lock, serializer=codec)
        journal.preallocate = max(0, preallocate)
        try:
            report = journal.recovery
            remove_stray_tmp(fs, directory, journal._meta.tmp_path, report)
            journal._msums = open_meta_sums(fs, journal._msums.path, writer=True)
            if salvage:
                # Keep whatever meta still says; its checksums are rebuilt from it.
                journal._msums.clear()
            loaded = load(data, meta, data_path, meta_path, report=report, meta_sums=journal._msums,
                          salvage=salvage)
            journal._install(loaded)
            roll_meta_forward(journal._meta, journal._entries, loaded, report)
            complete_meta_sums(journal._msums, journal._entries, report)
            journal._dsums = load_data_sums(fs, journal._dsums.path, data, data_path, loaded.end, report,
                                            salvage=salvage)
        except BaseException:
            journal._release()
            raise
        report.log(log)
        journal._watch_unclosed(f"event journal {directory!r}")
        return journal

    @classmethod
    def open_read_only(
        cls,
        directory: str | PathLike[str],
        *,
        readahead: int = DEFAULT_READAHEAD,
        serializer: object = None,
        fs: FileSystem | None = None,
    ) -> EventJournal:
        """Open without the writer lock and without repairing anything.

        The reader sees what was committed when it opened (or last called
        :meth:`refresh`), even while a writer keeps appending: committed blocks
        never change, and the reader never looks past the committed length.
        ``serializer`` decodes ``event.value`` as in :meth:`open`.
        """
        directory = as_path(directory, "directory")
        fs = resolve(fs)
        codec = parse_serializer(serializer)
        data_path = join(directory, DATA_NAME)
        meta_path = join(directory, META_NAME)
        missing = [path for path in (meta_path, data_path) if not fs.exists(path)]
        if len(missing) == 2:  # nothing of a journal there (or no permission to look)
            raise no_such(fs, directory, "event journal", probe=meta_path if fs.isdir(directory) else None)
        if missing:
            raise ConfigError(f"{directory}: not an event journal ({missing[0]} is missing)")
        data = fs.open(data_path, OpenMode.READ)
        try:
            meta = fs.open(meta_path, OpenMode.READ)
        except BaseException:
            data.close()
            raise
        journal = cls(fs, directory, data, meta, read_only=True, sync=SyncPolicy("never"),
                      max_data_size=MAX_DATA_SIZE, readahead=readahead, serializer=codec)
        try:
            journal._load_snapshot()
        except BaseException:
            journal._release()
            raise
        journal._watch_unclosed(f"read-only event journal {directory!r}")
        return journal

    def refresh(self) -> None:
        """Reader only: take a new snapshot of what is committed now."""
        with self._lock:
            self._check_open()
            if not self.read_only:
                return
            # The writer may have replaced ``meta`` (atomic rewrite): open it anew.
            self._meta.reopen_read()
            self._load_snapshot()

    def _load_snapshot(self) -> None:
        # A writer updating meta while we read it can be seen half-way; a few
        # retries give a consistent picture (each retry re-reads the whole file).
        attempts = 5
        for attempt in range(attempts):
            try:
                self._msums.close()
                self._dsums.close()
                self._msums = open_meta_sums(self._fs, self._msums.path, writer=False)
                loaded = load(self._data, self._meta.handle, self.data_path, self.meta_path, report=None,
                              meta_sums=self._msums)
                self._dsums = load_data_sums(self._fs, self._dsums.path, self._data, self.data_path, loaded.end,
                                             None)
                self._install(loaded)
                if len(self._msums.entries) < len(loaded.entries):
                    log.warning("event journal %s: %d persistence id(s) have no checksum in %s (a writer "
                                "crashed before syncing it, or the journal predates it)", self.directory,
                                len(loaded.entries) - len(self._msums.entries), self._msums.path)
                return
            except FormatError:
                raise  # a foreign file does not change by re-reading it
            except CorruptFileError:
                if attempt == attempts - 1:
                    raise

    def _install(self, loaded: Loaded) -> None:
        """Take the state :func:`engine.events.recovery.load` found."""
        self._meta.reset(loaded.magic, loaded.meta_committed)
        self._entries = loaded.entries
        self._end = loaded.end
        size = self._data.size()
        self._allocated = max(loaded.end, size)
        self._past_end = size - loaded.end

    # -- state checks ---------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError(f"{self.directory}: event journal is closed")

    def _check_writable(self) -> None:
        self._check_open()
        if self.read_only:
            raise ConfigError(f"{self.directory}: journal was opened read-only")
        if isinstance(self._failure, DiskFullError):
            # A full disk stays a full disk (free space and reopen).
            raise DiskFullError(self._failure.path, self._failure.errno or errno.ENOSPC, self._failure.operation)
        if self._failure is not None:
            raise PoisonedError(self.directory, self._failure)

    # -- writing ----------------------------------------------------------------------
    def write(self, persistence_id: str, events: Iterable[tuple[int, Any]]) -> None:
        """Append one atomic batch of ``(sequence_nr, payload)`` events for one id.

        Sequence numbers must continue the id's sequence by one (the first event of
        a new id is 1).  After a crash the batch is there whole or not at all; with
        ``sync="always"`` it is durable when this returns.

        ``events`` is an iterable of pairs, e.g. ``[(n + 1, b"created")]``; a
        payload is bytes (a ``str`` is a TypeError: encode it), or any object the
        journal's ``serializer`` takes.
        """
        # The fast path assumes a well-formed batch; the explanations of a wrong
        # one (batch_error & co) run only once it failed, so they cost nothing
        # here.  (The checks are C-level comprehensions and comparisons: a
        # per-item Python loop costs ~0.3 us an event.)
        batch: list[Any] | None = None
        try:
            batch = list(events)
            seqs = [seq for seq, _ in batch]
            payloads = [payload for _, payload in batch]
        except (TypeError, ValueError):
            if batch is None and isinstance(events, Iterable) and not isinstance(events, (str, bytes)):
                raise  # the iterable's own error, raised while it was listed
            raise batch_error(events, batch) from None
        if not batch:
            return
        try:
            raw_id = encode_id(persistence_id)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        except AttributeError:
            raise TypeError(f"persistence_id must be a str, not {type(persistence_id).__name__} "
                            f"{persistence_id!r}") from None
        if self.serializer is not None:
            payloads = list(map(self.serializer.dumps, payloads))
        if set(map(type, payloads)) != {bytes}:
            if not all(isinstance(p, (bytes, bytearray, memoryview)) for p in payloads):
                raise payload_error(payloads, self.serializer)
            payloads = [bytes(p) for p in payloads]
        with self._lock:
            self._check_writable()
            entry = self._entries.get(persistence_id)
            expected = (entry.highest if entry is not None else 0) + 1
            if seqs != list(range(expected, expected + len(seqs))):
                wrong_type = sequence_number_error(batch)
                if wrong_type is not None:
                    raise wrong_type
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
            if entry is None and len(self._meta.image) + len(raw_id) + 26 > MAX_DATA_SIZE:
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
                # Its checksum before anything links to it.
                self._dsums.append(start, new_end, offsets[-1], batch_crc(blob, 0, offsets[-1] - start, len(blob)))
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
                    # Its checksum entry first, durable before the meta size that
                    # commits the id (once per id), so it is never torn.
                    self._msums.put(len(self._entries), raw_id, expected)
                    if self.sync.always:
                        self._msums.sync()
                    meta_offset = self._meta.append_block(persistence_id, offsets[0], offsets[-1], highest)
                    entry = Entry(persistence_id, meta_offset, offsets[0], offsets[-1], highest, expected)
                    self._entries[persistence_id] = entry
                else:
                    first = entry.first if entry.first else offsets[0]
                    # Committed already (by the link) unless the id had no chain.
                    self._meta.set_fields(entry, first, offsets[-1], highest, durable=not linked)
                    if not entry.first:
                        entry.first_seq = expected
                    entry.first, entry.last, entry.highest = first, offsets[-1], highest
            except BaseException as exc:
                self._failure = exc
                raise
            self._end = new_end
            self._allocated = max(self._allocated, new_end)
            self.batches_written += 1
            if self.sync.always and self._dsums.unsynced >= SUMS_SYNC_EVERY:
                self._sync_sums()

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
                # The checksummed first live number first, durably: after a crash
                # between the two files, recovery moves meta's first to it.
                self._msums.put(list(self._entries).index(persistence_id), persistence_id.encode("utf-8"),
                                new_first_seq)
                if self.sync.always:
                    self._msums.sync()
                self._meta.set_fields(entry, new_first, entry.last, entry.highest, durable=True)
            except BaseException as exc:
                self._failure = exc
                raise
            entry.first, entry.first_seq = new_first, new_first_seq

    def _link(self, last: int, first: int) -> None:
        """Point the id's last block's ``next`` at the first block of a new batch."""
        self._data.write_at(last + BLOCK_NEXT_FIELD, I32.pack(first))

    def _sync_sums(self, *, final: bool = False) -> None:
        """Sync the checksum side files (in rounds, and on close: ``final``)."""
        try:
            self._dsums.sync(final=final)
            self._msums.sync()
        except BaseException as exc:
            self._failure = exc
            raise

    def _sync_data(self, what: str) -> None:
        if self.sync.always:
            crashpoint(f"{what}.before-fsync")
            self._data.fdatasync()
            crashpoint(f"{what}.after-fsync")

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
        from the nearer end, with read-ahead).  An unknown id yields nothing (see
        ``persistence_id in journal``).

        Each is an :class:`Event`: ``sequence_nr``, ``payload``/``data`` (the
        stored bytes) and ``value`` (decoded by the journal's serializer: the
        events are re-typed to its Event class on the way out)."""
        with self._lock:
            self._check_open()
            entry = self._entries.get(persistence_id)
            if entry is None or entry.first == 0:
                return iter(())
            first, last, first_seq, highest = entry.first, entry.last, entry.first_seq, entry.highest
            limit = self._end
            sums = self._dsums.walk_sums
        lo = max_(from_seq, first_seq)
        hi = highest if to_seq is None else min(to_seq, highest)
        if max is not None:
            if max <= 0:
                return iter(())
            hi = min(hi, lo + max - 1)
        if lo > hi:
            return iter(())
        if lo != first_seq:
            # Find ``lo`` now (a broken link raises here), in small windows: the
            # run loop does the read-ahead.
            found = locate(BlockReader(self._data, self.data_path, limit, 4096), first, last, first_seq, highest, lo)
            events: Iterator[Event] = chain.from_iterable(self._runs(found.offset, found.previous, lo, hi, limit,
                                                                     sums))
            return events if self._decoded is None else map(self._decoded, events)
        # From the first live block (the usual replay): no separate walk to find
        # ``lo``.  That block's ``previous`` is not checked (after a delete it
        # points at deleted blocks); everything else is, as in _runs.  The first
        # chunk is walked now: most replays are done in one call of the walker
        # and need no generator at all.
        # The walker checks each batch it reads against data.crc the first time
        # (``sums``: it remembers which it checked).
        cap = max_(self.readahead, BLOCK_HEADER_SIZE)
        walked = read_runs(self._raw_read, first, ANY_PREVIOUS, lo, hi, limit, cap, min(MIN_WINDOW, cap), RUN_CHUNK,
                           sums)
        events = iter(walked[0]) if walked[5] == RUN_DONE else chain.from_iterable(
            self._runs(first, ANY_PREVIOUS, lo, hi, limit, sums, walked))
        return events if self._decoded is None else map(self._decoded, events)

    def _runs(self, offset: int, prev: int, expected: int, hi: int, limit: int, sums: Sums | None,
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
        read_at = self._raw_read
        walk = read_runs
        cap = max_(self.readahead, BLOCK_HEADER_SIZE)
        want = min(MIN_WINDOW, cap)
        while True:
            if walked is None:
                walked = walk(read_at, offset, prev, expected, hi, limit, cap, want, RUN_CHUNK, sums)
            events, offset, prev, expected, want, status, detail = walked
            walked = None
            if events:
                yield events
            if status == RUN_DONE:
                return
            if status == RUN_SUM:
                raise self._dsums.failure(detail[0], detail[1], self.data_path)
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

    def __len__(self) -> int:
        """The number of persistence ids ever written (an id whose events were all
        deleted still counts: its highest sequence number is kept)."""
        with self._lock:
            self._check_open()
            return len(self._entries)

    def __contains__(self, persistence_id: object) -> bool:
        """``pid in journal``: the id was ever written (as :meth:`persistence_ids`)."""
        with self._lock:
            self._check_open()
            return persistence_id in self._entries

    def __iter__(self) -> Iterator[str]:
        """The persistence ids (a snapshot of :meth:`persistence_ids`)."""
        return iter(self.persistence_ids())

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

    def stats(self) -> dict[str, Any]:
        """Counts and sizes (for ``engine events stats``): snake_case keys, numbers.

        ``data_committed_bytes`` is the data file's committed length (header
        included); ``data_capacity_used_fraction`` (0..1) is that length over
        ``data_capacity_bytes``, the format's 2 GiB limit (or a lower
        ``max_data_size``).  ``data_bytes_past_committed_end``: what a reader's
        snapshot skips (a writer's reserved zeros or a batch in progress), or the
        zeros a writer keeps reserved.  ``recovery_actions``: how many repairs the
        writer's open made (None for a reader, which repairs nothing).
        """
        with self._lock:
            self._check_open()
            infos = [e.info() for e in self._entries.values()]
            past_end = self._past_end if self.read_only else max(0, self._data.size() - self._end)
            return {
                "directory": self.directory,
                "read_only": self.read_only,
                "meta_magic": self._meta.magic.decode("ascii"),
                "persistence_ids": len(infos),
                "live_events": sum(i.live for i in infos),
                "events_ever_written": sum(i.highest for i in infos),
                "data_committed_bytes": self._end,
                "data_capacity_bytes": self.max_data_size,
                "data_capacity_used_fraction": self._end / self.max_data_size,
                "data_bytes_past_committed_end": past_end,
                "meta_bytes": len(self._meta.image),
                "recovery_actions": None if self.read_only else len(self.recovery.actions),
            }

    @property
    def committed_size(self) -> int:
        """The data file's committed length (header included)."""
        return self._end

    def verify(self) -> list[str]:
        """Check every invariant of both files; raises CorruptFileError on a problem
        and returns notes: what recovery repaired on open, then what the check found."""
        with self._lock:
            self._check_open()
            notes = [str(action) for action in self.recovery.actions] + verify_journal(
                self._data, self.data_path, self._end, self.meta_path,
                [(e.pid, e.first, e.last, e.highest) for e in self._entries.values()],
                strict_links=not self.read_only)
            return notes + verify_sums(self._dsums, self._msums, self._data, self.data_path, self._end,
                                       len(self._entries), strict=not self.read_only)

    # -- closing ----------------------------------------------------------------------
    def close(self) -> None:
        """Make everything durable (with ``sync="never"``) and release the lock."""
        self._unwatch()
        with self._lock:
            if self._closed:
                return
            try:
                if not self.read_only and self._failure is None:
                    self._flush_on_close()
            finally:
                self._closed = True
                self._release()

    def _flush_on_close(self) -> None:
        """Make everything durable and leave the files as the original
        akka-persistence-file-journal reader expects them (close's work)."""
        if self._data.size() > self._end:
            # Leave exactly what the akka-persistence-file-journal
            # writer would: no reserved zeros.
            self._data.truncate(self._end)
            self._data.fdatasync()
        elif not self.sync.always:
            self._data.fdatasync()
        # The data first, then the checksum entries that describe it: a crash
        # between the two leaves batches whose entries recovery rebuilds, never
        # synced entries past the committed end (which would read as damage).
        self._sync_sums(final=True)
        self._meta.flush()

    def _release(self) -> None:
        """Close both files, then let the writer lock go (closing must release
        everything it can)."""
        for close, path in ((self._meta.close, self.meta_path), (self._data.close, self.data_path),
                            (self._dsums.close, self._dsums.path), (self._msums.close, self._msums.path)):
            try:
                close()
            except Exception:
                log.exception("closing %s", path)
        if self._writer_lock is not None:
            self._writer_lock.release()

    def __enter__(self) -> EventJournal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        mode = "read-only" if self.read_only else "writer"
        return f"<EventJournal {self.directory!r} {mode} ids={len(self._entries)} end={self._end}>"


max_ = max  # ``replay`` has a parameter named ``max`` (Akka's name)
