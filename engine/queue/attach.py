"""Reader files and the queue's locks: what the producers, the consumers and the
diagnostics share.

Every lock of a queue comes from :mod:`engine.fs.lock`:

* ``<queue>.lock``: the producers' presence lock (each open producer holds it
  shared; ``engine queue repair`` takes it exclusively);
* ``<queue>.rlock.<reader>``: a reader name's lock file.  Every consumer of the
  name holds it shared (:mod:`engine.queue.compete`); the writer's probes and
  ``engine queue repair`` take it exclusively for a moment.  A consumer opening
  waits :data:`READER_LOCK_PATIENCE` for it, because those probes hold it for
  microseconds and a consumer must not fail because of that.  Its first 8
  bytes carry the reader's mark once its checkpoint exists (:mod:`engine.queue.census`).

:func:`attach_reader` is how every consumer, in a producer's process or any
other, locks its name and loads (or creates) its checkpoint file.
"""

from __future__ import annotations

import logging

from engine.errors import CorruptFileError, LockedError
from engine.fs import FileSystem, HeldLock, OpenMode, RecoveryReport, probe_lock, take_lock
from engine.queue import census, checkpoint, naming
from engine.queue.compete import lock_consumer
from engine.queue.state import ReaderState

log = logging.getLogger("engine.queue")

#: How long a reader (or the writer) opening waits for its lock before LockedError
#: (seconds): the writer probes the lock of a reader that has no file yet for a few
#: microseconds (see :func:`reader_being_created`), and a reader in another process
#: probes the writer's when the newest file ends in bytes it cannot deliver.
READER_LOCK_PATIENCE = 0.05


def lock_writer(fs: FileSystem, directory: str, queue: str) -> HeldLock:
    """The presence lock of ``queue``, exclusively (``engine queue repair``:
    LockedError while a producer is open, after :data:`READER_LOCK_PATIENCE`)."""
    path = naming.join(directory, naming.writer_lock_name(queue))
    # Waits as a reader does: a reader in another process probes this lock for
    # a moment (cursor.PollingSource.writer_alive).
    return take_lock(fs, path, wait=READER_LOCK_PATIENCE, what=f"writer lock of queue {queue!r}")


def lock_reader(fs: FileSystem, directory: str, queue: str, reader: str, *, patience: bool = True) -> HeldLock:
    """The lock of reader ``reader`` of ``queue``, exclusively (no consumer holds
    it), waiting :data:`READER_LOCK_PATIENCE` for it when ``patience``
    (LockedError if a consumer holds the name)."""
    path = naming.join(directory, naming.reader_lock_name(queue, reader))
    return take_lock(
        fs,
        path,
        wait=READER_LOCK_PATIENCE if patience else 0.0,
        what=f"lock of reader {reader!r} of queue {queue!r}",
    )


def _lock_consumer(fs: FileSystem, directory: str, queue: str, reader: str) -> HeldLock:
    path = naming.join(directory, naming.reader_lock_name(queue, reader))
    handle = fs.open(path, OpenMode.CREATE)
    try:
        what = f"lock of reader {reader!r} of queue {queue!r}"
        return lock_consumer(handle, path, what, READER_LOCK_PATIENCE)
    except BaseException:
        handle.close()
        raise


def reader_files(fs: FileSystem, directory: str, queue: str, listing: list[str] | None = None) -> dict[str, str]:
    """Reader name -> path of every reader file of ``queue`` (in ``listing``, the
    directory's names, when given)."""
    found = {}
    for filename in fs.listdir(directory) if listing is None else listing:
        reader = naming.parse_reader(queue, filename)
        if reader is not None:
            found[reader] = naming.join(directory, filename)
    return found


def reader_being_created(fs: FileSystem, directory: str, queue: str, listing: list[str]) -> str | None:
    """The name of a reader that holds its lock but has no file in ``listing``: a
    reader being created (or taking over the default one) right now, or None.

    :func:`attach_reader` takes the reader's lock before it decides where the reader
    starts and writes its file, so until that file exists the writer must not
    retire anything on the strength of the reader files alone.  A lock file
    nobody holds (a removed reader, a crash) is ignored.
    """
    have = {naming.parse_reader(queue, f) for f in listing}
    for filename in listing:
        reader = naming.parse_reader_lock(queue, filename)
        if reader is not None and reader not in have and probe_lock(fs, naming.join(directory, filename)):
            return reader
    return None


def remove_stray_temporaries(fs: FileSystem, directory: str, queue: str, report: RecoveryReport) -> None:
    """Delete the checkpoint temporaries (``<reader file>~~<ms>``) of readers nobody
    holds: a crash between writing one and renaming it left it behind."""
    for filename in fs.listdir(directory):
        if not naming.is_temp(queue, filename):
            continue
        reader = filename[len(queue) + len(".read.") :].split(naming.TEMP_MARK)[0]
        try:
            lock = lock_reader(fs, directory, queue, reader, patience=False)
        except LockedError:
            continue  # its reader is open (maybe checkpointing right now)
        with lock:
            path = naming.join(directory, filename)
            fs.unlink(path)
        report.add("removed", path, 1, "files", detail="stray checkpoint temporary")


