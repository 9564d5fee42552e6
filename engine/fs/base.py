"""The file-system seam: every durable operation of engine goes through here.

Stores never call ``os.write``, ``os.fsync``, ``os.rename`` and friends themselves;
they hold a :class:`FileSystem` (the real one by default) and the handles it opens.
Tests swap in the crash simulator or a fault injector (``stress/``) to record every
operation, model power loss, and make the Nth operation fail.

The handle base class implements the one policy every store needs and must not
reimplement: *poisoning*.  If an fsync fails, the handle refuses all further writes
with :class:`~engine.errors.PoisonedError` until it is closed and the file reopened.
A failed write or truncate poisons it too, because the file's contents are then
unknown to the store.  A full disk (ENOSPC, EDQUOT) is reported as
:class:`~engine.errors.DiskFullError`, whichever operation met it.

Implementations (the real OS, the crash simulator, the fault injector) override
only the ``_raw_*`` operations; the checks live here, once.
"""

from __future__ import annotations

import errno
import functools
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from enum import StrEnum
from types import TracebackType

from engine.errors import ClosedError, DiskFullError, PoisonedError
from engine.fs import timing
from engine.fs.words import WORD, FileWords, SharedWords

#: errno values that mean "the file system is full" (reported as DiskFullError).
_DISK_FULL = frozenset({errno.ENOSPC, errno.EDQUOT})


class OpenMode(StrEnum):
    """How :meth:`FileSystem.open` treats the file."""

    READ = "r"  # read only; must exist
    WRITE = "w"  # read and write; must exist
    CREATE = "c"  # read and write; created empty if missing
    NEW = "n"  # read and write; must not exist yet


