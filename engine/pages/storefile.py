"""What the writer, the reader and the transaction share about the store file:
its typed errors, reading its header, the page checks, the file names, and how
committed page images are written into it.

The store file (ENGPAGES, ``docs/formats/pagestore.md``) sits at ``path``; its
JRNL journal at ``path + "-journal"``, its page checksums at ``path + "-sums"``
the writers' lock at ``path + "-lock"`` and the store file lock's gate at
``path + "-gate"`` (:class:`~engine.fs.GatedLock`).
"""

from __future__ import annotations

import errno
from collections.abc import Iterable, Set

from engine.errors import CorruptFileError, FormatError, LockedError, PageError
from engine.errors import RecoveryNeededError as RecoveryNeededError  # re-exported
from engine.fs import FileHandle, FileSystem, GatedLock, OpenMode, create_file, lock_handle, parent_dir
from engine.pages import codec, store_codec
from engine.pages.store_codec import StoreHeader

LOCK_SUFFIX = "-lock"


GATE_SUFFIX = "-gate"


def gate_path(store_path: str) -> str:
    """The gate of the store file's lock (its scratch words; see :class:`~engine.fs.GatedLock`)."""
    return store_path + GATE_SUFFIX


def lock_store_shared(fs: FileSystem, path: str, handle: FileHandle, wait: float | None) -> None:
    """Take the store file's shared lock on ``handle`` through its gate, for a
    one-off read; closing ``handle`` lets it go."""
    store_lock = GatedLock(fs, handle, gate_path(path), what="store file lock")
    try:
        store_lock.acquire(exclusive=False, wait=wait)
    finally:
        store_lock.close()


def lock_path(store_path: str) -> str:
    """The writers' lock file of the store at ``store_path``."""
    return store_path + LOCK_SUFFIX


def read_header(path: str, handle: FileHandle) -> StoreHeader:
    """The store file's header; FormatError for a foreign file, CorruptFileError for damage."""
    return read_header_bytes(path, handle.read_at(0, store_codec.HEADER_SIZE))


def read_header_bytes(path: str, raw: bytes) -> StoreHeader:
    """:func:`read_header` of bytes already read."""
    try:
        return store_codec.decode_header(raw)
    except store_codec.ForeignMagic as exc:
        raise FormatError(path, 0, *str(exc).split(", ", 1)) from exc
    except ValueError as exc:
        expected, _, found = str(exc).partition(", ")
        raise CorruptFileError(path, 0, expected, found or None) from exc


def check_live(path: str, page: object, count: int, is_free: bool, page_size: int) -> None:
    """PageError unless ``page`` is an allocated page id (1..``count``, not free).
    (A :class:`PageReader` words a page past its file's end itself: the writer
    may have committed it already.)"""
    if not isinstance(page, int) or isinstance(page, bool) or not 1 <= page <= count:
        off = page * page_size if isinstance(page, int) else 0
        if not isinstance(page, int) or isinstance(page, bool) or page < 1:
            why = "was never allocated (page ids start at 1)"
        else:
            has = f"pages 1..{count}" if count else "no pages yet"
            why = f"was never allocated (the store has {has})"
        raise PageError(path, page, off, why)
    if is_free:
        raise PageError(path, page, page * page_size, "is free")


def slice_page(path: str, page: int, data: bytes | bytearray, offset: int, size: int | None, ps: int) -> bytes:
    """``data[offset:offset + size]`` of a page image (all of the rest without ``size``)."""
    if size is None:
        size = ps - offset
    if offset < 0 or size < 0 or offset + size > ps:
        raise PageError(
            path, page, page * ps + max(offset, 0), f"range [{offset}:{offset + size}] is outside the {ps}-byte page"
        )
    return bytes(data[offset : offset + size])


