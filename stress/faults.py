"""Fault injection: make the Nth mutating file-system operation fail.

:class:`FaultyFS` wraps any :class:`~engine.fs.FileSystem` (the real one or the
crash simulator).  It counts mutating operations – write, append, truncate,
fsync, fdatasync, rename, unlink, mkdir, rmdir, directory fsync (a durable
write counts as a write and an fsync), each an :class:`OpKind` – logs each as a
:class:`FaultLogEntry`, and makes the
``fail_at``-th one (1-based) raise ``OSError(errno)``; with ``persistent=True``
every later one fails too (a dead disk, a full one that stays full).  Sweeping
``fail_at`` from 1 until the workload completes without a fault is SQLite's
I/O-error test.
"""

from __future__ import annotations

import errno as errno_mod
import os
import threading
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from enum import StrEnum

from engine.fs.base import FileHandle, FileSystem, OpenMode
from engine.fs.words import SharedWords


class OpKind(StrEnum):
    """A kind of mutating operation :class:`FaultyFS` counts (a ``str``, so
    ``kinds=("fsync",)`` selects :attr:`FSYNC`)."""

    WRITE = "write"  # a write of any form, and the creation of a file
    TRUNCATE = "truncate"
    FSYNC = "fsync"  # fsync, fdatasync, and the sync half of a durable write
    RENAME = "rename"
    UNLINK = "unlink"
    MKDIR = "mkdir"
    RMDIR = "rmdir"
    FSYNC_DIR = "fsync_dir"


#: Operation kinds counted (and so failable) by default: all of them.
MUTATING: tuple[OpKind, ...] = tuple(OpKind)


@dataclass(frozen=True)
class FaultLogEntry:
    """One counted operation: its 1-based number, kind, path, and whether it was
    the one made to fail."""

    n: int
    kind: OpKind
    path: str
    failed: bool

    def __str__(self) -> str:
        return f"{self.n} {self.kind} {self.path}{' FAILED' if self.failed else ''}"


class FaultyFS(FileSystem):
    """A :class:`FileSystem` that fails on schedule; see the module docstring."""

    def __init__(
        self,
        inner: FileSystem,
        fail_at: int | None = None,
        errno: int = errno_mod.EIO,
        persistent: bool = False,
        kinds: Sequence[str] = MUTATING,
    ) -> None:
        self.inner = inner
        self.fail_at = fail_at
        self.errno = errno
        self.persistent = persistent
        self.kinds: Collection[str] = frozenset(OpKind(k) for k in kinds)
        self.ops = 0
        self.faults = 0
        self.log: list[FaultLogEntry] = []
        self._lock = threading.Lock()

    def tick(self, kind: OpKind, path: str) -> None:
        """Count one operation and raise if it is scheduled to fail."""
        if kind not in self.kinds:
            return
        with self._lock:
            self.ops += 1
            n = self.ops
            fail = self.fail_at is not None and (
                n == self.fail_at or (self.persistent and n > self.fail_at)
            )
            if fail:
                self.faults += 1
            self.log.append(FaultLogEntry(n, kind, path, fail))
        if fail:
            raise OSError(self.errno, f"injected {errno_mod.errorcode.get(self.errno, self.errno)} "
                          f"at operation {n} ({kind})", path)

    def failed_since(self, since: int, kind: OpKind | None = None) -> list[FaultLogEntry]:
        """The log entries from index ``since`` on that failed (of ``kind`` only,
        if given)."""
        return [e for e in self.log[since:] if e.failed and (kind is None or e.kind == kind)]

    def open(self, path: str, mode: OpenMode | str = OpenMode.READ) -> FileHandle:
        mode = OpenMode(mode)
        if mode in (OpenMode.CREATE, OpenMode.NEW) and not self.inner.exists(path):
            self.tick(OpKind.WRITE, path)  # creating a file writes a directory entry
        return FaultyHandle(self, self.inner.open(path, mode), mode is not OpenMode.READ)

    def exists(self, path: str) -> bool:
        return self.inner.exists(path)

    def is_symlink(self, path: str) -> bool:
        return self.inner.is_symlink(path)

    def isdir(self, path: str) -> bool:
        return self.inner.isdir(path)

    def listdir(self, path: str) -> list[str]:
        return self.inner.listdir(path)

    def file_size(self, path: str) -> int:
        return self.inner.file_size(path)

    def mtime_ns(self, path: str) -> int:
        return self.inner.mtime_ns(path)

    def mkdir(self, path: str) -> None:
        self.tick(OpKind.MKDIR, path)
        self.inner.mkdir(path)

    def rmdir(self, path: str) -> None:
        self.tick(OpKind.RMDIR, path)
        self.inner.rmdir(path)

    def rename(self, src: str, dst: str) -> None:
        self.tick(OpKind.RENAME, dst)
        self.inner.rename(src, dst)

    def unlink(self, path: str) -> None:
        self.tick(OpKind.UNLINK, path)
        self.inner.unlink(path)

    def fsync_dir(self, path: str) -> None:
        self.tick(OpKind.FSYNC_DIR, path)
        self.inner.fsync_dir(path)

    def block_size(self, path: str) -> int:
        return self.inner.block_size(path)


