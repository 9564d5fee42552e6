"""``engine queue repair``: make a damaged queue openable again, saying what it dropped.

Open refuses what a crash cannot explain (checksummed data after damage, a
reader id far past the tail) rather than guess; repair is the explicit way out.
It takes ``<queue>.lock`` exclusively (no producer may be open) and:

* cuts a writer file with a bad or incomplete record at that record (the report
  gives the bytes and the ids lost, counting the checksummed items after the
  damage); in a finished file it then writes a BURNT record for each id lost
  up to the next file's first, so the ids stay contiguous (libkestrel's reader
  stops at a gap; :func:`engine.queue.codec.encode_burnt`).  Records another
  program appended after the last CHECK (libkestrel) are items, not damage,
  and stay;
* rewrites a reader file that cannot be read, or whose head is more than a
  crash's loss past the journal's tail, with its head at the first id still in
  the journal minus one: nothing is lost, items it had confirmed are delivered
  again (at-least-once), never silently skipped; done ids that far are dropped;
* writes again the checkpoint of a reader whose file was deleted (its lock
  file's mark says it existed), at the start of the journal;
* removes stray checkpoint temporaries;
* records the durable facts afresh (the newest file and where it ends), so an
  open and ``verify`` no longer report a newest file deleted, emptied or cut:
  the loss is accepted here, explicitly.
"""

from __future__ import annotations

import time

from engine.errors import CorruptFileError, FormatError
from engine.fs import FileHandle, FileSystem, OpenMode, RecoveryReport, crashpoint
from engine.queue import census, checkpoint, codec, naming
from engine.queue.attach import lock_writer, reader_files, restart_reader
from engine.queue.config import QueueConfig
from engine.queue.segments import Segment, encode_check, foreign_records, ids_in_valid_batches, list_segments, scan_file
from engine.queue.shared import Facts, peek_facts, write_facts_file


def repair(fs: FileSystem, directory: str, queue: str, journal_size: int = QueueConfig.journal_size) -> RecoveryReport:
    """Repair ``queue`` (see the module docstring); returns the repairs as a
    :class:`RecoveryReport` (``cut``, ``reset``, ``dropped``, ``removed``,
    ``rebuilt``), empty when nothing was wrong.  ``journal_size``: the queue's,
    for the window of ids a crash can lose."""
    naming.check_queue_name(queue)  # before its lock file is created
    report = RecoveryReport(path=naming.join(directory, queue))
    census.check_no_links(fs, directory, queue)
    lock = lock_writer(fs, directory, queue)
    try:
        segments: list[Segment] = list_segments(fs, directory, queue, strict=False)
        tail, newest_end = _repair_writer_files(fs, segments, report)
        earliest = next((seg.first_id for seg in segments if seg.first_id is not None), None)
        _repair_reader_files(fs, directory, queue, earliest, tail, journal_size, report)
        for filename in fs.listdir(directory):
            if naming.is_temp(queue, filename):
                fs.unlink(naming.join(directory, filename))
                report.add("removed", naming.join(directory, filename), 1, "files", detail="stray checkpoint temporary")
        if segments:
            facts = Facts(segments[-1].number, segments[-1].number, newest_end)
            if census.newest_damage(fs, directory, queue, segments, peek_facts(fs, directory, queue)) is not None:
                report.add("reset", segments[-1].path, 1, "files",
                           detail="the newest writer file was deleted, emptied or cut: loss accepted, facts recorded")
            write_facts_file(fs, directory, queue, facts)
        if report.repaired:
            fs.fsync_dir(directory)
    finally:
        lock.release()
    return report


