"""Opening a queue as its writer: what the files hold, and the repairs a crash needs.

:func:`recover` reads the reader files and scans the newest writer file only (plus
the first record of each older file, for its first id), so open time does not
grow with the backlog.  Every repair goes into the queue's
:class:`~engine.fs.RecoveryReport`:

* ``removed``: checkpoint temporaries of readers nobody holds;
* ``rebuilt``: the header of a writer file a crash left half-created;
* ``cut``: the newest file's torn tail (a batch without its matching CHECK);
* ``reset``: the next id, moved past ids that reader checkpoints mention but the
  journal lost (a power loss took back items a reader in another process had
  already seen).

Damage that is not a crash's (checksummed data after the damage, a reader id far
past the tail) raises CorruptFileError: ``engine queue repair`` is the explicit
way out.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.errors import FormatError
from engine.fs import FileHandle, FileSystem, OpenMode, RecoveryReport, crashpoint
from engine.queue import checkpoint, codec, naming
from engine.queue.attach import reader_files, remove_stray_temporaries
from engine.queue.config import QueueConfig
from engine.queue.segments import (
    SEGMENT_HEADER,
    Segment,
    create_segment,
    earliest_id,
    find_tail,
    is_half_created,
    list_segments,
    scan_file,
)


@dataclass
class Recovered:
    """What the writer starts from."""

    segments: list[Segment]
    handle: FileHandle  # the newest writer file, open for appending
    end: int  # where its valid records end
    tail: int  # the id of the last item (or the highest id a reader mentions)
    #: Ids burnt because reader checkpoints mention them but the journal lost
    #: them (``(low, high)``), or None.
    skipped: tuple[int, int] | None
    #: The tail jumped past the ids of the newest file: the next put must go to a
    #: new file (ids are contiguous within a file).
    rotate: bool


def recover(
    fs: FileSystem, directory: str, queue: str, config: QueueConfig, report: RecoveryReport, now_ms: int
) -> Recovered:
    """Bring ``queue``'s files to a consistent state (the caller holds the writer
    lock) and say where the writer goes on; each repair is added to ``report``."""
    remove_stray_temporaries(fs, directory, queue, report)
    segments, handle, end, tail = resync(fs, directory, queue, report, now_ms)
    newest = segments[-1]
    try:
        skipped, tail = _burn_mentioned_ids(fs, directory, queue, config, segments, tail, report)
        if not reader_files(fs, directory, queue):
            # A queue always has at least the default reader, so items are kept.
            start = earliest_id(segments)
            first_head = tail if start is None else start - 1
            path = naming.join(directory, naming.reader_name(queue, ""))
            checkpoint.write_reader_file(fs, path, first_head, (), now_ms)
    except BaseException:
        handle.close()
        raise
    rotate = skipped is not None and newest.first_id is not None
    return Recovered(segments, handle, end, tail, skipped, rotate)


def resync(
    fs: FileSystem, directory: str, queue: str, report: RecoveryReport, now_ms: int
) -> tuple[list[Segment], FileHandle, int, int]:
    """Re-read the writer files after a producer died in the middle of a write or a
    rotation (see :mod:`engine.queue.shared`; the caller holds the append lock):
    the newest file is repaired (a half-created header rebuilt, a torn batch cut;
    whole, checksummed batches kept), the first step of :func:`recover` at open.  Returns the files, a handle on
    the newest, where its valid records end, and the last id in the files."""
    segments = list_segments(fs, directory, queue)
    if not segments:
        segments.append(create_segment(fs, directory, queue, segments, now_ms))
    newest = segments[-1]
    handle = fs.open(newest.path, OpenMode.WRITE)
    try:
        end, last_id = _recover_newest(handle, newest, segments, report)
        tail = last_id if last_id is not None else find_tail(fs, segments[:-1])
    except BaseException:
        handle.close()
        raise
    return segments, handle, end, tail


def _recover_newest(
    handle: FileHandle, newest: Segment, segments: list[Segment], report: RecoveryReport
) -> tuple[int, int | None]:
    """Repair the newest writer file (half-created header, torn tail); returns
    where its valid records end and its last id (None: it holds no PUT)."""
    head = handle.read_at(0, codec.MAGIC_SIZE)
    if is_half_created(head):
        # A crash during create_file left the name but not the magic.
        handle.truncate(0)
        handle.write_at(0, SEGMENT_HEADER)
        crashpoint("queue.recover.before-fsync")
        handle.fsync()
        report.add(
            "rebuilt", newest.path, 1, "headers", offset=0, detail=f"half-created writer file ({len(head)} bytes)"
        )
        head = codec.WRITER_MAGIC
    if head != codec.WRITER_MAGIC:
        raise FormatError(newest.path, 0, "writer journal magic 27 64 26 03", head.hex(" ") or "an empty file")
    previous_first = max((s.first_id for s in segments[:-1] if s.first_id is not None), default=0)
    scan = scan_file(handle, newest.path, after_id=previous_first)
    if scan.valid_after is not None:
        # Checksummed data after the damage: not a torn tail.  Cutting would drop
        # acknowledged items; `engine queue repair` is the explicit way out.
        raise scan.mid_file_error(newest.path)
    if scan.good_end < scan.size:
        handle.truncate(scan.good_end)
        crashpoint("queue.recover.before-fsync")
        handle.fsync()
        report.cut(newest.path, scan.good_end, scan.size - scan.good_end, f"torn tail: {scan.problem}")
    newest.first_id = newest.first_id if scan.count else None
    return scan.good_end, scan.last_id


def _burn_mentioned_ids(
    fs: FileSystem,
    directory: str,
    queue: str,
    config: QueueConfig,
    segments: list[Segment],
    tail: int,
    report: RecoveryReport,
) -> tuple[tuple[int, int] | None, int]:
    """Every id any reader checkpoint mentions (head and done ids) is burnt: the
    next id must be above all of them.  Returns ``(skipped ids or None, tail)``.

    Otherwise a reader that saw and confirmed an item whose bytes a power loss then
    took back (a reader in another process reads what is in the file, synced or
    not) would treat the NEW item that reuses the id as already done: an
    acknowledged put lost.  (This also keeps ids increasing when every item was
    deleted.)

    But only ids a crash could really have taken back: at most the newest file's
    worth past the tail that survived (``checkpoint.crash_window``).  An id further
    out is a damaged reader file (one flipped bit can make it 2**60): it raises
    CorruptFileError instead of making the writer skip that many ids; `engine
    queue repair` drops it.  That bound needs a tail: when no file holds an item
    (the previous version retired every file but an empty newest one after a
    crash right after a rotation; this one keeps the last item's file), the
    highest id the readers mention IS the tail, whatever its distance from 0.
    Loading every reader file here also fails the open, not a later checkpoint,
    on a corrupt one.
    """
    has_items = earliest_id(segments) is not None
    window = checkpoint.crash_window(config.journal_size) if has_items else None
    paths = reader_files(fs, directory, queue).values()
    mentioned, where = checkpoint.highest_mentioned(fs, paths, tail, window)
    if mentioned <= tail:
        return None, tail
    if not has_items:
        # Every item was retired (a queue the previous version left with only an
        # empty writer file): the reader files are the only record of the last id.
        return None, mentioned
    report.add(
        "reset",
        where,
        mentioned - tail,
        "ids",
        detail=f"ids {tail + 1}..{mentioned} lost before they were durable: the next id is {mentioned + 1}",
    )
    return (tail + 1, mentioned), mentioned