class FaultyHandle(FileHandle):
    """Delegates to the wrapped handle after asking :meth:`FaultyFS.tick`."""

    def __init__(self, fs: FaultyFS, inner: FileHandle, writable: bool) -> None:
        super().__init__(inner.path, writable)
        self._fs = fs
        self._inner = inner

    def fileno(self) -> int:
        return self._inner.fileno()  # type: ignore[attr-defined, no-any-return]

    def _raw_read(self, offset: int, size: int) -> bytes:
        return self._inner.read_at(offset, size)

    def _raw_write(self, offset: int, data: bytes) -> None:
        self._fs.tick(OpKind.WRITE, self.path)
        self._inner.write_at(offset, data)

    def _raw_size(self) -> int:
        return self._inner.size()

    def _raw_truncate(self, size: int) -> None:
        self._fs.tick(OpKind.TRUNCATE, self.path)
        self._inner.truncate(size)

    def _raw_sync(self, data_only: bool) -> None:
        self._fs.tick(OpKind.FSYNC, self.path)
        try:
            if data_only:
                self._inner.fdatasync()
            else:
                self._inner.fsync()
        except Exception as exc:
            raise self._unwrapped(exc) from exc

    def _raw_write_durable(self, offset: int, parts: Sequence[bytes | bytearray | memoryview]) -> None:
        """Counted as the write and the sync it is; the wrapped file system then
        sees a real ``write_durable_at`` (the crash simulator models exactly those
        bytes as durable, not the whole file).  A fault on the sync half leaves
        the bytes written but not durable, as a failed ``O_DSYNC`` write may."""
        self._fs.tick(OpKind.WRITE, self.path)
        try:
            self._fs.tick(OpKind.FSYNC, self.path)
        except OSError:
            self._inner.write_parts_at(offset, parts)
            raise
        try:
            self._inner.write_durable_at(offset, parts)
        except Exception as exc:
            raise self._unwrapped(exc) from exc

    def _unwrapped(self, exc: Exception) -> OSError:
        """The inner handle already turned its OSError into a PoisonedError: hand the
        base class the OSError, so that it poisons this handle the same way."""
        if isinstance(exc, OSError):
            return exc
        cause = exc.__cause__
        return cause if isinstance(cause, OSError) else OSError(errno_mod.EIO, str(exc), self.path)

    @property
    def supports_range_locks(self) -> bool:  # type: ignore[override]
        return self._inner.supports_range_locks

    def _raw_lock_range(self, offset: int, length: int, exclusive: bool, blocking: bool) -> bool:
        return self._inner.lock_range(offset, length, exclusive=exclusive, blocking=blocking)

    def _raw_unlock_range(self, offset: int, length: int) -> None:
        self._inner.unlock_range(offset, length)

    def _raw_range_locked(self, offset: int, length: int, exclusive: bool) -> bool:
        return self._inner.range_locked(offset, length, exclusive=exclusive)

    def _raw_lock(self, exclusive: bool, blocking: bool) -> None:
        self._inner.lock(exclusive=exclusive, blocking=blocking)

    def _raw_map_words(self, count: int) -> SharedWords:
        # Stores to mapped words are memory stores: a disk fault never fails one
        # (the file's blocks were written when it was mapped).
        return self._inner.map_words(count)

    def _raw_watch_words(self, count: int) -> SharedWords:
        words = self._inner.watch_words(count)
        assert words is not None  # (its size was checked through this handle)
        return words

    def _raw_map_scratch_words(self, count: int) -> SharedWords:
        return self._inner.map_scratch_words(count)  # (memory stores, as the mapped words)

    def _raw_watch_scratch_words(self, count: int) -> SharedWords | None:
        return self._inner.watch_scratch_words(count)

    def _raw_unlock(self) -> None:
        self._inner.unlock()

    def _raw_close(self) -> None:
        self._inner.close()


def dev_full_available() -> bool:
    """Whether ``/dev/full`` exists here (writes to it fail with ENOSPC)."""
    return os.path.exists("/dev/full")
