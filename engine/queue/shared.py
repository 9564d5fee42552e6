"""Several producer processes on one queue: the shared state file and its locks.

Any number of processes (and threads) open the same queue with ``Queue.open`` and
put.  They agree through two small files of this engine (libkestrel never
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

The state record (little-endian, 76 bytes at offset 0; then 12 bytes at 96 and
8 at 112):

    magic "EQSTATE1", gen u64, rotating u64, segment u64, end u64, tail i64,
    first_id i64 (0: none), written u64, segment_start u64, crc32 u32
    synced u64, crc32 u32
    knock u64

``gen`` changes at every write of the record; ``segment`` is the newest writer
file's number and ``end`` where its valid records end; ``tail`` the last id,
``first_id`` the newest file's first id.  ``written`` counts every byte appended
to the writer files since the first producer opened (a *logical* position that
runs across files), ``segment_start`` is that count when the newest file was
created, and ``synced`` is a count every byte before which is durable.

Group commit across processes.  The threads of one process share its fsyncs
(:class:`engine.fs.GroupCommit`); the processes share them two ways, neither of
which makes one process wait for another's fsync:

* A producer whose put ends at logical position P is durable once
  ``synced >= P``, and then returns without an fsync of its own.  The process that
  fsyncs reads ``written`` first, fsyncs, then publishes it as ``synced`` (with
  no lock: two publishing at once may leave the smaller count, which is true all
  the same and costs a later put an fsync at most).
* Producers of several processes that fsync at the same time share the file
  system's journal commit: ext4 and XFS fold the fsyncs that arrive while one
  commit is under way into the next commit, and the disk may run flushes side
  by side.  An earlier version made each fsync wait for the one before it (a
  lock file, ``<queue>.sync``) so that more producers would find themselves
  covered: the fsyncs then ran one at a time and each waiter woke in turn, and 4
  processes put 1.5x as fast as one against 1.9x without it
  (``benchmarks/queue_mp.py``, which also counts the disk's flushes).

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

from engine.errors import LockedError
from engine.fs import FileHandle, FileSystem, HeldLock, OpenMode, lock_handle
from engine.queue import naming

_MAGIC = b"EQSTATE1"
_RECORD = struct.Struct("<8sQQQQqqQQ")
_CRC = struct.Struct("<I")
_SYNCED_AT = 96
_SYNCED = struct.Struct("<QI")
_KNOCK_AT = 112
_KNOCK = struct.Struct("<Q")
assert _RECORD.size + _CRC.size == 76 <= _SYNCED_AT and _SYNCED_AT + _SYNCED.size <= _KNOCK_AT
_VIEW_SIZE = _KNOCK_AT + _KNOCK.size  # one read covers the record and the knock

#: How often a producer holding the append lock across group commits looks for
#: a knock (seconds): what a producer asking for the lock waits, at most, beyond
#: one fsync.
KNOCK_PERIOD = 0.005

#: How often a producer alone tries the exclusive ``<queue>.lock`` before it
#: takes another process's shared hold for granted (a reader's probe holds it for
#: microseconds).
_ALONE_TRIES = 5


def state_name(queue: str) -> str:
    return f"{queue}.state"


def old_sync_lock_name(queue: str) -> str:
    """The lock file an earlier version's group commit used (no longer made; a
    queue's deletion removes one left behind)."""
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
    def read_synced(self) -> int:
        """The logical position every byte before which is durable (0 when unknown,
        or when a write was under way: the crc32 does not match)."""
        raw = self._read_at(_SYNCED_AT, _SYNCED.size)
        if len(raw) < _SYNCED.size:
            return 0
        value, crc = _SYNCED.unpack(raw)
        return value if crc == zlib.crc32(raw[:8]) else 0

    def write_synced(self, value: int) -> None:
        """Publish ``value`` as durable (every byte before it is)."""
        body = value.to_bytes(8, "little")
        self._write_at(_SYNCED_AT, body + _CRC.pack(zlib.crc32(body)))

    def clear(self) -> None:
        """Empty the file (the last producer closing; the append lock held)."""
        self._handle.truncate(0)

    def close(self) -> None:
        """Close the file (the caller makes sure no write is under way)."""
        self._handle.close()


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
