"""The writer's ``verify()`` and ``stats()``, over the parts a
:class:`~engine.pages.store.PageStore` is made of (its
:class:`~engine.pages.pagefile.StoreFile`, :class:`~engine.pages.freelist.FreeList`
and :class:`~engine.pages.journal.Journal`), called with the store's lock held;
kept out of ``store.py`` to keep that module to the commit path.
"""

from __future__ import annotations

from engine.errors import CorruptFileError
from engine.fs import FileSystem
from engine.pages.freelist import FreeList
from engine.pages.journal import Journal
from engine.pages.pagefile import StoreFile
from engine.pages.recovery import pages_words, verify_journal, walk_free_list


def verify_parts(fs: FileSystem, files: StoreFile, free: FreeList, journal: Journal) -> list[str]:
    """:meth:`PageStore.verify`'s checks: the store file (header, size, cache,
    checksums), the free list in memory against the one on disk (as committed),
    the journal's chain against the writer's transactions."""
    files.verify()
    header = files.header  # the committed state: the file plus what is not yet written
    found = walk_free_list(files.path, header, files.overlay_read)
    if not free.same_as(found):
        raise CorruptFileError(files.path, 24, f"free list {free.pages()}", str(found))
    notes = verify_journal(fs, journal.path, header, owner=journal.handle, expected=journal.tx_offsets)
    notes.append(pages_words(header, len(found)))
    return notes


def parts_stats(files: StoreFile, free: FreeList, journal: Journal, counters: dict[str, int]) -> dict[str, int]:
    """:meth:`PageStore.stats`, the store's own ``counters`` included:
    snake_case keys, integer values.

    ``pages`` counts every page id (``live_pages`` + ``free_pages``);
    ``unflushed_pages`` are committed pages not yet written to the store file
    (readers in other processes do not see them yet); ``pending_transactions``
    are commits in the journal not yet checkpointed into the store file (normal
    while a writer is open).
    """
    count = files.header.page_count
    figures = files.stats()
    return {
        "page_size": files.page_size,
        "pages": count,
        "live_pages": count - len(free),
        "free_pages": len(free),
        "store_bytes": figures["store_bytes"],
        "journal_bytes": journal.size,
        "pending_transactions": len(journal.unapplied),
        "unflushed_pages": figures["unflushed_pages"],
        **counters,
        **{key: figures[key] for key in ("cache_pages", "cached_pages", "cache_hits", "cache_misses")},
    }
