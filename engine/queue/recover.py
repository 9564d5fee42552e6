"""Opening a queue as its first producer: what the files hold, and the repairs a
crash (or a hand-off with libkestrel) needs.

:func:`recover` reads the reader files and scans the newest writer file only
(plus the first record of each older file, for its first id), so open time does
not grow with the backlog.  Every repair goes into the queue's
:class:`~engine.fs.RecoveryReport`:

* ``removed``: checkpoint temporaries of readers nobody holds;
* ``rebuilt``: the header of a writer file a crash left half-created; a CHECK
  written over whole PUT records another program appended after this engine's
  last CHECK (libkestrel continuing the queue: they are kept);
* ``cut``: the newest file's torn tail (a batch without its matching CHECK);
* ``reset``: ids burnt because reader checkpoints mention them but the journal
  lost them (a power loss took back items a reader had already seen: the
  writer puts a BURNT record for each, see :func:`codec.encode_burnt`); a
  reader whose checkpoint file was deleted, started again at the start of the
  journal (every item is delivered to it again, none skipped); the newest
  writer file found deleted, emptied or cut short since the durable facts were
  written (its items are gone: said, never silently; :mod:`engine.queue.census`).

Damage that is not a crash's (checksummed data after the damage, a reader id far
past the tail, a queue file that is a symbolic link) raises CorruptFileError:
``engine queue repair`` is the explicit way out.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.errors import FormatError, LockedError
from engine.fs import FileHandle, FileSystem, OpenMode, RecoveryReport, crashpoint
from engine.queue import census, checkpoint, codec, naming
from engine.queue.attach import lock_reader, reader_files, remove_stray_temporaries, restart_reader
from engine.queue.config import QueueConfig
from engine.queue.segments import (
    SEGMENT_HEADER,
    Segment,
    create_segment,
    earliest_id,
    encode_check,
    find_tail,
    foreign_records,
    is_half_created,
    list_segments,
    read_first_id,
    scan_file,
)
from engine.queue.shared import Facts


@dataclass
class Recovered:
    """What the writer starts from."""

    segments: list[Segment]
    handle: FileHandle  # the newest writer file, open for appending
    end: int  # where its valid records end
    tail: int  # the id of the last item in the files
    #: Ids reader checkpoints mention but the journal lost (``(low, high)``): the
    #: writer puts a BURNT record for each before any item.  None: none.
    burnt: tuple[int, int] | None
    #: The newest file is not one this engine wrote (no leading CHECK: libkestrel's):
    #: the writer starts a file of its own before it writes.
    rotate: bool


def recover(
    fs: FileSystem,
    directory: str,
    queue: str,
    config: QueueConfig,
    report: RecoveryReport,
    now_ms: int,
    facts: Facts | None,
) -> Recovered:
    """Bring ``queue``'s files to a consistent state (the caller holds the append
    lock and no other producer is open) and say where the writer goes on; each
    repair is added to ``report``.  ``facts``: the durable facts of
    ``<queue>.state`` (None: none recorded)."""
    census.check_no_links(fs, directory, queue)
    remove_stray_temporaries(fs, directory, queue, report)
    segments = list_segments(fs, directory, queue)
    lost = census.newest_damage(fs, directory, queue, segments, facts)
    if lost is not None:
        report.add("reset", lost.path, 1, "files", detail=f"{lost}; the queue goes on from the files there are")
    closed = facts if facts is not None and facts.closed_segment and lost is None else None
    segments, handle, end, tail, foreign = _open_newest(fs, directory, queue, segments, report, now_ms, closed)
    try:
        burnt, tail = _burn_mentioned_ids(fs, directory, queue, config, segments, tail, report)
        _reset_missing_checkpoints(fs, directory, queue, segments, tail, now_ms, report)
        if not reader_files(fs, directory, queue):
            # A queue always has at least the default reader, so items are kept.
            start = earliest_id(segments)
            first_head = tail if start is None else start - 1
            path = naming.join(directory, naming.reader_name(queue, ""))
            checkpoint.write_reader_file(fs, path, first_head, (), now_ms)
    except BaseException:
        handle.close()
        raise
    return Recovered(segments, handle, end, tail, burnt, foreign)


def resync(
    fs: FileSystem, directory: str, queue: str, report: RecoveryReport, now_ms: int
) -> tuple[list[Segment], FileHandle, int, int]:
    """Re-read the writer files after a producer died holding the append lock
    (the caller holds it now): the newest file is repaired as at open (a torn
    batch cut; whole records kept).  Returns the files, a handle on the newest,
    where its valid records end, and the last id in the files."""
    segments = list_segments(fs, directory, queue)
    segments, handle, end, tail, _ = _open_newest(fs, directory, queue, segments, report, now_ms, None)
    return segments, handle, end, tail


def _open_newest(
    fs: FileSystem,
    directory: str,
    queue: str,
    segments: list[Segment],
    report: RecoveryReport,
    now_ms: int,
    closed: Facts | None,
) -> tuple[list[Segment], FileHandle, int, int, bool]:
    """Open the newest writer file (created when there is none) and repair it:
    ``(segments, handle, end, last id in the files, foreign)``."""
    if not segments:
        segments.append(create_segment(fs, directory, queue, segments, now_ms))
    newest = segments[-1]
    handle = fs.open(newest.path, OpenMode.WRITE)
    try:
        end, last_id, foreign = _recover_newest(handle, newest, segments, report, closed)
        if last_id is not None and newest.first_id is None:
            newest.first_id = read_first_id(fs, newest.path, finished=False)
        tail = last_id if last_id is not None else find_tail(fs, segments[:-1])
    except BaseException:
        handle.close()
        raise
    return segments, handle, end, tail, foreign


def _recover_newest(
    handle: FileHandle, newest: Segment, segments: list[Segment], report: RecoveryReport, closed: Facts | None
) -> tuple[int, int | None, bool]:
    """Repair the newest writer file (half-created header, torn tail, records
    another program appended); returns where its valid records end, its last id
    (None: it holds no PUT) and whether it is a file this engine did not write."""
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
    good_end, last, count, size = scan.good_end, scan.last_id, scan.count, scan.size
    if scan.uses_checks and good_end < size:
        kept = _adopt_foreign(handle, newest, scan.good_end, scan.size, last, report, closed)
        if kept is not None:
            good_end, last, count = kept[0], kept[1], count + kept[2]
            size = good_end
    if good_end < size:
        handle.truncate(good_end)
        crashpoint("queue.recover.before-fsync")
        handle.fsync()
        report.cut(newest.path, good_end, size - good_end, f"torn tail: {scan.problem}")
    newest.first_id = newest.first_id if count else None
    return good_end, last, not scan.uses_checks


def _adopt_foreign(
    handle: FileHandle,
    newest: Segment,
    start: int,
    size: int,
    last_id: int | None,
    report: RecoveryReport,
    closed: Facts | None,
) -> tuple[int, int, int] | None:
    """The bytes after the newest file's last CHECK (``start``) when they are
    whole PUT records another program wrote: keep them under a CHECK of their
    own; ``(end, last id, records)``, or None (a torn write of ours: cut).

    Whole PUTs whose ids continue the file's and that end exactly at the end of
    the file are kept whoever wrote them: their bytes are what was written
    (libkestrel, which appends to the newest file, closed cleanly; or a write of
    ours whose CHECK a crash took, never acknowledged: at-least-once).  When the
    last producer of this engine closed the queue exactly there (the durable
    facts say so), whatever follows was written by another program: its whole
    records are kept up to the first damage or end marker (libkestrel's own rule,
    as after it crashed with its file still preallocated), the rest is cut."""
    data = handle.read_at(start, size - start)
    end, records, top, clean = foreign_records(data, last_id)
    after_close = closed is not None and closed.closed_segment == newest.number and closed.closed_end == start
    if not records or not (clean or after_close):
        return None
    kept = data[:end]
    if start + end < size:
        handle.truncate(start + end)
        report.cut(newest.path, start + end, size - start - end, "after the records another program appended")
    handle.write_at(start + end, encode_check(kept))
    crashpoint("queue.recover.before-fsync")
    handle.fsync()
    report.add(
        "rebuilt",
        newest.path,
        records,
        "records",
        offset=start,
        detail=f"ids {top - records + 1}..{top} appended with no CHECK (by libkestrel, or a write whose CHECK a crash "
        "took): kept, under a CHECK of their own",
    )
    return start + end + len(codec.EMPTY_CHECK), top, records


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
    next id must be above all of them.  Returns ``(ids to burn or None, tail)``.

    Otherwise a reader that saw and confirmed an item whose bytes a power loss then
    took back (readers read what is in the file, synced or not) would treat the NEW
    item that reuses the id as already done: an acknowledged put lost.  The
    writer puts a BURNT record for each such id, so the ids stay contiguous and
    libkestrel's reader (which stops at a gap) reads on.

    But only ids a crash could really have taken back: at most the newest file's
    worth past the tail that survived (``checkpoint.crash_window``).  An id further
    out is a damaged reader file (one flipped bit can make it 2**60): it raises
    CorruptFileError instead of making the writer burn that many ids; `engine
    queue repair` drops it.  That bound needs a tail: when no file holds an item,
    the highest id the readers mention IS the tail, whatever its distance from 0.
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
        # Every item was retired (a queue an earlier version left with only an
        # empty writer file): the reader files are the only record of the last id.
        return None, mentioned
    report.add(
        "reset",
        where,
        mentioned - tail,
        "ids",
        detail=f"ids {tail + 1}..{mentioned} lost before they were durable: burnt (the next id is {mentioned + 1})",
    )
    return (tail + 1, mentioned), tail


def _reset_missing_checkpoints(
    fs: FileSystem, directory: str, queue: str, segments: list[Segment], tail: int, now_ms: int, report: RecoveryReport
) -> None:
    """A reader whose checkpoint file is gone (its lock file's mark says it had
    one) starts again at the start of the journal: every item still in the
    journal is delivered to it again, none is skipped."""
    start = earliest_id(segments)
    head = tail if start is None else start - 1
    for reader in census.missing_checkpoints(fs, directory, queue):
        try:
            lock = lock_reader(fs, directory, queue, reader, patience=False)
        except LockedError:
            continue  # in use: its consumer found the same and deals with it
        with lock:
            restart_reader(fs, directory, queue, reader, head, now_ms, report)
