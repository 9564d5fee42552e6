"""Several producer processes on one queue: the shared state files and their locks.

Any number of processes (and threads) open the same queue with ``Queue.open`` and
put.  They agree through three small files of this engine (libkestrel never
looks at them):

* ``<queue>.lock``: every open producer holds it *shared* for as long as it is
  open.  "Some writer has the queue open" is what a reader in another process
  probes, and ``engine queue repair`` takes it exclusively (so not while a
  producer is open).  The producer that opens while nobody else holds it is the
  *first* one: it alone runs the crash recovery of :mod:`engine.queue.recover` and
  writes the state below afresh.
* ``<queue>.state``: the producers' shared state; its exclusive lock is the
  *append lock*, held around every write to the newest writer file (with
  ``sync="always"`` from a put's write until the group commit's fsync, in the
  buffered modes while puts are staged in memory, at most about 50 ms) and around
  a rotation.  Whoever takes it reads the state and, when another process wrote
  since, takes the file's end, the tail id and the newest file from it: appends
  stay ordered and ids unique and increasing across processes.
* ``<queue>.sync``: the group commit across processes (below).

The state record (little-endian, 76 bytes at offset 0; then 8 bytes at 112;
bytes 76-111 are unused, an earlier version's ``synced`` at 96):

    magic "EQSTATE1", gen u64, rotating u64, segment u64, end u64, tail i64,
    first_id i64 (0: none), written u64, segment_start u64, crc32 u32
    knock u64

``gen`` changes at every write of the record; ``segment`` is the newest writer
file's number and ``end`` where its valid records end; ``tail`` the last id,
``first_id`` the newest file's first id.  ``written`` counts every byte appended
to the writer files since the first producer opened (a *logical* position that
runs across files), ``segment_start`` is that count when the newest file was
created.

Group commit across processes.  The threads of one process share its fsyncs
(:class:`engine.fs.GroupCommit`: one thread fsyncs for the others); the
processes share them through ``<queue>.sync``.  Its exclusive flock makes one
producer the *leader*, the one that fsyncs; its 16 bytes are words every
producer maps shared (:class:`engine.fs.SharedWords`, a futex on Linux):

    ended u32 (fsyncs ended so far, mod 2**32), busy u32 (1 while a leader
    fsyncs), synced u64 (every byte before this logical position is durable)

A producer whose put ends at logical position P is durable once
``synced >= P``.  Until then it tries the lock.  When it has it, it yields the
CPU once (the producers the last fsync woke are runnable, each about to write
its next put: what they write now, this fsync covers), reads ``written`` W,
fdatasyncs its handle on the newest file, publishes ``synced = max(W, P)``,
clears ``busy``, counts ``ended``, lets the lock go and wakes every producer
sleeping on ``ended``.  A producer that finds the lock held sleeps on
``ended`` until it changes, then looks again: covered, or it leads the next
fsync.  A leader killed in its fsync leaves ``busy`` set, but its lock is gone:
sleepers look again every :data:`FOLLOW_PERIOD`.  The words are never fsynced
and mean nothing after a machine crash; the first producer to open clears
``busy`` and ``synced``, and the last one to close empties the file (see
:meth:`SharedState.clear`).

Why this shape (``benchmarks/queue_mp.py``, 4 producer processes with
``sync="always"`` against one, on 2 cores with a fast fsync): sleeping on the
flock itself, as an earlier version did, hands the lock to the sleepers one by
one, each taking it to look and letting it go: 1.5x.  No lock at all, every
producer fsyncing for itself (the file system folds fsyncs that arrive together
into one journal commit): 1.8x.  The futex wakes every sleeper with one system
call, and the yield lets them write before the fsync starts: 2.2x, with about 3
puts per fsync.

The record is never fsynced: after a machine crash no producer is alive, and the
next first producer rebuilds it from the journal.  A producer killed in the
middle of a write leaves the newest file longer than ``end`` (or ``rotating``
set): the next one to take the append lock sees it and re-reads the newest file
as the recovery does (:func:`engine.queue.recover.resync`): whole, checksummed
batches are kept, a torn one is cut.  Reads without the lock (readers looking for
new data) check the crc32 and read again when a write was under way.

``knock`` is how a producer that finds the append lock taken asks for it
(:meth:`SharedState.lock` writes a value never written before, then waits).  A
producer alone with ``sync="always"`` whose threads keep writing holds the lock
from one group commit to the next instead of taking it for each (each take is
a lock, a read of the record and a look at the file's size; each release a
write of the record and an unlock): it looks at ``knock`` at most every
:data:`KNOCK_PERIOD` and lets the lock go when the value changed, and at once
when a group commit finds nothing written during its fsync.  So a newcomer
waits at most about that long plus one fsync.
"""

