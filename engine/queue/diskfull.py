"""A full disk met by a file-system call (not a handle's write) as DiskFullError.

The seam turns ENOSPC / EDQUOT met by a *handle* (a write, a sync) into
:class:`~engine.errors.DiskFullError`; a call on the file system itself (creating a
file, a rename, a directory fsync) raises the raw ``OSError``.  The queue creates
files on its write paths (a new writer file, a checkpoint's temporary, a lock file),
so it converts those here: a full disk is always DiskFullError to its callers,
whichever call met it.  (The smallest helper that does it inside this package; the
seam's ``FileSystem`` methods could do it once for every store.)
"""

from __future__ import annotations

import errno
from collections.abc import Iterator
from contextlib import contextmanager

from engine.errors import DiskFullError

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
