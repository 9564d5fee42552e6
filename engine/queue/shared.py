"""What the producers of a queue share: the state record, the append lock, the
group commit's words and the durable facts.

Any number of processes (and threads) open the same queue with ``Queue.open``
and put; one process alone is the case with nobody else there, not a mode.
They agree through three small files of this engine (libkestrel never looks at
them):

* ``<queue>.lock``: every open producer holds it *shared* for as long as it is
  open.  "Some writer has the queue open" is what a reader in another process
  probes, and ``engine queue repair`` takes it exclusively.  The producer that
  opens while nobody else holds it is the *first* one: it alone runs the crash
  recovery of :mod:`engine.queue.recover` and writes the record afresh.
* ``<queue>.state``: its exclusive flock is the *append lock*, held around every
  write to the newest writer file and around a rotation, never across an
  fsync.  Its first 128 bytes are words every producer maps shared (the state
  record below and ``knock``); from byte 128 it holds the *durable facts*,
  written in place and fsynced.
* ``<queue>.sync``: its exclusive flock makes one producer (one thread of one
  process) the *leader* of the group commit; its first 32 bytes are words
  every producer maps shared (a futex each on Linux): ``ended`` u32 (fsyncs
  ended, mod 2**32), ``busy`` u32 (1 while a leader fsyncs), ``synced`` u64
  (every byte before this logical position is durable), ``written`` u64 (the
  logical end of everything appended so far), ``newest`` u64 (the newest
  writer file's number).

The state record (little-endian, at offset 0 of ``<queue>.state``, 76 bytes;
``knock`` u64 at offset 112)::

    magic "EQSTATE2" | gen u64 | held u64 | segment u64 | end u64 | tail i64 |
    first_id i64 (0: none) | written u64 | segment_start u64 | crc32 u32 (of the 72 bytes before)

``gen`` changes at every write of the record; ``held`` is 1 from the moment a
producer takes the append lock until it writes the record back as it lets the
lock go, so a producer that finds it set has found the lock left by a process
that died holding it (in the middle of a write or a rotation): it re-reads the
newest file as the recovery does (:func:`engine.queue.recover.resync`).
``segment`` is the newest writer file's number and ``end`` where its valid
records end; ``tail`` the last id, ``first_id`` the newest file's first id.
``written`` counts every byte appended to the writer files since the first
producer opened (a *logical* position that runs across files),
``segment_start`` is that count when the newest file was created.  Reads
without the append lock (the tail, for ``len``) check the crc32 and read again
when a write was under way.

``knock`` is how a producer that finds the append lock taken asks for it: it
stores a value never stored before, then waits for the flock.  The holder
looks at ``knock`` after each of its writes and lets the lock go when it
changed; it never holds the lock across an fsync, so a knocking producer waits
at most one write (or, in the buffered modes, the staging of puts until the
next write: at most about 50 ms).

The durable facts (offset 128, 36 bytes, written with the file system's write
and fdatasync)::

    magic "EQFACTS1" | newest u64 | closed_segment u64 | closed_end u64 | crc32 u32 (of the 32 bytes before)

``newest`` is the number of the newest writer file a producer created (set
once the file and its directory entry are durable), so an open that finds no
writer file numbered that high, or that file shorter than its header, knows
the newest file was deleted or emptied; ``closed_segment`` / ``closed_end``
say where the last producer to close left the newest file (0: not closed
cleanly since), so records found after that point at the next open were
written by another program (libkestrel continuing the queue) and are kept,
and a file found shorter than that lost data after the close.

Group commit.  A producer (thread) whose bytes end at logical position P is
durable once ``synced >= P``.  Until then it tries to lead: this process's
leader lock (one leader thread per process) and ``<queue>.sync``'s flock.  The
leader sets ``busy``, yields the CPU once (the producers the last fsync woke
are about to write: this fsync covers what they write now), reads
``written``, fdatasyncs its handle on the newest file, publishes ``synced``,
clears ``busy``, counts ``ended``, lets the flock go and wakes every sleeper
with one futex call.  Any other producer, in this process or another, sleeps
on ``ended`` while ``busy`` is set (at most :data:`FOLLOW_PERIOD`), then
looks again: covered, or it leads the next fsync.  A leader killed in its
fsync leaves ``busy`` set, but its flock is gone: the sleepers look again
within :data:`FOLLOW_PERIOD` and one of them leads.  The words mean nothing
after a machine crash; the first producer to open clears them, and the last
one to close zeros them (:meth:`SharedState.clear`).

Why this shape (``benchmarks/queue_mp.py``, 4 producer processes with
``sync="always"`` against one, on 2 cores with a fast fsync): sleeping on the
flock itself hands the lock to the sleepers one by one, each taking it to
look and letting it go: 1.5x.  No lock at all, every producer fsyncing for
itself: 1.8x.  The futex wakes every sleeper with one system call, and the
yield lets them write before the fsync starts: 2.2x.
"""

