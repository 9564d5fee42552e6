"""What a writer's open does once it holds the locks and has read the journal:
recovery (cut an unfinished tail, redo or undo what the store file lacks, reset
the journal) and the store header's JOURNAL_LIVE flag, set before the first
commit and cleared at a clean close (``docs/formats/pagestore.md``, "What the
header records").

Functions over a :class:`~engine.pages.store.PageStore`, called by its open and
close, kept out of ``store.py`` to keep that module to the commit path.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from engine.errors import LockedError
from engine.pages import codec, store_codec
from engine.pages.journal import JournalScan
from engine.pages.recovery import StoreState, check_ops, redo, undo
from engine.pages.store_codec import StoreHeader

if TYPE_CHECKING:  # pragma: no cover
    from engine.pages.store import PageStore


def recover_into_store(store: PageStore, state: JournalScan) -> None:
    """Cut an unfinished tail, redo/undo what the store lacks, reset the journal."""
    journal = store._journal
    rep = store.recovery
    jpath = store.journal_path
    if state.needs_repair:
        detail = "; ".join(state.notes)
        if state.cut_bytes:
            rep.cut(jpath, state.size, state.cut_bytes, detail)
        elif state.cut:
            rep.add("reset", jpath, 1, "links", offset=state.clear_next_at or 0, detail=detail)
        if (state.first, state.last) != (state.header.first, state.header.last):
            rep.add(
                "reset",
                jpath,
                1,
                "headers",
                offset=0,
                detail=f"first/last {state.header.first}/{state.header.last} -> {state.first}/{state.last}",
            )
        journal.repair(state)
    h = store._header
    if not state.txs:
        if h.flags & store_codec.FLUSHING:
            # A flush mark with nothing to replay: the pages it covered were all
            # journaled and applied before; only the mark is left to clear.
            store._header = store._disk_header = StoreHeader(
                h.page_size, h.page_count, h.free_head, flags=h.flags & ~store_codec.FLUSHING
            )
            store._handle.write_at(0, store_codec.encode_header(store._header))
            store._sync_store("recover")
            rep.add("reset", store.path, 1, "flags", offset=0, detail="flush mark of an interrupted flush")
        return
    replay = StoreState(h.page_size, h.page_count, h.free_head)
    redone = undone = 0
    store._store_lock.acquire(exclusive=True, wait=None)
    try:
        for tx in state.txs:
            if tx.applied:
                # Already in the synced store; keep the count of appended pages right for checks.
                check_ops(jpath, tx, replay)
            elif tx.rolled_back:
                undo(store._handle, jpath, tx, replay)
                undone += 1
            else:
                redo(store._handle, jpath, tx, replay)
                redone += 1
        if redone or undone or h.flags & store_codec.FLUSHING:
            store._header = StoreHeader(
                h.page_size, replay.page_count, replay.free_head, flags=h.flags & ~store_codec.FLUSHING
            )
            store._disk_header = store._header
            store._handle.write_at(0, store_codec.encode_header(store._header))
            store._sync_store("recover")
            # Checksums of every page the replayed transactions touched, from the
            # pages as they now are (a crash may have torn their entries too).
            assert store._sums is not None
            touched = {
                off // h.page_size
                for tx in state.txs
                if not tx.applied
                for op in tx.ops
                for off in codec.op_page_offsets(op)
            }
            store._sums.truncate_to(replay.page_count)
            store._sums.recompute(sorted(p for p in touched if p <= replay.page_count), store._raw_page)
            store._sums.sync("recover")
    finally:
        store._store_lock.release()
    rep.add("redone", jpath, redone, "transactions")
    rep.add("undone", jpath, undone, "transactions")
    journal.reset()
    journal.sync_reset()  # at rest: the JRNL picture of an empty journal


def mark_journal_live(store: PageStore) -> None:
    """Set the header's JOURNAL_LIVE flag, synced, before the first commit: from
    now until a clean close the latest commits may be only in the journal, and
    an open that finds the flag but no journal refuses instead of losing them."""
    h = store._header
    if h.flags & store_codec.JOURNAL_LIVE:
        return
    live = StoreHeader(h.page_size, h.page_count, h.free_head, flags=h.flags | store_codec.JOURNAL_LIVE)
    store._store_lock.acquire(exclusive=True, wait=None)
    try:
        store._handle.write_at(0, store_codec.encode_header(live))
        store._sync_store("open")
    finally:
        store._store_lock.release()
    store._header = store._disk_header = live


def clear_journal_live(store: PageStore) -> None:
    """At a clean close, after the checkpoint that applied every commit: the
    store file alone is the whole store again (clear the flag, synced)."""
    h = store._header
    if not store._disk_header.flags & store_codec.JOURNAL_LIVE or store._dirty or not store._journal.empty:
        return
    clean = StoreHeader(h.page_size, h.page_count, h.free_head, flags=h.flags & ~store_codec.JOURNAL_LIVE)
    try:
        store._store_lock.acquire(exclusive=True, wait=store.reader_wait)
    except LockedError:
        return  # the flag stays: harmless, the journal is there and at rest
    try:
        store._handle.write_at(0, store_codec.encode_header(clean))
        store._sync_store("close")
    finally:
        store._store_lock.release()
    store._header = store._disk_header = clean
