"""Operating-system errors as the queue's typed errors, where it must not leak them.

(A full disk needs nothing here: the seam, ``engine/fs/base.py``, raises
:class:`~engine.errors.DiskFullError` for every file-system and handle operation.)

* :func:`os_errors_typed`: the command line and ``engine inspect`` / ``verify``
  report a path that is missing, a symbolic link loop, a directory where a file
  belongs (and the other way round) as an :class:`~engine.errors.EngineError`
  naming the path: a message and a non-zero exit, never a traceback.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from engine.errors import EngineError


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
