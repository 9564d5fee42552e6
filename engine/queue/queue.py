"""The queue store: a thin class over the producer and consumer protocols.

Any number of producers per queue, in any number of processes, and any number
of consumers per reader name: one protocol each, whoever else is there.  The
write side is :class:`engine.queue.writer.JournalWriter` (staging, the append
lock, writes, rotation, the group commit; :mod:`engine.queue.shared` says what
the producers share); the sync policy is driven by the store core's :class:`~engine.fs.core.SyncDriver`; a
reader is one consumer of its name (:mod:`engine.queue.compete`) and reads the
files as every reader does (:class:`engine.queue.cursor.PollingSource`).
Opening is :func:`recover.recover` for the first producer; readers lock and
load their files through :func:`attach.attach_reader`; the choice of files to
delete is :mod:`retire`'s, the checks and statistics are :mod:`diagnose`'s,
the watch over abandoned readers (pin warnings, ``reader_expiry``) is
:mod:`pinning`'s.

Durability (sync="always"): a put writes its record and returns once an
fdatasync that started after its write has finished; concurrent puts share that
fsync, across threads and processes alike (the group commit's ``synced``
position).  Readers see an item as soon as it is written (a reader checkpoint
that mentions an id a crash then takes back makes the writer's next open burn
that id: see :mod:`recover`).
"""

from __future__ import annotations

import datetime
import logging
import threading
import time
from collections.abc import Callable, Iterable
from os import PathLike
from typing import Any

from engine.conventions import instant_ms, require_bytes
from engine.errors import ClosedError, EngineError
from engine.fs import FileSystem, HeldLock, RecoveryReport, as_path, crashpoint, make_dirs, resolve
from engine.fs.core import StoreCore
from engine.lifetime import keeper_of
from engine.queue import naming
from engine.queue.attach import READER_LOCK_PATIENCE, attach_reader, lock_reader, reader_files, remove_reader_files
from engine.queue.compete import wait_round
from engine.queue.config import QueueConfig
from engine.queue.cursor import PollingSource
from engine.queue.diagnose import disk_pending, verify_queue
from engine.queue.face import DefaultConsumer, Taken
from engine.queue.limits import Limits
from engine.queue.payload import put_many_batch
from engine.queue.pinning import ReaderWatch, file_sizes, live_stats, retire_round
from engine.queue.reader import Item, Reader
from engine.queue.recover import Recovered, recover, resync
from engine.queue.remote import RemoteReader, open_remote_reader
from engine.queue.segments import Segment, earliest_id, list_segments
from engine.queue.shared import SharedState, lock_producer
from engine.queue.view import QueueStats
from engine.queue.writer import JournalWriter

log = logging.getLogger("engine.queue")


