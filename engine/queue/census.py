"""Whole files: what a queue's directory must hold, and the marks that tell.

A damaged byte is found by the CHECKs; a whole file gone is not, unless
something else says it existed.  Three things do (docs/formats/queue.md,
"Whole files"):

* every reader that has written its checkpoint file has the mark ``EQREADER``
  in the first 8 bytes of its lock file ``<queue>.rlock.<reader>`` (written and
  fsynced once the checkpoint is durable, cleared before the reader is removed):
  a mark without a checkpoint file is a checkpoint deleted, not a reader being
  created;
* the durable facts of ``<queue>.state`` name the newest writer file a producer
  created and where the last producer to close left it
  (:class:`engine.queue.shared.Facts`): no writer file numbered that high, one
  shorter than its header, or one shorter than where it was closed, is a newest
  file deleted, emptied or cut (:func:`newest_damage`);
* a queue's files are never symbolic links: a link where one belongs (dangling
  or not) is reported, never followed as if it were the file.

The checks here only look.  The writer's open and the readers' attach repair
what can be repaired without losing anything (a missing checkpoint: the reader
starts again at the start of the journal, every item delivered again), report
in their ``recovery`` what cannot (the newest writer file deleted: its items
are gone; the queue goes on from the files there are), and refuse a symbolic
link; ``verify`` (and ``engine verify``) raises for every one of them.
"""

from __future__ import annotations

from engine.errors import CorruptFileError
from engine.fs import FileHandle, FileSystem, OpenMode
from engine.queue import naming
from engine.queue.segments import SEGMENT_HEADER, Segment
from engine.queue.shared import FACTS_AT, Facts, state_name, sync_name

#: The first 8 bytes of a reader's lock file once its checkpoint exists.
READER_MARK = b"EQREADER"
#: The reader lock file's mapped words: the mark (words 0-1, written through the
#: file system, not the mapping) and the checkpoint generation (u64, words 2-3).
RLOCK_WORDS = 4
GEN_WORD = 2


def queue_file(queue: str, filename: str) -> bool:
    """Whether ``filename`` is one of ``queue``'s files (or a temporary of one)."""
    if filename in (naming.writer_lock_name(queue), state_name(queue), sync_name(queue)):
        return True
    return (
        naming.parse_writer(queue, filename) is not None
        or naming.parse_reader(queue, filename) is not None
        or naming.parse_reader_lock(queue, filename) is not None
        or naming.is_temp(queue, filename)
    )


def check_no_links(fs: FileSystem, directory: str, queue: str, listing: list[str] | None = None) -> None:
    """CorruptFileError for the first of ``queue``'s files that is a symbolic link."""
    for filename in fs.listdir(directory) if listing is None else listing:
        if queue_file(queue, filename):
            path = naming.join(directory, filename)
            if fs.is_symlink(path):
                raise CorruptFileError(
                    path, 0, "a regular file (a queue's files are never symbolic links)", "a symbolic link"
                )


def has_mark(fs: FileSystem, directory: str, queue: str, reader: str) -> bool:
    """Whether reader ``reader``'s lock file carries :data:`READER_MARK`."""
    path = naming.join(directory, naming.reader_lock_name(queue, reader))
    try:
        with fs.open(path) as handle:
            return handle.read_at(0, len(READER_MARK)) == READER_MARK
    except FileNotFoundError:
        return False


def write_mark(handle: FileHandle) -> None:
    """Mark the reader whose lock file ``handle`` is open as having a checkpoint
    (after that checkpoint is durable); durable itself."""
    if handle.read_at(0, len(READER_MARK)) != READER_MARK:
        handle.write_at(0, READER_MARK)
        handle.fdatasync()


def clear_mark(fs: FileSystem, directory: str, queue: str, reader: str) -> None:
    """Take the mark off (durably) before the reader's checkpoint file is
    deleted, so that its absence is not reported as damage."""
    path = naming.join(directory, naming.reader_lock_name(queue, reader))
    try:
        handle = fs.open(path, OpenMode.WRITE)
    except FileNotFoundError:
        return
    with handle:
        if handle.read_at(0, len(READER_MARK)) == READER_MARK:
            handle.write_at(0, bytes(len(READER_MARK)))
            handle.fdatasync()


