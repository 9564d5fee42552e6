"""What an event journal directory holds, and what the journal knows about one id.

The file names (``meta`` and ``data`` as in akka-persistence-file-journal, plus the
two this implementation adds: the transient ``meta.tmp`` of an atomic meta rewrite
and the writer's ``.lock``), how their paths are formed without ``os.path`` (the
format handler and the crash simulator give plain strings), and the in-memory
entry of one persistence id shared by the writer, its recovery and its meta file.
"""

from __future__ import annotations

from dataclasses import dataclass

#: File names inside a journal directory (akka-persistence-file-journal's names).
META_NAME = "meta"
DATA_NAME = "data"
#: Temporary name used while the meta file is rewritten atomically (this
#: implementation's addition; deleted on open).
META_TMP_NAME = "meta.tmp"
#: Checksum side files (this implementation's addition, see engine.events.sums):
#: one CRC per batch of ``data``, one per block of ``meta``.
DATA_SUMS_NAME = "data.crc"
META_SUMS_NAME = "meta.crc"
#: The writer lock (this implementation's addition): an empty file a writer holds
#: an exclusive ``flock`` on from before it creates anything until it closes.
LOCK_NAME = ".lock"


def join(directory: str, name: str) -> str:
    """``directory/name`` without doubling a trailing slash."""
    if directory == "/":
        return "/" + name
    return directory.rstrip("/") + "/" + name if directory else name


def split(path: str) -> tuple[str, str]:
    """``(directory, name)`` of ``path`` (directory ``"."`` for a bare name)."""
    directory, sep, name = path.rstrip("/").rpartition("/")
    if not sep:
        return ".", name
    return directory or "/", name


@dataclass(frozen=True)
class IdInfo:
    """What the journal knows about one persistence id.

    ``lowest`` is the first sequence number still replayable (``highest + 1`` when
    everything was deleted); ``highest`` survives deletion.
    """

    persistence_id: str
    lowest: int
    highest: int
    first_offset: int
    last_offset: int

    @property
    def live(self) -> int:
        """How many events replay would return."""
        return max(0, self.highest - self.lowest + 1)


@dataclass
class Entry:
    """In-memory copy of one meta block plus the cached first live sequence number.

    ``meta_offset`` is where the id's block sits in the meta file; ``first``,
    ``last`` are data-file offsets (0 = none), ``highest`` the highest sequence
    number ever written, ``first_seq`` the sequence number of the block at
    ``first`` (``highest + 1`` when everything was deleted).
    """

    pid: str
    meta_offset: int
    first: int
    last: int
    highest: int
    first_seq: int

    def info(self) -> IdInfo:
        return IdInfo(self.pid, self.first_seq, self.highest, self.first, self.last)