class Queue:
    """A durable multi-reader queue in ``directory``, files named ``<name>.*``.

    Use :meth:`open`.  ``put`` appends; each reader (``reader(name)``) sees every
    item (fanout).  Close it (or use ``with``) to checkpoint readers and release
    the producer's locks; dropped unclosed, it is closed (readers too) with a
    ResourceWarning (:mod:`engine.lifetime`).  ``recovery``: what open repaired.
    """

    def __init__(
        self,
        core: StoreCore,
        directory: str,
        name: str,
        config: QueueConfig,
        clock: Callable[[], float],
        presence: HeldLock,
        writer: JournalWriter,
        burnt: tuple[int, int] | None = None,
    ) -> None:
        self._core = core
        self.fs = fs = core.fs
        self.directory = directory
        self.name = name
        self.config = config
        self.max_item_size = config.max_item_size
        serializer = config.payload_serializer
        #: The serializer's dumps (None: payloads are bytes, put as given).
        self._dumps = None if serializer is None else serializer.dumps
        #: What opening repaired (and what attaching readers found since).
        self.recovery = core.report
        self._clock = clock
        self._writer = writer
        self._presence = presence
        #: Ids this open burnt (BURNT records: not items), for the readers here to
        #: count as done before they read past them (``len``); None if none.
        self._burnt = burnt
        # The readers here read the files as any reader does; this producer's
        # writes wake them, and it says which file is the newest (no listing).
        self._source = PollingSource(fs, directory, name, config.poll_interval, writer=writer)
        writer.readers = self._source  # its puts wake the readers here
        self._lock = threading.RLock()  # the readers and punt queues of this process
        self._retire_lock = threading.Lock()
        self._attach_lock = threading.Lock()
        self._readers: dict[str, Reader] = {}
        self._punt_queues: dict[str, Queue] = {}
        self._checkpointer: threading.Thread | None = None
        self._stop = threading.Event()
        self.deleted_files: list[str] = []
        self._watch = ReaderWatch(name, config.pin_warning, config.reader_expiry)  # see pinning
        self.checkpoint_failure: BaseException | None = None
        self._limits = Limits()  # max_items / max_size, every reader counted
        self._keeper: Queue = keeper_of(self)  # what threads, readers, finalizer hold (see lifetime)
        self._face = DefaultConsumer(self._keeper.reader, config.max_items)  # get / task_done / qsize ...
        if config.max_items is not None or config.max_size is not None:
            writer.make_room = self._keeper._make_room  # (the keeper: this class's own object)

    # -- opening -------------------------------------------------------------------
    @classmethod
    def open(
        cls,
        directory: str | PathLike[str],
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
        core = StoreCore(fs, naming.join(directory, name), "queue", policy=cfg.sync_policy)
        with core.opening():
            # Producers share the queue: no writer lock, but the state record's
            # mutex while opening (no other producer opens, writes or rotates
            # meanwhile) and a shared presence lock until close.
            state = core.keep(SharedState(fs, directory, name))
            state.lock()
            presence, alone = lock_producer(fs, directory, name, READER_LOCK_PATIENCE)
            core.hold(presence)
            now_ms = int(clock() * 1000)
            facts = state.read_facts()
            if alone:
                start = recover(fs, directory, name, cfg, core.report, now_ms, facts)
            else:
                segments, handle, end, last = resync(fs, directory, name, core.report, now_ms)
                start = Recovered(segments, handle, end, last, None, False)
            writer = core.keep(JournalWriter(
                fs, directory, name, journal_size=cfg.journal_size, max_item_size=cfg.max_item_size,
                policy=cfg.sync_policy, group_commit_delay=cfg.group_commit_delay, clock=clock, state=state,
                start=start, report=core.report, latch=core.latch,
            ))
            writer.start(alone, start)
        queue = cls(core, directory, name, cfg, clock, presence, writer, start.burnt)
        keeper = queue._keeper  # (the keeper is this class's own object: engine.lifetime)
        keeper._start_threads()  # (this class's own object)
        core.opened(queue, log, close=keeper._close_dropped, threads=keeper.background_threads,  # (its own)
                    name=f"queue {name!r} in {directory!r}")
        return queue

    def now_ms(self) -> int:
        """The queue's clock, in ms since the epoch."""
        return int(self._clock() * 1000)

    def _start_threads(self) -> None:
        writer = self._writer
        self._core.start_sync(writer.sync, flush=writer.flush, name=f"queue-{self.name}-sync")
        self._checkpointer = threading.Thread(
            target=self._checkpoint_loop, name=f"queue-{self.name}-checkpoint", daemon=True
        )
        self._checkpointer.start()

    def background_threads(self) -> list[threading.Thread | None]:
        """The threads this queue runs (its checkpoints; its sync driver's)."""
        driver = self._core.driver
        return [self._checkpointer, None if driver is None else driver.thread]

    def _close_dropped(self) -> None:
        """:meth:`close` by the finalizer (the user's object is gone): readers say why."""
        for reader in list(self._readers.values()):
            reader.note_closed_by_queue(
                ": its Queue was dropped without close() (keep it referenced while using readers)"
            )
        self.close()

    # -- writing -------------------------------------------------------------------
    def _check_usable(self) -> None:
        if self._core.closed:
            raise ClosedError(f"queue {self.name!r} is closed")
        self._writer.check_usable()  # (the core's latch, and the writer file)

    def put(self, data: Any, *, expire_at: float | datetime.datetime | None = None) -> int:
        """Add an item; returns its id (with sync="always", once it is durable).
        ``data``: bytes, or any object the queue's ``serializer`` takes.
        ``expire_at``: a datetime or seconds since the epoch.  :meth:`put_many`
        of one item."""
        if self._dumps is not None:
            data = self._dumps(data)
        elif type(data) is not bytes:
            require_bytes(data, "data")  # a TypeError that says what to do
            data = bytes(data)
        try:  # seconds inline (free unless it raises); anything else is engine.conventions'
            expire_ms = None if expire_at is None else int(expire_at * 1000)  # type: ignore[operator]
        except (TypeError, ValueError, OverflowError):
            expire_ms = instant_ms(expire_at, "expire_at")  # a datetime, or an error naming expire_at
        return self._writer.put([(data, expire_ms)], 0)

    def put_many(self, items: Iterable[Any], *, expire_at: float | datetime.datetime | None = None) -> list[int]:
        """Add several items with one write and (sync="always") one fsync.

        ``expire_at`` (a datetime or seconds since the epoch) applies to them all.
        Without a serializer an element may also be a ``(bytes, expire_at)`` pair,
        its own expiry; with one, every element is a value (tuples included).
        """
        batch = put_many_batch(items, self._dumps, expire_at)
        if not batch:
            return []
        first = self._writer.put(batch, 0)
        return list(range(first, first + len(batch)))

    def put_moved(self, item: Item) -> int:
        """Put ``item`` moved here from another queue (error / expired), keeping its
        payload bytes, error count and expiry."""
        return self._writer.put([(item.data, item.expire_time_ms)], item.error_count)

    def _make_room(self, adding: int, nbytes: int) -> None:
        """``max_items`` / ``max_size`` before a put (see :mod:`engine.queue.limits`)."""
        self._limits.make_room(self, adding, nbytes)

    # -- queue.Queue's face, over the default reader (see engine.queue.face) ----------
    def get(self, block: bool = True, timeout: float | datetime.timedelta | None = None) -> Taken:
        """The next item of the default reader (``reader()``), opened, as
        ``queue.Queue.get``: waits for one (``block``, up to ``timeout``: seconds or
        a timedelta, None for ever), raises :class:`EmptyError` (a ``queue.Empty``)
        when none comes.  Confirm it with :meth:`task_done` (or ``item.confirm()``,
        or ``with q.get() as item:``, which gives it back if the block raises)."""
        return self._face.get(block, timeout)

    def get_nowait(self) -> Taken:
        """``get(block=False)``."""
        return self._face.get(False, None)

    def put_nowait(self, data: Any) -> int:
        """``put(data)`` (a put never waits: a full queue raises :class:`FullError`,
        a ``queue.Full``)."""
        return self.put(data)

    def task_done(self) -> None:
        """Confirm the oldest item this thread got with :meth:`get` and has not
        confirmed (``queue.Queue.task_done``); ValueError when there is none."""
        self._face.task_done()

    def join(self, timeout: float | None = None) -> bool:
        """Block until the default reader has no item left: every item got and
        confirmed (``queue.Queue.join``; False when ``timeout`` passed first)."""
        return self._face.join(timeout)

    def qsize(self) -> int:
        """The default reader's backlog: its items not confirmed (open ones too)."""
        return self._face.qsize()

    def empty(self) -> bool:
        """``qsize() == 0``."""
        return self._face.qsize() == 0

    def full(self) -> bool:
        """Whether the default reader's backlog reached ``max_items`` (never
        without ``max_items``)."""
        return self._face.full()

    def flush(self) -> None:
        """Write the staged puts to the file now, without an fsync (buffered modes)."""
        self._check_usable()
        self._writer.flush()

    def sync(self) -> None:
        """Make every put so far durable (whatever the sync policy)."""
        self._check_usable()
        self._writer.sync()

    # -- readers -------------------------------------------------------------------
    def reader(self, name: str = "") -> Reader:
        """A consumer of reader ``name`` of this queue in this process (created if
        new; the same object while it is open here).

        What attaching it found (a head raised past retired ids, a checkpoint
        file that was missing) is added to :attr:`recovery` and logged.
        """
        with self._lock:
            self._check_usable()
            existing = self._readers.get(name)
            if existing is not None and not existing.closed:
                return existing
        with self._attach_lock:  # one consumer of a name per Queue: two threads asking get the same
            return self._attach(name)

    def _attach(self, name: str) -> Reader:
        with self._lock:
            existing = self._readers.get(name)
            if existing is not None and not existing.closed:
                return existing
            held = any(True for n, r in self._readers.items() if n and not r.closed)
        segments = self._writer.segments()  # (no listing: creating N readers costs O(N) in all)
        tail = self.current_tail()
        report = RecoveryReport(path=naming.join(self.directory, naming.reader_name(self.name, name)))
        lock, state = attach_reader(
            self.fs, self.directory, self.name, name, tail=tail, earliest=earliest_id(segments),
            stamp_ms=self.now_ms(), report=report, named_reader_held=held,
        )
        if self._burnt is not None and state.head < self._burnt[1]:
            state.skip_missing(max(self._burnt[0], state.head + 1), self._burnt[1])  # not items: never pending
        self._watch.note_return(name, report)  # retired by reader_expiry: it comes back as a new reader
        report.log(log)
        self.recovery.actions.extend(report.actions)
        keeper = self._keeper  # never ``self``: a reader must not keep the queue alive
        reader = Reader(
            name=name,
            queue=self.name,
            directory=self.directory,
            fs=self.fs,
            source=self._source,
            state=state,
            config=self.config,
            lock=lock,
            clock=self._clock,
            punt=keeper._punt,  # (the keeper: this class's own object)
            tail=keeper.current_tail,
        )
        if report.repaired:
            reader.mark_dirty()
        with self._lock:
            self._readers[name] = reader
        return reader

    @property
    def readers(self) -> dict[str, Reader]:
        """The readers open in this process."""
        return dict(self._readers)

    def live_readers(self) -> dict[str, Reader]:  # (a Mapping[str, LiveReader] for the helpers)
        """The readers open (not closed) in this process, by name."""
        with self._lock:
            return {name: r for name, r in self._readers.items() if not r.closed}

    def forget_reader(self, name: str) -> None:
        """Drop a closed reader of this process from :attr:`readers` (retired)."""
        with self._lock:
            reader = self._readers.get(name)
            if reader is not None and reader.closed:
                del self._readers[name]

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
            if remove_reader_files(self.fs, self.directory, self.name, name):
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
        for reader in self.live_readers().values():
            reader.checkpoint()
        self.retire_files()

    def _checkpoint_loop(self) -> None:
        """Checkpoint every interval.  A failure (a full disk, say) is kept in
        :attr:`checkpoint_failure` and logged once per run of failures, and the
        next round tries again: checkpoints resume by themselves once space is
        freed (a reader file is rewritten whole each time).  Explicit
        :meth:`checkpoint` and :meth:`close` raise their own failures."""
        while wait_round(self._stop, self.config.checkpoint_interval):
            try:
                for reader in self.live_readers().values():
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
            retired = retire_round(self, self._watch)
        if retired:
            self._writer.forget_files(set(retired))
        return retired

    @property
    def clock(self) -> Callable[[], float]:
        return self._clock

    # -- introspection -------------------------------------------------------------
    def current_tail(self) -> int:
        """The last id put by any producer, as the producers' record says now."""
        return self._writer.current_tail()

    def files_now(self) -> tuple[list[Segment], int]:
        """The writer files on disk (first ids read once per file) and the tail now."""
        segments = list_segments(self.fs, self.directory, self.name, strict=False, known=self._writer.segments())
        return segments, self.current_tail()

    @property
    def staged_bytes(self) -> int:
        """Bytes of puts staged in memory, not yet written (buffered modes)."""
        return self._writer.staged_bytes

    @property
    def written_position(self) -> int:
        """The logical end of everything appended (see :mod:`engine.queue.shared`)."""
        return self._writer.written_position

    def __len__(self) -> int:
        """Items not confirmed by every reader: the largest backlog of any reader (open
        here or on disk); with no reader yet, every item (the first reader gets them)."""
        if self._core.closed:
            self._check_usable()  # raises ClosedError
        tail = self.current_tail()
        segments = self.files_now()[0]
        live = self.live_readers()
        backlogs = [len(r) for r in live.values()]
        others = [name for name in self.reader_names() if name not in live]
        backlogs += [disk_pending(self.fs, self.directory, self.name, name, tail) for name in others]
        if backlogs:
            return max(backlogs)
        earliest = earliest_id(segments)
        return 0 if earliest is None else tail - earliest + 1

    @property
    def tail_id(self) -> int:
        """The id of the last item put (by any producer)."""
        return self.current_tail()

    @property
    def journal_files(self) -> list[str]:
        return [seg.path for seg in self.files_now()[0]]

    def journal_bytes(self) -> int:
        """Bytes of writer files on disk (and staged for the newest)."""
        return sum(file_sizes(self, self.files_now()[0]).values())

    def stats(self) -> QueueStats:
        """Queue-level figures and one entry per reader on disk (snake_case keys,
        numbers): see :func:`pinning.live_stats`.  A reader's ``backlog_bytes`` is
        :func:`diagnose.backlog_bytes`: the payload bytes of its items not yet
        confirmed (it reads the backlog)."""
        return live_stats(self, self._watch)

    def verify(self) -> list[str]:
        """Check every invariant; raises CorruptFileError/EngineError, returns notes."""
        self._check_usable()
        with self._writer.holding():  # no producer writes while the files are checked
            notes = verify_queue(self.fs, self.directory, self.name, journal_size=self.config.journal_size, live=True)
            tail = self.current_tail()
        for reader in self.live_readers().values():
            reader.verify(tail)
        return notes

    # -- closing -------------------------------------------------------------------
    def close(self) -> None:
        """Sync, checkpoint every reader, delete passed files, release the locks
        (the store core's close: the sync thread first, the files and locks last)."""
        core = self._core
        with self._lock:  # (readers attach under it: none once closing began)
            if not core.begin_close():
                return
        self._stop.set()
        if self._checkpointer is not None and self._checkpointer is not threading.current_thread():
            self._checkpointer.join()
        failure: BaseException | None = None
        try:
            if not self._writer.failed:  # (a writer that failed already reported its failure)
                self._writer.sync()
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
            leftover = [r for r in self._readers.values() if not r.closed]
        for reader in leftover:  # outside our lock: readers take theirs first
            reader.close(checkpoint_first=False)
        for other in self._punt_queues.values():
            other.close()
        self._source.close()
        if failure is None:
            try:
                self._writer.leave(self._presence)
            except (EngineError, OSError) as exc:
                failure = exc
        try:
            core.finish_close()  # the writer file, the presence lock, the shared words
        except BaseException as exc:
            failure = failure or exc
        if failure is not None:
            raise failure

    def __enter__(self) -> Queue:
        self._check_usable()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._core.closed else f"tail={self._writer.tail}"
        return f"<Queue {self.name!r} in {self.directory!r} {state}>"

    # -- readers in other processes ------------------------------------------------
    @staticmethod
    def open_reader(
        directory: str | PathLike[str],
        name: str,
        reader: str = "",
        *,
        fs: FileSystem | None = None,
        clock: Callable[[], float] = time.time,
        **config: Any,
    ) -> RemoteReader:
        """Open a consumer of reader ``reader`` of queue ``name`` in a process that
        need not be a producer.

        It polls the writer files every ``poll_interval`` seconds and checkpoints
        (merged with the reader's other consumers) every ``checkpoint_interval``
        and on close.  Items it moves to another queue (error / expired) go
        through :meth:`Queue.open` of that queue in this process.  What
        attaching it found is in its ``recovery``.
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


__all__ = ["Item", "PollingSource", "Queue", "Reader", "Taken"]
