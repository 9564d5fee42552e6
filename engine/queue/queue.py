"""The queue writer: puts, rotation, group commit, checkpoints, file retirement.

One writer per queue across processes (``<queue>.lock``).  Opening reads the reader
files and scans the newest writer file only (plus the first record of each older
file, for its first id), so open time does not grow with the backlog.

Durability (sync="always"): a put appends its record, takes a group-commit ticket
and returns once an fdatasync that started after its write has finished; concurrent
puts share that fsync.  Readers in this process see an item only once it is durable,
so no reader can confirm (and checkpoint) an id that a crash then takes back.
"""

from __future__ import annotations

import logging
import struct
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from engine.errors import ClosedError, ConfigError, EngineError, FormatError, FullError, LockedError, PoisonedError
from engine.fs import (
    FileHandle,
    FileSystem,
    GroupCommit,
    OpenMode,
    PeriodicSync,
    crashpoint,
    create_file,
    make_dirs,
    resolve,
)
from engine.queue import checkpoint, codec, naming
from engine.queue.config import QueueConfig
from engine.queue.cursor import PollingSource
from engine.queue.reader import Item, Reader
from engine.queue.segments import (
    SEGMENT_HEADER,
    Segment,
    is_half_created,
    list_segments,
    open_segment_handle,
    scan_file,
)
from engine.queue.state import ReaderState

log = logging.getLogger("engine.queue")

#: Staged bytes that trigger a write in the buffered sync modes.
_BUFFER_LIMIT = 64 * 1024
_PUT6 = struct.Struct("<Biiqq").pack  # command byte + PUT header (no expiry)
_PUT8 = struct.Struct("<Biiqqq").pack  # command byte + PUT header with expiry
assert struct.calcsize("<Biiqq") == 1 + codec.PUT_HEADER.size
assert struct.calcsize("<Biiqqq") == 1 + codec.PUT_HEADER_EXPIRY.size


#: How long a reader opening waits for its lock before LockedError: the writer
#: probes the lock of a reader that has no file yet for a few microseconds (see
#: ``Queue._durable_heads``), and a reader must not fail because of that.
_READER_LOCK_PATIENCE = 0.05


def _lock_file(fs: FileSystem, path: str, what: str, *, patience: float = 0.0) -> FileHandle:
    handle = fs.open(path, OpenMode.CREATE)
    try:
        deadline = time.monotonic() + patience
        while True:
            try:
                handle.lock(exclusive=True, blocking=False)
                break
            except LockedError:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.002)
    except LockedError:
        handle.close()
        raise LockedError(f"{path}: {what} is held by another process or handle") from None
    except BaseException:
        handle.close()
        raise
    return handle


def reader_being_created(fs: FileSystem, directory: str, queue: str, listing: list[str]) -> str | None:
    """The name of a reader that holds its lock but has no file in ``listing``: a
    reader being created (or taking over the default one) right now, or None.

    ``attach_reader`` takes the reader's lock before it decides where the reader
    starts and writes its file, so until that file exists the writer must not
    retire anything on the strength of the reader files alone.  A lock file
    nobody holds (a removed reader, a crash) is ignored.
    """
    have = {naming.parse_reader(queue, f) for f in listing}
    for filename in listing:
        reader = naming.parse_reader_lock(queue, filename)
        if reader is None or reader in have:
            continue
        try:
            probe = _lock_file(fs, naming.join(directory, filename), "reader")
        except LockedError:
            return reader
        except FileNotFoundError:
            continue
        probe.close()
    return None


def find_tail(fs: FileSystem, segments: list[Segment], max_item_size: int) -> int:
    """The id of the last PUT, from the newest file that holds one (read-only)."""
    for index in range(len(segments) - 1, -1, -1):
        seg = segments[index]
        if seg.first_id is None:
            continue
        with open_segment_handle(fs, seg.path) as handle:
            scan = scan_file(handle, seg.path, max_item_size)
        if scan.last_id is not None:
            return scan.last_id
    return 0


def earliest_id(segments: list[Segment]) -> int | None:
    for seg in segments:
        if seg.first_id is not None:
            return seg.first_id
    return None