def restart_reader(
    fs: FileSystem, directory: str, queue: str, reader: str, head: int, stamp_ms: int, report: RecoveryReport
) -> ReaderState:
    """Reader ``reader``'s checkpoint file is gone although its lock file's mark
    says it had one (deleted): write it again at ``head``, the start of the
    journal, so that every item still there is delivered to it again and none is
    skipped; report it (the caller holds the reader's lock)."""
    path = naming.join(directory, naming.reader_name(queue, reader))
    checkpoint.write_reader_file(fs, path, head, (), stamp_ms)
    report.add(
        "reset",
        path,
        1,
        "readers",
        detail=f"reader {reader!r}'s checkpoint file was missing ({naming.reader_lock_name(queue, reader)} says it "
        f"had one): started again at the start of the journal (head {head}); its items are delivered again",
    )
    log.warning("queue %s: %s", queue, report.actions[-1])
    return ReaderState(head, ())


def _load_state(
    fs: FileSystem,
    path: str,
    *,
    tail: int,
    earliest: int | None,
    window: int | None,
    report: RecoveryReport,
) -> ReaderState:
    """A reader file's state, with the head raised past ids no longer in the
    journal (each such change recorded); ids far past the tail are damage."""
    head, done = checkpoint.load_reader_file(fs, path)
    if window is not None:
        checkpoint.check_ids_in_window(fs, path, head, done, tail, window)
    state = ReaderState(head, done)
    for kind, count, unit, detail in state.clamp(earliest):
        report.add(kind, path, count, unit, detail=detail)
    return state


def attach_reader(
    fs: FileSystem,
    directory: str,
    queue: str,
    name: str,
    *,
    tail: int,
    earliest: int | None,
    stamp_ms: int,
    report: RecoveryReport,
    window: int | None = None,
    named_reader_held: bool = False,
) -> tuple[HeldLock, ReaderState]:
    """Lock reader ``name`` as one of its consumers and load (or create) its state.

    A new named reader takes over the default reader's file and backlog if the
    default is the only reader (fanout: "the first named reader takes over the
    default one"); otherwise it starts at the current tail.  A reader whose
    checkpoint file was deleted starts again at the start of the journal
    (reported).  Returns the lock and the state; each change is added to
    ``report``.  ``window``: ids more than this past ``tail`` are damage, not a
    crash's loss (CorruptFileError, see :func:`checkpoint.check_ids_in_window`).
    """
    naming.check_reader_name(queue, name)
    lock = _lock_consumer(fs, directory, queue, name)
    try:
        path = naming.join(directory, naming.reader_name(queue, name))
        if fs.is_symlink(path):
            raise CorruptFileError(
                path, 0, "a regular file (a queue's files are never symbolic links)", "a symbolic link"
            )
        if fs.exists(path):
            state = _load_state(fs, path, tail=tail, earliest=earliest, window=window, report=report)
        elif census.has_mark(fs, directory, queue, name):
            head = tail if earliest is None else earliest - 1
            state = restart_reader(fs, directory, queue, name, head, stamp_ms, report)
        else:
            state = _create(fs, directory, queue, name, path, tail, earliest, window, stamp_ms, report,
                            named_reader_held)
        census.write_mark(lock.handle)
        return lock, state
    except BaseException:
        lock.release()
        raise


def _create(
    fs: FileSystem,
    directory: str,
    queue: str,
    name: str,
    path: str,
    tail: int,
    earliest: int | None,
    window: int | None,
    stamp_ms: int,
    report: RecoveryReport,
    named_reader_held: bool,
) -> ReaderState:
    """A new reader's state, its file written (the caller holds its lock)."""
    # Only while the default reader's file is the only reader file can this
    # reader take it over, and only then is the directory listed: creating N
    # readers costs O(N) file operations in all, not a listing (O(N) names)
    # each.  ``named_reader_held``: the caller holds a named reader open, so
    # its file exists and the default is not alone (no listing needed).
    default = naming.join(directory, naming.reader_name(queue, ""))
    if name != "" and not named_reader_held and fs.exists(default) and set(reader_files(fs, directory, queue)) == {""}:
        try:
            default_lock: HeldLock | None = lock_reader(fs, directory, queue, "")
        except LockedError:
            default_lock = None  # the default reader is in use: start at the tail
        if default_lock is not None:
            with default_lock:
                if not fs.exists(default):  # another new reader took it over first
                    return _start_at_tail(fs, path, tail, stamp_ms)
                state = _load_state(fs, default, tail=tail, earliest=earliest, window=window, report=report)
                # Write the named file first, then drop the default: a crash in
                # between leaves two readers with the same backlog (safe).  The
                # default's mark goes before its file, so that its absence is not
                # taken for a deleted checkpoint.
                checkpoint.write_reader_file(fs, path, state.head, state.done, stamp_ms)
                census.clear_mark(fs, directory, queue, "")
                fs.unlink(default)
                fs.fsync_dir(directory)
                log.info("queue %s: reader %r took over the default reader at head %d", queue, name, state.head)
                return state
    return _start_at_tail(fs, path, tail, stamp_ms)


def _start_at_tail(fs: FileSystem, path: str, tail: int, stamp_ms: int) -> ReaderState:
    """A new reader's state, at ``tail``, written at once: the writer decides which
    files to delete from the reader files on disk, and must see that this reader
    needs everything after ``tail``."""
    state = ReaderState(tail, ())
    checkpoint.write_reader_file(fs, path, state.head, state.done, stamp_ms)
    return state


def remove_reader_files(fs: FileSystem, directory: str, queue: str, reader: str) -> bool:
    """Delete reader ``reader``'s checkpoint durably, its mark first (the caller
    holds its lock exclusively); False when it had no file."""
    path = naming.join(directory, naming.reader_name(queue, reader))
    if not fs.exists(path):
        return False
    census.clear_mark(fs, directory, queue, reader)
    fs.unlink(path)
    return True
