"""The queue store: puts, rotation, group commit, checkpoints, file retirement.

Any number of producers per queue, in any number of processes: they share the
append lock, the state record and the group commit of :mod:`engine.queue.shared`
(the protocol's write side is :class:`producers.Producers`).  The store class is
thin: opening is :func:`recover.recover`, readers lock and load
their files through :func:`attach.attach_reader`, the choice of files to delete is
:mod:`retire`'s, the checks and statistics are :mod:`diagnose`'s, the watch over
abandoned readers (pin warnings, ``reader_expiry``) is :mod:`pinning`'s.  What stays here is
the write path and the in-process readers' view of it.

Durability (sync="always"): a put appends its record, takes a group-commit ticket
and returns once an fdatasync that started after its write has finished; concurrent
puts share that fsync, in this process (the ticket) and across processes (the
shared ``synced`` position).  While no other producer writes, readers in this
process see an item only once it is durable, so no reader can confirm (and
checkpoint) an id that a crash then takes back.
"""

from __future__ import annotations

import datetime
import errno
import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from engine.conventions import instant_ms, require_bytes
from engine.errors import ClosedError, ConfigError, DiskFullError, EngineError, PoisonedError
from engine.fs import (
    FileHandle,
    FileSystem,
    GroupCommit,
    HeldLock,
    PeriodicSync,
    RecoveryReport,
    as_path,
    crashpoint,
    make_dirs,
    resolve,
)
from engine.lifetime import close_when_dropped, detached, keeper_of
from engine.queue import codec, naming
from engine.queue.attach import READER_LOCK_PATIENCE, attach_reader, lock_reader, reader_files
from engine.queue.compete import SHARE_WAIT, wait_round
from engine.queue.config import QueueConfig
from engine.queue.cursor import PollingSource, WakeUps
from engine.queue.diagnose import disk_pending, verify_queue
from engine.queue.limits import OtherReaders, make_room
from engine.queue.payload import put_many_batch, put_records
from engine.queue.pinning import ReaderWatch, file_sizes, live_stats, retire_round
from engine.queue.producers import Producers
from engine.queue.reader import Item, Reader
from engine.queue.recover import Recovered, recover, resync
from engine.queue.remote import RemoteReader, open_remote_reader
from engine.queue.segments import SEGMENT_HEADER, Segment, earliest_id, encode_check
from engine.queue.shared import SharedState, lock_producer

log = logging.getLogger("engine.queue")

#: Staged bytes that trigger a write in the buffered sync modes.
_BUFFER_LIMIT = 64 * 1024
_HEADER_SIZE = len(SEGMENT_HEADER)
# The PUT record layout is the codec's (see ``codec.encode_put``); bound here once.
_pack_put, _pack_put_expiry = codec.pack_put, codec.pack_put_expiry
_PUT_BYTE, _PUT_BYTE_EXPIRY = codec.PUT_BYTE, codec.PUT_BYTE_EXPIRY


def _again(error: PoisonedError) -> PoisonedError:
    """A fresh copy (same type, no traceback) of the failure that stopped writes."""
    if isinstance(error, DiskFullError):
        return DiskFullError(error.path, error.errno or errno.ENOSPC, error.operation)
    return PoisonedError(error.path, None if error.cause is None else detached(error.cause), error.operation)


