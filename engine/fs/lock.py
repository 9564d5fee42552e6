"""The locks every store takes, written once.

A store's writer holds an exclusive advisory lock (``flock``) on a lock file for as
long as it is open; the kernel drops it when the process dies, so a held lock
always means a live holder and a crash never leaves a stale lock behind.  Readers
that must keep a writer from changing a file under them (the page store's journal
scan) hold a shared lock on it for the moment they read.

The lock file holds no data, so creating it needs no fsync: if a crash loses its
directory entry, the next holder creates it again.

``wait`` is how long to wait for a holder to let go: ``0`` fails at once with
:class:`~engine.errors.LockedError`, a number of seconds (or a ``timedelta``)
polls with a growing sleep (1 ms to 50 ms; ``flock`` has no timed wait), and
``None`` blocks until the lock is free.

A file that readers lock shared for a snapshot and a writer locks exclusively
between them (the page store's file) uses a :class:`GatedLock`: with plain
``flock`` a polling writer can wait for ever behind readers whose snapshots
overlap, because a new shared lock is granted while the writer sleeps.  The
gate is a second, empty lock file every locker passes through (shared for
readers, for an instant; exclusive for a writer, until it holds the file), so
once a writer is waiting, new snapshots queue behind it and the ones already
running drain (SQLite's PENDING lock plays the same part).

A lock that processes of other runtimes take too uses :func:`take_record_lock`:
an exclusive fcntl record lock of the file's first byte, taken through the
handle's range lock (an open-file-description lock on Linux).  ``flock`` and
fcntl record locks do not conflict with each other, and the JVM's
``FileChannel.lock`` takes classic POSIX record locks, so a lock the JVM must
respect cannot be a ``flock``; OFD locks do conflict with classic POSIX locks
(fcntl(2)), so both sides exclude each other.  The engine-log Spark sink's
manifest lock (``_LOCK``, taken by the connector's driver commit and by
``engine spark cleanup``) is one.
"""

from __future__ import annotations

import datetime
import time
from array import array
from collections.abc import Callable, Iterable
from types import TracebackType

from engine.errors import ConfigError, LockedError
from engine.fs.base import FileHandle, FileSystem, OpenMode
from engine.fs.words import SharedWords

#: The gate's words (u32): the change count (u64 at word 0), the change ring's
#: head (u64 at word 2) and its RING slots (u32 from word 4): 4 KiB in all.
RING = 1020
_HEAD = 2
_SLOTS = 4
_WORDS = _SLOTS + RING
assert _WORDS * 4 == 4096 and array("I").itemsize == 4

#: The longest sleep between two tries of a waiting lock.
_MAX_POLL = 0.05


def wait_seconds(wait: float | datetime.timedelta | None) -> float | None:
    """``wait`` as seconds (None stays None: wait for ever)."""
    if wait is None:
        return None
    if isinstance(wait, datetime.timedelta):
        wait = wait.total_seconds()
    if isinstance(wait, bool) or not isinstance(wait, (int, float)) or wait < 0:
        raise ConfigError(f"a lock wait is seconds >= 0, a timedelta or None, not {wait!r}")
    return float(wait)


class HeldLock:
    """A lock this process holds on ``path``; :meth:`release` (or leaving the
    ``with`` block) lets it go and closes the lock file."""

    __slots__ = ("exclusive", "handle", "path")

    def __init__(self, path: str, handle: FileHandle, exclusive: bool) -> None:
        self.path = path
        self.handle = handle
        self.exclusive = exclusive

    @property
    def held(self) -> bool:
        return not self.handle.closed

    def release(self) -> None:
        """Let the lock go (closing the handle drops it).  Releasing twice is fine."""
        self.handle.close()

    def __enter__(self) -> HeldLock:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()

    def __repr__(self) -> str:
        kind = "exclusive" if self.exclusive else "shared"
        return f"<HeldLock {kind} {self.path!r}{'' if self.held else ' released'}>"