def missing_checkpoints(fs: FileSystem, directory: str, queue: str, listing: list[str] | None = None) -> list[str]:
    """Readers whose lock file carries the mark but whose checkpoint file is gone."""
    names = fs.listdir(directory) if listing is None else listing
    have = {naming.parse_reader(queue, f) for f in names}
    missing = []
    for filename in names:
        reader = naming.parse_reader_lock(queue, filename)
        if reader is not None and reader not in have and has_mark(fs, directory, queue, reader):
            missing.append(reader)
    return missing


def missing_checkpoint_error(directory: str, queue: str, reader: str) -> CorruptFileError:
    path = naming.join(directory, naming.reader_name(queue, reader))
    return CorruptFileError(
        path,
        0,
        f"reader {reader!r}'s checkpoint file ({naming.reader_lock_name(queue, reader)} says it has one)",
        "no such file (deleted?); opening the queue or the reader resets it to the start of the journal",
    )


def newest_damage(
    fs: FileSystem, directory: str, queue: str, segments: list[Segment], facts: Facts | None
) -> CorruptFileError | None:
    """What the durable facts say happened to the newest writer file since they
    were written: deleted, emptied, or cut short of where the last producer
    closed it (None: nothing).  Its items are gone; the writer's open reports it
    (and goes on from the files there are), ``verify`` raises it."""
    if facts is None or facts.newest == 0:
        return None
    if not segments or segments[-1].number < facts.newest:
        path = naming.join(directory, naming.writer_name(queue, facts.newest))
        return CorruptFileError(
            path,
            0,
            f"the newest writer file ({state_name(queue)} records that it was created)",
            "no such file: deleted, with its items",
        )
    newest = segments[-1]
    if newest.number != facts.newest:
        return None  # a newer file since (another program rotated): nothing recorded about it
    size = fs.file_size(newest.path)
    if size < len(SEGMENT_HEADER):
        return CorruptFileError(
            newest.path,
            size,
            f"at least its {len(SEGMENT_HEADER)}-byte header (it was created whole)",
            f"{size} bytes: emptied, with its items",
        )
    if facts.closed_segment == newest.number and size < facts.closed_end:
        return CorruptFileError(
            newest.path,
            size,
            f"at least the {facts.closed_end} bytes the last producer closed it with",
            f"{size} bytes: cut short after the queue was closed, with the items there",
        )
    return None


def side_file(filename: str) -> tuple[str, str] | None:
    """``(kind, queue)`` when ``filename`` is one of a queue's own lock or state
    files (``state``, ``sync``, ``lock``, ``rlock``), else None."""
    for suffix, kind in ((".state", "state"), (".sync", "sync"), (".lock", "lock")):
        if filename.endswith(suffix) and len(filename) > len(suffix):
            return kind, filename[: -len(suffix)]
    if ".rlock." in filename:
        return "rlock", filename.split(".rlock.", 1)[0]
    return None


def describe_side_file(fs: FileSystem, path: str, kind: str) -> dict[str, object]:
    """What a queue's side file holds, for ``engine inspect`` / ``queue dump``
    (snake_case keys); raises CorruptFileError when its contents cannot be its."""
    with fs.open(path) as handle:
        data = handle.read_all()
    if kind == "state":
        facts = Facts.unpack(data[FACTS_AT:]) if len(data) > FACTS_AT else None
        if len(data) > FACTS_AT and facts is None:
            raise CorruptFileError(path, FACTS_AT, "the durable facts (EQFACTS1 and their crc32)", "other bytes")
        return {
            "kind": "queue state file",
            "bytes": len(data),
            "producers_record": bool(data[:76].strip(b"\0")),
            "newest_writer_file": None if facts is None else facts.newest,
            "closed_at": (
                None if facts is None or not facts.closed_segment else [facts.closed_segment, facts.closed_end]
            ),
        }
    if kind == "sync":
        return {"kind": "queue group-commit words", "bytes": len(data), "in_use": bool(data.strip(b"\0"))}
    if kind == "lock":
        return {"kind": "queue presence lock file", "bytes": len(data)}
    mark = data[: len(READER_MARK)]
    if mark not in (READER_MARK, bytes(len(mark))):
        raise CorruptFileError(path, 0, f"the reader mark {READER_MARK.decode()} or zeros", mark.hex(" "))
    return {"kind": "reader lock file", "bytes": len(data), "has_checkpoint": mark == READER_MARK}
