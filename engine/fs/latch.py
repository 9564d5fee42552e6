"""The failure latch: after a failed write or fsync, a store stops writing.

After a failed fsync the kernel may have dropped the dirty pages and marked them
clean, so a retried fsync can "succeed" without writing (PostgreSQL's
fsyncgate); after a failed write the store no longer knows what the file holds.
Either way the only safe course is to refuse every later write until a reopen
lets recovery decide what is on disk.  :class:`FailureLatch` is that rule,
once: :meth:`trip` remembers the first failure, :meth:`check` raises it again,
each time as a fresh copy with its type (a :class:`DiskFullError` stays one, so
a caller can tell a full disk from a broken one).
"""

from __future__ import annotations

import copy
import errno
import threading

from engine.errors import DiskFullError, PoisonedError


def _detached(exc: BaseException) -> BaseException:
    """A copy of ``exc`` without its traceback (which holds the frames of whoever
    met it, and through them the user's objects); ``exc`` itself if it cannot be
    copied."""
    try:
        return copy.copy(exc)
    except Exception:
        return exc


class FailureLatch:
    """The first failure that stopped a store's writes (see the module docstring)."""

    __slots__ = ("_guard", "failure")

    def __init__(self) -> None:
        #: The first failure (read it; only :meth:`trip` sets it).  One attribute
        #: read tells a hot path whether writes go on.
        self.failure: PoisonedError | None = None
        self._guard = threading.Lock()

    @property
    def tripped(self) -> bool:
        return self.failure is not None

    def trip(self, exc: BaseException, path: str, operation: str) -> None:
        """Remember ``exc`` (a failed ``operation`` on ``path``) unless a failure
        is remembered already: the first one is the cause of the others."""
        with self._guard:
            if self.failure is not None:
                return
            if isinstance(exc, PoisonedError):
                self.failure = _copy(exc)
            else:
                self.failure = PoisonedError(path, _detached(exc), operation)

    def check(self) -> None:
        """Raise the remembered failure again (as a fresh copy), if any."""
        failure = self.failure
        if failure is not None:
            raise _copy(failure)


def _copy(error: PoisonedError) -> PoisonedError:
    """A fresh copy of ``error``, same type, no traceback."""
    if isinstance(error, DiskFullError):
        return DiskFullError(error.path, error.errno or errno.ENOSPC, error.operation)
    cause = None if error.cause is None else _detached(error.cause)
    return PoisonedError(error.path, cause, error.operation)
