"""One process's producer side of a queue: staging, the append lock, writes,
rotation and the group commit (the protocol is :mod:`engine.queue.shared`'s).

Every put, alone or with other producers in this or other processes, takes the
same steps: :meth:`JournalWriter.put` stages its records (encoded by the codec,
ids ``tail + 1 ...``) under the append lock, writes them with one CHECK when the
sync policy says (at once with ``sync="always"``; in the buffered modes when
64 KiB are staged, at the driver's tick, or when a reader in this process has
caught up), and with ``sync="always"`` waits for the group commit.  Nobody
else there is the uncontended case of that path: the append lock is then never
asked for (nobody knocks), so a producer keeps it from one write to the next
until its next fsync, and the group commit's leader is always this process.

The sync policy is driven by the store core's :class:`~engine.fs.core.SyncDriver`:
``always`` has no thread (puts wait for this group commit, shared by threads
and processes); a period, and ``never``, have one thread that writes what is
staged (:meth:`JournalWriter.flush`) every :data:`~engine.fs.core.TICK` seconds
at most and, for a period, fsyncs once per period (:meth:`JournalWriter.sync`)
through the same group commit.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from engine.errors import ClosedError, ConfigError, PoisonedError
from engine.fs import FileHandle, FileSystem, HeldLock, OpenMode, RecoveryReport, SyncPolicy, crashpoint
from engine.fs.latch import FailureLatch
from engine.native import kernel
from engine.queue import codec, naming
from engine.queue.cursor import WakeUps
from engine.queue.recover import Recovered, resync
from engine.queue.segments import SEGMENT_HEADER, Segment, create_segment, encode_check, list_segments
from engine.queue.shared import Facts, SharedState, SharedView, last_to_leave, yield_cpu

#: The PUT encoder of every put: the compiled twin of :func:`codec.encode_put` when
#: it is built (``engine/queue/_native.c``), chosen once per process; the function
#: itself otherwise, and always with ``ENGINE_PURE_PYTHON=1``.
encode_put = kernel("queue.encode_put") or codec.encode_put

log = logging.getLogger("engine.queue")

#: Staged bytes that trigger a write in the buffered sync modes.
BUFFER_LIMIT = 64 * 1024
_HEADER_SIZE = len(SEGMENT_HEADER)


def _largest(batch: list[tuple[bytes, int | None]]) -> int:
    """The largest payload of ``batch``."""
    return max(map(len, [data for data, _ in batch]))


def _payload_bytes(batch: list[tuple[bytes, int | None]]) -> int:
    """The payload bytes of ``batch``."""
    return sum(map(len, [data for data, _ in batch]))


def _too_big(batch: list[tuple[bytes, int | None]], limit: int) -> ConfigError:
    """The error for a batch holding an item over ``limit`` bytes (the first one)."""
    big = next(len(data) for data, _ in batch if len(data) > limit)
    return ConfigError(f"item of {big} bytes exceeds max_item_size {limit}")


class JournalWriter:
    """The producer protocol of one process (see the module docstring).

    Thread-safe.  ``_lock`` guards this process's view (the newest file, its
    end, the tail, the staged records, whether it holds the append lock);
    ``_handle_lock`` serializes an fsync of a writer file with its close at a
    rotation; ``_lead_lock`` makes one thread of this process at a time the
    group commit's leader.
    """

    # Slots: every put reads a dozen of these (an instance dict of more than 30
    # keys loses CPython's fast attribute path).
    __slots__ = (
        "_always",
        "_buffer",
        "_buffer_bytes",
        "_buffer_first",
        "_clock",
        "_closed",
        "_delay",
        "_end_l",
        "_foreign_lead",
        "_handle",
        "_handle_lock",
        "_held",
        "_in_flight",
        "_journal_size",
        "_knock_seen",
        "_latch",
        "_lead_lock",
        "_lock",
        "_max_item_size",
        "_seen_gen",
        "_segment_start_l",
        "_segments",
        "_state",
        "_tail",
        "_written_end",
        "_written_l",
        "directory",
        "fs",
        "make_room",
        "name",
        "policy",
        "readers",
        "recovery",
    )

    def __init__(
        self,
        fs: FileSystem,
        directory: str,
        name: str,
        *,
        journal_size: int,
        max_item_size: int,
        policy: SyncPolicy,
        group_commit_delay: float,
        clock: Callable[[], float],
        state: SharedState,
        start: Recovered,
        report: RecoveryReport,
        latch: FailureLatch,
    ) -> None:
        self.fs = fs
        self.directory = directory
        self.name = name
        self.policy = policy
        self._always = policy.mode == "always"
        self.recovery = report
        self._journal_size = journal_size
        self._delay = group_commit_delay
        self._clock = clock
        self._state = state
        self._lock = threading.RLock()
        self._handle_lock = threading.Lock()
        self._lead_lock = threading.Lock()
        self._latch = latch  # the store core's: a failure here stops the queue's writes
        self._closed = False
        self._segments: list[Segment] = start.segments
        self._handle: FileHandle = start.handle
        self._tail = start.tail
        self._written_end = start.end  # where the newest file's records end (this process's view)
        self._written_l = 0  # logical end of everything appended (see shared.py), as last known
        self._segment_start_l = 0  # logical position of the newest file's first record
        self._end_l = 0  # logical end of this process's last write
        self._buffer: list[bytes] = []
        self._buffer_bytes = 0
        self._buffer_first: int | None = None  # id of the first staged record
        self._held = False  # this process holds the append lock
        # Durable puts of this process between their write and their return, one
        # entry each: appended under ``_lock``, popped without it (list appends and
        # pops are atomic), so a put's end takes the lock only to let go.
        self._in_flight: list[None] = []
        self._foreign_lead = False  # another producer led the group commit when last looked (_sync_to)
        self._knock_seen = 0  # ``knock`` when the lock was taken
        self._seen_gen = 0  # the record's gen as this process last wrote or read it
        #: The readers of this process's wake-ups (their source): woken after a put.
        self.readers: WakeUps = WakeUps()
        #: ``max_items`` / ``max_size`` (the queue's, when it has them): called with the
        #: items and bytes of a put before it is staged; raises FullError.
        self.make_room: Callable[[int, int], None] | None = None
        self._max_item_size = max_item_size

    # -- what the queue asks -----------------------------------------------------------
    @property
    def tail(self) -> int:
        """The last id this process assigned or learnt of."""
        return self._tail

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def failed(self) -> bool:
        """Whether a failure stopped writes (until a reopen)."""
        return self._latch.tripped or self._handle.poisoned

    @property
    def staged(self) -> bool:
        """Whether puts are staged (not written to the file yet)."""
        return bool(self._buffer)

    @property
    def staged_bytes(self) -> int:
        return self._buffer_bytes

    @property
    def written_position(self) -> int:
        """The logical end of everything appended, as this process knows it."""
        return self._written_l

    def check_usable(self) -> None:
        """Raise ClosedError once closed, or the failure that stopped writes."""
        if self._closed:
            raise ClosedError(f"queue {self.name!r} is closed")
        self._latch.check()
        if self._handle.poisoned:
            raise PoisonedError(self._handle.path)

    def current_tail(self) -> int:
        """The last id put by any producer, as the state record says now."""
        if self._held or self._closed:
            return self._tail  # nobody else writes meanwhile
        view = self._state.read(tries=3)
        return self._tail if view is None else max(view.tail, self._tail)

    def newest_number(self) -> int:
        """The newest writer file's number as the producers last published it
        (0: unknown); a reader here uses it to know its file is still the newest
        without listing the directory."""
        return self._state.newest()

    def segments(self) -> list[Segment]:
        """This process's view of the writer files (the newest one as of its last
        take of the append lock)."""
        with self._lock:
            return list(self._segments)

    def newest_end(self) -> int:
        """Where the newest file's records end, staged puts not counted."""
        return self._written_end

    def forget_files(self, paths: set[str]) -> None:
        """Writer files retired (deleted or archived) by any producer: no longer
        in this process's view (the newest one always stays)."""
        with self._lock:
            kept = [seg for seg in self._segments[:-1] if seg.path not in paths]
            self._segments = kept + self._segments[-1:]

    # -- putting ------------------------------------------------------------------------
    def put(self, batch: list[tuple[bytes, int | None]], error_count: int) -> int:
        """Stage ``batch`` (payload, expiry in ms) with the next ids and return
        the first (the others follow it); with ``sync="always"`` once they are durable, in the buffered modes
        once staged (written within :data:`~engine.fs.core.TICK`, or at once past
        :data:`BUFFER_LIMIT`).  The one path of every put, of one item or many
        (``Queue.put``, ``put_many``, an item moved from another queue), kept flat:
        its steps are the cost of every put."""
        # (No generator expression here: one would make a closure cell per put.)
        if len(batch[0][0]) > self._max_item_size or (len(batch) > 1 and _largest(batch) > self._max_item_size):
            raise _too_big(batch, self._max_item_size)
        if self.make_room is not None:
            self.make_room(len(batch), _payload_bytes(batch))
        lock = self._lock
        lock.acquire()  # (not ``with``: that builds two bound methods per put)
        try:
            if self._closed or self._latch.failure is not None:  # (every failure of the file trips it)
                self.check_usable()
            if not self._held:
                self._acquire()  # and the newest file, its end and the tail as of now
            first = self._tail + 1
            try:
                now = int(self._clock() * 1000)
                if len(batch) == 1:  # (one call of the encoder, no comprehension frame)
                    data, expire = batch[0]
                    records = [encode_put(first, now, data, expire, error_count)]
                else:
                    records = [encode_put(x, now, d, e, error_count) for x, (d, e) in enumerate(batch, first)]
            except BaseException:
                if not self._buffer:
                    self._release()
                raise
            size = len(records[0]) if len(records) == 1 else sum(map(len, records))
            if self._written_end + self._buffer_bytes + size <= self._journal_size and self._buffer:
                self._buffer.extend(records)  # the common case: more for a write to come
                self._buffer_bytes += size
                self._tail = first + len(records) - 1
            else:
                self._stage_records(records, first)
            if self._always or self._buffer_bytes >= BUFFER_LIMIT:
                self._write_staged()
                if self._state.knock_value() != self._knock_seen:
                    self._release()  # another producer asked for the append lock
            target = self._end_l
            if self._always:
                self._in_flight.append(None)
        finally:
            lock.release()
        if self._always:
            try:
                self._sync_to(target)
            finally:
                self._put_done()
        elif self.readers.waiters:
            self.readers.notify()  # (after a write, it woke them itself)
        return first

    def _put_done(self) -> None:
        """After a durable put: the last of this process's durable puts in flight
        lets the append lock go.  Another thread's put may have taken it after the
        leader wrote and been covered by that leader's fsync (which counted its
        bytes) without leading one itself; held then, with no write to come, nobody
        would let it go and a producer waiting for it would wait for ever
        (``sync="always"`` has no background thread to flush).  While other puts of
        this process are in flight it stays: one of them leads the next fsync,
        which lets it go (``_lead``), so threads putting together take it once per
        fsync, not once per put."""
        in_flight = self._in_flight
        in_flight.pop()
        if self._held and not in_flight:  # (looked at again under the lock: a put may start meanwhile)
            lock = self._lock
            lock.acquire()
            try:
                if not in_flight:
                    self.flush_locked()
            finally:
                lock.release()

    def _let_go(self) -> None:
        """Let the append lock go (what is staged written first)."""
        lock = self._lock
        lock.acquire()
        try:
            self.flush_locked()
        finally:
            lock.release()

    def _release_if_knocked(self) -> None:
        """After a write: let the append lock go if another producer asked for it
        since this process took it (a look at a shared word)."""
        if self._held and self._state.knock_value() != self._knock_seen:
            self._release()

    def _stage_records(self, records: list[bytes], first: int) -> None:
        """Stage ``records`` (ids ``first ...``), starting a new writer file
        before a record that would not fit in this one (``_lock`` and the append
        lock held)."""
        size = sum(map(len, records))
        if self._written_end + self._buffer_bytes + size <= self._journal_size:
            if self._buffer_first is None:
                self._buffer_first = first
            self._buffer += records
            self._buffer_bytes += size
        else:
            for xid, record in enumerate(records, first):
                end = self._written_end + self._buffer_bytes
                if end + len(record) > self._journal_size and end > _HEADER_SIZE:
                    self._write_staged()
                    self._rotate()
                if self._buffer_first is None:
                    self._buffer_first = xid
                self._buffer.append(record)
                self._buffer_bytes += len(record)
        self._tail = first + len(records) - 1

    def _write_staged(self) -> None:
        """Write the staged records and their CHECK at the newest file's end
        (``_lock`` and the append lock held)."""
        if not self._buffer:
            return
        records = self._buffer[0] if len(self._buffer) == 1 else b"".join(self._buffer)
        first = self._buffer_first
        self._buffer = []
        self._buffer_bytes = 0
        self._buffer_first = None
        # One CHECK per write: recovery can tell a whole batch from a torn one.
        blob = records + encode_check(records)
        offset = self._written_end
        try:
            self._handle.write_at(offset, blob)
        except BaseException as exc:
            self._latch.trip(exc, self._handle.path, "write")  # (the handle's own error goes up)
            raise
        newest = self._segments[-1]
        if newest.first_id is None:
            newest.first_id = first  # only once written: files are retired on the strength of it
        self._written_end = offset + len(blob)
        self._written_l += len(blob)
        self._end_l = self._written_l
        self._state.set_written(self._written_l)
        if self.readers.waiters:
            self.readers.notify()

    def flush(self) -> None:
        """Write what is staged and let the append lock go."""
        with self._lock:
            if self._held:
                try:
                    self._write_staged()
                finally:
                    self._release()

    # -- opening ------------------------------------------------------------------------
    def start(self, alone: bool, start: Recovered) -> None:
        """Right after the open, which took the append lock: the first producer
        (``alone``) publishes the record afresh, records the durable facts
        (clearing "closed": whatever follows in the newest file is written by this
        engine now), starts a file of its own if the newest one is not, and burns
        the ids the reader checkpoints mention beyond the files; a producer
        joining others takes the record.  Then the append lock goes."""
        state = self._state
        self._held = True
        self._knock_seen = state.knock_value()
        try:
            if alone:
                state.reset_group_commit()
                # (A newest file cut back inside its header, magic and EMPTY_CHECK, by
                # recovery of a damaged one holds nothing of this engine's: it is
                # rotated away below, never appended to.)
                self._written_l = max(0, self._written_end - _HEADER_SIZE)
                self._segment_start_l = 0
                state.set_written(self._written_l)
                state.write_facts(Facts(self._segments[-1].number))
                state.set_newest(self._segments[-1].number)
                self._publish(held=True)
                if start.rotate:
                    self._rotate()  # never appended to a file this engine did not write
                if start.burnt is not None:
                    self._stage_burnt(*start.burnt)
            else:
                self._take_view()
        except BaseException:
            self._held = False
            state.unlock()
            raise
        self._release()
        if start.burnt is not None:
            self._sync_to(self._end_l)

    def _stage_burnt(self, low: int, high: int) -> None:
        """Write a BURNT record for each id ``low..high`` (``_lock`` and the append
        lock held): ids reader checkpoints mention but the journal lost in a
        crash, so that the next item gets ``high + 1`` and the ids stay
        contiguous (libkestrel's reader stops at a gap)."""
        step = max(1, BUFFER_LIMIT // codec.BURNT_SIZE)
        for first in range(low, high + 1, step):
            last = min(high, first + step - 1)
            self._stage_records([codec.encode_burnt(xid) for xid in range(first, last + 1)], first)
            self._write_staged()

    @contextmanager
    def holding(self) -> Iterator[None]:
        """Hold the append lock (what is staged written first) for the block: no
        producer writes meanwhile (``verify``)."""
        with self._lock:
            if not self._held:
                self._acquire()
            try:
                self._write_staged()
                yield
            finally:
                self._release()

    # -- the append lock ------------------------------------------------------------------
    def _acquire(self) -> None:
        """Take the append lock (``_lock`` held) and bring this process's view of
        the newest file up to date; mark the record held."""
        state = self._state
        state.lock()
        self._held = True
        try:
            self._knock_seen = state.knock_value()
            self._take_view()
        except BaseException:
            self._held = False
            state.unlock()
            raise

    def _take_view(self) -> None:
        """With the append lock just taken: the record's view of the files, or
        the files themselves when it cannot be trusted; then mark it held."""
        view = self._state.read()
        if view is None or view.held:
            # No record (or a damaged one), or the lock was left by a producer
            # that died holding it (in a write or a rotation): re-read the files.
            self._resync(view)
        elif view.gen != self._seen_gen and not self._adopt(view):
            self._resync(view)
        self._publish(held=True)

    def _release(self) -> None:
        """Store the record (no longer held) and let the append lock go."""
        if not self._held:
            return
        try:
            self._publish(held=False)
        finally:
            self._held = False
            self._state.unlock()

    def _publish(self, *, held: bool) -> None:
        newest = self._segments[-1]
        view = SharedView(
            self._seen_gen + 1,
            held,
            newest.number,
            self._written_end,
            self._tail,
            newest.first_id,
            self._written_l,
            self._segment_start_l,
        )
        self._state.write(view)
        self._seen_gen = view.gen

    def _adopt(self, view: SharedView) -> bool:
        """Take the newest file, its end and the tail from another producer's
        record; False when the files are not as it says (the caller re-reads them)."""
        if view.segment != self._segments[-1].number:
            segments = list_segments(self.fs, self.directory, self.name, known=self._segments)
            if not segments or segments[-1].number != view.segment:
                return False
            self._swap_handle(self.fs.open(segments[-1].path, OpenMode.WRITE))
            self._segments = segments
        self._segments[-1].first_id = view.first_id
        self._written_end = view.end
        self._tail = max(self._tail, view.tail)
        self._written_l, self._segment_start_l = view.written, view.segment_start
        self._seen_gen = view.gen
        return True

    def _swap_handle(self, handle: FileHandle) -> None:
        """Make ``handle`` the writer file's (an fsync of the old one may be running)."""
        old, self._handle = self._handle, handle
        if old is not handle:
            with self._handle_lock:
                old.close()

    def _resync(self, view: SharedView | None) -> None:
        """Re-read the newest file after a producer died holding the append lock,
        or when the record cannot be trusted (append lock held): see
        :func:`engine.queue.recover.resync`.  Everything in the files is then
        made durable and published as synced."""
        report = RecoveryReport(path=naming.join(self.directory, self.name))
        segments, handle, end, last = resync(self.fs, self.directory, self.name, report, int(self._clock() * 1000))
        self._swap_handle(handle)
        self._segments = segments
        self._written_end = end
        self._tail = last
        try:
            handle.fdatasync()
        except BaseException as exc:
            self._latch.trip(exc, handle.path, "fsync")
            raise
        base = max(self._written_l, 0 if view is None else view.written, self._state.written()) + end + 1
        self._written_l, self._segment_start_l = base, base - (end - _HEADER_SIZE)
        self._state.set_written(base)
        self._state.write_synced(max(base, self._state.read_synced()))
        self._seen_gen = 0 if view is None else view.gen
        if view is not None and view.tail > last:
            # Ids another producer published are not in the files: burn them, so
            # that none is handed out twice (never seen so far: a write of a
            # producer that lived is whole and checked before its record says so).
            report.add("reset", handle.path, view.tail - last, "ids", detail="published but not in the files: burnt")
            self._stage_records([codec.encode_burnt(x) for x in range(last + 1, view.tail + 1)], last + 1)
            self._write_staged()
        if report.actions:
            report.log(log)
            self.recovery.actions.extend(report.actions)
            log.warning("queue %s: a producer stopped holding the append lock; files re-read (tail %d)",
                        self.name, self._tail)

    def _rotate(self) -> None:
        """Start a new writer file (``_lock`` and the append lock held, nothing
        staged).  A producer killed from here to the end leaves the record held:
        the next one re-reads the files (:meth:`_resync`)."""
        old = self._handle
        assert not self._buffer
        with self._handle_lock:
            # The old file is complete and durable before the next one exists, so a
            # reader that sees the new file knows the old one will not grow.
            # (A failed fsync here poisons ``old``, which stays the writer file.)
            self._fsync(old, "queue.rotate", data_only=False)
            old.close()
        try:
            segment = create_segment(self.fs, self.directory, self.name, self._segments, int(self._clock() * 1000))
            crashpoint("queue.rotate.after-create")
            # Durable now: from here an open that does not find it (or finds it
            # shorter than its header) knows it was deleted or emptied.
            self._state.write_facts(Facts(newest=segment.number))
            handle = self.fs.open(segment.path, OpenMode.WRITE)
        except BaseException as exc:
            # The old file is closed and the new one may or may not be on disk:
            # no write may go anywhere until a reopen lets recovery decide.
            self._latch.trip(exc, old.path, "fsync")
            raise
        self._state.set_newest(segment.number)
        # Everything before the new file is durable (the fsync above).
        self._state.write_synced(max(self._written_l, self._state.read_synced()))
        self._segments.append(segment)
        self._handle = handle
        self._written_end = _HEADER_SIZE
        self._segment_start_l = self._written_l
        self._publish(held=True)

    # -- the group commit --------------------------------------------------------------
    def sync(self) -> None:
        """Make every put of this process so far durable (whatever the policy)."""
        with self._lock:
            if self._held:
                self._write_staged()
            target = self._end_l
        self._sync_to(target)

    def _sync_to(self, target: int) -> None:
        """Return once every byte before logical position ``target`` is durable:
        covered by a leader's fsync, or by leading one (see :mod:`engine.queue.shared`)."""
        state = self._state
        while state.read_synced() < target:
            self._latch.check()
            if self._lead_lock.acquire(blocking=False):
                try:
                    if state.read_synced() >= target:
                        return
                    if state.lead():
                        self._foreign_lead = False
                        try:
                            self._lead(target)
                        finally:
                            state.end_lead()
                        continue
                    self._foreign_lead = True
                finally:
                    self._lead_lock.release()
            if self._held and self._foreign_lead:
                # Never wait for another producer's fsync holding the append lock:
                # that producer's leading thread may need it to be let go (one of its
                # threads waits for it while holding what the leader needs; its knock
                # may have been taken by this producer's own acquire, so a knock is
                # no sign to wait for).  Following this process's own leader, keep
                # it: that leader lets it go before its fsync (_lead) and needs
                # nothing of another producer.  (A stale False, another producer
                # leading since the last look, lasts one FOLLOW_PERIOD: then a
                # thread of this process tries to lead, fails and sets it.)
                self._let_go()
            state.follow(target)

    def _lead(self, target: int) -> None:
        """This thread leads: one fsync for every byte written before it starts."""
        state = self._state
        if state.read_synced() >= target:
            return  # covered by the fsync that ended just before
        if self._delay > 0:
            time.sleep(self._delay)
        else:
            # Let the producers that the last fsync woke run first (they are
            # runnable, and each is about to write its next put): what they
            # write now, this fsync covers.  Costs nothing when none is.
            yield_cpu()
        with self._lock:
            # Never across an fsync: other producers write while it runs.
            self.flush_locked()
            handle, number, covered = self._handle, self._segments[-1].number, self._written_l
        # Read before the fsync: every byte it counts is in the file by now.
        written, newest = state.written(), state.newest()
        with self._handle_lock:
            if handle.closed:
                return  # rotated out: that rotation fsynced it and published it
            self._fsync(handle, "queue.put")
        if newest in (0, number):
            # Every byte counted in ``written`` is in this file (covered by this
            # fsync) or in an older one (fsynced by its rotation).
            covered = max(covered, written)
        state.write_synced(max(covered, state.read_synced()))

    def flush_locked(self) -> None:
        """:meth:`flush` for a caller holding ``_lock``."""
        if self._held:
            try:
                self._write_staged()
            finally:
                self._release()

    def fail(self, exc: BaseException, operation: str) -> None:
        """Stop writes after ``exc`` (the sync driver's thread failed)."""
        self._latch.trip(exc, self._handle.path, operation)

    def _failed(self, exc: BaseException, path: str, operation: str) -> None:
        """A write or fsync of a writer file failed: writes stop (the latch) and
        the caller's error is the typed one (PoisonedError, DiskFullError)."""
        self._latch.trip(exc, path, operation)
        if isinstance(exc, Exception) and not isinstance(exc, PoisonedError):
            try:
                self._latch.check()
            except PoisonedError as typed:
                raise typed from exc

    def _fsync(self, handle: FileHandle, point: str, *, data_only: bool = True) -> None:
        """fdatasync (or fsync) ``handle`` between the crash points ``<point>.before-fsync``
        and ``<point>.after-fsync``; a failure stops writes."""
        crashpoint(f"{point}.before-fsync")
        try:
            handle.fdatasync() if data_only else handle.fsync()
        except BaseException as exc:
            self._failed(exc, handle.path, "fsync")
            raise
        crashpoint(f"{point}.after-fsync")

    # -- closing -----------------------------------------------------------------------
    def leave(self, presence: HeldLock) -> None:
        """At close (this process's puts written and durable): the last producer
        to leave (``presence``: its hold of ``<queue>.lock``) records in the
        durable facts where it left the newest file, and zeros the shared words."""
        with self._lock:
            if self._handle.poisoned or self._latch.tripped:
                return  # recovery decides what the files hold
            self._acquire()
            last = False
            try:
                last = last_to_leave(presence)
                if last:
                    newest = self._segments[-1].number
                    with self._handle_lock:  # no fsync of this process is running
                        self._state.write_facts(Facts(newest, newest, self._written_end))
                        self._state.clear()  # (the record too: nobody holds anything)
            finally:
                if last:
                    self._held = False
                    self._state.unlock()
                else:
                    self._release()

    def close(self) -> None:
        """Close the writer file and the shared files (after :meth:`leave`)."""
        with self._lock:
            self._closed = True
            with self._handle_lock:
                self._handle.close()
                self._state.close()

    def abandon(self) -> None:
        """Close without leaving (an open that failed)."""
        self.close()
