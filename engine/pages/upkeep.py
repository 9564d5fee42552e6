"""Store upkeep that needs the writer's state: shrinking the file, verify(),
stats() and closing a store its user forgot to close.

Functions over a :class:`~engine.pages.store.PageStore` (called by its
``shrink``, ``verify`` and ``stats`` methods with the store's lock held, and by
its finalizer), kept out of ``store.py`` to keep that module to the commit path.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from engine.errors import CorruptFileError
from engine.pages import store_codec
from engine.pages.recovery import pages_words, verify_journal, walk_free_list
from engine.pages.store_codec import StoreHeader
from engine.pages.storefile import check_store_size, free_tail_prefix, read_header

if TYPE_CHECKING:  # pragma: no cover
    from engine.pages.store import PageStore


def shrink_store(store: PageStore) -> int:
    """Give the free pages at the end of the file back to the file system;
    returns how many pages the store lost.

    Checkpoints first (the journal is then at rest, so no redo can reach past
    the new end), then drops the longest run of free pages that ends at the
    last page *and* makes up the head of the free list (the newest frees: a
    caller that frees the pages it wants returned last, as ``engine.kv``'s
    compaction does, gets all of them).  The header (page count and free-list
    head) changes in one atomic 40-byte write, synced before the file and its
    checksums are truncated (the journal, at rest, is truncated to its header
    too): a crash leaves the old store or the new one with
    a longer file than it needs, which is valid.  Waits up to ``reader_wait``
    for readers' snapshots like ``checkpoint``.
    """
    store.checkpoint()
    store._journal.release_space()  # the journal is at rest: its old space goes too
    header = store._header
    drop = free_tail_prefix(store._free_order, header.page_count)
    if not drop:
        return 0
    count = header.page_count - drop
    rest = store._free_order[drop:]
    ps = header.page_size
    new = StoreHeader(ps, count, rest[0] * ps if rest else 0, flags=header.flags)
    store._store_lock.acquire(exclusive=True, wait=store.reader_wait)
    try:
        store._handle.write_at(0, store_codec.encode_header(new))
        store._sync_store("shrink")
        store._header = store._disk_header = new
        store._handle.truncate((count + 1) * ps)
        store._sync_store("shrink-truncate")
        assert store._sums is not None
        store._sums.truncate_to(count)
        store._sums.handle.truncate(store_codec.sum_offset(count + 1))
        store._sums.sync("shrink")
    except BaseException as exc:
        store._failure = exc
        raise
    finally:
        store._store_lock.release()
    store._free_order = rest
    store._free = set(rest)
    store._cache.discard_many(range(count + 1, count + drop + 1))
    return drop


def verify_store(store: PageStore) -> list[str]:
    """:meth:`PageStore.verify`'s checks (the caller holds the store's lock)."""
    disk_header = read_header(store.path, store._handle)
    if disk_header != store._disk_header:
        raise CorruptFileError(store.path, 0, f"header {store._disk_header}", str(disk_header))
    ps = disk_header.page_size
    check_store_size(store.path, disk_header, store._handle.size())
    header = store._header  # the committed state: the file plus what is not yet written
    free = walk_free_list(store.path, header, store._overlay_read)
    if free != store._free_order or set(free) != store._free:
        raise CorruptFileError(store.path, 24, f"free list {store._free_order}", str(free))
    for page, data in store._cache.items():
        if page not in store._dirty and store._handle.read_at(page * ps, ps) != data:
            raise CorruptFileError(store.path, page * ps, "cached page equal to disk")
    assert store._sums is not None
    sums = store._sums
    for page in range(1, min(disk_header.page_count, len(sums.values) - 1) + 1):
        if page not in store._dirty:
            sums.check(page, store._raw_page(page), ps)  # raises if it does not match
    journal = store._journal
    notes = verify_journal(store._fs, store.journal_path, header, owner=journal.handle, expected=journal.tx_offsets)
    notes.append(pages_words(header, len(free)))
    return notes


def store_stats(store: PageStore) -> dict[str, int]:
    """:meth:`PageStore.stats`: snake_case keys, integer values.

    ``pages`` counts every page id (``live_pages`` + ``free_pages``);
    ``unflushed_pages`` are committed pages not yet written to the store file
    (readers in other processes do not see them yet); ``pending_transactions``
    are commits in the journal not yet checkpointed into the store file (normal
    while a writer is open); ``postponed`` counts flushes and checkpoints put off
    because a reader held a snapshot.
    """
    free = len(store._free_order)
    cache = store._cache
    return {
        "page_size": store.page_size,
        "pages": store.page_count,
        "live_pages": store.page_count - free,
        "free_pages": free,
        "store_bytes": store._handle.size(),
        "journal_bytes": store._journal.size,
        "pending_transactions": len(store._journal.unapplied),
        "unflushed_pages": len(store._dirty),
        "commits": store.commits,
        "checkpoints": store.checkpoints,
        "postponed": store.postponed,
        "cache_pages": cache.capacity,
        "cached_pages": len(cache),
        "cache_hits": cache.hits,
        "cache_misses": cache.misses,
    }
