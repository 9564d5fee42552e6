"""Durability helpers every store needs, written once.

* :func:`atomic_write` – replace a small file atomically (temp, fsync, rename,
  fsync directory);
* :func:`create_file` – create a file and make its directory entry durable;
* :func:`make_dirs` – create directories and fsync each parent;
* :class:`SyncPolicy` – the ``sync=`` knob shared by the stores;
* :class:`GroupCommit` – many threads' writes share one fsync, and each caller
  returns only once its own bytes are durable;
"""

from __future__ import annotations

import os.path
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from engine.errors import ConfigError, DiskFullError, PoisonedError
from engine.fs.base import FileHandle, FileSystem, OpenMode
from engine.fs.crashpoints import crashpoint


def parent_dir(path: str) -> str:
    """The directory holding ``path`` ('.' for a bare name)."""
    return os.path.dirname(path) or "."


def atomic_write(fs: FileSystem, path: str, data: bytes, *, tmp_path: str | None = None) -> None:
    """Replace ``path`` with ``data`` so that a crash leaves the old or the new file.

    Order: write temp -> fsync temp -> rename over ``path`` -> fsync directory.
    Without the first fsync the rename could reach disk before the data (an empty
    or torn file under the final name); without the last one the rename itself
    could be undone by a crash.
    """
    tmp = tmp_path if tmp_path is not None else path + ".tmp"
    with fs.open(tmp, OpenMode.CREATE) as handle:
        handle.truncate(0)
        handle.write_at(0, data)
        crashpoint("atomic_write.before-fsync")
        handle.fsync()
    crashpoint("atomic_write.before-rename")
    fs.rename(tmp, path)
    crashpoint("atomic_write.before-dir-fsync")
    fs.fsync_dir(parent_dir(path))
    crashpoint("atomic_write.after-dir-fsync")


def create_file(fs: FileSystem, path: str, initial: bytes = b"") -> FileHandle:
    """Create ``path`` (must not exist) holding ``initial``, durably, and return it open.

    The data is fsynced before the directory so that the name never points at a
    file whose header has not reached the disk.
    """
    handle = fs.open(path, OpenMode.NEW)
    try:
        if initial:
            handle.write_at(0, initial)
        crashpoint("create_file.before-fsync")
        handle.fsync()
        fs.fsync_dir(parent_dir(path))
        crashpoint("create_file.after-dir-fsync")
    except BaseException:
        handle.close()
        raise
    return handle


def make_dirs(fs: FileSystem, path: str) -> None:
    """``mkdir -p`` that fsyncs the parent of each directory it creates."""
    if not path or fs.isdir(path):
        return
    parent = os.path.dirname(path.rstrip("/"))
    if parent and parent != path:
        make_dirs(fs, parent)
    try:
        fs.mkdir(path)
    except FileExistsError:
        return
    fs.fsync_dir(parent or ".")


@dataclass(frozen=True)
class SyncPolicy:
    """When writes become durable: ``always`` (before the call returns, with
    group commit), every ``period`` seconds in the background, or ``never``
    (left to the OS; a crash may lose recent writes)."""

    mode: str  # "always" | "periodic" | "never"
    period: float = 0.0

    @classmethod
    def parse(cls, value: object) -> SyncPolicy:
        """Accept ``"always"``, ``"never"``, a number of seconds, or a SyncPolicy."""
        if isinstance(value, SyncPolicy):
            return value
        if value is True or value == "always":
            return cls("always")
        if value is None or value is False or value == "never":
            return cls("never")
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if value <= 0:
                return cls("always")
            return cls("periodic", float(value))
        if isinstance(value, str):
            try:
                return cls.parse(float(value))
            except ValueError:
                pass
        raise ConfigError(f"sync must be 'always', 'never' or seconds > 0, not {value!r}")

    @property
    def always(self) -> bool:
        return self.mode == "always"

    def __str__(self) -> str:
        return f"{self.period:g}s" if self.mode == "periodic" else self.mode


def _as_poisoned(name: str, failure: BaseException) -> PoisonedError:
    """The error every writer that shared a failed sync gets: the sync's own typed
    error (a :class:`DiskFullError` stays one) or a PoisonedError wrapping it."""
    if isinstance(failure, DiskFullError):
        return DiskFullError(failure.path, failure.errno or 28, failure.operation)
    if isinstance(failure, PoisonedError):
        return PoisonedError(failure.path, failure.cause, failure.operation)
    return PoisonedError(name, failure)


class GroupCommit:
    """Let concurrent writers share fsyncs.

    A writer appends its bytes (under its own lock), takes a :meth:`ticket`, and
    calls :meth:`wait`.  The first waiter becomes the leader: it notes the highest
    ticket issued so far, runs ``sync`` without holding the lock, and releases every
    waiter whose ticket it covered.  Writers that arrive during that fsync are
    covered by the next one, so N concurrent writers cost about two fsyncs, not N.

    ``delay`` (seconds) makes the leader wait a little before syncing so that more
    writers can join (journald's trick); 0 means sync at once.

    A failed sync is final: every waiter, then and later, gets PoisonedError.
    """

    def __init__(self, sync: Callable[[], None], *, delay: float = 0.0, name: str = "") -> None:
        self._sync = sync
        self._delay = delay
        self._name = name
        self._cond = threading.Condition(threading.Lock())
        self._issued = 0
        self._synced = 0
        self._syncing = False
        self._failure: BaseException | None = None
        self.syncs = 0  # how many fsync rounds ran (for tests and benchmarks)

    def ticket(self) -> int:
        """Call after your write completed; returns the number to wait for."""
        with self._cond:
            self._issued += 1
            return self._issued

    @property
    def pending(self) -> bool:
        """Whether some ticket is not yet covered by a completed sync."""
        return self._synced < self._issued

    def wait(self, ticket: int) -> None:
        """Return once a sync that started after ``ticket`` was issued has finished."""
        with self._cond:
            while True:
                if self._failure is not None:
                    raise _as_poisoned(self._name, self._failure)
                if self._synced >= ticket:
                    return
                if not self._syncing:
                    break
                self._cond.wait()
            self._syncing = True
        self._lead()

    def sync_now(self) -> None:
        """Sync everything issued so far (used by periodic and close paths)."""
        self.wait(self.ticket())

    def _lead(self) -> None:
        if self._delay > 0:
            time.sleep(self._delay)
        with self._cond:
            target = self._issued
        failure: BaseException | None = None
        try:
            self._sync()
        except BaseException as exc:
            failure = exc
        with self._cond:
            self._syncing = False
            if failure is None:
                self._synced = max(self._synced, target)
                self.syncs += 1
            else:
                self._failure = failure
            self._cond.notify_all()
        if failure is not None:
            raise _as_poisoned(self._name, failure) from failure
