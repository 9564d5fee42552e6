"""Operating-system errors as the queue's typed errors, where it must not leak them.

* :func:`disk_full_typed`: the seam turns ENOSPC / EDQUOT met by a *handle* (a
  write, a sync) into :class:`~engine.errors.DiskFullError`; a call on the file
  system itself (creating a file, a rename, a directory fsync) raises the raw
  ``OSError``.  The queue creates files on its write paths (a new writer file, a
  checkpoint's temporary, a lock file), so it converts those: a full disk is always
  DiskFullError to its callers, whichever call met it.  (The smallest helper that
  does it inside this package; the seam's ``FileSystem`` methods could do it once
  for every store.)
* :func:`os_errors_typed`: the command line and ``engine inspect`` / ``verify``
  report a path that is missing, a symbolic link loop, a directory where a file
  belongs (and the other way round) as an :class:`~engine.errors.EngineError`
  naming the path: a message and a non-zero exit, never a traceback.
"""

from __future__ import annotations

import errno
from collections.abc import Iterator
from contextlib import contextmanager

from engine.errors import DiskFullError, EngineError

_DISK_FULL = frozenset({errno.ENOSPC, errno.EDQUOT})


@contextmanager
def disk_full_typed(path: str, operation: str = "write") -> Iterator[None]:
    """Re-raise an ``OSError`` meaning "no space" from the block as DiskFullError
    naming ``path`` (a DiskFullError passes unchanged, other errors too)."""
    try:
        yield
    except DiskFullError:
        raise
    except OSError as exc:
        if exc.errno in _DISK_FULL:
            raise DiskFullError(path, exc.errno, operation) from exc
        raise


@contextmanager
def os_errors_typed(path: str) -> Iterator[None]:
    """Re-raise any ``OSError`` from the block (that is not already an
    EngineError) as an EngineError naming the file it is about."""
    try:
        yield
    except EngineError:
        raise
    except OSError as exc:
        where = exc.filename if exc.filename is not None else path
        raise EngineError(f"{where}: {exc.strerror or exc}") from exc
