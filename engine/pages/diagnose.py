"""Read-only looks at a page store and its journal (CLI, ``inspect``, ``verify``).

Nothing here writes or recovers: a journal that recovery would repair is reported
in notes, and damage raises the typed error the store would raise.  Every function
takes the file system first (the CLI passes the real one, tests the simulator).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from engine.clireport import human_size
from engine.errors import CorruptFileError, PageError
from engine.fs import FileSystem, OpenMode, no_such
from engine.pages import codec, store_codec
from engine.pages import sums as sums_module
from engine.pages.journal import JOURNAL_SUFFIX, JournalScan, journal_path, scan, scan_if_idle
from engine.pages.recovery import StoreState, check_ops, page_range, unapplied_words, walk_free_list
from engine.pages.store_codec import StoreHeader
from engine.pages.storefile import (
    check_store_size,
    file_present,
    journal_present,
    lock_store_shared,
    missing_journal_error,
    orphan_journal_error,
    read_header,
)
from engine.pages.sums import SUMS_SUFFIX, sums_path


@dataclass
class StoreInfo:
    """What a store file holds, read without locks beyond a shared one."""

    path: str
    header: StoreHeader
    file_size: int
    free: list[int]


def store_path_of(path: str) -> str:
    """The store file for ``path``, which may name the store, its journal or its sums."""
    for suffix in (JOURNAL_SUFFIX, SUMS_SUFFIX):
        if path.endswith(suffix):
            return path[: -len(suffix)]
    return path


def read_store(fs: FileSystem, path: str) -> StoreInfo:
    """Header, size and free list of the store file; typed errors on damage."""
    with fs.open(path, OpenMode.READ) as handle:
        lock_store_shared(fs, path, handle, None)
        header = read_header(path, handle)
        size = handle.size()
        check_store_size(path, header, size)
        free = walk_free_list(path, header, handle.read_at)
    return StoreInfo(path, header, size, free)


def _verify_sums(fs: FileSystem, info: StoreInfo) -> str:
    """Check every page against ``<store>-sums``; a note saying what was checked."""
    spath = sums_path(info.path)
    if not file_present(fs, spath, "the page checksum file"):
        return f"{spath}: missing (rebuilt from the store on the next writable open)"
    with fs.open(spath, OpenMode.READ) as handle:
        loaded = sums_module.load(handle.read_all(), info.header.page_size)
    if loaded is None:
        # Not a pass: with its checksums unreadable, no page of the store is checked.
        raise CorruptFileError(
            spath,
            0,
            f"an ENGSUMS header for {info.header.page_size}-byte pages",
            "a damaged or foreign header (the next writable open rebuilds the file from the store)",
        )
    values, page_sum = loaded
    ps = info.header.page_size
    checked = 0
    with fs.open(info.path, OpenMode.READ) as handle:
        lock_store_shared(fs, info.path, handle, None)
        for page in range(1, min(len(values) - 1, info.header.page_count) + 1):
            data = handle.read_at(page * ps, ps)
            if page_sum(data) != values[page]:
                raise CorruptFileError(info.path, page * ps, f"page {page} matching its checksum", "damaged")
            checked += 1
    return f"{spath}: {checked} page checksum(s) match"


def read_journal(fs: FileSystem, jpath: str) -> JournalScan:
    """Scan the journal file (no repair)."""
    with fs.open(jpath, OpenMode.READ) as handle:
        return scan(jpath, handle.read_all())


def read_page(fs: FileSystem, path: str, page: int) -> bytes:
    """The bytes of page ``page`` as the store file holds them, checked against
    its checksum when the sums file has one (CorruptFileError, never damaged bytes)."""
    info = read_store(fs, path)
    ps = info.header.page_size
    if not 1 <= page <= info.header.page_count:
        held = page_range(info.header.page_count)
        raise PageError(path, page, max(page, 0) * ps, f"is not in the store file, which holds {held}")
    return next(iter_pages(fs, info, [page]))


def iter_pages(fs: FileSystem, info: StoreInfo, pages: Iterable[int]) -> Iterator[bytes]:
    """The bytes of ``pages`` (ids in 1..page_count) as the store file holds them,
    each checked against its checksum when the sums file has one: a damaged page
    is a CorruptFileError with its offset, never returned."""
    path = info.path
    ps = info.header.page_size
    loaded = None
    spath = sums_path(path)
    if file_present(fs, spath, "the page checksum file"):
        with fs.open(spath, OpenMode.READ) as sh:
            loaded = sums_module.load(sh.read_all(), ps)
    with fs.open(path, OpenMode.READ) as handle:
        for page in pages:
            lock_store_shared(fs, path, handle, None)
            try:
                data = handle.read_at(page * ps, ps)
            finally:
                handle.unlock()
            if len(data) < ps:
                raise CorruptFileError(path, page * ps + len(data), f"page {page} of {ps} bytes", "end of file")
            if loaded is not None and page < len(loaded[0]) and loaded[1](data) != loaded[0][page]:
                raise CorruptFileError(
                    path, page * ps, f"page {page} matching its checksum", "a different CRC (damaged)"
                )
            yield data


def _describe_flags(flags: int) -> str:
    """The store header's flags in words."""
    words = []
    if flags & store_codec.FLUSHING:
        words.append("FLUSHING (a flush was interrupted: recovery needed)")
    if flags & store_codec.JOURNAL_LIVE:
        words.append("JOURNAL_LIVE (a writer has it open, or did not close it: the journal is part of the store)")
    return ", ".join(words) or "0 (closed cleanly)"


