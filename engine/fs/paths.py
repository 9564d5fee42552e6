"""Paths as users give them: ``str`` or any ``os.PathLike``.

Every store's ``open()`` passes its path arguments through :func:`as_path` first,
so ``pathlib.Path`` works everywhere and anything else gets a ``TypeError`` in
the user's terms (not ``'PosixPath' object has no attribute 'rstrip'`` from deep
inside).  The stores then work with ``str`` paths only.
"""

from __future__ import annotations

import errno
import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from engine.fs.base import FileSystem


def as_path(path: object, what: str = "path") -> str:
    """``path`` as a ``str`` (``str`` or ``os.PathLike[str]``); ``what`` names the
    argument in the error ("directory", "socket path")."""
    if isinstance(path, str):
        return path
    if isinstance(path, os.PathLike):
        value = os.fspath(path)
        if isinstance(value, str):
            return value
        raise TypeError(f"{what} must be a str or a text path, not a bytes path {path!r}")
    raise TypeError(f"{what} must be a str or an os.PathLike (e.g. pathlib.Path), not {type(path).__name__}")


def no_such(fs: FileSystem, path: str, what: str, probe: str | None = None) -> OSError:
    """The error for a store that is not at ``path``, in the OS's own terms.

    ``FileNotFoundError`` ("PATH: no such <what>") when nothing is there; when
    the path cannot be looked at (a directory on the way without search
    permission, say), the real error instead, so a permission problem is called
    "permission denied", never "no such file" (``exists`` and ``isdir`` answer
    False for both).  ``probe``: the file whose absence means no store (default
    ``path`` itself).
    """
    error = fs.lookup_error(probe or path)
    if error is not None:
        if error.filename is None:
            error.filename = probe or path
        return error
    return FileNotFoundError(errno.ENOENT, f"no such {what}", path)
