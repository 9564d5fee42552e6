"""Fault injection: make the Nth mutating file-system operation fail.

:class:`FaultyFS` wraps any :class:`~engine.fs.FileSystem` (the real one or the
crash simulator).  It counts mutating operations – write, append, truncate,
fsync, fdatasync, rename, unlink, mkdir, rmdir, directory fsync – and makes the
``fail_at``-th one (1-based) raise ``OSError(errno)``; with ``persistent=True``
every later one fails too (a dead disk, a full one that stays full).  Sweeping
``fail_at`` from 1 until the workload completes without a fault is SQLite's
I/O-error test.
"""

from __future__ import annotations

import errno as errno_mod
import os
import threading

from engine.fs.base import FileHandle, FileSystem, OpenMode

#: Operation kinds counted (and so failable).
MUTATING = ("write", "truncate", "fsync", "rename", "unlink", "mkdir", "rmdir", "fsync_dir")


class FaultyFS(FileSystem):
    """A :class:`FileSystem` that fails on schedule; see the module docstring."""

    def __init__(
        self,
        inner: FileSystem,
        fail_at: int | None = None,
        errno: int = errno_mod.EIO,
        persistent: bool = False,
        kinds: tuple[str, ...] = MUTATING,
    ) -> None:
        self.inner = inner
        self.fail_at = fail_at
        self.errno = errno
        self.persistent = persistent
        self.kinds = kinds
        self.ops = 0
        self.faults = 0
        self.log: list[str] = []
        self._lock = threading.Lock()

    def tick(self, kind: str, path: str) -> None:
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
            self.log.append(f"{n} {kind} {path}{' FAILED' if fail else ''}")
        if fail:
            raise OSError(self.errno, f"injected {errno_mod.errorcode.get(self.errno, self.errno)} "
                          f"at operation {n} ({kind})", path)

    def open(self, path: str, mode: OpenMode | str = OpenMode.READ) -> FileHandle:
        mode = OpenMode(mode)
        if mode in (OpenMode.CREATE, OpenMode.NEW) and not self.inner.exists(path):
            self.tick("write", path)  # creating a file writes a directory entry
        return FaultyHandle(self, self.inner.open(path, mode), mode is not OpenMode.READ)

    def exists(self, path: str) -> bool:
        return self.inner.exists(path)

    def isdir(self, path: str) -> bool:
        return self.inner.isdir(path)

    def listdir(self, path: str) -> list[str]:
        return self.inner.listdir(path)

    def file_size(self, path: str) -> int:
        return self.inner.file_size(path)

    def mtime_ns(self, path: str) -> int:
        return self.inner.mtime_ns(path)

    def mkdir(self, path: str) -> None:
        self.tick("mkdir", path)
        self.inner.mkdir(path)

    def rmdir(self, path: str) -> None:
        self.tick("rmdir", path)
        self.inner.rmdir(path)

    def rename(self, src: str, dst: str) -> None:
        self.tick("rename", dst)
        self.inner.rename(src, dst)

    def unlink(self, path: str) -> None:
        self.tick("unlink", path)
        self.inner.unlink(path)

    def fsync_dir(self, path: str) -> None:
        self.tick("fsync_dir", path)
        self.inner.fsync_dir(path)


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
        self._fs.tick("write", self.path)
        self._inner.write_at(offset, data)

    def _raw_size(self) -> int:
        return self._inner.size()

    def _raw_truncate(self, size: int) -> None:
        self._fs.tick("truncate", self.path)
        self._inner.truncate(size)

    def _raw_sync(self, data_only: bool) -> None:
        self._fs.tick("fsync", self.path)
        try:
            if data_only:
                self._inner.fdatasync()
            else:
                self._inner.fsync()
        except Exception as exc:  # the inner handle already wrapped it: unwrap for the base
            cause = exc.__cause__ if isinstance(exc.__cause__, OSError) else None
            raise cause or OSError(errno_mod.EIO, str(exc), self.path) from exc

    def _raw_lock(self, exclusive: bool, blocking: bool) -> None:
        self._inner.lock(exclusive=exclusive, blocking=blocking)

    def _raw_unlock(self) -> None:
        self._inner.unlock()

    def _raw_close(self) -> None:
        self._inner.close()


def dev_full_available() -> bool:
    """Whether ``/dev/full`` exists here (writes to it fail with ENOSPC)."""
    return os.path.exists("/dev/full")