def _repair_writer_files(fs: FileSystem, segments: list[Segment], report: RecoveryReport) -> tuple[int, int]:
    """Cut each writer file at its damage (see the module docstring); returns
    the journal's tail and where the newest file ends."""
    previous = 0
    end = 0
    for index, seg in enumerate(segments):
        with fs.open(seg.path, OpenMode.WRITE) as handle:
            if handle.read_at(0, codec.MAGIC_SIZE) != codec.WRITER_MAGIC:
                raise FormatError(seg.path, 0, "writer journal magic 27 64 26 03", handle.read_at(0, 4).hex(" "))
            scan = scan_file(handle, seg.path, after_id=previous)
            last = scan.last_id
            newest = index == len(segments) - 1
            later = next((s.first_id for s in segments[index + 1 :] if s.first_id is not None), None)
            end = scan.good_end
            if scan.good_end < scan.size and scan.valid_after is None and scan.uses_checks:
                rest = handle.read_at(scan.good_end, scan.size - scan.good_end)
                stop, count, top, clean = foreign_records(rest, last)
                zeros = not rest[stop:].strip(b"\0")
                if count and (clean or zeros) and (later is None or top + 1 == later):
                    last, end = top, scan.good_end + stop  # another program's items: kept
                    if newest and stop < len(rest):
                        _cut(handle, seg.path, end, scan.size, "zeros after the records another program appended",
                             report)
                    elif not newest:
                        end = scan.size
            if end < scan.size and (end == scan.good_end):
                lost = f"ids {(last or previous) + 1}..{later - 1}" if later else f"ids after {last or previous}"
                if scan.valid_after is not None:
                    # Mid-file damage: the checksummed batches after it go too.
                    dropped = ids_in_valid_batches(handle.read_at(0, scan.size), scan.good_end)
                    lost += f", including {len(dropped)} checksummed item(s) after the damage" + (
                        f" (ids {dropped[0]}..{dropped[-1]})" if dropped else ""
                    )
                _cut(handle, seg.path, end, scan.size, f"{scan.problem}; lost {lost}", report)
                if later is not None and later > (last or previous) + 1:
                    end = _burn_gap(handle, seg.path, end, (last or previous) + 1, later - 1, scan.uses_checks,
                                    report)
                    last = later - 1
        if last is not None:
            previous = last
    return previous, end


def _cut(handle: FileHandle, path: str, end: int, size: int, detail: str, report: RecoveryReport) -> None:
    report.cut(path, end, size - end, detail)
    handle.truncate(end)
    crashpoint("queue.repair.before-fsync")
    handle.fsync()


def _burn_gap(
    handle: FileHandle, path: str, end: int, low: int, high: int, checked: bool, report: RecoveryReport
) -> int:
    """Append a BURNT record for each id ``low..high`` at ``end`` (with their CHECK
    in a file that has CHECKs) and fsync; returns the new end."""
    records = b"".join(codec.encode_burnt(xid) for xid in range(low, high + 1))
    blob = records + encode_check(records) if checked else records
    handle.write_at(end, blob)
    handle.fsync()
    report.add("rebuilt", path, high - low + 1, "records", offset=end,
               detail=f"BURNT records for the ids cut ({low}..{high}): the ids stay contiguous")
    return end + len(blob)


def _repair_reader_files(
    fs: FileSystem,
    directory: str,
    queue: str,
    earliest: int | None,
    tail: int,
    journal_size: int,
    report: RecoveryReport,
) -> None:
    start = tail if earliest is None else earliest - 1
    stamp = int(time.time() * 1000)

    def reset_head(path: str, why: str) -> None:
        """Rewrite a reader file at the journal's first item: redeliver, never skip."""
        checkpoint.write_reader_file(fs, path, start, (), stamp)
        report.add("reset", path, 1, "heads",
                   detail=f"{why}; reset to head {start}: items {start + 1}..{tail} will be delivered again")

    limit = tail + checkpoint.crash_window(journal_size)
    for path in reader_files(fs, directory, queue).values():
        try:
            head, done = checkpoint.load_reader_file(fs, path)
        except CorruptFileError as exc:
            reset_head(path, f"unreadable ({exc})")
            continue
        # Ids further past the journal's tail than a crash can lose (a flipped bit)
        # name nothing in the journal.  A head there cannot be trusted: reset it
        # (redeliver, never skip); done ids there are dropped.  Unless the journal
        # holds no item at all: then the reader files are the only record of the
        # last id, and resetting them would reuse ids.
        if earliest is None:
            continue
        if head > limit:
            reset_head(path, f"head {head} is past the journal tail {tail} by more than a crash loses")
        elif done and max(done) > limit:
            beyond = [i for i in done if i > limit]
            kept = [i for i in done if i <= limit]
            checkpoint.write_reader_file(fs, path, head, kept, stamp)
            report.add("dropped", path, len(beyond), "ids",
                       detail=f"done ids past the journal tail {tail} by more than a crash loses "
                       f"({beyond[0]}..{beyond[-1]}); head {head} kept")
    for reader in census.missing_checkpoints(fs, directory, queue):
        restart_reader(fs, directory, queue, reader, start, stamp, report)
