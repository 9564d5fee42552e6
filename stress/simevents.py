"""The crash simulator's trace: one small frozen dataclass per recorded operation.

:class:`stress.simfs.SimFS` appends one event per file-system operation (and per
:meth:`~stress.simfs.SimFS.mark`) to its trace; replaying the trace through the
model rebuilds the file system as current and as durable at every crash point.
Typed events (rather than tuples tagged with a string) let the model, the tests
and the fault injector's log dispatch with ``match``/``isinstance`` and let mypy
check every field access.

Inode numbers identify files in the trace (a handle survives a rename or an
unlink, like a real one); paths are normalised absolute simulator paths.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Write:
    """``data`` written at ``offset`` of inode ``ino`` (not durable until a sync)."""

    ino: int
    offset: int
    data: bytes

    def describe(self) -> str:
        return f"write {len(self.data)} B to inode {self.ino} at {self.offset}"


@dataclass(frozen=True)
class Truncate:
    """Inode ``ino`` cut (or extended with zeros) to ``size`` bytes."""

    ino: int
    size: int

    def describe(self) -> str:
        return f"truncate inode {self.ino} to {self.size} B"


@dataclass(frozen=True)
class Sync:
    """An ``fsync``/``fdatasync`` of inode ``ino``: its current contents are durable."""

    ino: int

    def describe(self) -> str:
        return f"fsync inode {self.ino}"


@dataclass(frozen=True)
class DurableWriteReturned:
    """The :class:`Write` just before, to inode ``ino``, was a ``write_durable_at``
    (an ``O_DSYNC`` write) and has now returned: those bytes survive every later
    crash, even where earlier unsynced writes of the file are lost.  Two events, so
    that a crash between them may still lose or tear the write."""

    ino: int

    def describe(self) -> str:
        return f"durable write to inode {self.ino} returned"


@dataclass(frozen=True)
class Create:
    """A new empty file ``path`` (inode ``ino``); its name is durable only after
    its directory's fsync."""

    path: str
    ino: int

    def describe(self) -> str:
        return f"create {self.path} (inode {self.ino})"


@dataclass(frozen=True)
class Rename:
    """``src`` (inode ``ino``) renamed to ``dst``, replacing it."""

    src: str
    dst: str
    ino: int

    def describe(self) -> str:
        return f"rename {self.src} -> {self.dst}"


@dataclass(frozen=True)
class Unlink:
    """The name ``path`` removed (open handles keep the inode)."""

    path: str

    def describe(self) -> str:
        return f"unlink {self.path}"


@dataclass(frozen=True)
class Mkdir:
    """Directory ``path`` created."""

    path: str

    def describe(self) -> str:
        return f"mkdir {self.path}"


@dataclass(frozen=True)
class Rmdir:
    """Empty directory ``path`` removed."""

    path: str

    def describe(self) -> str:
        return f"rmdir {self.path}"


@dataclass(frozen=True)
class FsyncDir:
    """Directory ``path`` fsynced: its entry operations so far are durable."""

    path: str

    def describe(self) -> str:
        return f"fsync directory {self.path}"


@dataclass(frozen=True)
class Mark:
    """Not an operation: the workload's acknowledgement ``label`` (see
    :meth:`stress.simfs.SimFS.mark`).  Changes nothing on disk."""

    label: Any

    def describe(self) -> str:
        return f"mark {self.label!r}"[:80]


#: What the trace holds.
Event = Write | Truncate | Sync | DurableWriteReturned | Create | Rename | Unlink | Mkdir | Rmdir | FsyncDir | Mark

#: Operations on a file's contents, kept per inode until its next sync.
FileOp = Write | Truncate

#: Operations on directory entries, kept per directory until its next fsync.
EntryOp = Create | Rename | Unlink | Mkdir | Rmdir


__all__ = [
    "Create",
    "DurableWriteReturned",
    "EntryOp",
    "Event",
    "FileOp",
    "FsyncDir",
    "Mark",
    "Mkdir",
    "Rename",
    "Rmdir",
    "Sync",
    "Truncate",
    "Unlink",
    "Write",
]
