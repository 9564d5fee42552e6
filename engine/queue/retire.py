"""Retiring writer files: which ones every reader has passed, and deleting them.

The writer decides from the reader files on disk (for readers open in its own
process: their head as last checkpointed), never from memory alone, so that a
crash right after a deletion cannot leave a reader file pointing into a deleted
file.  The newest file is never retired, nor the newest file that holds a PUT:
the journal must always hold the tail id, or a reopen could not tell the next id
from the files (see :func:`retirable`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from engine.fs import FileSystem, crashpoint, make_dirs
from engine.queue import census, checkpoint, naming
from engine.queue.attach import reader_being_created, reader_files
from engine.queue.segments import Segment

log = logging.getLogger("engine.queue")


class Checkpointed(Protocol):
    """What retiring asks of a reader open in the writer's process."""

    @property
    def closed(self) -> bool: ...

    @property
    def durable_head(self) -> int: ...


def durable_heads(
    fs: FileSystem, directory: str, queue: str, live: Mapping[str, Checkpointed]
) -> dict[str, int] | None:
    """Each reader's head as on disk (``live`` readers: as last checkpointed), by name.

    None when the reader files cannot be trusted this round, and nothing may be
    retired: a reader is being created (it holds its lock, its file is not written
    yet), or a reader file vanished or appeared while we read them (a named reader
    taking over the default one writes its file, then deletes the default's:
    reading the old name after the delete must not make its backlog look unheld).
    The next checkpoint round tries again.
    """
    listing = fs.listdir(directory)
    files = reader_files(fs, directory, queue, listing)
    heads: dict[str, int] = {}
    for reader, path in files.items():
        open_reader = live.get(reader)
        if open_reader is not None and not open_reader.closed:
            heads[reader] = open_reader.durable_head
            continue
        try:
            heads[reader] = checkpoint.load_reader_file(fs, path)[0]
        except FileNotFoundError:
            return None  # removed or renamed meanwhile
    # After the loads: a reader that took its lock before this point and has not
    # written its file yet could start below the heads just read.
    creating = reader_being_created(fs, directory, queue, listing)
    if creating is not None:
        log.info("queue %s: reader %r is being created: no file retired this round", queue, creating)
        return None
    missing = census.missing_checkpoints(fs, directory, queue, listing)
    if missing:
        # Its head is unknown until it is opened again (it restarts at the start of
        # the journal): nothing it may need can go.
        log.warning("queue %s: reader %r's checkpoint file is missing: no file retired", queue, missing[0])
        return None
    if set(reader_files(fs, directory, queue)) != set(files):
        return None  # a reader file appeared or went while we read them
    return heads


def retirable(segments: list[Segment], floor: int) -> list[Segment]:
    """The oldest files whose every id is at or below ``floor`` (the lowest reader
    head), stopping at the first file still needed.

    A file is retired only when a LATER file holds a PUT: the newest file that
    holds one is kept even once every reader has passed it (the files after it
    are empty, as after a crash right after a rotation created a file).  It is
    what tells a reopen the tail id; without it the next open would start ids
    again from the reader checkpoints alone, or refuse them as being too far
    past an empty journal.
    """
    doomed: list[Segment] = []
    for index, seg in enumerate(segments[:-1]):  # the newest file is never deleted
        later = next((s.first_id for s in segments[index + 1 :] if s.first_id is not None), None)
        if later is None or later - 1 > floor:
            break
        doomed.append(seg)
    return doomed


@dataclass(frozen=True)
class Pin:
    """The writer files one reader pins (see :func:`pinned_files`) and their bytes."""

    paths: tuple[str, ...] = ()
    bytes: int = 0


def pinned_files(
    segments: list[Segment], heads: Mapping[str, int], tail: int, size: Callable[[Segment], int]
) -> dict[str, Pin]:
    """The files each reader pins: those that other readers have all passed and
    that could be retired but for it.

    They are the files :func:`retirable` at the lowest head of the readers ahead
    of it and not at its own head.  Only the readers at the lowest head pin
    anything; several readers at that same head each pin the same files (without
    any of them, the files would go).  When no reader is ahead (one reader, or all
    at one head) nothing is pinned: what they hold is their backlog, which no
    reader has consumed yet.  ``size``: a file's bytes.
    """
    floor = min(heads.values(), default=tail)
    ahead = min((head for head in heads.values() if head > floor), default=None)
    if ahead is None:
        return {name: Pin() for name in heads}
    now = {seg.number for seg in retirable(segments, floor)}
    extra = [seg for seg in retirable(segments, ahead) if seg.number not in now]
    pin = Pin(tuple(seg.path for seg in extra), sum(size(seg) for seg in extra)) if extra else Pin()
    return {name: pin if head == floor else Pin() for name, head in heads.items()}


def remove_files(fs: FileSystem, directory: str, doomed: list[Segment], archive: str | None) -> None:
    """Delete (or move into ``archive``) the ``doomed`` writer files, durably."""
    if archive is not None:
        make_dirs(fs, archive)
    for seg in doomed:
        try:
            if archive is not None:
                fs.rename(seg.path, naming.join(archive, seg.path.rsplit("/", 1)[-1]))
            else:
                fs.unlink(seg.path)
        except FileNotFoundError:
            continue  # another producer retired it first
    crashpoint("queue.retire.before-dir-fsync")
    fs.fsync_dir(directory)
    if archive is not None:
        fs.fsync_dir(archive)
    crashpoint("queue.retire.after-dir-fsync")
