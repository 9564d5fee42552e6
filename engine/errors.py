"""One error hierarchy for every store.

Everything engine raises on purpose derives from :class:`EngineError`, so a caller
can catch one type.  Errors that are about a file say which file and where.
"""

from __future__ import annotations

import queue


class EngineError(Exception):
    """Base class of every error engine raises deliberately."""


class CorruptFileError(EngineError):
    """A file is damaged, truncated in the middle, or not of the expected format.

    ``path`` and ``offset`` say where the problem is; ``expected`` says what the
    decoder wanted to find there (and ``found`` what it found, when that helps).
    """

    def __init__(
        self,
        path: str,
        offset: int,
        expected: str,
        found: str | None = None,
    ) -> None:
        self.path = path
        self.offset = offset
        self.expected = expected
        self.found = found
        msg = f"{path} at offset {offset}: expected {expected}"
        if found is not None:
            msg += f", found {found}"
        super().__init__(msg)

    def __reduce__(self) -> tuple[type, tuple[str, int, str, str | None]]:
        return (type(self), (self.path, self.offset, self.expected, self.found))


class FormatError(CorruptFileError):
    """A file is not of the format asked for at all (foreign magic, wrong version)."""


class PageError(EngineError, ValueError):
    """A page id that was never allocated or is free, or a range outside the page."""

    def __init__(self, path: str, page: object, offset: int, reason: str) -> None:
        self.path = path
        self.page = page
        self.offset = offset
        self.reason = reason
        super().__init__(f"{path}: page {page!r} (byte offset {offset}): {reason}")

    def __reduce__(self) -> tuple[type, tuple[str, object, int, str]]:
        return (type(self), (self.path, self.page, self.offset, self.reason))


class RecoveryNeededError(EngineError):
    """A read-only open found committed work no writer has applied yet (open the
    store once as its writer to recover it)."""


class StreamRejected(EngineError):
    """A journald server answered 0 (or closed without answering): the stream was
    not committed."""


class UnknownFormatError(EngineError):
    """The path is not a file or directory of any format engine knows."""


class LockedError(EngineError):
    """Another handle or process holds the lock this operation needs.

    ``path`` names the lock file that could not be had (``None`` when the message
    alone says it), so an operator knows which process to look for
    (``fuser PATH``).
    """

    def __init__(self, message: str, path: str | None = None) -> None:
        self.path = path
        super().__init__(message)

    def __reduce__(self) -> tuple[type, tuple[str, str | None]]:
        return (type(self), (str(self), self.path))


class ClosedError(EngineError):
    """The object was closed; open it again to use it."""


class ConfigError(EngineError, ValueError):
    """A configuration value or an argument is out of range or inconsistent."""


class SequenceNumberError(ConfigError):
    """An event batch's sequence numbers do not continue the id's sequence by one."""


class FullError(EngineError, queue.Full):
    """A size limit (items, bytes, file capacity) refuses the write.  A
    ``queue.Full`` too, for code written against the standard library's queue."""


class EmptyError(EngineError, queue.Empty):
    """No item came (``Queue.get`` without blocking, or past its timeout).  A
    ``queue.Empty`` too, as ``queue.Queue.get`` raises."""


class PoisonedError(EngineError):
    """A write or an fsync failed earlier on this handle; it refuses writes until
    reopened.

    After a failed fsync the kernel may have dropped the dirty pages and a retried
    fsync can report success without having written anything (the PostgreSQL
    "fsyncgate" lesson), so the only safe course is to stop writing, reopen, and
    let recovery decide what is on disk.  After a failed write the file's contents
    are unknown to the store, with the same consequence.  ``operation`` says which
    of the two failed (``"write"`` or ``"fsync"``).
    """

    def __init__(self, path: str, cause: BaseException | None = None, operation: str = "fsync") -> None:
        self.path = path
        self.cause = cause
        self.operation = operation
        detail = f": {cause}" if cause is not None else ""
        super().__init__(f"{path}: an earlier {operation} failed{detail}; reopen to continue")

    def __reduce__(self) -> tuple[type, tuple[str, None, str]]:
        return (type(self), (self.path, None, self.operation))


class DiskFullError(PoisonedError, OSError):
    """The file system had no room left (ENOSPC or EDQUOT) for a write or a sync.

    It is an :class:`OSError` too (``errno`` is set), so code that handles disk
    errors generically still catches it, and a :class:`PoisonedError`: what the
    failed operation left in the file is unknown, so the handle refuses further
    writes and the store must be reopened (and recovered) once space is freed.
    """

    def __init__(self, path: str, errno_: int = 28, operation: str = "write", message: str | None = None) -> None:
        OSError.__init__(self, errno_, "no space left on the device")
        self.path = path
        self.cause = None
        self.operation = operation
        self.filename = path
        # ``message``: a refusal made before anything was written (a file that
        # would not fit), said in its own words.
        self._message = message or f"{path}: no space left on the device during a {operation}; free space and reopen"

    def __str__(self) -> str:
        return self._message

    def __reduce__(self) -> tuple[type, tuple[str, int, str, str]]:  # type: ignore[override]
        return (type(self), (self.path, self.errno or 28, self.operation, self._message))


__all__ = [
    "ClosedError",
    "ConfigError",
    "CorruptFileError",
    "DiskFullError",
    "EmptyError",
    "EngineError",
    "FormatError",
    "FullError",
    "LockedError",
    "PageError",
    "PoisonedError",
    "RecoveryNeededError",
    "SequenceNumberError",
    "StreamRejected",
    "UnknownFormatError",
]
