"""Read-only looks at a page store and its journal (CLI, ``inspect``, ``verify``).

Nothing here writes or recovers: a journal that recovery would repair is reported
in notes, and damage raises the typed error the store would raise.  Every function
takes the file system first (the CLI passes the real one, tests the simulator).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from engine.clireport import human_size
from engine.errors import PageError
from engine.fs import FileHandle, FileSystem, OpenMode, no_such
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


def _open_read(fs: FileSystem, path: str, what: str, file_what: str) -> FileHandle:
    """``path`` opened for reading.  Nothing there: "PATH: no such <what>"
    (FileNotFoundError); a name that leads to no file (a dangling symbolic link):
    CorruptFileError naming it (``file_what``); a directory, a symbolic link loop,
    no permission: the OS's own error, naming the path.  Creates nothing."""
    try:
        return fs.open(path, OpenMode.READ)
    except FileNotFoundError:
        raise _absent(fs, path, what, file_what) from None


def _absent(fs: FileSystem, path: str, what: str, file_what: str) -> Exception:
    """The error for no readable file at ``path``: the OS's own when its name
    cannot be looked at (a symbolic link loop, no permission), CorruptFileError
    naming a name that leads to no file (a dangling link), else "no such <what>"."""
    if fs.lookup_error(path) is None:
        file_present(fs, path, file_what)  # raises for a dangling link
    return no_such(fs, path, what)


def read_store(fs: FileSystem, path: str) -> StoreInfo:
    """Header, size and free list of the store file; typed errors on damage."""
    with _open_read(fs, path, "page store", "the page store file") as handle:
        lock_store_shared(fs, path, handle, None)
        header = read_header(path, handle)
        size = handle.size()
        check_store_size(path, header, size)
        free = walk_free_list(path, header, handle.read_at)
    return StoreInfo(path, header, size, free)


def _verify_sums(fs: FileSystem, info: StoreInfo) -> str:
    """Check every page against ``<store>-sums`` (:func:`iter_pages`, the readers'
    check); a note saying what was checked."""
    spath = sums_path(info.path)
    # Not a pass when unusable: with its checksums unreadable, no page is checked.
    loaded = sums_module.load_present(fs, info.path, info.header.page_size)
    if loaded is None:
        return f"{spath}: missing (rebuilt from the store on the next writable open)"
    checked = min(len(loaded[0]) - 1, info.header.page_count)
    for _ in iter_pages(fs, info, range(1, checked + 1)):
        pass
    return f"{spath}: {checked} page checksum(s) match"


def read_journal(fs: FileSystem, jpath: str) -> JournalScan:
    """Scan the journal file (no repair)."""
    with _open_read(fs, jpath, "page store journal", "the page store's JRNL journal file") as handle:
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
    each checked against its checksum as the store's readers check it
    (:func:`engine.pages.sums.check_read`): a damaged page, or a sums file that is
    there but unusable (no page could be checked), is a CorruptFileError with the
    file and offset, never bytes returned."""
    path = info.path
    ps = info.header.page_size
    sums, page_sum = sums_module.load_present(fs, path, ps) or (None, store_codec.page_sum)
    with _open_read(fs, path, "page store", "the page store file") as handle:
        for page in pages:
            lock_store_shared(fs, path, handle, None)
            try:
                data = handle.read_at(page * ps, ps)
            finally:
                handle.unlock()
            yield sums_module.check_read(path, page, data, ps, sums, page_sum)


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
        raise _absent(fs, path, "page store", "the page store file")
    if not path.endswith(JOURNAL_SUFFIX) and not fs.exists(spath):
        # Not "a journal without its store" when the store's name is there but
        # cannot be followed (a symbolic link loop, a dangling link, no permission).
        if fs.lookup_error(spath) is not None:
            raise no_such(fs, spath, "page store")  # the OS's error, naming it
        file_present(fs, spath, "the page store file")  # raises for a dangling link
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
