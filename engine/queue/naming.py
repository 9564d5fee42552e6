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


def check_queue_name(name: str) -> None:
    """Queue and reader names become file names: refuse separators and dots' tricks."""
    if os.sep in name or "/" in name or name in (".", "..") or "~" in name or "\0" in name:
        raise ConfigError(f"invalid queue or reader name {name!r}")


def join(directory: str, filename: str) -> str:
    return os.path.join(directory, filename)