class FileHandle(ABC):
    """An open file.  Offsets are absolute; there is no hidden file position.

    Implementations provide the ``_raw_*`` methods; the public methods add the
    closed check, poisoning, and the tracked end-of-file used by :meth:`append`.
    """

    def __init__(self, path: str, writable: bool) -> None:
        self.path = path
        self.writable = writable
        self._closed = False
        self._poison: BaseException | None = None
        self._poison_operation = "write"
        self._end: int | None = None
        self._append_lock = threading.Lock()

    # -- what implementations provide -------------------------------------------
    @abstractmethod
    def _raw_read(self, offset: int, size: int) -> bytes: ...

    @abstractmethod
    def _raw_write(self, offset: int, data: bytes) -> None: ...

    def _raw_write_parts(self, offset: int, parts: Sequence[bytes | bytearray | memoryview]) -> None:
        """Write ``parts`` back to back at ``offset`` (not durable).  This default
        joins them into one write; the real one hands them to ``pwritev`` uncopied."""
        self._raw_write(offset, b"".join(parts))

    def _raw_write_many(self, writes: Sequence[tuple[int, bytes]]) -> None:
        for offset, data in writes:
            self._raw_write(offset, data)

    @abstractmethod
    def _raw_size(self) -> int: ...

    @abstractmethod
    def _raw_truncate(self, size: int) -> None: ...

    def _raw_write_durable(self, offset: int, parts: Sequence[bytes | bytearray | memoryview]) -> None:
        """Write ``parts`` back to back at ``offset`` and make them durable.

        This default writes, then syncs the whole file (stronger than the contract
        of :meth:`write_durable_at`, so right for any file system); the real one
        uses an ``O_DSYNC`` write, the crash simulator models exactly the range.
        """
        for part in parts:
            self._raw_write(offset, part)  # type: ignore[arg-type]  # any buffer
            offset += len(part)
        self._raw_sync(True)

    @abstractmethod
    def _raw_sync(self, data_only: bool) -> None: ...

    @abstractmethod
    def _raw_lock(self, exclusive: bool, blocking: bool) -> None: ...

    @abstractmethod
    def _raw_unlock(self) -> None: ...

    @abstractmethod
    def _raw_close(self) -> None: ...

    #: Whether this handle offers byte-range locks (:meth:`lock_range`).
    supports_range_locks = False

    def _raw_lock_range(self, offset: int, length: int, exclusive: bool, blocking: bool) -> bool:
        raise NotImplementedError(f"{type(self).__name__} has no range locks")

    def _raw_unlock_range(self, offset: int, length: int) -> None:
        raise NotImplementedError(f"{type(self).__name__} has no range locks")

    def _raw_range_locked(self, offset: int, length: int, exclusive: bool) -> bool:
        raise NotImplementedError(f"{type(self).__name__} has no range locks")

    # -- public API ---------------------------------------------------------------
    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def poisoned(self) -> bool:
        return self._poison is not None

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError(f"{self.path}: file handle is closed")

    def _check_writable(self) -> None:
        self._check_open()
        if self._poison is not None:
            raise self._poisoned_error()
        if not self.writable:
            raise PermissionError(f"{self.path}: opened read-only")

    def _poisoned_error(self) -> PoisonedError:
        """The error every write or sync after a failure raises."""
        cause = self._poison
        if isinstance(cause, OSError) and cause.errno in _DISK_FULL:
            return DiskFullError(self.path, cause.errno, self._poison_operation)
        return PoisonedError(self.path, cause, self._poison_operation)

    def _failed(self, exc: OSError, operation: str) -> BaseException:
        """Poison the handle after ``operation`` raised ``exc``; return what to raise.

        The one rule for every mutating operation: the handle is poisoned; a full
        disk becomes :class:`DiskFullError`; a failed sync (or durable write)
        becomes :class:`PoisonedError`; another failed write or truncate is
        re-raised as the ``OSError`` it is.
        """
        self._poison = exc
        self._poison_operation = operation
        if exc.errno in _DISK_FULL:
            return DiskFullError(self.path, exc.errno, operation)
        if operation == "write":
            return exc
        return PoisonedError(self.path, exc, operation)

    def read_at(self, offset: int, size: int) -> bytes:
        """Up to ``size`` bytes at ``offset`` (fewer at end of file).

        :class:`~engine.fs.osfs.OsFileHandle` serves this with its raw read
        directly (one frame per read), which keeps these same rules itself."""
        if self._closed:
            self._check_open()
        if size <= 0:
            return b""
        return self._raw_read(offset, size)

    def read_all(self) -> bytes:
        """The whole file as it is now."""
        self._check_open()
        return self._raw_read(0, self._raw_size())

    def size(self) -> int:
        """Current size in bytes (as this process sees it, synced or not)."""
        self._check_open()
        return self._raw_size()

    def write_at(self, offset: int, data: bytes) -> None:
        """Write ``data`` at ``offset``; not durable until :meth:`fsync`."""
        # The checks' rule is _check_writable; the test that it has nothing to
        # say is inlined (a write per record or field: two frames were ~40% of
        # this method's own cost).
        if self._closed or self._poison is not None or not self.writable:
            self._check_writable()
        try:
            self._raw_write(offset, data)
        except OSError as exc:
            raise self._failed(exc, "write") from exc
        end = offset + len(data)
        if self._end is not None and end > self._end:
            self._end = end

    def write_parts_at(self, offset: int, parts: Sequence[bytes | bytearray | memoryview]) -> None:
        """Write ``parts`` back to back at ``offset``, as one write; not durable until
        :meth:`fsync`.  What :meth:`write_at` of their join would do, without the
        join: the page store's checkpoint writes runs of page images this way (a
        run of 1,000 pages would otherwise be copied once more into a 4 MB buffer).
        """
        # write_at's rules, inlined as there (a frame per write was most of the
        # cost of an append log's flush: three of these per flush).
        if self._closed or self._poison is not None or not self.writable:
            self._check_writable()
        try:
            self._raw_write_parts(offset, parts)
        except OSError as exc:
            raise self._failed(exc, "write") from exc
        if self._end is not None:
            end = offset + sum(map(len, parts))
            if end > self._end:
                self._end = end

    def write_many_at(self, writes: Sequence[tuple[int, bytes]]) -> None:
        """:meth:`write_at` of each ``(offset, data)`` in order, in one call: the
        page store sets the JRNL_COMPLETE flag byte of every transaction in the
        journal at a checkpoint (hundreds of one-byte writes), and a Python frame
        per write would cost more than the write; a page store flush writes a
        commit's ranges, or a bulk commit's scattered pages, this way)."""
        # write_at's rules, inlined as there (this runs on every commit's flush).
        if self._closed or self._poison is not None or not self.writable:
            self._check_writable()
        try:
            self._raw_write_many(writes)
        except OSError as exc:
            raise self._failed(exc, "write") from exc
        if self._end is not None:
            end = max((o + len(d) for o, d in writes), default=0)
            if end > self._end:
                self._end = end

    def append(self, data: bytes) -> int:
        """Write ``data`` at the end of the file and return the offset it went to.

        The end is tracked in memory (one writer per file is the rule everywhere in
        engine), so appends from several threads of one handle never overlap.
        """
        with self._append_lock:
            self._check_writable()
            if self._end is None:
                self._end = self._raw_size()
            offset = self._end
            try:
                self._raw_write(offset, data)
            except OSError as exc:
                raise self._failed(exc, "write") from exc
            self._end = offset + len(data)
            return offset

    def truncate(self, size: int) -> None:
        """Cut (or extend with zeros) the file to ``size`` bytes."""
        self._check_writable()
        try:
            self._raw_truncate(size)
        except OSError as exc:
            raise self._failed(exc, "write") from exc
        self._end = size

    def write_durable_at(self, offset: int, parts: Sequence[bytes | bytearray | memoryview]) -> None:
        """Write ``parts`` back to back at ``offset``; return once *those* bytes are
        durable (``O_DSYNC``: the data, and the file size needed to read it back).

        Other unsynced writes of the file are not waited for: a crash may still
        lose them while these bytes survive (a whole-file sync instead would have
        to write them out first).  The page store commits a journal transaction
        this way, so that the flags a checkpoint left unsynced in the journal's
        old transactions cost the commit nothing.  A failure poisons the handle
        and raises :class:`PoisonedError`, as a failed sync does.
        """
        self._check_writable()
        started = time.perf_counter()
        try:
            self._raw_write_durable(offset, parts)
        except OSError as exc:
            raise self._failed(exc, "durable write") from exc
        timing.record(self.path, time.perf_counter() - started)
        if self._end is not None:  # only handles that append track their end
            end = offset + sum(map(len, parts))
            if end > self._end:
                self._end = end

    def fsync(self) -> None:
        """Make the data and metadata durable; a failure poisons the handle."""
        self._sync(data_only=False)

    def fdatasync(self) -> None:
        """Make the data (and the size) durable, skipping unneeded metadata."""
        self._sync(data_only=True)

    def _sync(self, data_only: bool) -> None:
        self._check_open()
        if self._poison is not None:
            raise self._poisoned_error()
        if not self.writable:
            return  # a read-only handle has written nothing to make durable
        started = time.perf_counter()
        try:
            self._raw_sync(data_only)
        except OSError as exc:
            raise self._failed(exc, "fsync") from exc
        timing.record(self.path, time.perf_counter() - started)

    def lock(self, *, exclusive: bool = True, blocking: bool = False) -> None:
        """Take an advisory lock on the file (raises LockedError if not blocking)."""
        self._check_open()
        self._raw_lock(exclusive, blocking)

    def unlock(self) -> None:
        self._check_open()
        self._raw_unlock()

    # Range locks: advisory locks of the bytes ``[offset, offset + length)``,
    # held by this handle (its open file description), released by
    # :meth:`unlock_range`, by closing it, or by the death of the process.  Each
    # byte is a lock of its own (a range is taken or refused whole, and released
    # in any pieces), so one file can hold many: the queue's consumers claim the
    # items they deliver by their ids.  Only where :attr:`supports_range_locks`.

    def lock_range(self, offset: int, length: int = 1, *, exclusive: bool = True, blocking: bool = False) -> bool:
        """Lock the bytes ``[offset, offset + length)``; without ``blocking``, False
        when another handle holds a conflicting lock on any of them (nothing
        taken), else True."""
        self._check_open()
        if offset < 0 or length < 1:
            raise ValueError(f"lock_range: offset {offset} and length {length} must be >= 0 and >= 1")
        return self._raw_lock_range(offset, length, exclusive, blocking)

    def unlock_range(self, offset: int, length: int = 1) -> None:
        """Release this handle's locks of the bytes ``[offset, offset + length)``
        (bytes it does not hold: no-op)."""
        self._check_open()
        if offset < 0 or length < 1:
            raise ValueError(f"unlock_range: offset {offset} and length {length} must be >= 0 and >= 1")
        self._raw_unlock_range(offset, length)

    def range_locked(self, offset: int, length: int = 1, *, exclusive: bool = True) -> bool:
        """Whether another handle holds a lock on any byte of ``[offset, offset +
        length)`` that would conflict with taking it (``exclusive`` or shared) now."""
        self._check_open()
        return self._raw_range_locked(offset, length, exclusive)

    def map_words(self, count: int) -> SharedWords:
        """``count`` u32 words at the start of this file that every process (and
        handle) mapping the same file shares, with sleeps and wakes on each (see
        :mod:`engine.fs.words`); the file grows to hold them.  Close the words
        before the handle."""
        self._check_open()
        if count <= 0:
            raise ValueError(f"map_words: count must be at least 1, not {count}")
        size = self.size()
        if size < count * WORD.size:
            # Written, not truncated up: the blocks are allocated now (a full disk
            # is a DiskFullError here, not a SIGBUS at a later store through the
            # mapping).  Only ever grows: others may use the words.
            self.write_at(size, bytes(count * WORD.size - size))
        return self._raw_map_words(count)

    def watch_words(self, count: int) -> SharedWords | None:
        """``count`` words at the start of this file for loads only (a handle
        opened for reading: another process stores them, see :meth:`map_words`),
        or None while the file is too short to hold them (nobody made them yet)."""
        self._check_open()
        if count <= 0:
            raise ValueError(f"watch_words: count must be at least 1, not {count}")
        if self.size() < count * WORD.size:
            return None
        return self._raw_watch_words(count)

    def map_scratch_words(self, count: int) -> SharedWords:
        """``count`` *scratch* words of this file: shared like :meth:`map_words`'
        (stores, sleeps and wakes), for words that hold nothing durable: never
        synced, never read as the file's bytes, meaningless after a restart (a
        process only compares them with what it saw in them itself: the page
        store lock's change count, :class:`engine.fs.GatedLock`).  On the OS
        they are :meth:`map_words`; a crash simulator keeps them out of its
        crash images (``stress/simwords.py``): a power loss loses them whole."""
        self._check_open()
        if count <= 0:
            raise ValueError(f"map_scratch_words: count must be at least 1, not {count}")
        return self._raw_map_scratch_words(count)

    def watch_scratch_words(self, count: int) -> SharedWords | None:
        """The scratch words for loads only (:meth:`map_scratch_words`, as
        :meth:`watch_words` is to :meth:`map_words`): None while nobody made them."""
        self._check_open()
        if count <= 0:
            raise ValueError(f"watch_scratch_words: count must be at least 1, not {count}")
        return self._raw_watch_scratch_words(count)

    def _raw_map_scratch_words(self, count: int) -> SharedWords:
        """This default: the file's first bytes (:meth:`map_words`)."""
        return self.map_words(count)

    def _raw_watch_scratch_words(self, count: int) -> SharedWords | None:
        return self.watch_words(count)

    def _raw_watch_words(self, count: int) -> SharedWords:
        """This default loads through :meth:`read_at`; the real file system maps the file."""
        return FileWords(self, count)

    def _raw_map_words(self, count: int) -> SharedWords:
        """This default goes through :meth:`read_at` / :meth:`write_at`; the real
        file system maps the file."""
        return FileWords(self, count)

    def close(self) -> None:
        """Close the handle (releases its lock).  Closing twice is allowed."""
        if self._closed:
            return
        self._closed = True
        self._raw_close()

    def __enter__(self) -> FileHandle:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else ("poisoned" if self._poison else "open")
        return f"<{type(self).__name__} {self.path!r} {state}>"