class Queue(Producers, WakeUps):
    """A durable multi-reader queue in ``directory``, files named ``<name>.*``.

    Use :meth:`open`.  ``put`` appends; each reader (``reader(name)``) sees every
    item (fanout).  Close it (or use ``with``) to checkpoint readers and release
    the writer lock; dropped unclosed, it is closed (readers too) with a
    ResourceWarning (:mod:`engine.lifetime`).  ``recovery``: what open repaired.
    """

    def __init__(
        self,
        fs: FileSystem,
        directory: str,
        name: str,
        config: QueueConfig,
        clock: Callable[[], float],
        writer_lock: HeldLock,
        start: Recovered,
        recovery: RecoveryReport,
        state: SharedState,
        shared: bool = False,
    ) -> None:
        self.fs = fs
        self.directory = directory
        self.name = name
        self.config = config
        self.max_item_size = config.max_item_size
        serializer = config.payload_serializer
        #: The serializer's dumps (None: payloads are bytes, put as given).
        self._dumps = None if serializer is None else serializer.dumps
        self._finalizer: Any = None
        #: What opening repaired (and what attaching readers clamped since).
        self.recovery = recovery
        self._clock = clock
        self._policy = config.sync_policy
        # Re-entrant: a reader's cursor asks readable_end() while put holds it.
        self._lock = threading.RLock()
        self._sync_lock = threading.Lock()
        self._retire_lock = threading.Lock()
        self._init_wakeups()  # version, wait(), notify(): see cursor.WakeUps
        self._closed = False
        self._buffer: list[bytes] = []
        self._buffer_bytes = 0
        self._journal_size = config.journal_size
        self._limited = config.max_items is not None or config.max_size is not None
        self._readers: dict[str, Reader] = {}
        self._segments: list[Segment] = start.segments
        self._handle: FileHandle = start.handle
        self._tail = start.tail
        self._written_end = self._durable_end = self._visible_end = start.end
        #: Ids burnt at open because reader checkpoints mentioned them but the
        #: journal no longer holds them (see :mod:`recover`); None if none.
        self._skipped = start.skipped
        self._punt_queues: dict[str, Queue] = {}
        self._gc: GroupCommit | None = None
        self._periodic: PeriodicSync | None = None
        self._checkpointer: threading.Thread | None = None
        self._stop = threading.Event()
        self._writer_lock = writer_lock
        self.deleted_files: list[str] = []
        self._watch = ReaderWatch(name, config.pin_warning, config.reader_expiry)  # see pinning
        self.checkpoint_failure: BaseException | None = None
        #: The failure that stopped writes: a write or fsync of the writer file
        #: (its handle is poisoned), or a rotation that failed after the old file
        #: was closed (no usable writer file).  Every later write raises it again,
        #: with its type: DiskFullError stays DiskFullError (the fsyncgate rule,
        #: until a reopen lets recovery decide what the files hold).
        self._poisoned: PoisonedError | None = None
        self._init_producers(state, shared)
        self._other_readers = OtherReaders()  # max_items / max_size of readers not open here
        self._keeper: Queue = keeper_of(self)  # what threads, readers, finalizer hold (see lifetime)

    # -- opening -------------------------------------------------------------------
    @classmethod
    def open(
        cls,
        directory: str,
        name: str,
        *,
        fs: FileSystem | None = None,
        clock: Callable[[], float] = time.time,
        **config: Any,
    ) -> Queue:
        """Open (creating if needed) queue ``name`` in ``directory`` as a producer.

        Any number of producers (processes, or handles in one process) may have
        the queue open and put (see :mod:`engine.queue.shared`); the first one
        runs the crash recovery.  Options are :class:`QueueConfig` fields; each
        producer has its own (its sync mode, its limits, its readers).  Raises
        LockedError while ``engine queue repair`` holds the queue,
        CorruptFileError / FormatError on damaged files.
        """
        directory = as_path(directory, "directory")
        cfg = QueueConfig.from_kwargs(**config)
        cfg.check_names(name)  # before any file is created
        fs = resolve(fs)
        make_dirs(fs, directory)
        state = SharedState(fs, directory, name)
        report = RecoveryReport(path=naming.join(directory, name))
        queue: Queue | None = None
        writer_lock: HeldLock | None = None
        try:
            state.lock()  # no other producer opens, writes or rotates meanwhile (released below)
            state.map_words()  # (under the lock: the last producer to close empties the file)
            writer_lock, alone = lock_producer(fs, directory, name, READER_LOCK_PATIENCE)
            now_ms = int(clock() * 1000)
            if alone:
                start = recover(fs, directory, name, cfg, report, now_ms)
            else:
                segments, handle, end, last = resync(fs, directory, name, report, now_ms)
                start = Recovered(segments, handle, end, last, None, False)
            queue = cls(fs, directory, name, cfg, clock, writer_lock, start, report, state, shared=not alone)
            queue._held = True
            if alone:
                queue._publish_locked()  # the record afresh: nobody else is open
                state.reset_group_commit()
                if start.rotate:
                    queue._rotate()  # ids are contiguous within a file: the jump goes between two
            else:
                queue._acquire_shared_open()
        except BaseException:
            if queue is not None:
                queue._abandon()
            else:
                state.close()
                if writer_lock is not None:
                    writer_lock.release()
            raise
        with queue._lock:
            queue._release_locked()
        report.log(log)
        queue._keeper._start_threads()
        keeper = queue._keeper
        queue._finalizer = close_when_dropped(
            queue, keeper._close_dropped, keeper.background_threads, f"queue {name!r} in {directory!r}"
        )
        return queue

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)

    def _start_threads(self) -> None:
        if self._policy.mode == "always":
            self._gc = GroupCommit(self._sync_journal, delay=self.config.group_commit_delay, name=self.name)
        elif self._policy.mode == "periodic":
            # Ticks at least every 50 ms: staged puts hold the append lock, which
            # producers in other processes wait for; the fsync comes every period.
            self._next_sync = time.monotonic() + self._policy.period
            self._periodic = PeriodicSync(
                self._tick,
                min(self._policy.period, 0.05),
                dirty=lambda: self._durable_end < self._written_end or bool(self._buffer) or self._held,
                name=f"queue-{self.name}-sync",
            )
        else:
            # sync="never": no fsync, but staged puts reach the file (and readers in
            # other processes) within 50 ms.
            self._periodic = PeriodicSync(
                self._flush, 0.05, dirty=lambda: bool(self._buffer) or self._held, name=f"queue-{self.name}-flush"
            )
        self._checkpointer = threading.Thread(
            target=self._checkpoint_loop, name=f"queue-{self.name}-checkpoint", daemon=True
        )
        self._checkpointer.start()

    def background_threads(self) -> list[threading.Thread | None]:
        """The threads this queue runs (its checkpoints; its periodic sync or flush)."""
        return [self._checkpointer, None if self._periodic is None else self._periodic._thread]

    def _close_dropped(self) -> None:
        """:meth:`close` by the finalizer (the user's object is gone): readers say why."""
        for reader in list(self._readers.values()):
            reader._closed_note = ": its Queue was dropped without close() (keep it referenced while using readers)"
        self.close()

    def _abandon(self) -> None:
        self._handle.close()
        with self._sync_lock:  # no group commit is writing the state file meanwhile
            self._state.close()
        self._writer_lock.release()

    # -- writing -------------------------------------------------------------------
    # Records are first *staged* in memory (``_buffer``), then *flushed* to the newest
    # file in one write followed by one CHECK record.  sync="always" flushes at the
    # end of every put (and the group commit fsyncs it); the other modes flush when
    # 64 KiB are staged, when a reader has read everything flushed, at each sync
    # period (or every 50 ms with sync="never"), before a rotation, and on close.
    # That is what lets a buffered put cost a few microseconds, like queuelib's
    # buffered file; the price is that a crash of the *process* (not only of the
    # machine) may lose the last staged puts in those modes.

    def _check_usable(self) -> None:
        if self._closed:
            raise ClosedError(f"queue {self.name!r} is closed")
        if self._periodic is not None:
            self._periodic.check()
        if self._poisoned is not None:
            raise _again(self._poisoned)
        if self._handle.poisoned:
            raise PoisonedError(self._handle.path)

    def _wait_durable(self, gc: GroupCommit, ticket: int) -> None:
        """Wait for the group commit; a put that shared a failed fsync raises the
        failure itself (DiskFullError stays DiskFullError), not the group commit's
        generic PoisonedError."""
        try:
            gc.wait(ticket)
        except PoisonedError:
            self._flush()  # no leader flushed: the append lock must go all the same
            if self._poisoned is not None:
                raise _again(self._poisoned) from None
            raise

    def _fail(self, exc: BaseException, path: str, operation: str) -> None:
        """Remember the first failure that stopped writes (see ``_poisoned``), as a copy:
        its traceback holds the caller's frames, and so the user's object."""
        if self._poisoned is None:
            if isinstance(exc, PoisonedError):
                self._poisoned = _again(exc)
            else:
                self._poisoned = PoisonedError(path, detached(exc), operation)

    def _flush_locked(self) -> None:
        """Write the staged records and their CHECK, and let the append lock go
        (caller holds ``_lock``)."""
        if self._held:
            try:
                self._write_staged()
            finally:
                self._release_locked()

    def _write_staged(self) -> None:
        """Write the staged records and their CHECK at the newest file's end, then
        the state record (caller holds ``_lock`` and the append lock)."""
        if not self._buffer:
            return
        records = b"".join(self._buffer)
        self._buffer.clear()
        self._buffer_bytes = 0
        # One CHECK per write: recovery can tell a whole batch from a torn one.
        blob = records + encode_check(records)
        offset = self._written_end
        try:
            self._handle.write_at(offset, blob)
        except BaseException as exc:
            self._fail(exc, self._handle.path, "write")
            raise
        self._written_end = offset + len(blob)
        self._written_l += len(blob)
        self._end_l = self._written_l
        self._unpublished = True  # the record is written when the lock goes
        if not self._policy.always:
            self._visible_end = self._written_end

    def flush(self) -> None:
        """Write the staged puts to the file now, without an fsync (buffered modes)."""
        self._check_usable()
        self._flush()

    def _flush(self) -> None:
        with self._lock:
            if not self._closed:
                self._flush_locked()

    def _tick(self) -> None:
        """The periodic thread's round (sync=<period>): flush; fsync once a period."""
        if time.monotonic() >= self._next_sync:
            self._next_sync = time.monotonic() + self._policy.period
            self._sync_journal()
        else:
            self._flush()

    def _sync_journal(self) -> None:
        """Flush, make this process's writes durable (an fsync here or in another
        producer's process, see :meth:`_sync_shared`); then they become visible."""
        with self._lock:
            self._flush_for_sync()
            handle, end, target = self._handle, self._written_end, self._end_l
            segment = self._segments[-1].number
        try:
            with self._sync_lock:
                if not handle.closed:  # a rotated-out handle was fsynced whole and closed by _rotate
                    self._sync_shared(handle, segment, target)
        except BaseException:
            self._flush()  # a kept append lock goes
            raise
        with self._lock:
            if handle is self._handle and end > self._durable_end:
                self._durable_end = end
                if self._policy.always:
                    self._visible_end = end
            self._after_sync(end)
        self.notify()

    def _make_room(self, adding: int, nbytes: int) -> None:
        """Enforce max_items / max_size for every reader (see :mod:`limits`)."""
        make_room(self, adding, nbytes)

    def put(self, data: Any, *, expire_at: float | datetime.datetime | None = None) -> int:
        """Add an item; returns its id (with sync="always", once it is durable).
        ``data``: bytes, or any object the queue's ``serializer`` takes.
        ``expire_at``: a datetime or seconds since the epoch."""
        if self._dumps is not None:
            data = self._dumps(data)
        try:
            size = len(data)
        except TypeError:
            require_bytes(data)  # a TypeError that says what to do
            raise
        if size > self.max_item_size:
            raise ConfigError(f"item of {len(data)} bytes exceeds max_item_size {self.max_item_size}")
        if self._limited:
            self._make_room(1, len(data))
        try:  # seconds inline (free unless it raises); anything else is engine.conventions'
            expire_ms = None if expire_at is None else int(expire_at * 1000)  # type: ignore[operator]
        except (TypeError, ValueError, OverflowError):
            expire_ms = instant_ms(expire_at, "expire_at")  # a datetime, or an error naming expire_at
        gc, periodic = self._gc, self._periodic
        with self._lock:
            # _check_usable's tests, inline (a call per put costs 5%): it raises.
            if (
                self._closed
                or self._poisoned is not None
                or self._handle.poisoned
                or (periodic is not None and periodic.failure is not None)
            ):
                self._check_usable()
            try:
                xid = self._stage(data, expire_ms, 0, int(self._clock() * 1000))
            except TypeError:
                require_bytes(data)  # a str: a TypeError that says so (not "can't concat str to bytes")
                raise
            if gc is not None:
                self._write_for_commit()
            elif self._buffer_bytes >= _BUFFER_LIMIT:
                self._write_staged() if not self._shared else self._flush_locked()
            ticket = gc.ticket() if gc is not None else 0
        if gc is not None:
            self._wait_durable(gc, ticket)  # the sync notifies the readers
        elif self._waiters:
            self.notify()
        return xid

    def put_many(self, items: Iterable[Any], *, expire_at: float | datetime.datetime | None = None) -> list[int]:
        """Add several items with one write and (sync="always") one fsync.

        ``expire_at`` (a datetime or seconds since the epoch) applies to them all.
        Without a serializer an element may also be a ``(bytes, expire_at)`` pair,
        its own expiry; with one, every element is a value (tuples included).
        """
        return self._put_batch(put_many_batch(items, self._dumps, expire_at), 0)

    def put_moved(self, item: Item) -> int:
        """Put ``item`` moved here from another queue (error / expired), keeping its
        payload bytes, error count and expiry."""
        return self._put_batch([(item.data, item.expire_time_ms)], item.error_count)[0]

    def _put_batch(self, batch: list[tuple[bytes, int | None]], error_count: int) -> list[int]:
        """:meth:`put` for several items (expiry in ms): the same steps, one lock
        hold, one write, and (sync="always") one group-commit wait for all."""
        if not batch:
            return []
        if max([len(data) for data, _ in batch]) > self.max_item_size:
            big = next(len(data) for data, _ in batch if len(data) > self.max_item_size)
            raise ConfigError(f"item of {big} bytes exceeds max_item_size {self.max_item_size}")
        if self._limited:
            self._make_room(len(batch), sum(len(d) for d, _ in batch))
        gc = self._gc
        with self._lock:
            self._check_usable()
            now = int(self._clock() * 1000)
            ids = self._stage_batch(batch, error_count, now)
            if gc is not None:
                self._write_for_commit()
            elif self._buffer_bytes >= _BUFFER_LIMIT:
                self._write_staged() if not self._shared else self._flush_locked()
            ticket = gc.ticket() if gc is not None else 0
        if gc is not None:
            self._wait_durable(gc, ticket)
        elif self._waiters:
            self.notify()
        return ids

    def _stage_batch(self, batch: list[tuple[bytes, int | None]], error_count: int, now_ms: int) -> list[int]:
        """:meth:`_stage` of each item: in one step when they all fit in the newest file."""
        if not self._held:
            self._acquire_locked()
        first = self._tail + 1
        try:
            records = put_records(batch, first, error_count, now_ms)
        except BaseException:
            if not self._buffer:
                self._release_locked()
            raise
        size = sum(map(len, records))
        if self._written_end + self._buffer_bytes + size > self._journal_size:
            return [self._stage(data, expire_ms, error_count, now_ms) for data, expire_ms in batch]
        self._buffer += records
        self._buffer_bytes, self._tail = self._buffer_bytes + size, first + len(records) - 1
        if self._segments[-1].first_id is None:
            self._segments[-1].first_id = first
        return list(range(first, self._tail + 1))

    def _stage(self, data: bytes, expire_ms: int | None, error_count: int, now_ms: int) -> int:
        """Stage one PUT record with the next id (caller holds ``_lock``), starting a
        new writer file first when it would not fit in this one; returns the id.

        Every put goes through here: ``put``, ``put_many`` and the items moved in
        from another queue (error / expired), so limits on ids, rotation and the
        first id of each file are handled in one place.
        """
        if not self._held:
            self._acquire_locked()  # and the newest file, its end and the tail as of now
        xid = self._tail + 1  # > 0: ids start at 1
        try:
            if expire_ms is None:
                record = _pack_put(_PUT_BYTE, len(data), error_count, xid, now_ms) + data
            else:
                record = _pack_put_expiry(_PUT_BYTE_EXPIRY, len(data), error_count, xid, now_ms, expire_ms) + data
        except BaseException:
            if not self._buffer:
                self._release_locked()
            raise
        end = self._written_end + self._buffer_bytes
        if end + len(record) > self._journal_size and end > _HEADER_SIZE:
            self._write_staged()
            self._rotate()
        self._buffer.append(record)
        self._buffer_bytes += len(record)
        self._tail = xid
        newest = self._segments[-1]
        if newest.first_id is None:
            newest.first_id = xid
        return xid

    # -- readers -------------------------------------------------------------------
    def reader(self, name: str = "") -> Reader:
        """The reader ``name`` of this queue in this process (created if new).

        What attaching it clamped (a head past the tail, done ids outside the
        journal) is added to :attr:`recovery` and logged.
        """
        with self._lock:
            self._check_usable()
            existing = self._readers.get(name)
            if existing is not None and not existing.closed:
                return existing
            tail = self._tail
            earliest = earliest_id(self._segments)
            held = next((True for n, r in self._readers.items() if n and not r.closed), False)
        clamped = RecoveryReport(path=naming.join(self.directory, naming.reader_name(self.name, name)))
        lock, state = attach_reader(self.fs, self.directory, self.name, name, tail=tail, earliest=earliest,
                                    stamp_ms=self._now_ms(), report=clamped, named_reader_held=held,
                                    share_wait=SHARE_WAIT)
        if self._skipped is not None and state.head < self._skipped[1]:
            # Those ids will never be delivered: count them done, so that len() and
            # max_items do not wait for them.
            low, high = max(self._skipped[0], state.head + 1), self._skipped[1]
            before = state.snapshot()
            state.skip_missing(low, high)
            if state.snapshot() != before:
                clamped.add("reset", clamped.path, high - low + 1, "ids", detail="lost in a crash: skipped")
        self._watch.note_return(name, clamped)  # retired by reader_expiry: it comes back as a new reader
        clamped.log(log)
        self.recovery.actions.extend(clamped.actions)
        keeper = self._keeper  # never ``self``: a reader must not keep the queue alive
        reader = Reader(
            name=name,
            queue=self.name,
            directory=self.directory,
            fs=self.fs,
            source=keeper,
            state=state,
            config=self.config,
            lock=lock,
            clock=self._clock,
            punt=keeper._punt,
            tail=keeper.current_tail,
        )
        if clamped.repaired:
            reader._dirty = True
        with self._lock:
            self._readers[name] = reader
        return reader

    @property
    def readers(self) -> dict[str, Reader]:
        """The readers open in this process."""
        return dict(self._readers)

    def reader_names(self) -> list[str]:
        """Every reader of the queue, from the files on disk."""
        return sorted(reader_files(self.fs, self.directory, self.name))

    def remove_reader(self, name: str) -> None:
        """Delete reader ``name``: its file goes, and it no longer holds journal files."""
        with self._lock:
            reader = self._readers.pop(name, None)
        if reader is not None:
            reader.close(checkpoint_first=False)
        naming.check_reader_name(self.name, name)
        with lock_reader(self.fs, self.directory, self.name, name, patience=False):
            path = naming.join(self.directory, naming.reader_name(self.name, name))
            if self.fs.exists(path):
                self.fs.unlink(path)
                crashpoint("queue.remove-reader.before-dir-fsync")
                self.fs.fsync_dir(self.directory)
        self.retire_files()

    def _punt(self, target: str, item: Item) -> None:
        """Move ``item`` to queue ``target`` of the same directory (error / expired;
        checked at open: a valid name, not this queue)."""
        with self._lock:
            other = self._punt_queues.get(target)
        if other is None:
            other = Queue.open(self.directory, target, fs=self.fs, clock=self._clock, sync=self.config.sync)
            with self._lock:
                self._punt_queues[target] = other
        other.put_moved(item)

    # -- checkpoints and file retirement -------------------------------------------
    def checkpoint(self) -> None:
        """Write every changed reader file, then delete journal files all readers passed."""
        self._check_usable()
        for reader in list(self._readers.values()):
            if not reader.closed:
                reader.checkpoint()
        self.retire_files()

    def _share_asked(self) -> bool:
        return any(r.share_requested() for r in list(self._readers.values()) if not r.closed)

    def _checkpoint_loop(self) -> None:
        """Checkpoint every interval.  A failure (a full disk, say) is kept in
        :attr:`checkpoint_failure` and logged once per run of failures, and the
        next round tries again: checkpoints resume by themselves once space is
        freed (a reader file is rewritten whole each time).  Explicit
        :meth:`checkpoint` and :meth:`close` raise their own failures."""
        while wait_round(self._stop, self.config.checkpoint_interval, self._share_asked):
            try:
                for reader in list(self._readers.values()):
                    if not reader.closed:
                        reader.checkpoint()
                self.retire_files()
            except (EngineError, OSError) as exc:
                if self.checkpoint_failure is None:
                    log.error("queue %s: background checkpoint failed (retried every interval): %s", self.name, exc)
                self.checkpoint_failure = exc
                continue
            if self.checkpoint_failure is not None:
                log.warning("queue %s: background checkpoints work again", self.name)
                self.checkpoint_failure = None

    def retire_files(self) -> list[str]:
        """Delete (or archive) writer files whose items every reader has passed, after
        retiring idle readers (``reader_expiry``); warn of pinning readers (see pinning)."""
        with self._retire_lock:  # the checkpoint thread and callers may race here
            return retire_round(self)

    # -- introspection -------------------------------------------------------------
    def __len__(self) -> int:
        """Items not confirmed by every reader: the largest backlog of any reader (open
        here or on disk); with no reader yet, every item (the first reader gets them)."""
        with self._lock:
            if self._closed:
                self._check_usable()  # raises ClosedError
            tail = self.current_tail()
            earliest = earliest_id(self._segments)
            live = {name: r for name, r in self._readers.items() if not r.closed}
        backlogs = [len(r) for r in live.values()]
        others = [name for name in self.reader_names() if name not in live]
        backlogs += [disk_pending(self.fs, self.directory, self.name, name, tail) for name in others]
        if backlogs:
            return max(backlogs)
        return 0 if earliest is None else tail - earliest + 1

    @property
    def tail_id(self) -> int:
        """The id of the last item put (by any producer)."""
        return self.current_tail()

    @property
    def journal_files(self) -> list[str]:
        return [seg.path for seg in self._files_now()[0]]

    def journal_bytes(self) -> int:
        """Bytes of writer files on disk (and staged for the newest)."""
        return sum(file_sizes(self, self._files_now()[0]).values())

    def stats(self) -> dict[str, object]:
        """Queue-level figures and one entry per reader on disk (snake_case keys,
        numbers): see :func:`pinning.live_stats`.  A reader's ``backlog_bytes`` is
        :func:`diagnose.backlog_bytes`: the payload bytes of its items not yet
        confirmed (it reads the backlog)."""
        return live_stats(self)

    def verify(self) -> list[str]:
        """Check every invariant; raises CorruptFileError/EngineError, returns notes."""
        with self._lock:
            self._check_usable()
            if not self._held:
                self._acquire_locked()  # no producer writes while the files are checked
            try:
                self._write_staged()  # staged puts count in the tail: put them in the file
                tail = self._tail
                notes = verify_queue(
                    self.fs,
                    self.directory,
                    self.name,
                    live_tail=tail,
                    live_end=self._written_end,
                    burnt_to=0 if self._skipped is None else self._skipped[1],
                    journal_size=self.config.journal_size,
                )
            finally:
                self._release_locked()
        for reader in self._readers.values():
            if reader.closed:
                continue
            if reader.head > tail:
                raise EngineError(f"reader {reader.name!r} head {reader.head} is past the tail {tail}")
            if any(i <= reader.head or i > tail for i in reader.done_ids):
                raise EngineError(f"reader {reader.name!r} has done ids outside (head, tail]")
        return notes

    # -- closing -------------------------------------------------------------------
    def sync(self) -> None:
        """Make every put so far durable (whatever the sync policy)."""
        self._check_usable()
        self._sync_journal()

    def close(self) -> None:
        """Sync, checkpoint every reader, delete passed files, release the locks."""
        if self._closed:
            return
        if self._finalizer is not None:
            self._finalizer.detach()
        self._stop.set()
        if self._checkpointer is not None and self._checkpointer is not threading.current_thread():
            self._checkpointer.join()
        if self._periodic is not None:
            self._periodic.stop()
        failure: BaseException | None = None
        try:
            # A poisoned handle already reported its failure: nothing more to sync.
            if not self._handle.poisoned:
                self._sync_journal()
        except BaseException as exc:
            failure = exc
        for reader in list(self._readers.values()):
            try:
                reader.close()  # checkpoints it: reader files do not depend on the journal handle
            except BaseException as exc:
                failure = failure or exc
        if failure is None:
            try:
                self.retire_files()
            except BaseException as exc:
                failure = exc
        with self._lock:
            self._closed = True
            leftover = [r for r in self._readers.values() if not r.closed]
            self._handle.close()
        for reader in leftover:  # outside our lock: readers take theirs first
            reader.close(checkpoint_first=False)
        for other in self._punt_queues.values():
            other.close()
        self.notify()
        if failure is None:
            self._leave(self._writer_lock)
        self._abandon()
        if failure is not None:
            raise failure

    def __enter__(self) -> Queue:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<Queue {self.name!r} in {self.directory!r} tail={self._tail}>"

    # -- readers in other processes ------------------------------------------------
    @staticmethod
    def open_reader(
        directory: str,
        name: str,
        reader: str = "",
        *,
        fs: FileSystem | None = None,
        clock: Callable[[], float] = time.time,
        **config: Any,
    ) -> RemoteReader:
        """Open reader ``reader`` of queue ``name`` from a process that is not the writer.

        It polls the writer files every ``poll_interval`` seconds and checkpoints its
        own file every ``checkpoint_interval`` (and on close).  Items it moves to
        another queue (error / expired) go through :meth:`Queue.open` of that queue
        in this process.  What attaching it clamped is in its ``recovery``.
        """
        directory = as_path(directory, "directory")
        return open_remote_reader(
            directory,
            name,
            reader,
            fs=resolve(fs),
            clock=clock,
            config=QueueConfig.from_kwargs(**config),
            open_queue=Queue.open,
        )


__all__ = ["Item", "PollingSource", "Queue", "Reader"]