from __future__ import annotations

import os
import struct
import time
import zlib
from dataclasses import dataclass

from engine.errors import ClosedError, LockedError
from engine.fs import FileHandle, FileSystem, HeldLock, OpenMode, SharedWords, lock_handle
from engine.queue import naming

_MAGIC = b"EQSTATE1"
_RECORD = struct.Struct("<8sQQQQqqQQ")
_CRC = struct.Struct("<I")
_KNOCK_AT = 112
_KNOCK = struct.Struct("<Q")
assert _RECORD.size + _CRC.size == 76 <= _KNOCK_AT
_VIEW_SIZE = _KNOCK_AT + _KNOCK.size  # one read covers the record and the knock

#: How often a producer holding the append lock across group commits looks for
#: a knock (seconds): what a producer asking for the lock waits, at most, beyond
#: one fsync.
KNOCK_PERIOD = 0.005

#: The words of ``<queue>.sync`` (see the module docstring).
_ENDED = 0  # fsyncs ended so far (mod 2**32): followers sleep on it
_BUSY = 1  # 1 while a leader fsyncs
_SYNCED = 2  # (u64, words 2-3) every byte before this logical position is durable
_WORDS = 4
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
    rotating: bool
    segment: int
    end: int
    tail: int
    first_id: int | None
    written: int
    segment_start: int
    #: The knock value when this view was read (not part of the record's bytes).
    knock: int = 0

    def pack(self) -> bytes:
        body = _RECORD.pack(
            _MAGIC,
            self.gen,
            int(self.rotating),
            self.segment,
            self.end,
            self.tail,
            self.first_id or 0,
            self.written,
            self.segment_start,
        )
        return body + _CRC.pack(zlib.crc32(body))