def reader_files(fs: FileSystem, directory: str, queue: str) -> dict[str, str]:
    """Reader name -> path of every reader file of ``queue``."""
    found = {}
    for filename in fs.listdir(directory):
        reader = naming.parse_reader(queue, filename)
        if reader is not None:
            found[reader] = naming.join(directory, filename)
    return found


def attach_reader(
    fs: FileSystem,
    directory: str,
    queue: str,
    name: str,
    *,
    tail: int,
    earliest: int | None,
    stamp_ms: int,
    window: int | None = None,
) -> tuple[FileHandle, ReaderState, list[str]]:
    """Lock reader ``name`` and load (or create) its state.

    A new named reader takes over the default reader's file and backlog if the
    default is the only reader (fanout: "the first named reader takes over the
    default one"); otherwise it starts at the current tail.  Returns the lock
    handle, the state (clamped into the journal) and notes about the clamping.
    ``window``: ids more than this past ``tail`` are damage, not a crash's loss
    (CorruptFileError, see :func:`checkpoint.check_ids_in_window`).
    """
    naming.check_queue_name(name)
    lock = _lock_file(
        fs,
        naming.join(directory, naming.reader_lock_name(queue, name)),
        f"reader {name!r}",
        patience=_READER_LOCK_PATIENCE,
    )
    try:
        path = naming.join(directory, naming.reader_name(queue, name))
        notes: list[str] = []
        files = reader_files(fs, directory, queue)
        if name in files:
            head, done = checkpoint.load_reader_file(fs, path)
            if window is not None:
                checkpoint.check_ids_in_window(fs, path, head, done, tail, window)
            state = ReaderState(head, done)
            notes = state.clamp(earliest, tail)
            return lock, state, notes
        if name != "" and set(files) == {""}:
            default_lock = None
            try:
                default_lock = _lock_file(
                    fs,
                    naming.join(directory, naming.reader_lock_name(queue, "")),
                    "reader ''",
                    patience=_READER_LOCK_PATIENCE,
                )
            except LockedError:
                default_lock = None  # the default reader is in use: start at the tail
            if default_lock is not None:
                try:
                    head, done = checkpoint.load_reader_file(fs, files[""])
                    if window is not None:
                        checkpoint.check_ids_in_window(fs, files[""], head, done, tail, window)
                    state = ReaderState(head, done)
                    notes = state.clamp(earliest, tail)
                    # Write the named file first, then drop the default: a crash in
                    # between leaves two readers with the same backlog (safe).
                    checkpoint.write_reader_file(fs, path, state.head, state.done, stamp_ms)
                    fs.unlink(files[""])
                    fs.fsync_dir(directory)
                    log.info("queue %s: reader %r took over the default reader at head %d", queue, name, state.head)
                    return lock, state, notes
                finally:
                    default_lock.close()
        state = ReaderState(tail, ())
        # Persist at once: the writer decides which files to delete from the reader
        # files on disk, and must see that this reader needs everything after tail.
        checkpoint.write_reader_file(fs, path, state.head, state.done, stamp_ms)
        return lock, state, notes
    except BaseException:
        lock.close()
        raise


