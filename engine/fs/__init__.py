"""engine's file-system seam (see :mod:`engine.fs.base`) and durability helpers.

Every store takes an optional ``fs`` argument; ``None`` means :func:`default_fs`,
the real OS.  Tests pass the crash simulator or a fault injector from ``stress/``.

The parts every store's write side is built from live here, once:

* the seam itself (:class:`FileSystem`, :class:`FileHandle`; poisoning and the
  typed disk-full error in the handle base class);
* the writer lock and the shared read lock (:func:`take_lock`, :func:`lock_handle`,
  :func:`probe_lock`), and the record lock other runtimes respect (:func:`take_record_lock`);
* the recovery report every ``open()`` leaves in ``store.recovery``
  (:class:`RecoveryReport`);
* the sync policy and group commit (:class:`SyncPolicy`, :class:`GroupCommit`;
  the store core's :class:`~engine.fs.core.SyncDriver` drives them) and the
  durable-creation helpers;
* the named crash points (:func:`crashpoint`);
* words shared between processes, with sleeps and wakes (:class:`SharedWords`,
  from :meth:`FileHandle.map_words`).
"""

from __future__ import annotations

from engine.fs.base import FileHandle, FileSystem, OpenMode
from engine.fs.crashpoints import crashpoint, get_crashpoint_hook, set_crashpoint_hook
from engine.fs.durable import (
    GroupCommit,
    SyncPolicy,
    atomic_write,
    create_file,
    make_dirs,
    parent_dir,
)
from engine.fs.lock import GatedLock, HeldLock, lock_handle, probe_lock, take_lock, take_record_lock
from engine.fs.osfs import OsFileSystem
from engine.fs.paths import as_path, no_such
from engine.fs.recovery import RecoveryAction, RecoveryReport
from engine.fs.words import SharedWords

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
    "GatedLock",
    "GroupCommit",
    "HeldLock",
    "OpenMode",
    "OsFileSystem",
    "RecoveryAction",
    "RecoveryReport",
    "SharedWords",
    "SyncPolicy",
    "as_path",
    "atomic_write",
    "crashpoint",
    "create_file",
    "default_fs",
    "get_crashpoint_hook",
    "lock_handle",
    "make_dirs",
    "no_such",
    "parent_dir",
    "probe_lock",
    "resolve",
    "set_crashpoint_hook",
    "take_lock",
    "take_record_lock",
]
