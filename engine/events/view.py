"""What the event journal's writer and its readers share: the loaded state of
one journal directory and everything that reads it (replay, the queries,
``stats``, ``verify``, close).

:class:`EventView` holds the open ``data`` file, the meta file's image
(:class:`~engine.events.metafile.MetaFile`), the checksum side files and the
ids loaded from meta, over one :class:`~engine.fs.core.StoreCore` (which keeps
the files and the writer's lock, and closes them once).  The writer
(:class:`engine.events.journal.EventJournal`) adds the write path and recovery;
the reader (:class:`engine.events.reader.EventReader`) adds snapshots.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from functools import partial
from itertools import chain
from typing import Any, Self

from engine.conventions import Serializer
from engine.events.blocks import BlockReader, locate
from engine.events.codec import BLOCK_HEADER_SIZE, DATA_HEADER_SIZE, MAX_DATA_SIZE
from engine.events.layout import DATA_NAME, DATA_SUMS_NAME, META_NAME, META_SUMS_NAME, Entry, IdInfo, join
from engine.events.metafile import MetaFile
from engine.events.payloads import event_class
from engine.events.recovery import Loaded
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
from engine.events.sumfiles import DataSums, MetaSums
from engine.events.verify import verify_journal, verify_sums
from engine.fs import FileHandle, RecoveryReport
from engine.fs.core import StoreCore
from engine.lifetime import ClosedWhenDropped

log = logging.getLogger("engine.events")

#: Replay decodes at most this many events ahead of its consumer.
RUN_CHUNK = 1024


class EventView(ClosedWhenDropped):
    """One open journal directory, read side (see the module docstring)."""

    _core: StoreCore  # (set first in __init__)

    #: The data file's size cap (the format's i32 offsets; a writer may lower it).
    max_data_size = MAX_DATA_SIZE

    def __init__(
        self,
        core: StoreCore,
        data: FileHandle,
        meta: MetaFile,
        *,
        readahead: int,
        serializer: Serializer | None,
    ) -> None:
        self._core = core
        self.directory = core.path
        self.data_path = join(core.path, DATA_NAME)
        self.meta_path = join(core.path, META_NAME)
        self._fs = core.fs
        self._data = data
        self._meta = meta
        # The side files are kept by the core too (see _replace_sums).
        self._dsums = DataSums(join(core.path, DATA_SUMS_NAME), None)
        self._msums = MetaSums(join(core.path, META_SUMS_NAME), None, [])
        # Bound once: replay's walker reads through it (the engine/fs seam).
        self._raw_read: ReadAt = data.read_at
        self.readahead = readahead
        # Replay's window bounds, fixed at open: the largest window the walker
        # reads (at least a block header) and the first one (4 KiB at most:
        # block sizes are not known yet).
        self._cap = readahead if readahead > BLOCK_HEADER_SIZE else BLOCK_HEADER_SIZE
        self._first_window = MIN_WINDOW if self._cap > MIN_WINDOW else self._cap
        self._lock = threading.RLock()
        self._entries: dict[str, Entry] = {}
        self._end = DATA_HEADER_SIZE
        #: The ``serializer=`` given to open (None: payloads are bytes).
        self.serializer = serializer
        # Replay re-types its events to the serializer's Event class (None: as built).
        self._decoded = None if serializer is None else partial(tuple.__new__, event_class(serializer))

    @property
    def recovery(self) -> RecoveryReport:
        """What opening repaired (empty when the journal was closed cleanly, and
        always for a reader)."""
        return self._core.report

    @property
    def read_only(self) -> bool:
        """True for a reader (:class:`~engine.events.reader.EventReader`)."""
        return not self._core.writer

    def _replace_sums(self, dsums: DataSums | None = None, msums: MetaSums | None = None) -> None:
        """Install newly opened side files; the core closes them on close."""
        core = self._core
        if dsums is not None:
            old_d, self._dsums = self._dsums, core.keep(dsums)
            core.forget(old_d)
            old_d.close()
        if msums is not None:
            old_m, self._msums = self._msums, core.keep(msums)
            core.forget(old_m)
            old_m.close()

    def _install(self, loaded: Loaded) -> None:
        """Take the state :func:`engine.events.recovery.load` found."""
        self._meta.reset(loaded.magic, loaded.meta_committed)
        self._entries = loaded.entries
        self._end = loaded.end

    def _past_committed_end(self) -> int:
        """Bytes of ``data`` past the committed end (see :meth:`stats`)."""
        return max(0, self._data.size() - self._end)

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
        # (acquire/release, not ``with``: the context-manager calls were a good
        # part of a short replay's own cost)
        lock = self._lock
        lock.acquire()
        try:
            self._core.check_open()
            entry = self._entries.get(persistence_id)
            if entry is None or entry.first == 0:
                return iter(())
            first, last, first_seq, highest = entry.first, entry.last, entry.first_seq, entry.highest
            limit = self._end
            sums = self._dsums.walk_sums
        finally:
            lock.release()
        # (Conditional expressions, not min/max: a replay of a few events pays
        # for every call here, and a builtin's argument parsing is not free.)
        lo = from_seq if from_seq > first_seq else first_seq
        hi = highest if to_seq is None or to_seq > highest else to_seq
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
        walked = read_runs(self._raw_read, first, ANY_PREVIOUS, lo, hi, limit, self._cap, self._first_window,
                           RUN_CHUNK, sums)
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
        cap = self._cap
        want = self._first_window
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
            self._core.check_open()
            entry = self._entries.get(persistence_id)
            return 0 if entry is None else entry.highest

    def lowest_sequence_nr(self, persistence_id: str) -> int:
        """The first sequence number replay would return (``highest + 1`` if none)."""
        with self._lock:
            self._core.check_open()
            entry = self._entries.get(persistence_id)
            return 1 if entry is None else entry.first_seq

    def persistence_ids(self) -> list[str]:
        """Every id that has ever been written, in meta-file order."""
        with self._lock:
            self._core.check_open()
            return list(self._entries)

    def __len__(self) -> int:
        """The number of persistence ids ever written (an id whose events were all
        deleted still counts: its highest sequence number is kept)."""
        with self._lock:
            self._core.check_open()
            return len(self._entries)

    def __contains__(self, persistence_id: object) -> bool:
        """``pid in journal``: the id was ever written (as :meth:`persistence_ids`)."""
        with self._lock:
            self._core.check_open()
            return persistence_id in self._entries

    def __iter__(self) -> Iterator[str]:
        """The persistence ids (a snapshot of :meth:`persistence_ids`)."""
        return iter(self.persistence_ids())

    def id_info(self, persistence_id: str) -> IdInfo | None:
        """Range and offsets of one id, or ``None`` if unknown."""
        with self._lock:
            self._core.check_open()
            entry = self._entries.get(persistence_id)
            return None if entry is None else entry.info()

    def ids(self) -> list[IdInfo]:
        """Every id with its replayable range (for listings and the Spark reader)."""
        with self._lock:
            self._core.check_open()
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
            self._core.check_open()
            infos = [e.info() for e in self._entries.values()]
            past_end = self._past_committed_end()
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
            self._core.check_open()
            notes = [str(action) for action in self.recovery.actions] + verify_journal(
                self._data, self.data_path, self._end, self.meta_path,
                [(e.pid, e.first, e.last, e.highest) for e in self._entries.values()],
                strict_links=not self.read_only)
            return notes + verify_sums(self._dsums, self._msums, self._data, self.data_path, self._end,
                                       len(self._entries), strict=not self.read_only)

    # -- closing ----------------------------------------------------------------------
    def close(self) -> None:
        """Writer: make everything durable (with ``sync="never"``) and leave the
        files as the original reader expects them; then release the files and the
        lock (the core's close, once)."""
        with self._lock:
            core = self._core
            if not core.begin_close():
                return
            try:
                if core.writer and not core.failed:
                    self._flush_on_close()
            finally:
                core.finish_close()

    def _flush_on_close(self) -> None:
        """The writer's last writes (see :class:`~engine.events.journal.EventJournal`)."""

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        mode = "read-only" if self.read_only else "writer"
        return f"<{type(self).__name__} {self.directory!r} {mode} ids={len(self._entries)} end={self._end}>"

