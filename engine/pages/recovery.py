"""Redo and undo of journal transactions against the store file, and the checks
that every op of a journal stays inside the store.

Every operation sets absolute values (page bytes, the free-list head, a page
count that only grows by ``max``), so replaying a transaction that already
reached the store, wholly or in part, changes nothing: redo is idempotent.
Transactions are replayed in journal order, so a rolled-back one is undone
between its neighbours and later transactions are redone on top of it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from engine.errors import CorruptFileError
from engine.fs import FileHandle, FileSystem
from engine.pages import codec, store_codec
from engine.pages.codec import Alloc, Marker, Modify, ParsedTx, Remove
from engine.pages.journal import MAX_PARTS, scan, scan_if_idle
from engine.pages.storefile import journal_present, missing_journal_error

ReadAt = Callable[[int, int], bytes]


@dataclass
class StoreState:
    """The header fields a replay changes."""

    page_size: int
    page_count: int
    free_head: int


def page_range(count: int) -> str:
    """The valid page ids of a store of ``count`` pages, in words."""
    if count == 0:
        return "no pages yet"
    return "page 1 only" if count == 1 else f"pages 1 to {count}"


def pages_words(header: store_codec.StoreHeader, free: int) -> str:
    """The note a clean verify() ends with: what the store holds and what was checked."""
    count = header.page_count
    return (
        f"{count} page{'' if count == 1 else 's'} of {header.page_size} bytes ({count - free} live, {free} free): "
        "free list whole, the pages in the store file match their checksums"
    )


def check_ops(journal_path: str, tx: ParsedTx, state: StoreState) -> None:
    """Raise CorruptFileError if an op of ``tx`` points outside the store.

    ``state`` is advanced as the ops would (page count) so that later
    transactions are checked against the pages earlier ones appended.
    """
    ps = state.page_size
    for op, at in zip(tx.ops, tx.op_offsets, strict=True):
        if type(op) is Modify:
            # The common op (every page a transaction writes), checked inline: one
            # page offset, inside the store, the bytes inside the page.
            off = op.page_offset
            if off % ps or not 1 <= off // ps <= state.page_count:
                _check_offsets(journal_path, op, at, state)
            if op.offset + len(op.after) > ps:
                raise CorruptFileError(
                    journal_path,
                    at,
                    f"a modification inside the {ps}-byte page",
                    f"[{op.offset}:{op.offset + len(op.after)}]",
                )
            continue
        if isinstance(op, Marker):
            continue
        _check_offsets(journal_path, op, at, state)
        if isinstance(op, Alloc):
            state.page_count = max(state.page_count, op.page_offset // ps)


def _check_offsets(journal_path: str, op: Alloc | Modify | Remove, at: int, state: StoreState) -> None:
    """Raise CorruptFileError for the first page offset of ``op`` outside the store."""
    ps = state.page_size
    for off in codec.op_page_offsets(op):
        if off % ps:
            raise CorruptFileError(journal_path, at, f"a page offset that is a multiple of {ps}", str(off))
        page = off // ps
        limit = state.page_count + 1 if isinstance(op, Alloc) and off == op.page_offset else state.page_count
        if not 1 <= page <= limit:
            inside = f"a page offset inside the store (it has {page_range(state.page_count)})"
            raise CorruptFileError(journal_path, at, inside, str(off))


def redo(handle: FileHandle, journal_path: str, tx: ParsedTx, state: StoreState) -> None:
    """Apply ``tx``'s after-images and free-list changes to the store file.

    The writes go out in op order; a run of them that lie back to back in the file
    (the pages of a transaction usually do) is one vectored write instead of a
    write per page: the same bytes at the same offsets, in the same order.
    """
    check_ops(journal_path, tx, StoreState(state.page_size, state.page_count, state.free_head))
    ps = state.page_size
    writes: list[tuple[int, bytes | memoryview]] = []
    for op in tx.ops:
        if type(op) is Modify:
            writes.append((op.page_offset + op.offset, op.after))
        elif isinstance(op, Alloc):
            if op.head_before == 0 and op.head_after == 0:
                # Appended at the end: the page starts as zeros whatever the file held.
                writes.append((op.page_offset, bytes(ps)))
            state.page_count = max(state.page_count, op.page_offset // ps)
            state.free_head = op.head_after
        elif isinstance(op, Remove):
            writes.append((op.page_offset, store_codec.encode_link(op.head_before)))
            state.free_head = op.page_offset
    write_runs(handle, writes)


def write_runs(handle: FileHandle, writes: list[tuple[int, bytes | memoryview]]) -> None:
    """Write each ``(offset, data)`` in order, those that follow on from the one
    before (offset = its end) together as one vectored write."""
    start = end = -1
    parts: list[bytes | memoryview] = []
    for off, data in writes:
        if off != end and parts:
            _write_run(handle, start, parts)
            parts = []
        if not parts:
            start = end = off
        parts.append(data)
        end += len(data)
    if parts:
        _write_run(handle, start, parts)


def _write_run(handle: FileHandle, offset: int, parts: list[bytes | memoryview]) -> None:
    if len(parts) == 1:
        handle.write_at(offset, bytes(parts[0]))
    else:
        for at in range(0, len(parts), MAX_PARTS):  # at most IOV_MAX pieces per write
            chunk = parts[at : at + MAX_PARTS]
            handle.write_parts_at(offset, chunk)
            offset += sum(map(len, chunk))


def undo(handle: FileHandle, journal_path: str, tx: ParsedTx, state: StoreState) -> None:
    """Restore ``tx``'s before-images and free-list head, newest op first."""
    check_ops(journal_path, tx, StoreState(state.page_size, state.page_count, state.free_head))
    ps = state.page_size
    for op in reversed(tx.ops):
        if isinstance(op, Alloc):
            state.free_head = op.head_before
            if op.head_before == 0 and op.head_after == 0:
                state.page_count = min(state.page_count, op.page_offset // ps - 1)
        elif isinstance(op, Modify):
            handle.write_at(op.page_offset + op.offset, bytes(op.before))
        elif isinstance(op, Remove):
            state.free_head = op.head_before


def walk_free_list(path: str, header: store_codec.StoreHeader, read_at: ReadAt) -> list[int]:
    """The free pages, head first; CorruptFileError on a link out of range or a cycle."""
    ps = header.page_size
    seen: set[int] = set()
    order: list[int] = []
    off = header.free_head
    link_at = 24  # the header's free_head field
    while off:
        page = off // ps
        if off % ps or not 1 <= page <= header.page_count:
            raise CorruptFileError(
                path, link_at, f"a free page offset inside the store (it has {page_range(header.page_count)})", str(off)
            )
        if page in seen:
            raise CorruptFileError(path, link_at, "a free list without a cycle", f"page {page} twice")
        seen.add(page)
        order.append(page)
        raw = read_at(off, store_codec.LINK.size)
        if len(raw) < store_codec.LINK.size:
            raise CorruptFileError(path, off, "a free page link", f"{len(raw)} bytes (file cut short)")
        link_at = off
        off = store_codec.decode_link(raw)
    return order


def verify_journal(
    fs: FileSystem,
    jpath: str,
    header: store_codec.StoreHeader,
    *,
    owner: FileHandle | None = None,
    expected: list[int] | None = None,
) -> list[str]:
    """Check the journal next to a store (read only): chain, ops in range.

    ``owner`` is the writer's own journal handle (it reads through it); anyone else
    checks the journal only when no writer is live (see :func:`scan_if_idle`).
    ``expected``: the transaction offsets the writer holds in memory; the chain on
    disk (followed past a lagging header) must be exactly those.
    """
    if owner is not None:
        state = scan(jpath, owner.read_all())
        found = [tx.offset for tx in state.txs]
        if expected is not None and (found != expected or state.cut):
            raise CorruptFileError(
                jpath,
                state.txs[-1].end if state.txs else codec.FILE_HEADER_SIZE,
                f"the writer's transactions {expected}",
                str(found),
            )
    elif not journal_present(fs, jpath):
        if header.flags & store_codec.JOURNAL_LIVE:
            raise missing_journal_error(jpath[: -len("-journal")], jpath)
        return [f"{jpath}: no journal (created on the next writable open)"]
    else:
        idle = scan_if_idle(fs, jpath)
        if idle is None:
            return [f"{jpath}: a live writer is using it (its own verify() checks it)"]
        state = idle
    notes = [f"{jpath}: {n} (recovery would repair)" for n in state.notes]
    # The store may already hold the transactions: check against the larger of the two counts.
    replay = StoreState(header.page_size, header.page_count, 0)
    for tx in state.txs:
        check_ops(jpath, tx, replay)
    if state.pending and owner is not None:
        notes.append(f"{jpath}: {pending_words(len(state.pending))}")
    elif state.pending:
        notes.append(f"{jpath}: {unapplied_words(len(state.pending))}")
    return notes


def _transactions(count: int) -> str:
    return f"{count} committed transaction{'' if count == 1 else 's'}"


def pending_words(count: int) -> str:
    """What a live writer's journal holds beyond the store file, in a user's words."""
    return (
        f"{_transactions(count)} in the journal, not yet checkpointed into the store file "
        "(normal while a writer is open: the next checkpoint or close() writes them there)"
    )


def unapplied_words(count: int) -> str:
    """What the journal of a writer that did not close holds, in a user's words."""
    return (
        f"{_transactions(count)} in the journal, not yet checkpointed into the store file: the writer "
        "did not close it; nothing is lost (the next writable open applies them)"
    )
