"""The real file system: the only module of engine that makes durable OS calls."""

from __future__ import annotations

import errno
import os
import stat
import struct
import sys
import threading
from collections.abc import Sequence

import portalocker

try:  # POSIX: flock and OFD range locks straight from the system calls
    import fcntl
except ImportError:  # pragma: no cover - Windows: portalocker's locks, no range locks
    fcntl = None  # type: ignore[assignment]

from engine.errors import LockedError
from engine.fs.base import FileHandle, FileSystem, OpenMode
from engine.fs.words import HAVE_FUTEX, FileWords, MappedWords, ReadMappedWords, SharedWords

_FLAGS = {
    OpenMode.READ: os.O_RDONLY,
    OpenMode.WRITE: os.O_RDWR,
    OpenMode.CREATE: os.O_RDWR | os.O_CREAT,
    OpenMode.NEW: os.O_RDWR | os.O_CREAT | os.O_EXCL,
}

# fdatasync is missing on macOS; fsync is the portable fallback there.
_fdatasync = getattr(os, "fdatasync", os.fsync)
# pwritev(..., RWF_DSYNC): one system call that writes and syncs exactly that range
# (Linux 4.7+).  Elsewhere, or when the kernel or file system refuses it, a write
# and fdatasync.
_RWF_DSYNC: int | None = getattr(os, "RWF_DSYNC", None) if hasattr(os, "pwritev") else None
#: The most buffers one pwritev takes (Linux's IOV_MAX).
_IOV_MAX = 1024
_HAVE_PWRITEV = hasattr(os, "pwritev")
#: ``struct flock`` for F_OFD_* (Linux x86-64/arm64): l_type i16, l_whence i16,
#: l_start i64, l_len i64, l_pid i32, padding (32 bytes).
_FLOCK = struct.Struct("hhqqi4x")
assert _FLOCK.size == 32