def merge_ranges(spans: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """Sorted, merged byte ranges (overlapping or touching ranges become one)."""
    merged: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            if end > merged[-1][1]:
                merged[-1] = (merged[-1][0], end)
        else:
            merged.append((start, end))
    return merged


def check_store_size(path: str, header: StoreHeader, size: int) -> None:
    """CorruptFileError if a store file of ``size`` bytes is too short for its header."""
    need = (header.page_count + 1) * header.page_size
    if size < need:
        raise CorruptFileError(path, size, f"{need} bytes for {header.page_count} pages", f"{size}")


def write_pages(
    handle: FileHandle,
    ps: int,
    images: dict[int, bytes | bytearray],
    whole: Set[int],
    ranges: Iterable[tuple[int, int]],
    first: tuple[int, bytes] | None = None,
) -> None:
    """Write page images into the store file (unsynced): the pages in ``whole``
    entirely, of the others only the byte ``ranges`` (absolute offsets) the
    journal holds after-images for, so that a write a crash tears damages only
    bytes that redo rewrites.  ``first`` (offset, bytes), when given, is written
    before any of them (the flush's FLUSHING-marked header).

    The writes go to the file system in one batch (``write_many_at``: one
    Python call for a commit's few ranges, or for the hundreds of scattered
    pages a bulk commit writes, instead of a call per write); a run of
    consecutive whole pages is one vectored write, straight from the images (no
    join: a run can be thousands of pages); ranges are merged where adjacent or
    overlapping (a whole page covers any range of it).
    """
    writes: list[tuple[int, bytes]] = [] if first is None else [first]
    if not whole:  # the usual commit: a few byte ranges, no whole page
        spans = ranges if isinstance(ranges, (list, tuple, set)) and len(ranges) == 1 else merge_ranges(ranges)
        for start, end in spans:
            page, off = divmod(start, ps)
            if end <= (page + 1) * ps:  # inside one page: one plain write of a slice
                writes.append((start, bytes(images[page][off : off + end - start])))
            else:
                handle.write_many_at(writes)  # in order: ``first`` before any page
                writes = []
                _write_span(handle, ps, images, start, end)
        handle.write_many_at(writes)
        return
    # One pass over the pages in order: a page alone (a bulk commit's usual case)
    # joins the batch, a run of consecutive pages is kept for a vectored write.
    runs: list[list[int]] = []
    ordered = sorted(whole)
    start = prev = ordered[0]
    for page in [*ordered[1:], -1]:  # -1: a sentinel that ends the last run
        if page == prev + 1:
            prev = page
            continue
        if start == prev:
            image = images[start]
            writes.append((start * ps, image if type(image) is bytes else bytes(image)))
        else:
            runs.append(list(range(start, prev + 1)))
        start = prev = page
    handle.write_many_at(writes)  # ``first`` went out before any page
    for run in runs:
        handle.write_parts_at(run[0] * ps, [images[p] for p in run])
    for start, end in merge_ranges(span for span in ranges if span[0] // ps not in whole):
        _write_span(handle, ps, images, start, end)


def _write_span(handle: FileHandle, ps: int, images: dict[int, bytes | bytearray], start: int, end: int) -> None:
    """Write store bytes ``start..end`` (absolute offsets, maybe across pages) from
    the page images, as one vectored write."""
    parts: list[bytes | bytearray | memoryview] = []
    pos = start
    while pos < end:
        page, off = divmod(pos, ps)
        stop = min(end, (page + 1) * ps)
        image = images[page]
        parts.append(image if stop - pos == ps else memoryview(image)[off : off + stop - pos])
        pos = stop
    handle.write_parts_at(start, parts)


def free_tail_prefix(free_order: list[int], page_count: int) -> int:
    """How many of the free list's first entries are exactly the last pages of
    the store (pages ``page_count - n + 1 .. page_count`` in any order): what
    :meth:`PageStore.shrink` can cut off with one header write."""
    best = 0
    low = page_count + 1
    for n, page in enumerate(free_order, 1):
        low = min(low, page)
        if low == page_count - n + 1:
            best = n  # the first n entries are a permutation of the last n pages
    return best


def file_present(fs: FileSystem, path: str, what: str) -> bool:
    """Whether the file ``path`` (``what``: which of the store's files) exists;
    CorruptFileError naming it if the name is there but leads to no file (a
    dangling symbolic link or a loop of them) or to a directory: that is not "no
    file", which would silently drop what it holds or skip its checks."""
    if fs.exists(path):
        if fs.isdir(path):
            raise CorruptFileError(path, 0, what, "a directory")
        return True
    parent = parent_dir(path)
    name = path.rsplit("/", 1)[-1]
    try:
        listed = name in fs.listdir(parent)
    except OSError:
        listed = False
    if listed:
        raise CorruptFileError(path, 0, what, "a name that leads to no file (a dangling or looping symbolic link)")
    return False


def journal_present(fs: FileSystem, jpath: str) -> bool:
    """:func:`file_present` for the store's JRNL journal."""
    return file_present(fs, jpath, "the page store's JRNL journal file")


def missing_journal_error(path: str, jpath: str) -> CorruptFileError:
    """The store file's header says its latest commits may be only in the journal, which is gone."""
    return CorruptFileError(
        jpath,
        0,
        f"the JRNL journal of {path} (its header flags say a writer had it open, so commits may be only in it)",
        "no file: it was deleted or moved; put it back (or restore a backup) before opening the store",
    )


def orphan_journal_error(path: str, jpath: str, count: int) -> CorruptFileError:
    """A journal (holding ``count`` transactions) whose store file is gone."""
    if count:
        held = f"{count} committed transaction(s) in it"
        advice = "put the store file back (or restore a backup)"
    else:
        held = "at rest"
        advice = f"put it back, or delete {jpath} too to start a new empty store"
    return CorruptFileError(
        path,
        0,
        f"the store file the journal {jpath} belongs to ({held})",
        f"no file: it was deleted or moved; {advice}",
    )


def refuse_foreign(fs: FileSystem, path: str) -> None:
    """Before a writer creates its lock files: refuse a directory, or a file that
    is not a page store, at ``path`` (an open that fails creates nothing).

    Looked at without the lock, so only what no page store ever is: a directory,
    or a file whose first bytes are not the magic (an empty file, or a shorter
    one that starts like it, may be a store a crash or another writer is
    creating: the locked open decides)."""
    if fs.isdir(path):
        raise IsADirectoryError(errno.EISDIR, "Is a directory: not a page store", path)
    if not fs.exists(path):
        return
    with fs.open(path, OpenMode.READ) as handle:
        head = handle.read_at(0, store_codec.HEADER_SIZE)
    if head and not store_codec.MAGIC.startswith(head[: len(store_codec.MAGIC)]):
        read_header_bytes(path, head)  # FormatError / CorruptFileError, as the open would say
        raise FormatError(path, 0, f"magic {store_codec.MAGIC!r}", repr(head[:8]))


def interrupted_creation(fs: FileSystem, path: str, jpath: str) -> bool:
    """An empty store file with no journal contents: a crash hit its creation.

    ``create_file`` syncs the header before the directory entry, but a crash can
    still leave the name of an empty file.  It never held data (the journal is
    created after the store is complete), so it is created again.
    """
    if fs.file_size(path) != 0:
        return False
    # A journal with transactions: not a fresh store; let the header check fail.
    return not (fs.exists(jpath) and fs.file_size(jpath) > codec.FILE_HEADER_SIZE)


def create_store_file(fs: FileSystem, path: str, initial: bytes) -> None:
    """Create ``path`` durably holding ``initial`` (replacing an empty leftover)."""
    if fs.exists(path):
        with fs.open(path, OpenMode.WRITE) as handle:
            handle.write_at(0, initial)
            handle.fsync()
        fs.fsync_dir(parent_dir(path))
        return
    create_file(fs, path, initial).close()


def take_journal_lock(jhandle: FileHandle, jpath: str, seconds: float) -> None:
    """Lock the journal exclusively, waiting up to ``seconds`` for readers.

    The caller holds the writer lock, so no other writer competes: whoever holds
    the journal now is a reader probing or scanning it, which takes milliseconds.
    """
    try:
        lock_handle(jhandle, exclusive=True, wait=seconds, what="journal lock")
    except LockedError as exc:
        raise LockedError(f"{jpath}: readers held a shared lock on the journal for over {seconds:g} s", jpath) from exc


def header_says_journal_live(fs: FileSystem, path: str) -> bool:
    """Whether the store file's header has JOURNAL_LIVE set (a writer may have left
    commits only in the journal); False for a header that does not decode (the
    open's own header check reports that)."""
    with fs.open(path, OpenMode.READ) as handle:
        try:
            header = store_codec.decode_header(handle.read_at(0, store_codec.HEADER_SIZE))
        except ValueError:
            return False
    return bool(header.flags & store_codec.JOURNAL_LIVE)