class Queue:
    """A durable multi-reader queue in ``directory``, files named ``<name>.*``.

    Use :meth:`open`.  ``put`` appends; each reader (``reader(name)``) sees every
    item (fanout).  Close it (or use ``with``) to checkpoint readers and release
    the writer lock.
    """

    def __init__(
        self, fs: FileSystem, directory: str, name: str, config: QueueConfig, clock: Callable[[], float]
    ) -> None:
        self.fs = fs
        self.directory = directory
        self.name = name
        self.config = config
        self.max_item_size = config.max_item_size
        self._clock = clock
        self._policy = config.sync_policy
        # Re-entrant: a reader's cursor asks readable_end() while put holds it.
        self._lock = threading.RLock()
        self._sync_lock = threading.Lock()
        self._retire_lock = threading.Lock()
        self._cond = threading.Condition(threading.Lock())
        self._version = 0
        self._waiters = 0
        self._closed = False
        self._buffer: list[bytes] = []
        self._buffer_bytes = 0
        self._journal_size = config.journal_size
        # The one-record fast path needs no limits to check and no group commit.
        self._fast = not self._policy.always and config.max_items is None and config.max_size is None
        self._readers: dict[str, Reader] = {}
        self._segments: list[Segment] = []
        self._handle: FileHandle | None = None
        self._tail = 0
        self._written_end = 0
        self._durable_end = 0
        self._visible_end = 0
        self._punt_queues: dict[str, Queue] = {}
        self._gc: GroupCommit | None = None
        self._periodic: PeriodicSync | None = None
        self._checkpointer: threading.Thread | None = None
        self._stop = threading.Event()
        self._writer_lock: FileHandle | None = None
        self.torn_tail_bytes = 0  # bytes cut off the newest file at open
        self.recovery_notes: list[str] = []
        self.deleted_files: list[str] = []
        self.checkpoint_failure: BaseException | None = None
        #: Set when a rotation failed after the old file was closed: there is no
        #: usable writer file, and every later write raises PoisonedError (the
        #: fsyncgate rule, as for a handle whose fsync failed) until reopened.
        self._poisoned: PoisonedError | None = None
        #: Ids burnt at open because reader checkpoints mentioned them but the
        #: journal no longer holds them (see ``_recover``); None if none.
        self.skipped_ids: tuple[int, int] | None = None

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
        """Open (creating if needed) queue ``name`` in ``directory`` as its writer.

        Options are :class:`QueueConfig` fields.  Raises LockedError if another
        writer has it open, CorruptFileError / FormatError on damaged files.
        """
        naming.check_queue_name(name)
        if not name:
            raise ConfigError("queue name must not be empty")
        cfg = QueueConfig.from_kwargs(**config)
        fs = resolve(fs)
        make_dirs(fs, directory)
        queue = cls(fs, directory, name, cfg, clock)
        queue._writer_lock = _lock_file(fs, naming.join(directory, naming.writer_lock_name(name)), "queue writer")
        try:
            queue._recover()
        except BaseException:
            queue._abandon()
            raise
        queue._start_threads()
        return queue

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)

    def _recover(self) -> None:
        fs, directory, name = self.fs, self.directory, self.name
        # Stray checkpoint temporaries: delete those whose reader nobody holds.
        for filename in fs.listdir(directory):
            if naming.is_temp(name, filename):
                reader = filename[len(name) + len(".read.") :].split(naming.TEMP_MARK)[0]
                try:
                    lock = _lock_file(fs, naming.join(directory, naming.reader_lock_name(name, reader)), "reader")
                except LockedError:
                    continue
                with lock:
                    fs.unlink(naming.join(directory, filename))
        self._segments = list_segments(fs, directory, name, self.max_item_size)
        if not self._segments:
            self._segments.append(self._create_segment())
        newest = self._segments[-1]
        handle = fs.open(newest.path, OpenMode.WRITE)
        self._handle = handle
        head = handle.read_at(0, codec.MAGIC_SIZE)
        if is_half_created(head):
            # A crash during create_file left the name but not the magic.
            note = f"{newest.path}: half-created writer file ({len(head)} bytes): magic rewritten"
            log.warning("queue %s: %s", name, note)
            self.recovery_notes.append(note)
            handle.truncate(0)
            handle.write_at(0, SEGMENT_HEADER)
            crashpoint("queue.recover.before-fsync")
            handle.fsync()
            head = codec.WRITER_MAGIC
        if head != codec.WRITER_MAGIC:
            raise FormatError(newest.path, 0, "writer journal magic 27 64 26 03", head.hex(" ") or "an empty file")
        previous_first = max((s.first_id for s in self._segments[:-1] if s.first_id is not None), default=0)
        scan = scan_file(handle, newest.path, self.max_item_size, after_id=previous_first)
        if scan.valid_after is not None:
            # Checksummed data after the damage: not a torn tail.  Cutting would drop
            # acknowledged items; `engine queue repair` is the explicit way out.
            raise scan.mid_file_error(newest.path)
        if scan.good_end < scan.size:
            cut = scan.size - scan.good_end
            note = f"{newest.path}: torn tail cut off at offset {scan.good_end} ({cut} bytes): {scan.problem}"
            log.warning("queue %s: %s", name, note)
            self.torn_tail_bytes += cut
            self.recovery_notes.append(note)
            handle.truncate(scan.good_end)
            crashpoint("queue.recover.before-fsync")
            handle.fsync()
        newest.first_id = newest.first_id if scan.count else None
        if scan.last_id is not None:
            self._tail = scan.last_id
        else:
            self._tail = find_tail(fs, self._segments[:-1], self.max_item_size)
        files = reader_files(fs, directory, name)
        # Every id any reader checkpoint mentions (head and done ids) is burnt: the
        # next id must be above all of them.  Otherwise a reader that saw and
        # confirmed an item whose bytes a power loss then took back (a reader in
        # another process reads what is in the file, synced or not) would treat the
        # NEW item that reuses the id as already done: an acknowledged put lost.
        # (This also keeps ids increasing when every item was deleted.)
        #
        # But only ids a crash could really have taken back: at most the newest
        # file's worth past the tail that survived (``checkpoint.crash_window``).
        # An id further out is a damaged reader file (one flipped bit can make it
        # 2**60): it raises CorruptFileError instead of making the writer skip that
        # many ids; `engine queue repair` drops it.
        mentioned = 0
        window = checkpoint.crash_window(self.config.journal_size)
        for path in files.values():  # also: fail now, not later, on a corrupt reader file
            reader_head, done = checkpoint.load_reader_file(fs, path)
            top = checkpoint.check_ids_in_window(fs, path, reader_head, done, self._tail, window)
            mentioned = max(mentioned, top)
        self._written_end = self._durable_end = self._visible_end = scan.good_end
        if mentioned > self._tail:
            if earliest_id(self._segments) is not None:
                note = (
                    f"reader checkpoints mention ids up to {mentioned}, past the journal tail {self._tail} "
                    f"(items lost before they were durable): the next id is {mentioned + 1}"
                )
                log.warning("queue %s: %s", name, note)
                self.recovery_notes.append(note)
                self.skipped_ids = (self._tail + 1, mentioned)
            self._tail = mentioned
            if newest.first_id is not None:
                # Ids are contiguous within a file: the jump goes between two files.
                self._rotate()
        if not files:
            # A queue always has at least the default reader, so items are kept.
            start = earliest_id(self._segments)
            first_head = self._tail if start is None else start - 1
            checkpoint.write_reader_file(
                fs, naming.join(directory, naming.reader_name(name, "")), first_head, (), self._now_ms()
            )

    def _create_segment(self) -> Segment:
        number = self._now_ms()
        if self._segments:
            number = max(number, self._segments[-1].number + 1)
        while self.fs.exists(naming.join(self.directory, naming.writer_name(self.name, number))):
            number += 1
        path = naming.join(self.directory, naming.writer_name(self.name, number))
        # create_file fsyncs the magic and then the directory: the name never points
        # at a file without its header.
        create_file(self.fs, path, SEGMENT_HEADER).close()
        return Segment(number, path, None)

    def _start_threads(self) -> None:
        if self._policy.mode == "always":
            self._gc = GroupCommit(self._sync_journal, delay=self.config.group_commit_delay, name=self.name)
        elif self._policy.mode == "periodic":
            self._periodic = PeriodicSync(
                self._sync_journal,
                self._policy.period,
                dirty=lambda: self._durable_end < self._written_end or bool(self._buffer),
                name=f"queue-{self.name}-sync",
            )
        else:
            # sync="never": no fsync, but staged puts reach the file (and readers in
            # other processes) within 50 ms.
            self._periodic = PeriodicSync(
                self._flush, 0.05, dirty=lambda: bool(self._buffer), name=f"queue-{self.name}-flush"
            )
        self._checkpointer = threading.Thread(
            target=self._checkpoint_loop, name=f"queue-{self.name}-checkpoint", daemon=True
        )
        self._checkpointer.start()

    def _abandon(self) -> None:
        if self._handle is not None:
            self._handle.close()
        if self._writer_lock is not None:
            self._writer_lock.close()

    # -- the JournalSource interface for in-process readers -------------------------
    def segment_list(self, *, fresh: bool = False) -> list[Segment]:
        with self._lock:
            return list(self._segments)

    def readable_end(self, segment: Segment, handle: FileHandle) -> tuple[int, bool]:
        with self._lock:
            if self._segments and segment.number == self._segments[-1].number:
                if self._buffer and not self._policy.always and not self._closed:
                    self._flush_locked()  # a reader caught up: hand it the staged puts
                return self._visible_end, True
        return handle.size(), False

    @property
    def version(self) -> int:
        return self._version

    def wait(self, version: int, timeout: float | None) -> None:
        with self._cond:
            if self._version == version and not self._closed:
                self._waiters += 1
                try:
                    self._cond.wait(timeout)
                finally:
                    self._waiters -= 1

    def notify(self) -> None:
        with self._cond:
            self._version += 1
            self._cond.notify_all()

    # -- writing -------------------------------------------------------------------
    #
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
            raise self._poisoned
        if self._handle is not None and self._handle.poisoned:
            raise PoisonedError(self._handle.path)

    def _flush_locked(self) -> None:
        """Write the staged records and their CHECK (caller holds ``_lock``)."""
        if not self._buffer:
            return
        assert self._handle is not None
        records = b"".join(self._buffer)
        self._buffer.clear()
        self._buffer_bytes = 0
        # One CHECK per write (ours): recovery can tell a whole batch from a torn one.
        blob = records + codec.encode_check(records)
        offset = self._handle.append(blob)
        self._written_end = offset + len(blob)
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

    def _sync_journal(self) -> None:
        """Flush, fdatasync the newest file; then its synced bytes become visible."""
        with self._lock:
            self._flush_locked()
            handle, end = self._handle, self._written_end
        assert handle is not None
        with self._sync_lock:
            # A rotated-out handle was fsynced whole and closed by _rotate.
            if not handle.closed:
                crashpoint("queue.put.before-fsync")
                handle.fdatasync()
                crashpoint("queue.put.after-fsync")
        with self._lock:
            if handle is self._handle and end > self._durable_end:
                self._durable_end = end
                if self._policy.always:
                    self._visible_end = end
        self.notify()

    def _rotate(self) -> None:
        """Start a new writer file (caller holds ``_lock``; the buffer is flushed)."""
        old = self._handle
        assert old is not None and not self._buffer
        with self._sync_lock:
            # The old file is complete and durable before the next one exists, so a
            # reader that sees the new file knows the old one will not grow.
            # (A failed fsync here poisons ``old``, which stays the writer file.)
            crashpoint("queue.rotate.before-fsync")
            old.fsync()
            old.close()
        try:
            segment = self._create_segment()
            crashpoint("queue.rotate.after-create")
            handle = self.fs.open(segment.path, OpenMode.WRITE)
        except BaseException as exc:
            # The old file is closed and the new one may or may not be on disk (its
            # create fsync failed, say): no write may go anywhere until a reopen
            # lets recovery decide what the files hold.
            self._poisoned = PoisonedError(old.path, exc)
            raise
        self._segments.append(segment)
        self._handle = handle
        self._written_end = self._durable_end = self._visible_end = len(SEGMENT_HEADER)

    def _make_room(self, adding: int, nbytes: int) -> None:
        """Enforce max_items / max_size for the in-process readers."""
        cfg = self.config
        if cfg.max_items is None and cfg.max_size is None:
            return
        for reader in list(self._readers.values()):
            while True:
                pending = len(reader)
                over_items = cfg.max_items is not None and pending + adding > cfg.max_items
                over_size = cfg.max_size is not None and self._pending_bytes(reader) + nbytes > cfg.max_size
                if not (over_items or over_size):
                    break
                if not cfg.discard_old_when_full or pending == 0 or not reader.discard_oldest():
                    raise FullError(f"queue {self.name!r} is full for reader {reader.name!r} ({pending} items)")

    def _pending_bytes(self, reader: Reader) -> int:
        """Journal bytes from the reader's position to the tail (an estimate: it
        counts record overhead, and items out-of-order confirmed ahead)."""
        path, offset = reader._cursor.position()
        total = self._buffer_bytes + reader._cursor.ready_bytes
        counting = path is None
        for seg in self._segments:
            size = self._written_end if seg is self._segments[-1] else self.fs.file_size(seg.path)
            if seg.path == path:
                counting = True
                total += max(0, size - offset)
            elif counting:
                total += size - len(SEGMENT_HEADER)
        return total

    def put(self, data: bytes, *, expire_at: float | None = None) -> int:
        """Add an item; returns its id.  ``expire_at``: seconds since the epoch.

        With sync="always" the call returns once the item is durable.
        """
        if not self._fast:
            return self._put_batch([(data, expire_at)])[0]
        # The buffered fast path (sync periodic/never, no size limits): stage one
        # record under the lock; no system call unless the buffer is full.
        if len(data) > self.max_item_size:
            raise ConfigError(f"item of {len(data)} bytes exceeds max_item_size {self.max_item_size}")
        with self._lock:
            handle = self._handle
            assert handle is not None
            if self._closed or self._poisoned is not None or handle.poisoned or self._periodic_failed():
                self._check_usable()
            xid = self._tail + 1
            now = int(self._clock() * 1000)
            if expire_at is None:
                record = _PUT6(codec.PUT_BYTE, len(data), 0, xid, now) + data
            else:
                record = _PUT8(codec.PUT_BYTE_EXPIRY, len(data), 0, xid, now, int(expire_at * 1000)) + data
            if self._written_end + self._buffer_bytes + len(record) > self._journal_size and (
                self._written_end + self._buffer_bytes > len(SEGMENT_HEADER)
            ):
                self._flush_locked()
                self._rotate()
            self._buffer.append(record)
            self._buffer_bytes += len(record)
            self._tail = xid
            newest = self._segments[-1]
            if newest.first_id is None:
                newest.first_id = xid
            if self._buffer_bytes >= _BUFFER_LIMIT:
                self._flush_locked()
        if self._waiters:
            self.notify()
        return xid

    def _periodic_failed(self) -> bool:
        return self._periodic is not None and self._periodic.failure is not None

    def put_many(self, items: Iterable[bytes | tuple[bytes, float | None]]) -> list[int]:
        """Add several items with one write and (sync="always") one fsync."""
        batch = [(item, None) if isinstance(item, (bytes, bytearray, memoryview)) else item for item in items]
        return self._put_batch([(bytes(d), e) for d, e in batch])

    def _put_batch(self, batch: list[tuple[bytes, float | None]], *, error_count: int = 0) -> list[int]:
        if not batch:
            return []
        for data, _ in batch:
            if len(data) > self.max_item_size:
                raise ConfigError(f"item of {len(data)} bytes exceeds max_item_size {self.max_item_size}")
        ticket = 0
        # Limits are checked before taking the writer lock (readers take their own
        # lock first and then ours; the other order could deadlock).  Under
        # concurrent puts they are therefore approximate by a few items.
        self._make_room(len(batch), sum(len(d) for d, _ in batch))
        with self._lock:
            self._check_usable()
            now = self._now_ms()
            ids: list[int] = []
            for data, expire_at in batch:
                xid = self._tail + 1
                expire = None if expire_at is None else int(expire_at * 1000)
                record = codec.encode_put(xid, now, data, expire_time=expire, error_count=error_count)
                logical_end = self._written_end + self._buffer_bytes
                if logical_end + len(record) > self._journal_size and logical_end > len(SEGMENT_HEADER):
                    self._flush_locked()
                    self._rotate()
                self._buffer.append(record)
                self._buffer_bytes += len(record)
                self._tail = xid
                newest = self._segments[-1]
                if newest.first_id is None:
                    newest.first_id = xid
                ids.append(xid)
            if self._gc is not None or self._buffer_bytes >= _BUFFER_LIMIT:
                self._flush_locked()
            if self._gc is not None:
                ticket = self._gc.ticket()
        if self._gc is not None:
            self._gc.wait(ticket)
        elif self._waiters:
            self.notify()
        return ids

    # -- readers -------------------------------------------------------------------
    def reader(self, name: str = "") -> Reader:
        """The reader ``name`` of this queue in this process (created if new)."""
        with self._lock:
            self._check_usable()
            existing = self._readers.get(name)
            if existing is not None and not existing.closed:
                return existing
            tail = self._tail
            earliest = earliest_id(self._segments)
        lock, state, notes = attach_reader(
            self.fs, self.directory, self.name, name, tail=tail, earliest=earliest, stamp_ms=self._now_ms()
        )
        if self.skipped_ids is not None and state.head < self.skipped_ids[1]:
            # Those ids will never be delivered: count them done, so that len() and
            # max_items do not wait for them.
            before = state.snapshot()
            state.skip_missing(max(self.skipped_ids[0], state.head + 1), self.skipped_ids[1])
            if state.snapshot() != before:
                notes = [*notes, f"ids {self.skipped_ids[0]}..{self.skipped_ids[1]} were lost in a crash: skipped"]
        for note in notes:
            log.warning("queue %s reader %r: %s", self.name, name, note)
            self.recovery_notes.append(f"reader {name!r}: {note}")
        reader = Reader(
            name=name,
            queue=self.name,
            directory=self.directory,
            fs=self.fs,
            source=self,
            state=state,
            config=self.config,
            lock_handle=lock,
            clock=self._clock,
            punt=self._punt,
            tail=lambda: self._tail,
        )
        if notes:
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
        lock = _lock_file(
            self.fs, naming.join(self.directory, naming.reader_lock_name(self.name, name)), f"reader {name!r}"
        )
        try:
            path = naming.join(self.directory, naming.reader_name(self.name, name))
            if self.fs.exists(path):
                self.fs.unlink(path)
                crashpoint("queue.remove-reader.before-dir-fsync")
                self.fs.fsync_dir(self.directory)
        finally:
            lock.close()
        self.retire_files()

    def _punt(self, target: str, item: Item) -> None:
        """Move ``item`` to queue ``target`` of the same directory (error / expired)."""
        if target == self.name:
            raise ConfigError("an item cannot be moved to its own queue")
        with self._lock:
            other = self._punt_queues.get(target)
        if other is None:
            other = Queue.open(self.directory, target, fs=self.fs, clock=self._clock, sync=self.config.sync)
            with self._lock:
                self._punt_queues[target] = other
        expire = None if item.expire_time is None else item.expire_time / 1000
        other._put_batch([(item.data, expire)], error_count=item.error_count)

    # -- checkpoints and file retirement -------------------------------------------
    def checkpoint(self) -> None:
        """Write every changed reader file, then delete journal files all readers passed."""
        self._check_usable()
        for reader in list(self._readers.values()):
            if not reader.closed:
                reader.checkpoint()
        self.retire_files()

    def _checkpoint_loop(self) -> None:
        while not self._stop.wait(self.config.checkpoint_interval):
            try:
                for reader in list(self._readers.values()):
                    if not reader.closed:
                        reader.checkpoint()
                self.retire_files()
            except EngineError as exc:
                self.checkpoint_failure = exc
                log.error("queue %s: background checkpoint failed: %s", self.name, exc)
                return
            except OSError as exc:
                self.checkpoint_failure = exc
                log.error("queue %s: background checkpoint failed: %s", self.name, exc)
                return

    def _durable_heads(self) -> list[int] | None:
        """Each reader's head as on disk (in-process readers: as last checkpointed).

        None when the reader files cannot be trusted this round, and nothing may be
        retired: a reader is being created (it holds its lock, its file is not
        written yet), or a reader file vanished or appeared while we read them (a
        named reader taking over the default one writes its file, then deletes the
        default's: reading the old name after the delete must not make its backlog
        look unheld).  The next checkpoint round tries again.
        """
        fs, directory, queue = self.fs, self.directory, self.name
        listing = fs.listdir(directory)
        files = {}
        for filename in listing:
            reader = naming.parse_reader(queue, filename)
            if reader is not None:
                files[reader] = naming.join(directory, filename)
        heads = []
        for reader, path in files.items():
            live = self._readers.get(reader)
            if live is not None and not live.closed:
                heads.append(live.durable_head)
                continue
            try:
                heads.append(checkpoint.load_reader_file(fs, path)[0])
            except FileNotFoundError:
                return None  # removed or renamed meanwhile
        # After the loads: a reader that took its lock before this point and has not
        # written its file yet could start below the heads just read.
        creating = reader_being_created(fs, directory, queue, listing)
        if creating is not None:
            log.info("queue %s: reader %r is being created: no file retired this round", queue, creating)
            return None
        if set(reader_files(fs, directory, queue)) != set(files):
            return None  # a reader file appeared or went while we read them
        return heads

    def retire_files(self) -> list[str]:
        """Delete (or archive) writer files whose items every reader has passed."""
        with self._retire_lock:  # the checkpoint thread and callers may race here
            return self._retire_files()

    def _retire_files(self) -> list[str]:
        heads = self._durable_heads()
        if heads is None:
            return []
        with self._lock:
            if self._closed and self._handle is None:
                return []
            segments = list(self._segments)
            tail = self._tail
        floor = min(heads) if heads else tail
        doomed: list[Segment] = []
        for index, seg in enumerate(segments[:-1]):  # the newest file is never deleted
            later = [s.first_id for s in segments[index + 1 :] if s.first_id is not None]
            last_id = (later[0] - 1) if later else tail
            if last_id <= floor:
                doomed.append(seg)
            else:
                break
        if not doomed:
            return []
        archive = self.config.archive_dir
        if archive is not None:
            make_dirs(self.fs, archive)
        for seg in doomed:
            if archive is not None:
                self.fs.rename(seg.path, naming.join(archive, seg.path.rsplit("/", 1)[-1]))
            else:
                self.fs.unlink(seg.path)
        crashpoint("queue.retire.before-dir-fsync")
        self.fs.fsync_dir(self.directory)
        if archive is not None:
            self.fs.fsync_dir(archive)
        crashpoint("queue.retire.after-dir-fsync")
        gone = {seg.number for seg in doomed}
        with self._lock:
            self._segments = [s for s in self._segments if s.number not in gone]
        paths = [seg.path for seg in doomed]
        self.deleted_files.extend(paths)
        return paths

    # -- introspection -------------------------------------------------------------
    @property
    def tail_id(self) -> int:
        """The id of the last item put."""
        return self._tail

    @property
    def journal_files(self) -> list[str]:
        with self._lock:
            return [seg.path for seg in self._segments]

    def journal_bytes(self) -> int:
        """Bytes of writer files on disk (and staged for the newest)."""
        with self._lock:
            segments = list(self._segments)
            written = self._written_end + self._buffer_bytes
        return sum(written if seg is segments[-1] else self.fs.file_size(seg.path) for seg in segments)

    def stats(self) -> dict[str, object]:
        """Queue-level figures and one entry per reader on disk."""
        from engine.queue.diagnose import disk_reader_stats

        readers: list[dict[str, object]] = []
        for name in self.reader_names():
            live = self._readers.get(name)
            if live is not None and not live.closed:
                entry = live.stats()
                entry["bytes"] = self._pending_bytes(live)
                readers.append(entry)
            else:
                readers.append(
                    disk_reader_stats(
                        self.fs, self.directory, self.name, name, self._tail, self.max_item_size, self._clock
                    )
                )
        return {
            "queue": self.name,
            "tail_id": self._tail,
            "journal_files": len(self._segments),
            "journal_bytes": self.journal_bytes(),
            "readers": readers,
        }

    def verify(self) -> list[str]:
        """Check every invariant; raises CorruptFileError/EngineError, returns notes."""
        from engine.queue.diagnose import verify_queue

        with self._lock:
            self._check_usable()
            self._flush_locked()  # staged puts count in the tail: put them in the file
            tail = self._tail
        notes = verify_queue(
            self.fs,
            self.directory,
            self.name,
            self.max_item_size,
            live_tail=tail,
            live_end=self._written_end,
            burnt_to=0 if self.skipped_ids is None else self.skipped_ids[1],
            journal_size=self.config.journal_size,
        )
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
        self._stop.set()
        if self._checkpointer is not None and self._checkpointer is not threading.current_thread():
            self._checkpointer.join()
        if self._periodic is not None:
            self._periodic.stop()
        failure: BaseException | None = None
        try:
            # A poisoned handle already reported its failure: nothing more to sync.
            if self._handle is not None and not self._handle.poisoned:
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
            if self._handle is not None:
                self._handle.close()
        for reader in leftover:  # outside our lock: readers take theirs first
            reader.close(checkpoint_first=False)
        for other in self._punt_queues.values():
            other.close()
        self.notify()
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
    ) -> Reader:
        """Open reader ``reader`` of queue ``name`` from a process that is not the writer.

        It polls the writer files every ``poll_interval`` seconds for new data and
        checkpoints its own file every ``checkpoint_interval`` (and on close).
        """
        from engine.queue.remote import open_remote_reader

        return open_remote_reader(
            directory, name, reader, fs=resolve(fs), clock=clock, config=QueueConfig.from_kwargs(**config)
        )


__all__ = ["Item", "PollingSource", "Queue", "Reader", "attach_reader"]