class OsFileHandle(FileHandle):
    """A file descriptor with pread/pwrite; locks are flock()s, range locks OFD locks."""

    def __init__(self, path: str, fd: int, writable: bool) -> None:
        super().__init__(path, writable)
        self._fd = fd
        self._locked = False
        self._lock_guard = threading.Lock()

    def fileno(self) -> int:
        return self._fd

    def _raw_read(self, offset: int, size: int) -> bytes:
        """Up to ``size`` bytes at ``offset``; also this handle's public
        :meth:`read_at` (see below), so it keeps the base class's rules itself."""
        if size <= 0:
            self._check_open()
            return b""
        try:
            first = os.pread(self._fd, size, offset)
        except OSError:
            # A closed handle's descriptor is -1 (see _raw_close), so reading it
            # fails here rather than reading a reused descriptor; the seam's one
            # closed rule then names it.
            self._check_open()
            raise
        if len(first) == size or not first:
            return first  # the usual case: one pread served it all (or end of file)
        chunks: list[bytes] = [first]
        offset += len(first)
        size -= len(first)
        while size > 0:
            chunk = os.pread(self._fd, size, offset)
            if not chunk:
                break
            chunks.append(chunk)
            offset += len(chunk)
            size -= len(chunk)
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    #: Reads are served by the raw operation itself: one Python frame per read
    #: instead of two.  Point reads (``AppendLog.get``, event replay's walker)
    #: make one call per record or block, and the base class's wrapper frame was
    #: 8% of a replay (callgrind).  The rules the wrapper applies hold here too:
    #: ``size <= 0`` reads nothing, and a closed handle raises ClosedError through
    #: the one copy of that rule (``_check_open``), met on the failure path only.
    read_at = _raw_read

    def _raw_write(self, offset: int, data: bytes) -> None:
        written = os.pwrite(self._fd, data, offset)
        if written == len(data):
            return  # the usual case: one pwrite wrote it all
        if written <= 0:  # pragma: no cover - the kernel reports errors instead
            raise OSError(errno.EIO, "short write", self.path)
        view = memoryview(data)[written:]
        offset += written
        while view:
            written = os.pwrite(self._fd, view, offset)
            if written <= 0:  # pragma: no cover - the kernel reports errors instead
                raise OSError(errno.EIO, "short write", self.path)
            view = view[written:]
            offset += written

    def _raw_write_many(self, writes: Sequence[tuple[int, bytes]]) -> None:
        fd, pwrite = self._fd, os.pwrite
        for offset, data in writes:
            if pwrite(fd, data, offset) != len(data):  # short (rare): the loop of _raw_write
                self._raw_write(offset, data)

    def _raw_write_parts(self, offset: int, parts: Sequence[bytes | bytearray | memoryview]) -> None:
        if not _HAVE_PWRITEV:  # pragma: no cover - not Linux or BSD
            super()._raw_write_parts(offset, parts)
            return
        # One pwritev in the usual case (no slicing: an append log's flush is three of these).
        n = len(parts)
        chunks = (parts,) if n <= _IOV_MAX else [parts[k : k + _IOV_MAX] for k in range(0, n, _IOV_MAX)]
        for chunk in chunks:
            written = os.pwritev(self._fd, chunk, offset)
            total = sum(map(len, chunk))
            if written != total:  # a short write (rare for regular files): the rest by pwrite
                self._raw_write(offset + written, memoryview(b"".join(chunk))[written:])  # type: ignore[arg-type]
            offset += total

    def _raw_write_durable(self, offset: int, parts: Sequence[bytes | bytearray | memoryview]) -> None:
        global _RWF_DSYNC
        if _RWF_DSYNC is not None and 0 < len(parts) <= _IOV_MAX:
            try:
                written = os.pwritev(self._fd, parts, offset, _RWF_DSYNC)
            except OSError as exc:
                if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
                    raise
                _RWF_DSYNC = None  # not supported here: write + fdatasync from now on
            else:
                total = sum(map(len, parts))
                if written == total:
                    return
                # A short write (rare for regular files): the rest, then a full sync.
                rest = b"".join(parts)[written:]
                self._raw_write(offset + written, rest)
                _fdatasync(self._fd)
                return
        super()._raw_write_durable(offset, parts)

    def _raw_size(self) -> int:
        return os.fstat(self._fd).st_size

    def _raw_truncate(self, size: int) -> None:
        os.ftruncate(self._fd, size)

    def _raw_sync(self, data_only: bool) -> None:
        if data_only:
            _fdatasync(self._fd)
        else:
            os.fsync(self._fd)

    def _raw_lock(self, exclusive: bool, blocking: bool) -> None:
        if fcntl is not None:
            # flock itself: portalocker's wrapper costs ~10x the system call, and
            # the queue's producers take a lock per group commit.
            op = (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | (0 if blocking else fcntl.LOCK_NB)
            try:
                fcntl.flock(self._fd, op)
            except OSError as exc:
                if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    raise
                kind = "exclusive" if exclusive else "shared"
                raise LockedError(f"{self.path}: {kind} lock is held by another handle") from exc
            self._locked = True
            return
        flags = portalocker.LockFlags.EXCLUSIVE if exclusive else portalocker.LockFlags.SHARED
        if not blocking:
            flags |= portalocker.LockFlags.NON_BLOCKING
        try:
            portalocker.lock(self._fd, flags)
        except portalocker.exceptions.LockException as exc:
            kind = "exclusive" if exclusive else "shared"
            raise LockedError(f"{self.path}: {kind} lock is held by another handle") from exc
        self._locked = True

    def _raw_unlock(self) -> None:
        if self._locked:
            if fcntl is not None:
                fcntl.flock(self._fd, fcntl.LOCK_UN)
            else:  # pragma: no cover - Windows
                portalocker.unlock(self._fd)
            self._locked = False

    #: Open-file-description range locks (Linux 3.15+): held per handle, not per
    #: process, so two handles of one process conflict as two processes do.
    #: ``_FLOCK`` is the 64-bit Linux layout, so only there.
    supports_range_locks = (
        fcntl is not None and hasattr(fcntl, "F_OFD_SETLK") and sys.platform.startswith("linux")
        and struct.calcsize("P") == 8
    )

    def _range_op(self, command: int, kind: int, offset: int, length: int) -> bytes:
        return fcntl.fcntl(self._fd, command, _FLOCK.pack(kind, os.SEEK_SET, offset, length, 0))  # type: ignore[no-any-return]

    def _raw_lock_range(self, offset: int, length: int, exclusive: bool, blocking: bool) -> bool:
        kind = fcntl.F_WRLCK if exclusive else fcntl.F_RDLCK
        try:
            self._range_op(fcntl.F_OFD_SETLKW if blocking else fcntl.F_OFD_SETLK, kind, offset, length)
        except OSError as exc:
            if exc.errno in (errno.EAGAIN, errno.EACCES):
                return False
            raise
        return True

    def _raw_unlock_range(self, offset: int, length: int) -> None:
        self._range_op(fcntl.F_OFD_SETLK, fcntl.F_UNLCK, offset, length)

    def _raw_range_locked(self, offset: int, length: int, exclusive: bool) -> bool:
        kind = fcntl.F_WRLCK if exclusive else fcntl.F_RDLCK
        raw = self._range_op(fcntl.F_OFD_GETLK, kind, offset, length)
        return bool(_FLOCK.unpack(raw)[0] != fcntl.F_UNLCK)

    def _raw_map_words(self, count: int) -> SharedWords:
        return MappedWords(self._fd, count) if HAVE_FUTEX else FileWords(self, count)

    def _raw_watch_words(self, count: int) -> SharedWords:
        return ReadMappedWords(self._fd, count)

    def _raw_close(self) -> None:
        fd, self._fd = self._fd, -1  # never a descriptor the OS may hand out again
        os.close(fd)


class OsFileSystem(FileSystem):
    """engine's default :class:`FileSystem`: plain POSIX calls."""

    def open(self, path: str, mode: OpenMode | str = OpenMode.READ) -> FileHandle:
        mode = OpenMode(mode)
        fd = os.open(path, _FLAGS[mode] | getattr(os, "O_CLOEXEC", 0), 0o644)
        if mode is OpenMode.READ and stat.S_ISDIR(os.fstat(fd).st_mode):
            # POSIX opens a directory for reading; its first read would fail with
            # an EISDIR that names no path.  Fail here, naming it.
            os.close(fd)
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path)
        return OsFileHandle(path, fd, writable=mode is not OpenMode.READ)

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def lookup_error(self, path: str) -> OSError | None:
        try:
            os.stat(path)
        except FileNotFoundError:
            return None
        except OSError as exc:
            return exc
        return None

    def isdir(self, path: str) -> bool:
        return os.path.isdir(path)

    def is_symlink(self, path: str) -> bool:
        return os.path.islink(path)

    def listdir(self, path: str) -> list[str]:
        return sorted(os.listdir(path))

    def file_size(self, path: str) -> int:
        return os.stat(path).st_size

    def mkdir(self, path: str) -> None:
        os.mkdir(path)

    def rmdir(self, path: str) -> None:
        os.rmdir(path)

    def rename(self, src: str, dst: str) -> None:
        os.replace(src, dst)

    def unlink(self, path: str) -> None:
        os.unlink(path)

    def fsync_dir(self, path: str) -> None:
        fd = os.open(path or ".", os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def mtime_ns(self, path: str) -> int:
        return os.stat(path).st_mtime_ns

    def lock_holders(self, path: str) -> list[int] | None:
        # /proc/locks lines: "1: FLOCK  ADVISORY  WRITE 20942 fe:00:2146451 0 EOF"
        # (pid, then device major:minor in hex and the inode in decimal).
        try:
            with open("/proc/locks", encoding="ascii", errors="replace") as f:
                lines = f.readlines()
        except OSError:
            return None  # not Linux (or no /proc): the system does not say
        try:
            st = os.stat(path)
        except FileNotFoundError:
            return []  # no file, no holder
        want = (os.major(st.st_dev), os.minor(st.st_dev), st.st_ino)
        pids: list[int] = []
        for line in lines:
            fields = line.split()
            if len(fields) < 6 or fields[1] == "->":  # a blocked request, not a holder
                continue
            try:
                major, minor, inode = fields[5].split(":")
                key = (int(major, 16), int(minor, 16), int(inode))
                pid = int(fields[4])
            except ValueError:
                continue
            if key == want and pid > 0 and pid not in pids:  # (OFD range locks show pid -1)
                pids.append(pid)
        return pids

    def block_size(self, path: str) -> int:
        page = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
        return max(page, os.stat(path or ".").st_blksize)

    def free_bytes(self, path: str) -> int | None:
        if not hasattr(os, "statvfs"):
            return None
        found = os.statvfs(path or ".")
        return found.f_bavail * found.f_frsize
