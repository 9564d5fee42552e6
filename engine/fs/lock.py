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
"""

from __future__ import annotations

import datetime
import time
from types import TracebackType

from engine.errors import ConfigError, LockedError
from engine.fs.base import FileHandle, FileSystem, OpenMode

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