from __future__ import annotations

import os
import struct
import time
import zlib
from dataclasses import dataclass

from engine.errors import LockedError
from engine.fs import FileHandle, FileSystem, HeldLock, OpenMode, SharedWords, lock_handle
from engine.queue import naming

_MAGIC = b"EQSTATE2"
_RECORD = struct.Struct("<8sQQQQqqQQ")
_CRC = struct.Struct("<I")
_RECORD_SIZE = _RECORD.size + _CRC.size
assert _RECORD_SIZE == 76
#: ``<queue>.state``'s mapped words: the record (bytes 0-75) and ``knock`` (u64 at byte 112).
_STATE_WORDS = 32
_KNOCK = 28  # word index of the u64 at byte 112
assert _KNOCK * 4 == 112 and _KNOCK * 4 + 8 <= _STATE_WORDS * 4

#: The durable facts, at byte 128 of ``<queue>.state`` (below the mapped words).
FACTS_AT = _STATE_WORDS * 4
_FACTS_MAGIC = b"EQFACTS1"
_FACTS = struct.Struct("<8sQQQ")
_FACTS_SIZE = _FACTS.size + _CRC.size
assert FACTS_AT == 128 and _FACTS_SIZE == 36

#: ``<queue>.sync``'s words.
_ENDED = 0  # fsyncs ended so far (mod 2**32): followers sleep on it
_BUSY = 1  # 1 while a leader fsyncs
_SYNCED = 2  # u64 (words 2-3): every byte before this logical position is durable
_WRITTEN = 4  # u64 (words 4-5): the logical end of everything appended
_NEWEST = 6  # u64 (words 6-7): the newest writer file's number
_SYNC_WORDS = 8

#: How long a follower sleeps before it looks again whether the leader lives (a
#: leader killed in its fsync leaves BUSY set; its lock is gone).
FOLLOW_PERIOD = 0.02

#: How often a producer alone tries the exclusive ``<queue>.lock`` before it
#: takes another process's shared hold for granted (a reader's probe holds it for
#: microseconds).
_ALONE_TRIES = 5


def yield_cpu() -> None:
    """Let another runnable thread or process have this CPU now (none: returns)."""
    sched_yield = getattr(os, "sched_yield", None)
    if sched_yield is not None:
        sched_yield()
    else:  # pragma: no cover - not POSIX
        time.sleep(0)


def state_name(queue: str) -> str:
    return f"{queue}.state"


def sync_name(queue: str) -> str:
    return f"{queue}.sync"


@dataclass(slots=True)
class SharedView:
    """One reading of the state record (see the module docstring)."""

    gen: int
    held: bool
    segment: int
    end: int
    tail: int
    first_id: int | None
    written: int
    segment_start: int

    def pack(self) -> bytes:
        body = _RECORD.pack(
            _MAGIC,
            self.gen,
            int(self.held),
            self.segment,
            self.end,
            self.tail,
            self.first_id or 0,
            self.written,
            self.segment_start,
        )
        return body + _CRC.pack(zlib.crc32(body))


@dataclass(frozen=True, slots=True)
class Facts:
    """The durable facts of ``<queue>.state`` (see the module docstring)."""

    newest: int = 0
    closed_segment: int = 0
    closed_end: int = 0

    def pack(self) -> bytes:
        body = _FACTS.pack(_FACTS_MAGIC, self.newest, self.closed_segment, self.closed_end)
        return body + _CRC.pack(zlib.crc32(body))

    @classmethod
    def unpack(cls, raw: bytes) -> Facts | None:
        """The facts in ``raw`` (None: none written, or damaged)."""
        if len(raw) < _FACTS_SIZE:
            return None
        body = raw[: _FACTS.size]
        magic, newest, segment, end = _FACTS.unpack(body)
        if magic != _FACTS_MAGIC or _CRC.unpack_from(raw, _FACTS.size)[0] != zlib.crc32(body):
            return None
        return cls(newest, segment, end)