def lock_handle(
    handle: FileHandle,
    *,
    exclusive: bool = True,
    wait: float | datetime.timedelta | None = 0.0,
    what: str = "lock",
) -> None:
    """Lock an open ``handle``, waiting up to ``wait`` (see the module docstring).

    Raises :class:`LockedError` naming the file and what holds it when the lock
    cannot be had in time; the handle stays open either way.
    """
    seconds = wait_seconds(wait)
    if seconds is None:
        handle.lock(exclusive=exclusive, blocking=True)
        return
    deadline = time.monotonic() + seconds
    delay = 0.001
    while True:
        try:
            handle.lock(exclusive=exclusive, blocking=False)
            return
        except LockedError:
            left = deadline - time.monotonic()
            if left <= 0:
                waited = f" (waited {seconds:g} s)" if seconds else ""
                raise LockedError(
                    f"{handle.path}: the {what} is held by another process or handle{waited}", handle.path
                ) from None
            time.sleep(min(delay, left))
            delay = min(delay * 2, _MAX_POLL)


class GatedLock:
    """The lock of ``handle`` (shared or exclusive, whole file), taken through
    the gate file ``gate_path`` (see the module docstring).

    The writer creates the gate file (an empty file, like a lock file) when it
    creates its lock file; this class only opens it, and while it is missing
    (no writer of this version has opened the store) takes the lock directly,
    looking for the gate again at the next lock.

    The gate's first 8 bytes are the *change count* (:meth:`changes`), a u64
    shared through a mapping: every exclusive hold adds one when it begins and
    one when it ends, so it is odd while a holder may be writing the file (or
    died doing so) and moves whenever the file may have changed.  A holder of
    the shared lock that finds the count as it was at its last look knows the
    file has not changed since; a process that finds it so without the lock
    knows that what it read then is still the file's state now (readers'
    snapshots: :class:`~engine.pages.PageReader`).  Scratch words
    (:meth:`FileHandle.map_scratch_words <engine.fs.FileHandle.map_scratch_words>`):
    never synced, nothing durable depends on them.  A process only compares
    them with what it saw in them itself, so after a restart (a power loss may
    leave anything in the gate file, or nothing) the first look of every
    reader reloads whole, and whatever count the writer finds it moves on from.

    After it, the *change ring*: a u64 head (how many ids were ever recorded)
    and :data:`RING` u32 slots.  A holder that says which units it writes
    (:meth:`note_written`: page ids, for the page store) has them recorded
    there at its release, before the count moves; a hold that says nothing, or
    writes too many, pushes the head past a whole ring, meaning "anything may
    have changed".  A reader under the shared lock asks which ids were written
    since the head it last saw (:meth:`written_since`) instead of comparing the
    whole of what it keeps.
    """

    __slots__ = (
        "_counter", "_exclusive", "_fs", "_gate", "_gate_path", "_head_now", "_noted", "_watch", "handle", "what"
    )

    def __init__(self, fs: FileSystem, handle: FileHandle, gate_path: str, *, what: str) -> None:
        self._fs = fs
        self.handle = handle
        self._gate_path = gate_path
        self.what = what
        self._gate: FileHandle | None = None
        self._exclusive = False
        self._noted: list[int] | None = None  # what this exclusive hold writes (None: not said)
        # The change count's words: stored through by exclusive holders (the gate
        # opened for writing), loaded by the others (mapped read-only).
        self._counter: tuple[FileHandle, SharedWords] | None = None
        self._watch: SharedWords | None = None
        self._head_now: Callable[[], int] | None = None  # the ring head's loader (with _watch)

    def _gate_handle(self) -> FileHandle | None:
        if self._gate is None:
            try:
                self._gate = self._fs.open(self._gate_path, OpenMode.READ)
            except FileNotFoundError:
                return None
        return self._gate

    def acquire(self, *, exclusive: bool, wait: float | datetime.timedelta | None) -> None:
        """Lock the file, waiting up to ``wait`` in all (LockedError past it)."""
        seconds = wait_seconds(wait)
        if exclusive:
            # A writer that gets the lock at once waits for nobody, so it needs
            # no gate (the gate only keeps new readers from starving a *waiting*
            # writer): two flock calls instead of four on every page-store flush.
            try:
                self.handle.lock(exclusive=True, blocking=False)
            except LockedError:
                self._acquire(exclusive, seconds)
            try:
                self._begin()  # odd: the file may change from now on
            except BaseException:
                self.handle.unlock()
                raise
            self._exclusive = True
            self._noted = None
            return
        self._acquire(exclusive, seconds)

    def _acquire(self, exclusive: bool, seconds: float | None) -> None:
        gate = self._gate_handle()
        if gate is None:
            lock_handle(self.handle, exclusive=exclusive, wait=seconds, what=self.what)
            return
        deadline = None if seconds is None else time.monotonic() + seconds
        try:
            lock_handle(gate, exclusive=exclusive, wait=seconds, what=self.what)
        except LockedError:
            raise LockedError(
                f"{self.handle.path}: the {self.what} is held by another process or handle (waited {seconds:g} s)",
                self.handle.path,
            ) from None
        try:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            lock_handle(self.handle, exclusive=exclusive, wait=left, what=self.what)
        finally:
            gate.unlock()

    def release(self) -> None:
        """Unlock the file (the gate is never held between calls)."""
        try:
            if self._exclusive:
                self._exclusive = False
                self._record(self._noted)
                self._noted = None
                self._bump()  # even again: the holder's writes are all in the file
        finally:
            self.handle.unlock()

    def _bump(self) -> None:
        """Add one to the change count (under the exclusive lock: no other
        holder stores it meanwhile).  Nothing without a gate (a store no writer
        of this version opened: readers then find no count and look at the
        file itself, as before the count existed)."""
        if self._counter is None:
            try:
                gate = self._fs.open(self._gate_path, OpenMode.WRITE)
            except FileNotFoundError:
                return
            try:
                self._counter = (gate, gate.map_scratch_words(_WORDS))
            except BaseException:
                gate.close()
                raise
        self._counter[1].add64(0, 1)

    def _begin(self) -> None:
        """Make the change count odd for an exclusive hold.  Found odd already (a
        holder died holding the lock, or a restart left debris in the gate): two
        steps instead of one, so that even keeps meaning "no holder" for the next
        readers, and the ring pushed past a whole ring, since what was written
        meanwhile is not recorded."""
        self._bump()
        words = self._counter[1] if self._counter is not None else None
        if words is not None and words.get64(0) % 2 == 0:
            words.add64(_HEAD, RING + 1)
            words.add64(0, 1)

    def note_written(self, ids: Iterable[int]) -> None:
        """Under the exclusive lock: ``ids`` are among what this hold writes
        (page ids, for the page store); at the release they go into the change
        ring (see the class docstring).  A hold that never calls this is
        recorded as "anything may have changed"."""
        assert self._exclusive, "note_written outside an exclusive hold"
        if self._noted is None:
            self._noted = []
        self._noted.extend(ids)

    def _record(self, ids: list[int] | None) -> None:
        """Put ``ids`` into the change ring (None, too many or out of range: push
        the head past a whole ring instead); before the count moves."""
        if self._counter is None:
            return
        words = self._counter[1]
        if ids is None or len(ids) > RING or (ids and (min(ids) < 0 or max(ids) > 0xFFFFFFFF)):
            words.add64(_HEAD, RING + 1)
            return
        if not ids:
            return
        head = words.get64(_HEAD)
        # The slots from head % RING on, wrapping to slot 0: one or two stores.
        at = head % RING
        first = ids[: RING - at]
        words.write_bytes((_SLOTS + at) * 4, array("I", first).tobytes())  # (native order, as the words)
        if len(ids) > len(first):
            words.write_bytes(_SLOTS * 4, array("I", ids[len(first) :]).tobytes())
        words.set64(_HEAD, head + len(ids))

    def written_since(self, head: int | None) -> tuple[int, list[int] | None] | None:
        """Under the shared lock: (the change ring's head now, the ids recorded
        since ``head``), the ids None when not all of them are known (``head``
        None, or a whole ring or more since); None when there is no ring."""
        words = self._watch or self._changes_words()
        if words is None:
            return None
        if self._head_now is None:
            self._head_now = words.loader64(_HEAD)  # (a bound load: no Python frame per look)
        now = self._head_now()
        if head is None or not 0 <= now - head <= RING:
            return now, None
        if now == head:
            return now, []
        # The slots from head % RING on, wrapping to slot 0: one or two loads of bytes.
        at, end = head % RING, now % RING or RING
        ids = array("I", words.read_bytes((_SLOTS + at) * 4, ((end if end > at else RING) - at) * 4))
        if end <= at:
            ids.frombytes(words.read_bytes(_SLOTS * 4, end * 4))
        return now, ids.tolist()

    def _changes_words(self) -> SharedWords | None:
        if self._watch is None:
            gate = self._gate_handle()
            if gate is None:
                return None
            self._watch = gate.watch_scratch_words(_WORDS)
        return self._watch

    def changes(self) -> Callable[[], int] | None:
        """A function of no arguments loading the change count now (see the class
        docstring; valid until :meth:`close`), or None while there is no count
        to load (no gate yet, or no writer of this version made it)."""
        words = self._changes_words()
        return None if words is None else words.loader64(0)

    def close(self) -> None:
        """Close the gate file (the locked file's handle belongs to the caller)."""
        if self._watch is not None:
            self._head_now = None
            self._watch.close()
            self._watch = None
        if self._counter is not None:
            self._counter[1].close()
            self._counter[0].close()
            self._counter = None
        if self._gate is not None:
            self._gate.close()
            self._gate = None


