"""The write side of several producer processes (a mixin of ``Queue``).

:mod:`engine.queue.shared` says what the producers share and why; this is what
one producer does with it:

* :meth:`Producers._acquire_locked` takes the append lock and, when another
  process wrote since, takes the newest file, its end and the tail from the
  state record (a producer killed in its write: :meth:`_resync_locked`);
  :meth:`_publish_locked` writes the record after each write or rotation;
* :meth:`_sync_shared` is the group commit across processes;
* the ``JournalSource`` faces for the readers in this process: while no other
  producer has written they read up to what this process made visible (with
  ``sync="always"``, what is durable); once one has, they read the files as a
  reader in another process does (:class:`cursor.PollingSource`: whole,
  checksummed batches up to the file's size, new data found by polling every
  ``poll_interval``).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING

from engine.errors import EngineError, LockedError
from engine.fs import FileHandle, FileSystem, HeldLock, OpenMode, RecoveryReport, SyncPolicy, crashpoint
from engine.queue import naming
from engine.queue.config import QueueConfig
from engine.queue.cursor import PollingSource
from engine.queue.recover import resync
from engine.queue.segments import SEGMENT_HEADER, Segment, create_segment, list_segments
from engine.queue.shared import KNOCK_PERIOD, SharedState, SharedView, yield_cpu

if TYPE_CHECKING:
    from engine.queue.reader import Reader

log = logging.getLogger("engine.queue")
_HEADER_SIZE = len(SEGMENT_HEADER)
#: While no other producer has written, how often readers here look whether one has.
_LOOK_PERIOD = 0.05


class Producers:
    """Cross-process appends, rotation and group commit (see the module docstring)."""

    fs: FileSystem
    directory: str
    name: str
    config: QueueConfig
    recovery: RecoveryReport
    poll_period: float | None
    _lock: threading.RLock
    _sync_lock: threading.Lock
    _segments: list[Segment]
    _handle: FileHandle
    _tail: int
    _written_end: int
    _durable_end: int
    _visible_end: int
    _buffer: list[bytes]
    _closed: bool
    _policy: SyncPolicy
    _readers: dict[str, Reader]

    # The Queue's (it comes first in the method order):
    def _fail(self, exc: BaseException, path: str, operation: str) -> None:
        raise NotImplementedError

    def _now_ms(self) -> int:
        raise NotImplementedError

    def _flush_locked(self) -> None:
        raise NotImplementedError

    def _write_staged(self) -> None:
        raise NotImplementedError

    def _init_producers(self, state: SharedState, shared: bool) -> None:
        self._state = state
        #: Another producer has written (or had the queue open when this one opened).
        self._shared = False
        self._seen_gen = 0  # the record's gen as this process last wrote or read it
        self._written_l = 0  # logical end of everything appended, as last known
        self._segment_start_l = 0  # logical position of the newest file's first record
        self._end_l = 0  # logical end of this process's last write
        self._next_look = 0.0
        self._unpublished = False  # written since the record was last written
        self._held = False  # this process holds the append lock (guarded by ``_lock``)
        self._knock_seen: int | None = None  # the knock value when the lock was taken
        self._next_knock_look = 0.0
        self._poller = PollingSource(self.fs, self.directory, self.name, self.config.poll_interval)
        self.poll_period = max(self.config.poll_interval, _LOOK_PERIOD)
        if shared:
            self._become_shared()

    @property
    def shared(self) -> bool:
        """Whether another producer has written since this one opened (or was open
        then): readers here then find new items by polling, every ``poll_interval``."""
        return self._shared

    def _become_shared(self) -> None:
        if not self._shared:
            self._shared = True
            self.poll_period = self.config.poll_interval

    # -- the append lock -------------------------------------------------------------
    def _publish_locked(self, *, rotating: bool = False) -> None:
        """Write the state record from this process's view (append lock held)."""
        newest = self._segments[-1]
        view = SharedView(
            self._seen_gen + 1,
            rotating,
            newest.number,
            self._written_end,
            self._tail,
            newest.first_id,
            self._written_l,
            self._segment_start_l,
        )
        self._state.write(view)
        self._seen_gen = view.gen
        self._unpublished = False

    def _acquire_locked(self) -> None:
        """Take the append lock (the caller holds ``_lock``) and bring this
        process's view of the newest file up to date."""
        state = self._state
        state.lock()
        self._held = True
        try:
            view = state.read()
            self._knock_seen = None if view is None else view.knock
            self._next_knock_look = time.monotonic() + KNOCK_PERIOD
            if view is not None and not view.rotating:
                if view.gen != self._seen_gen:
                    self._adopt(view)
                if self._segments[-1].number == view.segment and self._handle.size() == view.end:
                    return
            # No record (or a damaged one), a rotation that never finished, or the
            # newest file is not as the record says: a producer died in its write.
            self._resync_locked(view)
        except BaseException:
            self._held = False
            state.unlock()
            raise

    def _release_locked(self) -> None:
        """Write the record if this process wrote since, and let the append lock go."""
        if not self._held:
            return
        try:
            if self._unpublished:
                self._publish_locked()
        finally:
            self._held = False
            self._state.unlock()

    def _write_for_commit(self) -> None:
        """sync="always": write the put now.  The append lock stays held until the
        group commit's leader flushes (see :meth:`_flush_for_sync`), unless another
        producer writes too (it may be waiting for the lock)."""
        try:
            self._write_staged()
        except BaseException:
            self._release_locked()
            raise
        if self._shared:
            self._release_locked()

    def _flush_for_sync(self) -> None:
        """Before a group commit's fsync (``_lock`` held): write what is staged.
        A producer alone with sync="always" keeps the append lock through the
        fsync (its threads' next puts write without taking it again); otherwise
        the lock goes."""
        if self._held and self._policy.always and not self._shared:
            self._write_staged()
        else:
            self._flush_locked()

    def _after_sync(self, end: int) -> None:
        """After a group commit's fsync that covered the newest file up to ``end``
        (``_lock`` held): let a kept append lock go when nothing was written
        during the fsync (this producer went idle) or another producer knocked
        (see :mod:`engine.queue.shared`)."""
        if self._held and self._policy.always and (self._written_end == end or self._knocked()):
            self._flush_locked()

    def _knocked(self) -> bool:
        """Whether another producer asked for the append lock (looked at most
        every ``KNOCK_PERIOD``; always when the value at the take is unknown)."""
        now = time.monotonic()
        if now < self._next_knock_look:
            return False
        self._next_knock_look = now + KNOCK_PERIOD
        seen = self._knock_seen
        return seen is None or self._state.knocked(seen)

    def _swap_handle(self, handle: FileHandle) -> None:
        """Make ``handle`` the writer file's (a fsync of the old one may be running)."""
        old, self._handle = self._handle, handle
        if old is not handle:
            with self._sync_lock:
                old.close()

    def _adopt(self, view: SharedView) -> None:
        """Take the newest file, its end and the tail from another producer's record."""
        self._become_shared()
        if view.segment != self._segments[-1].number:
            segments = list_segments(self.fs, self.directory, self.name)
            if not segments or segments[-1].number != view.segment:
                return  # not as the record says: the caller resyncs
            self._swap_handle(self.fs.open(segments[-1].path, OpenMode.WRITE))
            self._segments = segments
        self._segments[-1].first_id = view.first_id
        self._written_end = self._durable_end = self._visible_end = view.end
        self._tail = view.tail
        self._written_l, self._segment_start_l = view.written, view.segment_start
        self._seen_gen = view.gen

    def _resync_locked(self, view: SharedView | None) -> None:
        """Re-read the newest file after a producer died in its write or rotation
        (append lock held): see :func:`engine.queue.recover.resync`."""
        report = RecoveryReport(path=naming.join(self.directory, self.name))
        segments, handle, end, last = resync(self.fs, self.directory, self.name, report, self._now_ms())
        self._become_shared()
        self._swap_handle(handle)
        self._segments = segments
        self._written_end = self._durable_end = self._visible_end = end
        # Ids handed out (or burnt at the first open) are never handed out again.
        self._tail = max(last, self._tail, 0 if view is None else view.tail)
        # From here on everything in the files is durable: publish it as synced.
        try:
            handle.fdatasync()
        except BaseException as exc:
            self._fail(exc, handle.path, "fsync")
            raise
        base = max(self._written_l, 0 if view is None else view.written) + end + 1
        self._written_l, self._segment_start_l = base, base - (end - _HEADER_SIZE)
        self._state.write_synced(base)
        self._seen_gen = 0 if view is None else view.gen
        report.log(log)
        self.recovery.actions.extend(report.actions)
        log.warning("queue %s: a producer stopped in its write; files re-read (tail %d)", self.name, self._tail)
        self._publish_locked()
        if self._tail > last and self._segments[-1].first_id is not None:
            self._rotate()  # ids are contiguous within a file: the jump goes between two

    def _rotate(self) -> None:
        """Start a new writer file (caller holds ``_lock`` and the append lock; the
        buffer is flushed)."""
        old = self._handle
        assert not self._buffer
        # A producer killed from here to the end leaves "rotating" set: the next one
        # re-reads the files (_resync_locked).
        self._publish_locked(rotating=True)
        with self._sync_lock:
            # The old file is complete and durable before the next one exists, so a
            # reader that sees the new file knows the old one will not grow.
            # (A failed fsync here poisons ``old``, which stays the writer file.)
            self._sync_file(old, "queue.rotate", data_only=False)
            old.close()
        try:
            segment = create_segment(self.fs, self.directory, self.name, self._segments, self._now_ms())
            crashpoint("queue.rotate.after-create")
            handle = self.fs.open(segment.path, OpenMode.WRITE)
        except BaseException as exc:
            # The old file is closed and the new one may or may not be on disk (its
            # create fsync failed, say): no write may go anywhere until a reopen
            # lets recovery decide what the files hold.
            self._fail(exc, old.path, "fsync")
            raise
        self._segments.append(segment)
        self._handle = handle
        self._written_end = self._durable_end = self._visible_end = _HEADER_SIZE
        self._segment_start_l = self._written_l
        self._publish_locked()

    def _leave(self, presence: HeldLock) -> None:
        """At close (this process's puts flushed): the last producer to leave empties
        the state record, so the directory of a closed queue holds no live state (the
        next first producer writes it afresh).  Best effort: a failure leaves a
        record that the next first producer overwrites all the same."""
        state = self._state
        try:
            with self._lock:
                if not self._held:
                    state.lock()
                    self._held = True
                try:
                    presence.handle.lock(exclusive=True, blocking=False)
                except LockedError:
                    return  # another producer is open
                with self._sync_lock:  # no put of this process is in the group commit (its words go)
                    state.clear()
        except (EngineError, OSError):
            pass
        finally:
            with self._lock:
                if self._held:
                    self._held = False
                    state.unlock()

    # -- group commit across processes -----------------------------------------------
    def _sync_shared(self, handle: FileHandle, segment: int, target: int) -> None:
        """Make every byte before logical position ``target`` durable: nothing to do
        when another process's fsync covered it; else lead the group commit (fsync
        ``handle``, the file numbered ``segment``, and publish what it covered) or
        follow the producer that leads it (see :mod:`engine.queue.shared`).  The
        caller holds ``_sync_lock``, this process's own."""
        if not self._shared:
            # Nobody else had written when this process last took the append lock
            # (``_acquire_locked`` reads the record every time and turns shared
            # when another producer wrote): nothing to share.  A producer that
            # writes meanwhile finds ``synced`` behind and fsyncs for itself, and
            # this one turns shared at its next append.
            self._sync_file(handle, "queue.put")
            return
        state = self._state
        while state.read_synced() < target:
            if not state.lead():
                state.follow(target)  # sleeps until the leader's fsync ends
                continue
            try:
                if state.read_synced() >= target:
                    return  # covered by the fsync that ended just before
                # Let the producers that the last fsync woke run first (they are
                # runnable, and each is about to write its next put): what they
                # write now, this fsync covers.  Costs nothing when none is.
                # Measured with 4 producer processes on 2 cores: 2.3 -> 3.1 puts
                # per fsync, 1.85x -> 2.15x the items/s of one process.
                yield_cpu()
                # Read before the fsync: every byte it counts is in the file by now.
                view = state.read()
                self._sync_file(handle, "queue.put")
                covered = target
                if view is not None and view.segment == segment:
                    covered = max(covered, view.written)
                state.write_synced(max(covered, state.read_synced()))
            finally:
                state.end_lead()
            return

    def _sync_file(self, handle: FileHandle, point: str, *, data_only: bool = True) -> None:
        """fdatasync (or fsync) ``handle`` between the crash points ``<point>.before-fsync``
        and ``<point>.after-fsync``; a failure stops writes."""
        crashpoint(f"{point}.before-fsync")
        try:
            handle.fdatasync() if data_only else handle.fsync()
        except BaseException as exc:
            self._fail(exc, handle.path, "fsync")
            raise
        crashpoint(f"{point}.after-fsync")

    # -- the JournalSource faces for readers in this process -------------------------
    def segment_list(self, *, fresh: bool = False) -> list[Segment]:
        if self._shared:
            return self._poller.segment_list(fresh=fresh)
        with self._lock:
            return list(self._segments)

    def readable_end(self, segment: Segment, handle: FileHandle) -> tuple[int, bool]:
        with self._lock:
            if self._buffer and not self._policy.always and not self._closed:
                self._flush_locked()  # a reader caught up: hand it the staged puts
            if not self._shared:
                self._look_for_others()
            if not self._shared:
                if self._segments and segment.number == self._segments[-1].number:
                    return self._visible_end, True
                return handle.size(), False
        return self._poller.readable_end(segment, handle)

    def _look_for_others(self) -> None:
        """Whether another producer wrote (at most every ``_LOOK_PERIOD``; ``_lock`` held)."""
        now = time.monotonic()
        if now < self._next_look or self._held or self._closed:
            return
        self._next_look = now + _LOOK_PERIOD
        view = self._state.read(tries=3)
        if view is not None and view.gen != self._seen_gen:
            self._become_shared()

    def _files_now(self) -> tuple[list[Segment], int]:
        """The writer files and the tail as of now: this process's view, or, once
        another producer has written, the directory's (it rotates and retires too)."""
        if not self._shared:
            with self._lock:
                return list(self._segments), self._tail
        return list_segments(self.fs, self.directory, self.name, strict=False), self.current_tail()

    def writer_alive(self) -> bool:
        return True  # this is a writer

    def current_tail(self) -> int:
        """The last id put by any producer, as the state record says now."""
        if self._held or self._closed:
            return self._tail  # nobody else writes meanwhile
        try:
            view = self._state.read(tries=3)
        except (EngineError, OSError):
            return self._tail  # closed meanwhile
        if view is None or view.gen == self._seen_gen:
            return self._tail
        self._become_shared()
        return max(view.tail, self._tail)

    def _acquire_shared_open(self) -> None:
        """A producer opening while others have the queue open (append lock held,
        the newest file re-read): take the logical positions from the record."""
        view = self._state.read()
        newest = self._segments[-1]
        if view is not None and not view.rotating and view.segment == newest.number and view.end == self._written_end:
            self._tail = max(self._tail, view.tail)
            self._written_l, self._segment_start_l, self._seen_gen = view.written, view.segment_start, view.gen
            return
        self._resync_locked(view)
