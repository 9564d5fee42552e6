"""Reader files and the queue's locks: what the writer, readers in other processes
and the diagnostics share.

Every lock of a queue comes from :mod:`engine.fs.lock`:

* ``<queue>.lock``: the writer's lock (one writer per queue across processes;
  ``engine queue repair`` takes it too);
* ``<queue>.rlock.<reader>``: a reader's lock (one process at a time owns a reader
  name).  A reader opening waits :data:`READER_LOCK_PATIENCE` for it, because the
  writer probes it for a moment (:func:`reader_being_created`) and a reader must not
  fail because of that.

:func:`attach_reader` is how both kinds of reader (in the writer's process and in
another one) lock their name and load or create their checkpoint file.
"""

from __future__ import annotations

import logging

from engine.errors import LockedError
from engine.fs import FileSystem, HeldLock, OpenMode, RecoveryReport, probe_lock, take_lock
from engine.queue import checkpoint, naming
from engine.queue.compete import lock_consumer
from engine.queue.state import ReaderState

log = logging.getLogger("engine.queue")

#: How long a reader (or the writer) opening waits for its lock before LockedError
#: (seconds): the writer probes the lock of a reader that has no file yet for a few
#: microseconds (see :func:`reader_being_created`), and a reader in another process
#: probes the writer's when the newest file ends in bytes it cannot deliver.
READER_LOCK_PATIENCE = 0.05


def lock_writer(fs: FileSystem, directory: str, queue: str) -> HeldLock:
    """The writer lock of ``queue`` (LockedError if another writer has it, after
    :data:`READER_LOCK_PATIENCE`)."""
    path = naming.join(directory, naming.writer_lock_name(queue))
    # Waits as a reader does: a reader in another process probes this lock for
    # a moment (cursor.PollingSource.writer_alive).
    return take_lock(fs, path, wait=READER_LOCK_PATIENCE, what=f"writer lock of queue {queue!r}")


def lock_reader(fs: FileSystem, directory: str, queue: str, reader: str, *, patience: bool = True) -> HeldLock:
    """The lock of reader ``reader`` of ``queue``, waiting :data:`READER_LOCK_PATIENCE`
    for it when ``patience`` (LockedError if another process or handle keeps it)."""
    path = naming.join(directory, naming.reader_lock_name(queue, reader))
    return take_lock(
        fs,
        path,
        wait=READER_LOCK_PATIENCE if patience else 0.0,
        what=f"lock of reader {reader!r} of queue {queue!r}",
    )


def _lock_consumer(fs: FileSystem, directory: str, queue: str, reader: str, share_wait: float) -> HeldLock:
    path = naming.join(directory, naming.reader_lock_name(queue, reader))
    handle = fs.open(path, OpenMode.CREATE)
    try:
        what = f"lock of reader {reader!r} of queue {queue!r}"
        return lock_consumer(handle, path, what, READER_LOCK_PATIENCE, share_wait)
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


def _load_state(
    fs: FileSystem,
    path: str,
    *,
    tail: int,
    earliest: int | None,
    window: int | None,
    report: RecoveryReport,
) -> ReaderState:
    """A reader file's state, clamped into the journal (each clamp recorded)."""
    head, done = checkpoint.load_reader_file(fs, path)
    if window is not None:
        checkpoint.check_ids_in_window(fs, path, head, done, tail, window)
    state = ReaderState(head, done)
    for kind, count, unit, detail in state.clamp(earliest, tail):
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
    share_wait: float | None = None,
) -> tuple[HeldLock, ReaderState]:
    """Lock reader ``name`` and load (or create) its state.

    A new named reader takes over the default reader's file and backlog if the
    default is the only reader (fanout: "the first named reader takes over the
    default one"); otherwise it starts at the current tail.  Returns the lock and
    the state, clamped into the journal; each clamp is added to ``report``.
    ``window``: ids more than this past ``tail`` are damage, not a crash's loss
    (CorruptFileError, see :func:`checkpoint.check_ids_in_window`).
    ``share_wait``: when another consumer holds the name, ask it to share and wait
    this long (:func:`engine.queue.compete.lock_consumer`; the lock returned is then
    shared: the reader competes); None: LockedError at once.
    """
    naming.check_reader_name(queue, name)
    if share_wait is None:
        lock = lock_reader(fs, directory, queue, name)
    else:
        lock = _lock_consumer(fs, directory, queue, name, share_wait)
    try:
        path = naming.join(directory, naming.reader_name(queue, name))
        if fs.exists(path):
            return lock, _load_state(fs, path, tail=tail, earliest=earliest, window=window, report=report)
        # Only while the default reader's file is the only reader file can this
        # reader take it over, and only then is the directory listed: creating N
        # readers costs O(N) file operations in all, not a listing (O(N) names)
        # each.  ``named_reader_held``: the caller holds a named reader open, so
        # its file exists and the default is not alone (no listing needed).
        default = naming.join(directory, naming.reader_name(queue, ""))
        if (
            name != ""
            and not named_reader_held
            and fs.exists(default)
            and set(reader_files(fs, directory, queue)) == {""}
        ):
            try:
                default_lock: HeldLock | None = lock_reader(fs, directory, queue, "")
            except LockedError:
                default_lock = None  # the default reader is in use: start at the tail
            if default_lock is not None:
                with default_lock:
                    if not fs.exists(default):  # another new reader took it over first
                        return lock, _start_at_tail(fs, path, tail, stamp_ms)
                    state = _load_state(fs, default, tail=tail, earliest=earliest, window=window, report=report)
                    # Write the named file first, then drop the default: a crash in
                    # between leaves two readers with the same backlog (safe).
                    checkpoint.write_reader_file(fs, path, state.head, state.done, stamp_ms)
                    fs.unlink(default)
                    fs.fsync_dir(directory)
                    log.info("queue %s: reader %r took over the default reader at head %d", queue, name, state.head)
                    return lock, state
        return lock, _start_at_tail(fs, path, tail, stamp_ms)
    except BaseException:
        lock.release()
        raise


def _start_at_tail(fs: FileSystem, path: str, tail: int, stamp_ms: int) -> ReaderState:
    """A new reader's state, at ``tail``, written at once: the writer decides which
    files to delete from the reader files on disk, and must see that this reader
    needs everything after ``tail``."""
    state = ReaderState(tail, ())
    checkpoint.write_reader_file(fs, path, state.head, state.done, stamp_ms)
    return state
