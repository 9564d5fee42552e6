"""Reader checkpoint files: load them strictly, replace them atomically.

A reader file is rewritten whole at each checkpoint (READ_HEAD, then one sorted
READ_DONE) under a ``~~<ms>`` temporary name, fsynced, renamed over the old one, and
then the directory is fsynced (this engine's addition: libkestrel skipped that last fsync, so a crash
could bring back an older checkpoint and redeliver confirmed items).
"""

from __future__ import annotations

from collections.abc import Iterable

from engine.errors import CorruptFileError, FormatError
from engine.fs import FileSystem, atomic_write
from engine.queue import codec


def load_reader_file(fs: FileSystem, path: str) -> tuple[int, list[int]]:
    """``(head, done ids)`` from reader file ``path``.

    Any damage raises :class:`CorruptFileError` (never a silent reset to the tail:
    that is how the original libkestrel server lost whole backlogs); ``engine queue repair`` is the
    explicit way out.
    """
    with fs.open(path) as handle:
        data = handle.read_all()
    if len(data) < codec.MAGIC_SIZE or not codec.check_magic(data, codec.READER_MAGIC):
        found = data[: codec.MAGIC_SIZE].hex(" ") or "an empty file"
        raise FormatError(path, 0, "reader checkpoint magic 26 3c 26 03", found)
    try:
        head, done = codec.decode_reader_file(data)
    except codec.Incomplete as exc:
        raise CorruptFileError(path, exc.offset, "a whole record", "the file ends inside it") from None
    except codec.BadRecord as exc:
        raise CorruptFileError(path, exc.offset, exc.expected, exc.found) from None
    return head, done


def write_reader_file(fs: FileSystem, path: str, head: int, done: Iterable[int], stamp_ms: int) -> None:
    """Atomically replace reader file ``path`` with ``head`` and ``done``."""
    # libkestrel's temp name, "<reader file>~~<ms>"; atomic_write fsyncs it before the
    # rename and the directory after it (the original libkestrel server skipped the latter: without it
    # the rename may be undone by a crash and an older head come back).
    atomic_write(fs, path, codec.encode_reader_file(head, done), tmp_path=f"{path}~~{stamp_ms}")


#: The smallest PUT record on disk: command byte + 24-byte header, no data.
MIN_PUT_BYTES = 1 + codec.PUT_HEADER.size


def crash_window(journal_size: int) -> int:
    """How many ids a crash can take back from the end of the journal.

    Only the newest writer file can lose bytes (a rotation fsyncs the old file
    before the new one exists), it holds at most ``journal_size`` bytes (or a
    single bigger item), and each PUT takes at least :data:`MIN_PUT_BYTES`.  So a
    reader checkpoint (of a reader in another process, which may confirm items
    before they are durable) can mention at most this many ids past the tail that
    survived; anything further is damage.
    """
    return journal_size // MIN_PUT_BYTES + 1


def check_ids_in_window(fs: FileSystem, path: str, head: int, done: list[int], tail: int, window: int) -> int:
    """The highest id reader file ``path`` mentions; CorruptFileError if it is more
    than ``window`` ids past the journal ``tail`` (a flipped bit, not a crash).

    O(number of ids), never O(their numeric distance).
    """
    top = max(head, max(done, default=0))
    limit = tail + window
    if top <= limit:
        return top
    # Point at the damaged id: READ_HEAD's id, or the first READ_DONE id past the limit.
    with fs.open(path) as handle:
        data = handle.read_all()
    bad = head if head > limit else next(i for i in done if i > limit)
    packed = bad.to_bytes(8, "little", signed=True)
    offset = data.find(packed, codec.MAGIC_SIZE)
    what = "READ_HEAD" if bad == head else "READ_DONE"
    raise CorruptFileError(
        path,
        max(offset, 0),
        f"{what} ids at most {limit} (the journal tail {tail} plus the {window} ids a crash can lose; "
        "run `engine queue repair`)",
        str(bad),
    )


def highest_mentioned(fs: FileSystem, paths: Iterable[str], tail: int, window: int | None) -> tuple[int, str]:
    """The highest id the reader files ``paths`` mention (0 if none) and the file
    that mentions it.  ``window``: as for :func:`check_ids_in_window` (None: no
    bound, when the journal holds no item and the reader files are the only record
    of the last id).  Loads every file: a damaged one raises here."""
    top, where = 0, ""
    for path in paths:
        head, done = load_reader_file(fs, path)
        if window is None:
            mentioned = max(head, max(done, default=0))
        else:
            mentioned = check_ids_in_window(fs, path, head, done, tail, window)
        if mentioned > top:
            top, where = mentioned, path
    return top, where