#: The file-system operations that can meet a full disk, and how an error names them.
_FS_OPERATIONS_THAT_ALLOCATE = {
    "open": "create",
    "mkdir": "mkdir",
    "rename": "rename",
    "unlink": "unlink",
    "rmdir": "rmdir",
    "fsync_dir": "directory fsync",
}


def _disk_full_typed(method: Callable[..., object], operation: str) -> Callable[..., object]:
    """``method`` with ENOSPC/EDQUOT raised as :class:`DiskFullError` naming the path."""

    @functools.wraps(method)
    def typed(self: FileSystem, path: str, *args: object, **kwargs: object) -> object:
        try:
            return method(self, path, *args, **kwargs)
        except DiskFullError:
            raise
        except OSError as exc:
            if exc.errno in _DISK_FULL:
                raise DiskFullError(str(path), exc.errno, operation) from exc
            raise

    typed.__disk_full_typed__ = True  # type: ignore[attr-defined]
    return typed


class FileSystem(ABC):
    """Directory-level operations plus :meth:`open`.  Paths are ``str``.

    Like the handles' writes, the operations that allocate (creating a file, a
    directory, a rename, a directory sync) report a full disk as
    :class:`DiskFullError` in every implementation: :meth:`__init_subclass__`
    wraps each implementation's methods once, so no file system and no store
    has to remember the rule.
    """

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        for name, operation in _FS_OPERATIONS_THAT_ALLOCATE.items():
            method = cls.__dict__.get(name)
            if method is not None and not getattr(method, "__disk_full_typed__", False):
                setattr(cls, name, _disk_full_typed(method, operation))

    @abstractmethod
    def open(self, path: str, mode: OpenMode | str = OpenMode.READ) -> FileHandle:
        """Open ``path``; see :class:`OpenMode`.  Raises FileNotFoundError /
        FileExistsError like the OS does."""

    @abstractmethod
    def exists(self, path: str) -> bool: ...

    @abstractmethod
    def isdir(self, path: str) -> bool: ...

    def lookup_error(self, path: str) -> OSError | None:
        """Why ``path`` cannot be looked at, other than its absence (a directory on
        the way without search permission, say), or None.  :meth:`exists` and
        :meth:`isdir` answer False in both cases; this tells them apart, so a
        message can say "permission denied" rather than "no such file".  (A file
        system without permissions, as the simulated ones, has nothing to say.)"""
        return None

    @abstractmethod
    def listdir(self, path: str) -> list[str]:
        """Names in directory ``path``, sorted."""

    @abstractmethod
    def file_size(self, path: str) -> int: ...

    @abstractmethod
    def mkdir(self, path: str) -> None:
        """Create one directory (parent must exist).  Not durable until the parent
        directory is fsynced: use :func:`engine.fs.durable.make_dirs`."""

    @abstractmethod
    def rmdir(self, path: str) -> None:
        """Remove an empty directory."""

    @abstractmethod
    def rename(self, src: str, dst: str) -> None:
        """Atomically rename, replacing ``dst``; durable after fsync of the dirs."""

    @abstractmethod
    def unlink(self, path: str) -> None: ...

    @abstractmethod
    def fsync_dir(self, path: str) -> None:
        """Make the directory's entries (creates, renames, deletes) durable."""

    @abstractmethod
    def mtime_ns(self, path: str) -> int:
        """Modification time, used by readers to notice a file changed."""

    def is_symlink(self, path: str) -> bool:
        """Whether ``path`` is a symbolic link (dangling or not).  A store's own
        files are never links: a link where one belongs is reported as damage
        (a dangling one reads as a missing file).  Simulated file systems have
        no links."""
        return False

    def lock_holders(self, path: str) -> list[int] | None:
        """The process ids holding a lock on ``path`` now, as far as the system
        tells (Linux: ``/proc/locks``); None when it cannot tell (simulated file
        systems, other systems).  For reports only: a lock is taken or probed with
        :func:`engine.fs.lock.probe_lock`, never decided from this."""
        return None

    def block_size(self, path: str) -> int:
        """The preferred I/O size of the file system holding ``path`` (a file or a
        directory), at least the OS page size.  The stream journal sizes its pages
        by it, as journald does.  Simulated file systems answer 4096."""
        return 4096

    def free_bytes(self, path: str) -> int | None:
        """Bytes an unprivileged writer may still add to the file system holding
        ``path`` (a directory), or None when unknown (simulated file systems).
        A store that preallocates its file asks before writing a byte, so a size
        larger than the disk is refused instead of filling it."""
        return None