def verify_files(fs: FileSystem, path: str) -> list[str]:
    """Check the store and its journal without changing them; returns notes.

    A store whose journal holds transactions not yet applied (a crashed writer) is
    only half checkable: the store file may hold a torn flush that recovery will
    redo, so its free list and page checksums are checked after recovery, not now.
    """
    spath = store_path_of(path)
    jpath = journal_path(spath)
    notes: list[str] = []
    state: JournalScan | None = None
    live_writer = False
    has_journal = journal_present(fs, jpath)  # a broken link to it raises, naming it
    if has_journal:
        state = scan_if_idle(fs, jpath)
        live_writer = state is None
    if not fs.exists(spath):
        if path == spath:
            raise FileNotFoundError(2, "No such page store", spath)
        if state is not None and state.txs:
            raise orphan_journal_error(spath, jpath, len(state.txs))
        notes.append(f"{spath}: no store file next to this journal")
        header = None
    else:
        header = _read_store_header(spath, fs)
        if not has_journal and header.flags & store_codec.JOURNAL_LIVE:
            raise missing_journal_error(spath, jpath)
        pending = state is not None and bool(state.pending)
        if pending or header.flags & store_codec.FLUSHING:
            notes.append(
                f"{spath}: a writer did not close the store: its last commits are in the journal, not all in the "
                "store file yet (the next writable open applies them); free list and page checksums are checked "
                "after that"
            )
        else:
            info = read_store(fs, spath)
            count = header.page_count
            live = count - len(info.free)
            notes.append(
                f"{spath}: {count} page{'' if count == 1 else 's'} of {header.page_size} bytes ({live} live, "
                f"{len(info.free)} free) as the store file holds them; free list whole"
            )
            notes.append(_verify_sums(fs, info))
    if live_writer:
        notes.append(
            f"{jpath}: a live writer has it open: its commits since its last checkpoint are in the journal, "
            "not yet all in the store file (normal); not checked here (the writer's verify() checks it)"
        )
    elif state is not None:
        notes.extend(f"{jpath}: {n} (the next writable open repairs this)" for n in state.notes)
        if header is not None:
            replay = StoreState(header.page_size, header.page_count, header.free_head)
            for tx in state.txs:
                check_ops(jpath, tx, replay)
        if state.pending:
            notes.append(f"{jpath}: {unapplied_words(len(state.pending))}; chain consistent")
        else:
            notes.append(f"{jpath}: at rest (every commit is in the store file)")
    return notes


def _read_store_header(path: str, fs: FileSystem) -> StoreHeader:
    with fs.open(path, OpenMode.READ) as handle:
        return read_header(path, handle)


