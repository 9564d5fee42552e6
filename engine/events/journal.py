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

This module is the writer: opening (the store core's sequence: the writer lock,
the files, :mod:`engine.events.recovery` into the report) and the write path.
Replay and the queries are :mod:`engine.events.view`'s, shared with the reader
(:mod:`engine.events.reader`).  The meta
file's cache updates are :mod:`engine.events.metafile`; replay's walk is
:mod:`engine.events.runs` (in C when built).
"""

from __future__ import annotations

import datetime as _dt
import logging
from collections.abc import Iterable
from os import PathLike
from typing import Any

from engine.conventions import Serializer
from engine.conventions import serializer as parse_serializer
from engine.errors import (
    ConfigError,
    CorruptFileError,
    FullError,
    SequenceNumberError,
)
from engine.events.blocks import DEFAULT_READAHEAD, BlockReader
from engine.events.codec import (
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
    LOCK_NAME,
    META_NAME,
    META_TMP_NAME,
    Entry,
    join,
)
from engine.events.metafile import MetaFile
from engine.events.payloads import batch_error, payload_error, sequence_number_error
from engine.events.reader import EventReader
from engine.events.recovery import (
    Loaded,
    complete_meta_sums,
    load,
    open_files,
    remove_stray_tmp,
    roll_meta_forward,
)
from engine.events.sumfiles import SUMS_SYNC_EVERY, load_data_sums, open_meta_sums
from engine.events.sums import batch_crc
from engine.events.view import EventView
from engine.fs import (
    FileHandle,
    FileSystem,
    SyncPolicy,
    as_path,
    crashpoint,
    make_dirs,
    no_such,
    resolve,
)
from engine.fs.core import StoreCore

log = logging.getLogger("engine.events")

#: Zero bytes reserved past the end of ``data`` at a time (trimmed on close).
DEFAULT_PREALLOCATE = 256 * 1024


class EventJournal(EventView):
    """An event-sourcing journal in one directory, open for writing; see the
    module docstring.

    Open with :meth:`open` (takes the writer lock ``<dir>/.lock`` and repairs a
    torn tail, reported in :attr:`recovery`).  :meth:`open_reader` opens an
    :class:`~engine.events.reader.EventReader` (no lock, no repair: a snapshot
    of what was committed).  Replay and the queries are :class:`EventView`'s.
    """

    def __init__(
        self,
        core: StoreCore,
        data: FileHandle,
        meta: MetaFile,
        *,
        max_data_size: int,
        readahead: int,
        preallocate: int,
        serializer: Serializer | None = None,
    ) -> None:
        super().__init__(core, data, meta, readahead=readahead, serializer=serializer)
        self.max_data_size = max_data_size
        self.preallocate = max(0, preallocate)
        # End of the zero-filled space reserved past the committed end (see write()).
        self._allocated = DATA_HEADER_SIZE
        # Bound once: the write path asks it on every batch.
        self._always = core.policy.always
        #: Counters for tests and benchmarks.
        self.batches_written = 0
        self.single_sync_batches = 0

    @property
    def sync(self) -> SyncPolicy:
        """The ``sync=`` policy the journal was opened with."""
        return self._core.policy

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
        lock_wait: float | _dt.timedelta | None = 0.0,
        fs: FileSystem | None = None,
    ) -> EventJournal:
        """Open (creating if allowed) the journal in ``directory`` for writing.

        ``sync`` is ``"always"`` (every write/delete is durable when it returns: one
        fdatasync for a batch inside one 512-byte sector, two ordered ones otherwise)
        or ``"never"`` (left to the OS and to :meth:`close`; a crash may then lose
        recent batches).  A period is refused: the format has no commit record, so
        recovery can tell what one crash leaves (one batch, one meta block) from
        damage only when at most one batch is in flight, and a periodic fsync
        leaves several (see docs/guide/conventions.md, "sync").
        ``max_data_size`` lowers the 2 GiB cap of the data file (tests use it).
        ``preallocate`` is how many zero bytes to reserve past the end of ``data`` at
        a time (0 = none), so that most batches overwrite allocated space and their
        fdatasync need not journal a size change; :meth:`close` trims the file.

        The writer lock (``<dir>/.lock``) is taken before anything is created, so
        of two processes opening (or creating) the same journal one gets
        :class:`~engine.errors.LockedError` (after waiting up to ``lock_wait``
        seconds or a timedelta for the other to close; None waits forever).

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
        core = StoreCore(fs, directory, "event journal", policy=policy)
        with core.opening():
            core.lock(join(directory, LOCK_NAME), wait=lock_wait)
            data, meta = open_files(fs, directory, data_path, meta_path, create)
            core.keep(data)
            # (The meta file replaces its handle on a rewrite, and closes the one it has.)
            metafile = core.keep(MetaFile(fs, meta_path, join(directory, META_TMP_NAME), meta,
                                          durable=policy.always))
            journal = cls(core, data, metafile, max_data_size=max_data_size, readahead=readahead,
                          preallocate=preallocate, serializer=codec)
            journal._recover(salvage)  # (this class's own object, being built)
        core.opened(journal, log)
        return journal

    @staticmethod
    def open_reader(
        directory: str | PathLike[str],
        *,
        readahead: int = DEFAULT_READAHEAD,
        serializer: object = None,
        fs: FileSystem | None = None,
    ) -> EventReader:
        """:meth:`EventReader.open <engine.events.reader.EventReader.open>`: a
        reader of the journal in ``directory`` (no lock, no repair)."""
        return EventReader.open(directory, readahead=readahead, serializer=serializer, fs=fs)

    def _recover(self, salvage: bool) -> None:
        """Open's recovery: repair what a crash left, into the report, and install
        what is committed."""
        report = self._core.report
        fs = self._fs
        remove_stray_tmp(fs, self.directory, self._meta.tmp_path, report)
        self._replace_sums(msums=open_meta_sums(fs, self._msums.path, writer=True))
        if salvage:
            # Keep whatever meta still says; its checksums are rebuilt from it.
            self._msums.clear()
        loaded = load(self._data, self._meta.handle, self.data_path, self.meta_path, report=report,
                      meta_sums=self._msums, salvage=salvage)
        self._install(loaded)
        roll_meta_forward(self._meta, self._entries, loaded, report)
        complete_meta_sums(self._msums, self._entries, report)
        self._replace_sums(dsums=load_data_sums(fs, self._dsums.path, self._data, self.data_path, loaded.end,
                                                report, salvage=salvage))

    def _install(self, loaded: Loaded) -> None:
        super()._install(loaded)
        self._allocated = max(loaded.end, self._data.size())

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
            self._core.check_writable()
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
                    if self._always:
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
                self._core.fail(exc, self.directory)
                raise
            self._end = new_end
            self._allocated = max(self._allocated, new_end)
            self.batches_written += 1
            if self._always and self._dsums.unsynced >= SUMS_SYNC_EVERY:
                self._sync_sums()

    def delete_to(self, persistence_id: str, sequence_nr: int) -> None:
        """Delete the id's events up to and including ``sequence_nr``.

        Replay no longer returns them; :meth:`highest_sequence_nr` is unchanged.
        Space is not reclaimed (the format has no free list).  Deleting past the
        highest deletes everything; an unknown id is a no-op.
        """
        with self._lock:
            self._core.check_writable()
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
                if self._always:
                    self._msums.sync()
                self._meta.set_fields(entry, new_first, entry.last, entry.highest, durable=True)
            except BaseException as exc:
                self._core.fail(exc, self.directory)
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
            self._core.fail(exc, self.directory)
            raise

    def _sync_data(self, what: str) -> None:
        if self._always:
            crashpoint(f"{what}.before-fsync")
            self._data.fdatasync()
            crashpoint(f"{what}.after-fsync")

    # -- closing ----------------------------------------------------------------------
    def _flush_on_close(self) -> None:
        """Make everything durable and leave the files as the original
        akka-persistence-file-journal reader expects them (close's work)."""
        if self._data.size() > self._end:
            # Leave exactly what the akka-persistence-file-journal
            # writer would: no reserved zeros.
            self._data.truncate(self._end)
            self._data.fdatasync()
        elif not self._core.policy.always:
            self._data.fdatasync()
        # The data first, then the checksum entries that describe it: a crash
        # between the two leaves batches whose entries recovery rebuilds, never
        # synced entries past the committed end (which would read as damage).
        self._sync_sums(final=True)
        self._meta.flush()