def take_lock(
    fs: FileSystem,
    path: str,
    *,
    exclusive: bool = True,
    wait: float | datetime.timedelta | None = 0.0,
    what: str = "writer lock",
    create: bool = True,
) -> HeldLock:
    """Open ``path`` (creating it when ``create``) and lock it.

    ``what`` names the lock in the :class:`LockedError` message ("the writer
    lock of the page store").  A missing file with ``create=False`` raises
    ``FileNotFoundError``.
    """
    handle = fs.open(path, OpenMode.CREATE if create else OpenMode.READ)
    try:
        lock_handle(handle, exclusive=exclusive, wait=wait, what=what)
    except BaseException:
        handle.close()
        raise
    return HeldLock(path, handle, exclusive)


def take_record_lock(
    fs: FileSystem,
    path: str,
    *,
    wait: float | datetime.timedelta | None = 0.0,
    what: str = "lock",
) -> HeldLock:
    """Open ``path`` (creating it) and take an exclusive record lock of its first
    byte, the kind other runtimes' locks conflict with (see the module docstring).

    Needs a file system with range locks (:attr:`FileHandle.supports_range_locks`;
    on the OS, 64-bit Linux): elsewhere it raises :class:`ConfigError` rather
    than take a lock that would not exclude the JVM.  ``wait`` as for
    :func:`take_lock`; released by :meth:`HeldLock.release` (closing the handle).
    """
    seconds = wait_seconds(wait)
    handle = fs.open(path, OpenMode.CREATE)
    try:
        if not handle.supports_range_locks:
            raise ConfigError(f"{path}: the {what} is a record lock, which this file system does not offer")
        if seconds is None:
            handle.lock_range(0, 1, exclusive=True, blocking=True)
            return HeldLock(path, handle, True)
        deadline = time.monotonic() + seconds
        delay = 0.001
        while not handle.lock_range(0, 1, exclusive=True, blocking=False):
            left = deadline - time.monotonic()
            if left <= 0:
                waited = f" (waited {seconds:g} s)" if seconds else ""
                raise LockedError(f"{path}: the {what} is held by another process or handle{waited}", path)
            time.sleep(min(delay, left))
            delay = min(delay * 2, _MAX_POLL)
    except BaseException:
        handle.close()
        raise
    return HeldLock(path, handle, True)


def probe_lock(fs: FileSystem, path: str) -> bool:
    """Whether some process holds a lock on ``path`` now (False if it is missing).

    Takes and at once drops an exclusive lock; used to tell a live holder's lock
    file from one a dead process left behind.
    """
    try:
        held = take_lock(fs, path, create=False)
    except LockedError:
        return True
    except FileNotFoundError:
        return False
    held.release()
    return False