def file_stats(fs: FileSystem, path: str) -> dict[str, object]:
    """What ``engine pages stats --json`` prints: snake_case keys, raw numbers.

    ``kind`` is ``page_store``, ``journal`` (a journal without its store file) or
    ``page_checksums``.  A store has ``format_version``, ``page_size``,
    ``pages`` (``live_pages`` + ``free_pages``), ``free_head_page`` (None: empty
    free list), ``store_bytes``, ``header_flags`` (the raw flags) and
    ``closed_cleanly``; beside a journal file, ``journal_path``,
    ``journal_bytes``, ``journal_transactions``, ``pending_transactions``
    (committed, not yet checkpointed into the store file) and
    ``journal_repairs`` (what the next writable open repairs, in words).
    """
    spath = store_path_of(path)
    jpath = journal_path(spath)
    out: dict[str, object] = {"path": path}
    if path.endswith(SUMS_SUFFIX):
        size = fs.file_size(path)
        out["kind"] = "page_checksums"
        out["store_path"] = spath
        out["bytes"] = size
        out["entries"] = max(0, (size - store_codec.SUMS_HEADER_SIZE) // store_codec.SUM.size)
        return out
    if not fs.exists(path) and not (fs.exists(spath) or fs.exists(jpath)):
        raise no_such(fs, path, "page store")
    if path.endswith(JOURNAL_SUFFIX) or not fs.exists(spath):
        out["kind"] = "journal"
    else:
        info = read_store(fs, spath)
        header = info.header
        out["kind"] = "page_store"
        out["format_version"] = header.version
        out["page_size"] = header.page_size
        out["pages"] = header.page_count
        out["live_pages"] = header.page_count - len(info.free)
        out["free_pages"] = len(info.free)
        out["free_head_page"] = header.free_head // header.page_size if header.free_head else None
        out["store_bytes"] = info.file_size
        out["header_flags"] = header.flags
        out["closed_cleanly"] = not header.flags & (store_codec.JOURNAL_LIVE | store_codec.FLUSHING)
    if journal_present(fs, jpath):
        state = read_journal(fs, jpath)
        out["journal_path"] = jpath
        out["journal_bytes"] = state.file_size
        out["journal_transactions"] = len(state.txs)
        out["pending_transactions"] = len(state.pending)
        out["journal_repairs"] = list(state.notes)
    return out


def _size(n: object) -> str:
    assert isinstance(n, int)
    return human_size(n)


def summarize(fs: FileSystem, path: str) -> dict[str, object]:
    """Name/value pairs in words for ``engine inspect`` and ``engine pages stats``
    (the same figures as :func:`file_stats`)."""
    stats = file_stats(fs, path)
    out: dict[str, object] = {}
    if stats["kind"] == "page_checksums":
        return {
            "kind": "page checksums",
            "size": _size(stats["bytes"]),
            "entries": stats["entries"],
            "store": stats["store_path"],
        }
    if stats["kind"] == "journal":
        out["kind"] = "JRNL journal"
    else:
        head = stats["free_head_page"]
        flags = stats["header_flags"]
        assert isinstance(flags, int)
        out.update(
            {
                "kind": "page store",
                "format version": stats["format_version"],
                "page size": _size(stats["page_size"]),
                "pages": stats["pages"],
                "live pages": stats["live_pages"],
                "free pages": stats["free_pages"],
                "free-list head": "none" if head is None else f"page {head}",
                "store file size": _size(stats["store_bytes"]),
                "header flags": _describe_flags(flags),
            }
        )
    if "journal_path" in stats:
        out["journal"] = stats["journal_path"]
        out["journal size"] = _size(stats["journal_bytes"])
        out["transactions in the journal"] = stats["journal_transactions"]
        out["committed, not yet checkpointed into the store file"] = stats["pending_transactions"]
        repairs = stats["journal_repairs"]
        assert isinstance(repairs, list)
        if repairs:
            out["journal repairs pending"] = "; ".join(repairs)
    return out


def sniff_kind(head: bytes) -> str | None:
    """'store', 'journal' or None from a file's first bytes."""
    if head[: len(store_codec.MAGIC)] == store_codec.MAGIC:
        return "store"
    if head[: len(codec.MAGIC)] == codec.MAGIC:
        return "journal"
    if head[: len(store_codec.SUMS_MAGIC)] in (store_codec.SUMS_MAGIC, store_codec.SUMS_MAGIC_32C):
        return "sums"
    return None
