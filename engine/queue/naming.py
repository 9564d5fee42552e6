"""File names of a queue's journal (the libkestrel journal's, plus this engine's lock files).

* writer files  ``<queue>.<n>``          n = a strictly increasing number (ms clock);
* reader files  ``<queue>.read.<reader>`` (``<queue>.read.`` is the default reader);
* temporaries   ``<queue>.read.<reader>~~<ms>`` (a checkpoint being written);
* this engine's: ``<queue>.lock`` (the writer's lock) and ``<queue>.rlock.<reader>`` (a
  reader's lock).  libkestrel ignores them: they are neither numeric nor ``read.``.
"""

from __future__ import annotations

import os.path

from engine.errors import ConfigError

READ_INFIX = "read."
TEMP_MARK = "~~"


def writer_name(queue: str, number: int) -> str:
    return f"{queue}.{number}"


def reader_name(queue: str, reader: str) -> str:
    return f"{queue}.{READ_INFIX}{reader}"


def writer_lock_name(queue: str) -> str:
    return f"{queue}.lock"


def reader_lock_name(queue: str, reader: str) -> str:
    return f"{queue}.rlock.{reader}"


def parse_writer(queue: str, filename: str) -> int | None:
    """The number of writer file ``filename`` of ``queue``, or None if it is not one."""
    prefix = queue + "."
    if not filename.startswith(prefix):
        return None
    rest = filename[len(prefix) :]
    if not rest.isdigit() or not rest.isascii():
        return None
    return int(rest)


def parse_reader(queue: str, filename: str) -> str | None:
    """The reader name of reader file ``filename`` (``""`` for the default), or None."""
    prefix = queue + "." + READ_INFIX
    if not filename.startswith(prefix) or "~" in filename:
        return None
    return filename[len(prefix) :]


def parse_reader_lock(queue: str, filename: str) -> str | None:
    """The reader name of reader lock file ``filename``, or None if it is not one."""
    prefix = queue + ".rlock."
    if not filename.startswith(prefix):
        return None
    return filename[len(prefix) :]


def is_temp(queue: str, filename: str) -> bool:
    """A stray checkpoint temporary of ``queue`` (deleted on open)."""
    return filename.startswith(queue + "." + READ_INFIX) and TEMP_MARK in filename


#: Longest file name most file systems take (ext4, xfs, tmpfs, btrfs: NAME_MAX).
NAME_MAX = 255
#: The longest suffix a queue adds to its name: a checkpoint temporary,
#: ``.read.<reader>~~<ms>`` (the ms clock, up to 20 digits for an i64).
_LONGEST_SUFFIX = len("." + READ_INFIX) + len(TEMP_MARK) + 20
#: Dot-separated parts of a queue name that would make its files look like another
#: queue's: the files of ``a.read`` (``a.read.<n>``, ``a.read.lock``...) are reader
#: files of ``a``, and ``a``'s reader ``5`` (``a.read.5``) is a writer file of
#: ``a.read``; ``a.rlock`` likewise for reader locks.
_RESERVED_PARTS = ("read", "rlock")


def _check_file_name_part(name: object, what: str) -> None:
    if not isinstance(name, str):
        hint = ": decode it (name.decode())" if isinstance(name, (bytes, bytearray)) else ""
        raise TypeError(f"{what} must be str, not {type(name).__name__}{hint}")
    if not name or os.sep in name or "/" in name or name in (".", "..") or "~" in name or "\0" in name:
        raise ConfigError(f"invalid {what} {name!r}: it must be non-empty, without '/', '~' or NUL, not '.' or '..'")


def check_queue_name(name: str) -> None:
    """A queue name becomes the prefix of its file names: refuse separators, names
    whose files would collide with another queue's, and names too long for them.
    ConfigError says which rule."""
    _check_file_name_part(name, "queue name")
    parts = name.split(".")
    for index, part in enumerate(parts[1:], start=1):
        if part in _RESERVED_PARTS:
            owner = ".".join(parts[:index])
            raise ConfigError(
                f"queue name {name!r} would collide with queue {owner!r}: its files "
                f"({name}.*) are named like {owner!r}'s {'reader' if part == 'read' else 'reader lock'} files "
                f"({owner}.{part}.*)"
            )
    size = len(name.encode("utf-8", "surrogateescape")) + _LONGEST_SUFFIX
    if size > NAME_MAX:
        raise ConfigError(
            f"queue name of {size - _LONGEST_SUFFIX} bytes is too long: its file names need up to "
            f"{_LONGEST_SUFFIX} bytes more, and a file name holds at most {NAME_MAX}"
        )


def check_reader_name(queue: str, reader: str) -> None:
    """A reader name becomes part of ``<queue>.read.<reader>`` (and its temporary
    and lock file names): refuse separators and names too long for them.  ``""``
    is the default reader."""
    if reader:
        _check_file_name_part(reader, "reader name")
    size = len(queue.encode("utf-8", "surrogateescape")) + len(reader.encode("utf-8", "surrogateescape"))
    if size + _LONGEST_SUFFIX > NAME_MAX:
        raise ConfigError(
            f"reader name {reader[:20]!r}... is too long for queue {queue!r}: "
            f"{size + _LONGEST_SUFFIX} bytes of file name, at most {NAME_MAX}"
        )


def check_target(queue: str, option: str, target: str | None) -> None:
    """An ``expired=`` / ``error_queue=`` target: a valid queue name (see
    :func:`check_queue_name`), not ``queue`` itself."""
    if target is None or (option == "expired" and target == "drop"):
        return
    try:
        check_queue_name(target)
    except ConfigError as exc:
        raise ConfigError(f"{option}={target!r}: {exc}") from None
    if target == queue:
        raise ConfigError(f"{option}={target!r}: items cannot be moved to their own queue")


def join(directory: str, filename: str) -> str:
    return os.path.join(directory, filename)