class SharedState:
    """One producer's handles on ``<queue>.state`` and ``<queue>.sync``, their
    mapped words, and the operations of the protocol on them."""

    def __init__(self, fs: FileSystem, directory: str, queue: str) -> None:
        self.path = naming.join(directory, state_name(queue))
        self._handle: FileHandle = fs.open(self.path, OpenMode.CREATE)
        self._knocks = 0  # this producer's knocks so far (see :meth:`knock`)
        try:
            self._sync: FileHandle = fs.open(naming.join(directory, sync_name(queue)), OpenMode.CREATE)
            try:
                # The files only ever grow to hold the words (and are zeroed, never
                # truncated, by the last producer to close): mapping them needs no lock.
                self._words: SharedWords = self._handle.map_words(_STATE_WORDS)
                try:
                    self._group: SharedWords = self._sync.map_words(_SYNC_WORDS)
                except BaseException:
                    self._words.close()
                    raise
            except BaseException:
                self._sync.close()
                raise
        except BaseException:
            self._handle.close()
            raise

    # -- the append lock -------------------------------------------------------------
    def lock(self) -> None:
        """Take the append lock; when another producer holds it, knock (see the
        module docstring) and wait for it."""
        try:
            self._handle.lock(exclusive=True, blocking=False)
            return
        except LockedError:
            pass
        self.knock()
        self._handle.lock(exclusive=True, blocking=True)

    def unlock(self) -> None:
        self._handle.unlock()

    def knock(self) -> None:
        """Ask the holder of the append lock for it: store a knock value no
        producer stored before (this process's id and its count of knocks; a
        holder only compares it with the value it saw when it took the lock)."""
        self._knocks += 1
        self._words.set64(_KNOCK, (os.getpid() << 32 | self._knocks & 0xFFFFFFFF) & 0xFFFFFFFFFFFFFFFF)

    def knock_value(self) -> int:
        return self._words.get64(_KNOCK)

    # -- the record ------------------------------------------------------------------
    def read(self, tries: int = 100) -> SharedView | None:
        """The record, or None when there is none (a new file, zeros) or it is damaged.

        Without the append lock a write may be under way: a crc32 that does not
        match is read again, ``tries`` times in all."""
        for _ in range(tries):
            raw = self._words.read_bytes(0, _RECORD_SIZE)
            body = raw[: _RECORD.size]
            if _CRC.unpack_from(raw, _RECORD.size)[0] == zlib.crc32(body):
                magic, gen, held, segment, end, tail, first, written, start = _RECORD.unpack(body)
                if magic != _MAGIC:
                    return None
                return SharedView(gen, bool(held), segment, end, tail, first or None, written, start)
        return None

    def write(self, view: SharedView) -> None:
        """Store the record (the caller holds the append lock)."""
        self._words.write_bytes(0, view.pack())

    # -- the durable facts -------------------------------------------------------------
    def read_facts(self) -> Facts | None:
        """The durable facts (None: never written, or damaged)."""
        return Facts.unpack(self._handle.read_at(FACTS_AT, _FACTS_SIZE))

    def write_facts(self, facts: Facts) -> None:
        """Write the durable facts and make them durable (the caller holds the
        append lock)."""
        self._handle.write_at(FACTS_AT, facts.pack())
        self._handle.fdatasync()

    # -- the group commit ------------------------------------------------------------
    def read_synced(self) -> int:
        """The logical position every byte before which is durable (0: unknown)."""
        return self._group.get64(_SYNCED)

    def write_synced(self, value: int) -> None:
        """Publish ``value`` as durable (every byte before it is)."""
        self._group.set64(_SYNCED, value)

    def written(self) -> int:
        """The logical end of everything appended, as the last writer stored it."""
        return self._group.get64(_WRITTEN)

    def set_written(self, value: int) -> None:
        self._group.set64(_WRITTEN, value)

    def newest(self) -> int:
        """The newest writer file's number, as the last producer to create one
        stored it (0: unknown)."""
        return self._group.get64(_NEWEST)

    def set_newest(self, number: int) -> None:
        self._group.set64(_NEWEST, number)

    def lead(self) -> bool:
        """Try to become the leader of the group commit: True when this producer
        holds ``<queue>.sync`` now and is to fsync (then :meth:`end_lead`), False
        when another process leads (then :meth:`follow`).  The caller holds its
        process's leader lock (a flock does not exclude threads sharing it)."""
        try:
            self._sync.lock(exclusive=True, blocking=False)
        except LockedError:
            return False
        try:
            self._group.set(_BUSY, 1)
        except BaseException:
            self._sync.unlock()
            raise
        return True

    def end_lead(self) -> None:
        """The leader's fsync ended (or failed): count it, let the lock go, then
        wake the followers (unlocked first, so that a woken one can lead the next)."""
        words = self._group
        try:
            words.set(_BUSY, 0)
            words.set(_ENDED, words.get(_ENDED) + 1)  # under the lock: no count is lost
        finally:
            self._sync.unlock()
        words.wake(_ENDED)

    def follow(self, covered: int) -> None:
        """Sleep until the leader's fsync ends (at most :data:`FOLLOW_PERIOD`),
        unless ``synced`` reaches ``covered`` first or nobody leads; the caller
        then looks again."""
        words = self._group
        ended = words.get(_ENDED)
        if self.read_synced() >= covered:
            return
        if words.get(_BUSY):
            words.wait(_ENDED, ended, FOLLOW_PERIOD)  # returns at once if it ended meanwhile
        else:
            # Between a leader's lock and its BUSY, or its BUSY and its unlock
            # (or another thread of this process about to lead): microseconds.
            yield_cpu()

    def reset_group_commit(self) -> None:
        """The first producer opening: nobody leads (a leader killed in its fsync
        may have left BUSY set) and nothing is known durable (logical positions
        start again from the journal)."""
        words = self._group
        words.set(_BUSY, 0)
        words.set64(_SYNCED, 0)
        words.set64(_WRITTEN, 0)

    def clear(self) -> None:
        """Zero the record and the group commit's words (the last producer
        closing, with the append lock and ``<queue>.lock`` exclusively): the
        directory of a closed queue holds no live state; the durable facts stay."""
        self._words.write_bytes(0, bytes(_STATE_WORDS * 4))
        self._group.write_bytes(0, bytes(_SYNC_WORDS * 4))

    def close(self) -> None:
        """Unmap the words and close the files (the caller makes sure no write or
        sync is under way)."""
        self._words.close()
        self._group.close()
        self._handle.close()
        self._sync.close()


