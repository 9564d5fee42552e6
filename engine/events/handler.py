"""``engine inspect`` / ``engine verify`` support for event journals.

A journal is a directory holding ``meta`` and ``data``; either file alone is also
recognised by its magic (``APFM``/``AKFM`` or ``AKFD``) and summarised from its
header, or as the journal of its directory when its partner is there.  Every
callback reads through the file system it is given (the tests pass the crash
simulator).
"""

from __future__ import annotations

from collections.abc import Mapping

from engine.clireport import in_words
from engine.errors import FormatError
from engine.events.codec import (
    DATA_HEADER_SIZE,
    DATA_MAGIC,
    META_HEADER_SIZE,
    META_MAGICS,
    decode_data_header,
    decode_meta_blocks,
    decode_meta_header,
)
from engine.events.journal import EventJournal
from engine.events.layout import DATA_NAME, DATA_SUMS_NAME, META_NAME, META_SUMS_NAME, join, split
from engine.events.sums import DATA_SUMS_MAGIC, META_SUMS_MAGIC
from engine.formats import FormatHandler
from engine.fs import FileSystem


def _journal_dir(fs: FileSystem, path: str, is_dir: bool) -> str | None:
    """The journal directory ``path`` is (or whose ``meta``/``data`` or checksum
    side file it is), if any."""
    directory, name = (path, "") if is_dir else split(path)
    both = fs.exists(join(directory, META_NAME)) and fs.exists(join(directory, DATA_NAME))
    if both and (is_dir or name in (META_NAME, DATA_NAME, DATA_SUMS_NAME, META_SUMS_NAME)):
        return directory
    return None


def sniff(fs: FileSystem, path: str, head: bytes, is_dir: bool) -> bool:
    if is_dir:
        return _journal_dir(fs, path, True) is not None
    if head[:4] in (DATA_SUMS_MAGIC, META_SUMS_MAGIC):  # a checksum side file: its journal's
        return _journal_dir(fs, path, False) is not None
    return head[:4] in META_MAGICS or head[:4] == DATA_MAGIC


def summarize(fs: FileSystem, path: str) -> Mapping[str, object]:
    """:func:`stats` in words, for ``engine inspect``."""
    return in_words(dict(stats(fs, path)))


def stats(fs: FileSystem, path: str) -> Mapping[str, object]:
    """A journal directory's :meth:`EventJournal.stats`, or what a lone ``data`` or
    ``meta`` file's header (and meta blocks) say; snake_case keys, numbers."""
    is_dir = fs.isdir(path)
    directory = _journal_dir(fs, path, is_dir)
    if directory is not None:
        with EventJournal.open_reader(directory, fs=fs) as journal:
            return journal.stats()
    # A lone file: what its header and (for meta) its blocks say.
    with fs.open(path) as handle:
        content = handle.read_all()
    if content[:4] == DATA_MAGIC:
        length = decode_data_header(content[:DATA_HEADER_SIZE], path)
        return {"file": "data", "blocks_bytes": length, "file_bytes": len(content)}
    magic, size = decode_meta_header(content[:META_HEADER_SIZE], path)
    blocks = decode_meta_blocks(content[META_HEADER_SIZE : META_HEADER_SIZE + size], path)
    return {"file": "meta", "meta_magic": magic.decode("ascii"), "blocks_bytes": size, "persistence_ids": len(blocks),
            "events_ever_written": sum(b.highest for b in blocks)}


def verify(fs: FileSystem, path: str) -> list[str]:
    directory = _journal_dir(fs, path, fs.isdir(path))
    if directory is None:
        raise FormatError(path, 0, "an event journal directory (meta and data files)", "a lone file")
    with EventJournal.open_reader(directory, fs=fs) as journal:
        return journal.verify()


HANDLER = FormatHandler(
    name="events",
    description="event journal (akka file-journal: meta + data)",
    sniff=sniff,
    summarize=summarize,
    verify=verify,
    stats=stats,
)
