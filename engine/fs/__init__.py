"""engine's file-system seam (see :mod:`engine.fs.base`) and durability helpers.

Every store takes an optional ``fs`` argument; ``None`` means :func:`default_fs`,
the real OS.  Tests pass the crash simulator or a fault injector from ``stress/``.
"""

from __future__ import annotations

from engine.fs.base import FileHandle, FileSystem, OpenMode
from engine.fs.crashpoints import crashpoint, get_crashpoint_hook, set_crashpoint_hook
from engine.fs.durable import (
    GroupCommit,
    PeriodicSync,
    SyncPolicy,
    atomic_write,
    create_file,
    make_dirs,
    parent_dir,
)
from engine.fs.osfs import OsFileSystem

_DEFAULT: FileSystem = OsFileSystem()


def default_fs() -> FileSystem:
    """The process-wide real file system."""
    return _DEFAULT


def resolve(fs: FileSystem | None) -> FileSystem:
    """``fs`` itself, or the real file system when ``None``."""
    return _DEFAULT if fs is None else fs


__all__ = [
    "FileHandle",
    "FileSystem",
    "GroupCommit",
    "OpenMode",
    "OsFileSystem",
    "PeriodicSync",
    "SyncPolicy",
    "atomic_write",
    "crashpoint",
    "create_file",
    "default_fs",
    "get_crashpoint_hook",
    "make_dirs",
    "parent_dir",
    "resolve",
    "set_crashpoint_hook",
]