def peek_facts(fs: FileSystem, directory: str, queue: str) -> Facts | None:
    """The durable facts of ``queue`` read without opening it as a producer
    (a reader, the tools; nothing is created): None when there are none."""
    try:
        with fs.open(naming.join(directory, state_name(queue))) as handle:
            return Facts.unpack(handle.read_at(FACTS_AT, _FACTS_SIZE))
    except FileNotFoundError:
        return None


def peek_tail(fs: FileSystem, directory: str, queue: str) -> int:
    """The tail the producers' record says (0: no record, or no producer open),
    read without opening the queue as a producer."""
    try:
        with fs.open(naming.join(directory, state_name(queue))) as handle:
            raw = handle.read_at(0, _RECORD_SIZE)
    except FileNotFoundError:
        return 0
    if len(raw) < _RECORD_SIZE:
        return 0
    body = raw[: _RECORD.size]
    if _CRC.unpack_from(raw, _RECORD.size)[0] != zlib.crc32(body):
        return 0
    magic, _, _, _, _, tail, *_ = _RECORD.unpack(body)
    return int(tail) if magic == _MAGIC else 0


def lock_producer(fs: FileSystem, directory: str, queue: str, patience: float) -> tuple[HeldLock, bool]:
    """Hold ``<queue>.lock`` shared for as long as this producer is open; returns
    the lock and whether no other producer has the queue open (the caller holds
    the append lock, so no other producer is opening right now).

    Alone: the exclusive lock is had (a reader's probe holds it for microseconds:
    a few tries), then turned into a shared one.  LockedError when ``engine queue
    repair`` holds it exclusively.
    """
    path = naming.join(directory, naming.writer_lock_name(queue))
    handle = fs.open(path, OpenMode.CREATE)
    try:
        alone = False
        for attempt in range(_ALONE_TRIES):
            try:
                handle.lock(exclusive=True, blocking=False)
            except LockedError:
                if attempt + 1 < _ALONE_TRIES:
                    time.sleep(0.001)
                continue
            alone = True
            break
        lock_handle(handle, exclusive=False, wait=patience, what=f"writer lock of queue {queue!r}")
    except BaseException:
        handle.close()
        raise
    return HeldLock(path, handle, False), alone


def last_to_leave(presence: HeldLock) -> bool:
    """Whether no other producer has the queue open (``presence``, this one's
    shared hold of ``<queue>.lock``, turned exclusive when so: the caller is
    closing and holds the append lock, so nobody opens meanwhile)."""
    try:
        presence.handle.lock(exclusive=True, blocking=False)
    except LockedError:
        return False
    return True


def write_facts_file(fs: FileSystem, directory: str, queue: str, facts: Facts) -> None:
    """Write ``queue``'s durable facts without opening it as a producer (``engine
    queue repair``, which holds ``<queue>.lock`` exclusively); durable."""
    with fs.open(naming.join(directory, state_name(queue)), OpenMode.CREATE) as handle:
        handle.write_at(FACTS_AT, facts.pack())
        handle.fdatasync()
