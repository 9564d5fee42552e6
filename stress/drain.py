"""Drain, retire, reopen: what the kill attack does to a store after each kill.

An independent run found a queue that a crash right after a rotation left openable
and readable, but that became unopenable once a reader had drained everything and
``close()`` had retired the older files (the next open raised CorruptFileError).
Reopening and reading after a crash is not enough: the life after recovery must go
on.  So after each kill (on a copy of the store, so that the crash, recover,
continue loop keeps its model), :func:`drain_cycle` consumes everything the store
holds the way a user would, lets the store retire what that frees (files, segments,
pages), closes it, and reopens it: the reopen must succeed, ``verify()`` must pass,
and what was drained must stay gone.

A store without a drain of its own here gets the generic cycle: open the writer,
close, open again, read everything (the adapter's snapshot).
"""

from __future__ import annotations

from collections.abc import Callable

from engine.fs import FileSystem
from stress.core import StoreAdapter, Violation

Drain = Callable[[FileSystem, str], None]


def _drain_queue(fs: FileSystem, root: str) -> None:
    """Every reader gets and confirms everything; checkpoint; close retires; reopen."""
    from engine.queue import Queue
    from stress.stores.queue import NAME, OPTIONS

    queue = Queue.open(root, NAME, fs=fs, **OPTIONS)
    try:
        names = sorted(set(queue.reader_names()) | {""})
        for name in names:
            reader = queue.reader(name)
            while True:
                item = reader.get(timeout=0)
                if item is None:
                    break
                reader.confirm(item.id)
        queue.checkpoint()
    finally:
        queue.close()  # retires the files every reader is past
    queue = Queue.open(root, NAME, fs=fs, **OPTIONS)
    try:
        queue.verify()
        for name in sorted(set(queue.reader_names()) | {""}):
            item = queue.reader(name).get(timeout=0)
            if item is not None:
                raise Violation(f"after draining reader {name!r} and reopening, item {item.id} is delivered again")
    finally:
        queue.close()


def _drain_applog(fs: FileSystem, root: str) -> None:
    """Truncate everything (segments are deleted), close, reopen: empty, indexes kept."""
    from engine.applog import AppendLog
    from stress.stores.applog import OPTIONS

    log = AppendLog.open(root, fs=fs, **OPTIONS)
    try:
        nxt = log.next_index
        log.truncate_before(nxt)
    finally:
        log.close()
    log = AppendLog.open(root, fs=fs, **OPTIONS)
    try:
        log.verify()
        if log.next_index < nxt:
            raise Violation(f"after truncating everything and reopening, next_index went back to {log.next_index}")
        left = [r.index for r in log.scan(log.first_index)]
        if left:
            raise Violation(f"after truncate_before({nxt}) and reopening, records {left[:10]} are still there")
    finally:
        log.close()


def _drain_events(fs: FileSystem, root: str) -> None:
    """delete_to(highest) for every id, close, reopen: nothing replays, highest kept."""
    from engine.events import EventJournal

    journal = EventJournal.open(root, sync="always", fs=fs)
    highest = {}
    try:
        for pid in journal.persistence_ids():
            highest[pid] = journal.highest_sequence_nr(pid)
            journal.delete_to(pid, highest[pid])
    finally:
        journal.close()
    journal = EventJournal.open(root, sync="always", fs=fs)
    try:
        journal.verify()
        for pid, hi in highest.items():
            if journal.highest_sequence_nr(pid) != hi:
                raise Violation(f"after delete_to({pid!r}, {hi}) and reopening, highest is "
                                f"{journal.highest_sequence_nr(pid)}")
            left = [e.sequence_nr for e in journal.replay(pid)]
            if left:
                raise Violation(f"after delete_to({pid!r}, {hi}) and reopening, {left[:10]} still replay")
    finally:
        journal.close()


def _drain_pages(fs: FileSystem, root: str) -> None:
    """Free every live page, checkpoint, close, reopen: every page free, verify passes."""
    from engine.pages import PageStore
    from stress.stores.pages import OPTIONS, PAGE

    path = root.rstrip("/") + "/store.db"
    store = PageStore.open(path, page_size=PAGE, fs=fs, create=False, **OPTIONS)
    try:
        live = sorted(store.live_pages)
        if live:
            with store.transaction() as tx:
                for page in live:
                    tx.free(page)
        store.checkpoint()
    finally:
        store.close()
    store = PageStore.open(path, page_size=PAGE, fs=fs, create=False, **OPTIONS)
    try:
        store.verify()
        if store.live_pages:
            raise Violation(f"after freeing every page and reopening, pages {sorted(store.live_pages)[:10]} are live")
    finally:
        store.close()


DRAINS: dict[str, Drain] = {
    "queue": _drain_queue,
    "applog": _drain_applog,
    "events": _drain_events,
    "pages": _drain_pages,
}


def drain_cycle(adapter: StoreAdapter, fs: FileSystem, root: str) -> None:
    """Drain, retire and reopen the store at ``root`` (it is changed: pass a copy).

    Raises :class:`Violation` for a broken promise, EngineError if the store refuses.
    """
    drain = DRAINS.get(adapter.name)
    if drain is not None:
        drain(fs, root)
        return
    session = adapter.session(fs, root)
    session.close()
    adapter.snapshot(fs, root)
