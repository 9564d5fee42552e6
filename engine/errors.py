"""One error hierarchy for every store.

Everything engine raises on purpose derives from :class:`EngineError`, so a caller
can catch one type.  Errors that are about a file say which file and where.
"""

from __future__ import annotations


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


class LockedError(EngineError):
    """Another handle or process holds the lock this operation needs."""


class ClosedError(EngineError):
    """The object was closed; open it again to use it."""


class ConfigError(EngineError, ValueError):
    """A configuration value or an argument is out of range or inconsistent."""


class FullError(EngineError):
    """A size limit (items, bytes, file capacity) refuses the write."""


class PoisonedError(EngineError):
    """An fsync failed earlier on this handle; it refuses writes until reopened.

    After a failed fsync the kernel may have dropped the dirty pages and a retried
    fsync can report success without having written anything (the PostgreSQL
    "fsyncgate" lesson), so the only safe course is to stop writing, reopen, and
    let recovery decide what is on disk.
    """

    def __init__(self, path: str, cause: BaseException | None = None) -> None:
        self.path = path
        self.cause = cause
        detail = f": {cause}" if cause is not None else ""
        super().__init__(f"{path}: an earlier fsync failed{detail}; reopen to continue")

    def __reduce__(self) -> tuple[type, tuple[str, None]]:
        return (type(self), (self.path, None))


__all__ = [
    "ClosedError",
    "ConfigError",
    "CorruptFileError",
    "EngineError",
    "FormatError",
    "FullError",
    "LockedError",
    "PoisonedError",
]
