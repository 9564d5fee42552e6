"""Paths as users give them: ``str`` or any ``os.PathLike``.

Every store's ``open()`` passes its path arguments through :func:`as_path` first,
so ``pathlib.Path`` works everywhere and anything else gets a ``TypeError`` in
the user's terms (not ``'PosixPath' object has no attribute 'rstrip'`` from deep
inside).  The stores then work with ``str`` paths only.
"""

from __future__ import annotations

import os


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