class SharedState:
    """The ``<queue>.state`` file of one producer."""

    def __init__(self, fs: FileSystem, directory: str, queue: str) -> None:
        self.path = naming.join(directory, state_name(queue))
        self._handle: FileHandle = fs.open(self.path, OpenMode.CREATE)
        self._knocks = 0  # this producer's knocks so far (see :meth:`knock`)
        self._words: SharedWords | None = None  # mapped by :meth:`map_words`
        try:
            self._sync: FileHandle = fs.open(naming.join(directory, sync_name(queue)), OpenMode.CREATE)
        except BaseException:
            self._handle.close()
            raise

    def _read_at(self, offset: int, size: int) -> bytes:
        return self._handle.read_at(offset, size)

    def _write_at(self, offset: int, data: bytes) -> None:
        self._handle.write_at(offset, data)  # (writes go through the seam, like every write)

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

    def knock(self) -> None:
        """Ask the holder of the append lock for it: write a knock value no
        producer wrote before (this process's id and its count of knocks; a
        holder only compares it with the value it saw when it took the lock)."""
        self._knocks += 1
        token = (os.getpid() << 32 | self._knocks & 0xFFFFFFFF) & 0xFFFFFFFFFFFFFFFF
        self._write_at(_KNOCK_AT, _KNOCK.pack(token))

    def knocked(self, seen: int) -> bool:
        """Whether a producer knocked since the knock value was ``seen``."""
        raw = self._read_at(_KNOCK_AT, _KNOCK.size)
        return len(raw) == _KNOCK.size and _KNOCK.unpack(raw)[0] != seen

    def unlock(self) -> None:
        self._handle.unlock()

    # -- the record ------------------------------------------------------------------
    def read(self, tries: int = 100) -> SharedView | None:
        """The record, or None when there is none (a new file) or it is damaged.

        Without the append lock a write may be under way: a crc32 that does not
        match is read again, ``tries`` times in all."""
        size = _RECORD.size + _CRC.size
        for _ in range(tries):
            raw = self._read_at(0, _VIEW_SIZE)  # the knock too, in the same read
            if len(raw) < size:
                return None
            body = raw[: _RECORD.size]
            if _CRC.unpack_from(raw, _RECORD.size)[0] == zlib.crc32(body):
                magic, gen, rotating, segment, end, tail, first, written, start = _RECORD.unpack(body)
                if magic != _MAGIC:
                    return None
                knock = _KNOCK.unpack_from(raw, _KNOCK_AT)[0] if len(raw) == _VIEW_SIZE else 0
                return SharedView(gen, bool(rotating), segment, end, tail, first or None, written, start, knock)
        return None

    def write(self, view: SharedView) -> None:
        """Write the record (the caller holds the append lock)."""
        self._write_at(0, view.pack())

    # -- the group commit ------------------------------------------------------------
    def map_words(self) -> None:
        """Map ``<queue>.sync``'s words (the append lock held: the last producer to
        close empties the file, under that lock, once no other producer is open)."""
        if self._words is None:
            self._words = self._sync.map_words(_WORDS)

    @property
    def words(self) -> SharedWords:
        """The group commit's words (mapped at open)."""
        words = self._words
        if words is None:
            raise ClosedError(f"{self._sync.path}: the group commit's words are not mapped")
        return words

    def read_synced(self) -> int:
        """The logical position every byte before which is durable (0: unknown)."""
        return self.words.get64(_SYNCED)

    def write_synced(self, value: int) -> None:
        """Publish ``value`` as durable (every byte before it is)."""
        self.words.set64(_SYNCED, value)

    def lead(self) -> bool:
        """Try to become the leader of the group commit: True when this producer
        holds ``<queue>.sync`` now and is to fsync (then :meth:`end_lead`), False
        when another one leads (then :meth:`follow`)."""
        try:
            self._sync.lock(exclusive=True, blocking=False)
        except LockedError:
            return False
        try:
            self.words.set(_BUSY, 1)
        except BaseException:
            self._sync.unlock()
            raise
        return True

    def end_lead(self) -> None:
        """The leader's fsync ended (or failed): count it, let the lock go, then
        wake the followers (unlocked first, so that a woken one can lead the next)."""
        words = self.words
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
        words = self.words
        ended = words.get(_ENDED)
        if self.read_synced() >= covered:
            return
        if words.get(_BUSY):
            words.wait(_ENDED, ended, FOLLOW_PERIOD)  # returns at once if it ended meanwhile
        else:
            # Between a leader's lock and its BUSY, or its BUSY and its unlock:
            # microseconds.  Let it run.
            yield_cpu()

    def reset_group_commit(self) -> None:
        """The first producer opening: nobody leads (a leader killed in its fsync
        may have left BUSY set) and nothing is known durable (logical positions
        start again from the journal)."""
        words = self.words
        words.set(_BUSY, 0)
        words.set64(_SYNCED, 0)

    def clear(self) -> None:
        """Empty both files (the last producer closing, with the append lock and
        ``<queue>.lock`` exclusively: no other producer has the words mapped, and
        none maps them before this one lets the append lock go)."""
        self._handle.truncate(0)
        self._unmap()
        self._sync.truncate(0)

    def _unmap(self) -> None:
        words, self._words = self._words, None
        if words is not None:
            words.close()

    def close(self) -> None:
        """Close the files (the caller makes sure no write or sync is under way)."""
        self._handle.close()
        self._unmap()
        self._sync.close()


def lock_producer(fs: FileSystem, directory: str, queue: str, patience: float) -> tuple[HeldLock, bool]:
    """Hold ``<queue>.lock`` shared for as long as this producer is open; returns
    the lock and whether no other producer has the queue open (the caller holds
    the append lock, so no other producer is opening right now).

    Alone: the exclusive lock is had (a reader's probe holds it for microseconds:
    a few tries), then turned into a shared one.  LockedError when ``engine queue
    repair`` (or an older version's writer) holds it exclusively.
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
