"""Read-only checks and the explicit repair: verify, stats from disk, dump, repair.

These work on the files alone (no locks taken, nothing changed) except
:func:`repair`, which needs the writer lock and says exactly what it dropped.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

from engine.errors import ConfigError, CorruptFileError, EngineError, FormatError
from engine.fs import FileSystem
from engine.queue import census, checkpoint, codec, naming
from engine.queue.config import QueueConfig
from engine.queue.cursor import JournalCursor, PollingSource
from engine.queue.retire import Pin, pinned_files
from engine.queue.segments import (
    SEGMENT_HEADER,
    Segment,
    find_tail,
    foreign_records,
    list_segments,
    open_segment_handle,
    scan_file,
)
from engine.queue.shared import peek_facts, peek_tail
from engine.queue.state import ReaderState
from engine.queue.view import ReaderStats

#: Kestrel's default journal_size, for checks made without a queue's config.
DEFAULT_JOURNAL_SIZE: int = QueueConfig.journal_size


def queue_names(fs: FileSystem, directory: str) -> list[str]:
    """Names of the queues with files in ``directory``."""
    names = set()
    for filename in fs.listdir(directory):
        base, dot, rest = filename.rpartition(".")
        if dot and rest.isdigit():
            names.add(base)
        elif ".read." in filename and "~" not in filename:
            names.add(filename.split(".read.", 1)[0])
    # ``a.read.5`` is reader 5 of ``a``, not a writer file of a queue ``a.read``
    # (such names are refused: naming.check_queue_name).
    return sorted(name for name in names if _valid_queue_name(name))


def _valid_queue_name(name: str) -> bool:
    try:
        naming.check_queue_name(name)
    except ConfigError:
        return False
    return True


def verify_queue(
    fs: FileSystem,
    directory: str,
    queue: str,
    *,
    journal_size: int = DEFAULT_JOURNAL_SIZE,
    live: bool = False,
) -> list[str]:
    """Check every file of ``queue``; raise on damage, return notes.

    Whole files first (:mod:`engine.queue.census`): a queue file that is a
    symbolic link, the newest writer file deleted, emptied or cut short of where
    the last producer closed it, a reader whose checkpoint file is gone.  Writer
    files: magic, every record valid, ids strictly increasing across files
    (contiguous within one file); only the newest file may end in a torn write
    (a note: open cuts it) unless ``live`` (the caller holds the append lock: no
    write is in progress, so it is damage); records another program appended
    after the last CHECK are a note in the newest file (open keeps them) and
    items at the end of a finished one.  Reader files: decodable; an id more
    than a crash's loss past the tail (``checkpoint.crash_window`` of
    ``journal_size``) is damage, CorruptFileError, as on open.
    """
    notes: list[str] = []
    census.check_no_links(fs, directory, queue)
    segments = list_segments(fs, directory, queue)
    if not segments:
        raise EngineError(f"{directory}: queue {queue!r} has no writer files")
    lost = census.newest_damage(fs, directory, queue, segments, peek_facts(fs, directory, queue))
    if lost is not None:
        raise lost
    missing = census.missing_checkpoints(fs, directory, queue)
    if missing:
        raise census.missing_checkpoint_error(directory, queue, missing[0])
    previous = 0
    tail = 0
    for index, seg in enumerate(segments):
        newest = index == len(segments) - 1
        with open_segment_handle(fs, seg.path) as handle:
            scan = scan_file(handle, seg.path, after_id=previous)
            if scan.valid_after is not None:
                raise scan.mid_file_error(seg.path)
            last = scan.last_id
            if scan.good_end < scan.size and scan.uses_checks:
                rest = handle.read_at(scan.good_end, scan.size - scan.good_end)
                end, count, top, clean = foreign_records(rest, last)
                whole = clean or (not newest and not rest[end:].strip(b"\0") and rest[end:end + 1] == b"\0")
                if count and whole and (not newest or not live):
                    notes.append(f"{seg.path}: {count} records appended after the last CHECK by another program "
                                 f"(ids {(last or 0) + 1}..{top}): " + ("kept at the next open" if newest else "items"))
                    last = top
                    scan.good_end = scan.size
        if scan.good_end < scan.size:
            if newest and not live:
                notes.append(
                    f"{seg.path}: torn tail of {scan.size - scan.good_end} bytes would be cut on open ({scan.problem})"
                )
            else:
                offset = _problem_offset(scan.problem, scan.good_end)
                raise CorruptFileError(seg.path, offset, "a valid record", scan.problem)
        if last is not None:
            if previous and seg.first_id is not None and seg.first_id != previous + 1:
                notes.append(f"{seg.path}: ids jump from {previous} to {seg.first_id} (libkestrel's reader stops "
                             "there; written by an engine version before BURNT records, or files were lost)")
            previous = tail = last
    tail = max(tail, peek_tail(fs, directory, queue))
    earliest = next((s.first_id for s in segments if s.first_id is not None), None)
    for filename in fs.listdir(directory):
        reader = naming.parse_reader(queue, filename)
        if reader is None:
            continue
        path = naming.join(directory, filename)
        head, done = checkpoint.load_reader_file(fs, path)
        if earliest is not None:  # else the reader files are the only record of the tail
            checkpoint.check_ids_in_window(fs, path, head, done, tail, checkpoint.crash_window(journal_size))
        top = max(head, max(done, default=0))
        if top > tail and earliest is None:
            notes.append(f"{path}: head {head}, and no item in the journal: the next id will be above it")
        elif top > tail:
            notes.append(f"{path}: ids up to {top} past the tail {tail}: burnt at the next open (lost in a crash)")
        if earliest is not None and head < earliest - 1:
            notes.append(f"{path}: head {head} is before the earliest item {earliest}")
    return notes


def _problem_offset(problem: str | None, default: int) -> int:
    if problem and " offset " in problem:
        digits = problem.split(" offset ", 1)[1].split()[0].rstrip(":")
        if digits.isdigit():
            return int(digits)
    return default


def disk_reader_stats(
    fs: FileSystem,
    directory: str,
    queue: str,
    reader: str,
    tail: int,
    clock: Callable[[], float] = time.time,
) -> ReaderStats:
    """A reader's figures from its file, with the keys of ``Reader.stats()``: what
    only the process holding the reader knows (open reads, items it expired or
    discarded) is None."""
    path = naming.join(directory, naming.reader_name(queue, reader))
    head, done = checkpoint.load_reader_file(fs, path)
    state = ReaderState(head, done)
    oldest = oldest_pending(fs, directory, queue, state)
    now = int(clock() * 1000)
    return {
        "reader": reader,
        "head": head,
        "items": state.pending(max(tail, head)),
        "backlog_bytes": backlog_bytes(fs, directory, queue, ReaderState(head, done), tail),
        "open_reads": None,
        "done_out_of_order": len(state.done),
        "oldest_age_s": None if oldest is None else max(0.0, (now - oldest.add_time) / 1000),
        "expired": None,
        "discarded": None,
        "gets": None,
        "confirms": None,
        "aborts": None,
        "consumers": None,
        "last_checkpoint_ns": last_checkpoint_ns(fs, path),
    }


def last_checkpoint_ns(fs: FileSystem, path: str) -> int | None:
    """When reader file ``path`` was last written (its mtime, ns since the epoch;
    None if it is gone): a reader file is rewritten whole at each checkpoint."""
    try:
        return fs.mtime_ns(path)
    except FileNotFoundError:
        return None


def oldest_pending(fs: FileSystem, directory: str, queue: str, state: ReaderState) -> codec.Put | None:
    """The first item (in id order) that ``state`` has not confirmed, or None."""
    source = PollingSource(fs, directory, queue, 0.001)
    cursor = JournalCursor(source, state.head)
    try:
        while True:
            put = cursor.next()
            if put is None or not state.is_done(put.xid):
                return put
    finally:
        cursor.close()


def add_pins(
    readers: list[ReaderStats], segments: list[Segment], tail: int, size: Callable[[Segment], int]
) -> dict[str, Pin]:
    """Add ``pinned_files`` (a count) and ``pinned_bytes`` to each reader's stats
    entry: the files it pins at its ``head`` (:func:`retire.pinned_files`).
    Returns the pins by reader name."""
    heads = {entry["reader"]: entry["head"] for entry in readers}
    pins = pinned_files(segments, heads, tail, size)
    for entry in readers:
        pin = pins[entry["reader"]]
        entry["pinned_files"] = len(pin.paths)
        entry["pinned_bytes"] = pin.bytes
    return pins


def disk_pending(fs: FileSystem, directory: str, queue: str, reader: str, tail: int) -> int:
    """Items reader ``reader`` has not confirmed, from its file (``len`` of a reader
    not open in this process)."""
    head, done = checkpoint.load_reader_file(fs, naming.join(directory, naming.reader_name(queue, reader)))
    return ReaderState(head, done).pending(max(tail, head))


def backlog_bytes(fs: FileSystem, directory: str, queue: str, state: ReaderState, tail: int) -> int:
    """A reader's backlog in bytes: the payload bytes of the items up to ``tail``
    that ``state`` has not confirmed (open reads count: they are not confirmed).

    The one definition every report uses: ``Queue.stats()``, ``engine queue
    stats`` and the Spark queue source's ``sum(length(data))`` per reader.  It
    reads the backlog's records (not the files' sizes, which count record
    overhead and whole files).
    """
    total = 0
    source = PollingSource(fs, directory, queue, 0.001)
    cursor = JournalCursor(source, state.head)
    try:
        while True:
            put = cursor.next()
            if put is None or put.xid > tail:
                return total
            if not state.is_done(put.xid):
                total += len(put.data)
    finally:
        cursor.close()


def unread_journal_bytes(
    fs: FileSystem, segments: list[Segment], newest_end: int, staged: int, position: tuple[str | None, int, int]
) -> int:
    """Journal bytes from an in-process reader's ``position`` (file, offset, bytes
    decoded not yet handed out: :meth:`Reader.cursor_position`) to the tail, for
    the writer's ``max_size``: the files from there on (the newest up to
    ``newest_end``), the ``staged`` bytes not written yet and the reader's
    decoded batch.  An estimate: it counts record overhead, and items confirmed
    out of order ahead of the reader."""
    path, offset, ready = position
    total = staged + ready
    counting = path is None
    for seg in segments:
        size = newest_end if seg is segments[-1] else fs.file_size(seg.path)
        if seg.path == path:
            counting = True
            total += max(0, size - offset)
        elif counting:
            total += size - len(SEGMENT_HEADER)
    return total


def journal_bytes_after(fs: FileSystem, segments: list[Segment], head: int, tail: int) -> int:
    """Bytes of the writer files that still hold ids above ``head`` (file-granular:
    an estimate of what a reader at ``head`` has left, record overhead included)."""
    total = 0
    for index, seg in enumerate(segments):
        later = next((s.first_id for s in segments[index + 1 :] if s.first_id is not None), None)
        last_id = later - 1 if later is not None else tail
        if last_id > head:
            try:
                total += fs.file_size(seg.path)
            except FileNotFoundError:
                continue
    return total


def queue_stats(fs: FileSystem, directory: str, queue: str) -> dict[str, object]:
    """Stats of a queue from its files alone (no locks needed)."""
    segments = list_segments(fs, directory, queue)
    if not segments:
        raise EngineError(f"{directory}: queue {queue!r} has no writer files")
    tail = find_tail(fs, segments)
    readers = []
    for filename in fs.listdir(directory):
        reader = naming.parse_reader(queue, filename)
        if reader is not None:
            readers.append(disk_reader_stats(fs, directory, queue, reader, tail))
    add_pins(readers, segments, tail, lambda seg: fs.file_size(seg.path))
    return {
        "queue": queue,
        "tail_id": tail,
        "journal_files": len(segments),
        "journal_bytes": sum(fs.file_size(seg.path) for seg in segments),
        "files": [(seg.path, fs.file_size(seg.path), seg.first_id) for seg in segments],
        "readers": readers,
    }


def iter_file_records(fs: FileSystem, path: str) -> Iterator[tuple[int, codec.Record]]:
    """(offset, record) for every record of a writer or reader file; raises on damage.

    Every CHECK record must match the bytes since the previous one.  In a file that
    starts with a CHECK (this engine's), records are yielded only once the CHECK
    after them has matched, so damaged bytes are never shown as data: the damage
    is a CorruptFileError naming the start of the records the CHECK covers.
    """
    with fs.open(path) as handle:
        data = handle.read_all()
    if not (codec.check_magic(data, codec.WRITER_MAGIC) or codec.check_magic(data, codec.READER_MAGIC)):
        raise FormatError(path, 0, "a libkestrel journal magic", data[:4].hex(" ") or "an empty file")
    pos = since = codec.MAGIC_SIZE
    first = data[pos : pos + 1]
    if first and first[0] != codec.CHECK_BYTE and codec.find_valid_check(data, pos, pos) is not None:
        # A valid CHECK further on: a file this engine wrote, whose first record is not
        # the empty CHECK such files start with.  Its start is damaged; read as a
        # libkestrel file (no CHECKs) its records would be shown unverified.
        found = f"{data[pos]:#04x}"
        raise CorruptFileError(path, pos, "the empty CHECK record files with CHECK records start with", found)
    checked = False
    held: list[tuple[int, codec.Record]] = []  # records waiting for their CHECK
    while True:
        try:
            record, end = codec.decode_record(data, pos)
        except codec.Incomplete as exc:
            raise CorruptFileError(path, exc.offset, "a whole record", "the file ends inside it") from None
        except codec.BadRecord as exc:
            raise CorruptFileError(path, exc.offset, exc.expected, exc.found) from None
        if record is None:
            break
        if isinstance(record, codec.Check):
            if not codec.check_matches(record, data[since:pos]):
                raise CorruptFileError(
                    path, since, f"records matching the CHECK record at offset {pos}", "a crc32 mismatch"
                )
            checked = checked or pos == codec.MAGIC_SIZE
            yield from held
            held.clear()
            yield pos, record
            since = end
        elif checked:
            held.append((pos, record))
        else:
            yield pos, record
        pos = end
    if checked and since != pos:
        raise CorruptFileError(path, since, "a CHECK record after the records from here", "the file ends without one")
