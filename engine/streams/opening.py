"""Opening a stream journal's file: create, reset or recover it.

:func:`open_ring` is step 2-3 of the store core's open sequence for the stream
journal (:meth:`StreamJournal.open <engine.streams.journal.StreamJournal.open>`
holds the writer lock): it opens or builds the file through the seam (kept by
the core), makes the repairs a crash calls for (each into the core's report),
and returns the file (:class:`~engine.streams.ring.RingFile`) with a
:class:`Start`, the value the journal installs: where to write next, the next
numbers, and the streams a dead writer left open (the journal aborts them).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from engine.errors import ConfigError, CorruptFileError, DiskFullError
from engine.fs import FileHandle, FileSystem, OpenMode, crashpoint, create_file, parent_dir
from engine.fs.core import StoreCore
from engine.streams import codec
from engine.streams.reader import JournalScan
from engine.streams.ring import RingFile
from engine.streams.stream import Lane

log = logging.getLogger("engine.streams")

#: Zero bytes written per call when preallocating a new journal.
PREALLOC_CHUNK = 1 << 20
#: Suffix of the temporary file a new journal is built in before its rename.
CREATING_SUFFIX = ".creating"
#: The largest journal: its offsets are signed 64-bit file offsets.
MAX_SIZE = (1 << 63) - 1


@dataclass(frozen=True)
class Start:
    """What opening found, for the journal to install."""

    #: File offset of the next transaction (a page start).
    position: int
    #: Global record number of the next record.
    next_global: int = 0
    #: Number of the next stream opened.
    next_stream: int = 0
    #: Start a new lap before anything else (no room for a zero page after the end).
    wrap: bool = False
    #: Streams the previous writer left open: the journal aborts them.
    orphans: tuple[Lane, ...] = ()


def check_geometry(page: int, size: int | None, path: str = "", *, free: int | None = None) -> int:
    """``size`` if a journal of ``page``-byte pages fits in it (and, for a new
    preallocated journal, in the ``free`` bytes of its file system); else
    ConfigError (DiskFullError when only the free space is short)."""
    if size is None:
        raise ConfigError(f"{path}: a new journal needs size= (bytes)")
    if page < codec.MIN_PAGE_SIZE:
        raise ConfigError(f"page size must be at least {codec.MIN_PAGE_SIZE}, not {page}")
    if size // page < codec.MIN_PAGES:
        raise ConfigError(f"a journal needs at least {codec.MIN_PAGES} pages of {page} bytes, not {size} bytes")
    # Refused before a byte is written: preallocating zeros up to a size the disk
    # cannot hold (a typo, --size 99999999999999999999) filled it first.
    if size > MAX_SIZE:
        raise ConfigError(f"a journal is at most {MAX_SIZE} bytes (file offsets are signed 64-bit), not {size}")
    if free is not None and size > free:
        # The disk's own refusal, made before a byte is written: DiskFullError (as
        # the failed write would have been), in words that say what to do.
        raise DiskFullError(
            path,
            operation="preallocation",
            message=f"{path}: a journal of {size} bytes does not fit: {free} bytes are free on its "
            "file system (a new journal is preallocated whole)",
        )
    return size


def free_for(fs: FileSystem, path: str, preallocate: bool) -> int | None:
    """What a new journal at ``path`` may take (None: no limit known, or not
    preallocated: a sparse file takes its blocks as it is written)."""
    return fs.free_bytes(parent_dir(path)) if preallocate else None


def default_page_size(fs: FileSystem, path: str) -> int:
    """journald's page size: the larger of the OS page size and the file
    system's block size."""
    return fs.block_size(parent_dir(path))


def open_ring(
    core: StoreCore, size: int | None, *, create: bool, reset: bool, page_size: int | None, preallocate: bool
) -> tuple[RingFile, Start]:
    """Create, reset or recover the journal file at ``core.path``; the core holds
    the writer lock and keeps the file (released by ``core.opening`` if this
    fails)."""
    path, fs = core.path, core.fs
    exists = fs.exists(path)
    # A blank file -- empty, or a header of zeros -- holds no journal: it is
    # what a crash during creation leaves, or a file preallocated for the
    # original journald server (which writes its header at start).  Initialise it.
    blank = exists and _is_blank(fs, path)
    if blank and create:
        exists = False
        if size is None:
            size = fs.file_size(path)
    if not exists and not create:
        raise FileNotFoundError(path)
    if not exists:
        page = page_size or default_page_size(fs, path)
        size = check_geometry(page, size, path, free=None if blank else free_for(fs, path, preallocate))
        size -= size % page
        ring = RingFile(core.keep(_create(fs, path, page, size, preallocate, reuse=blank)), path, page, size)
        if blank:
            # A reused file may hold stale records past page 1 (a header of
            # zeros is what a crash during creation leaves): scrub them.
            ring.scrub(2 * page, 0)
        return ring, Start(page)
    handle = core.keep(fs.open(path, OpenMode.WRITE))
    if reset:
        page = page_size or default_page_size(fs, path)
        file_size = handle.size()
        check_geometry(page, file_size)
        ring = RingFile(handle, path, page, file_size - file_size % page)
        # A new lap numbered from 0 (header and zero page 1 in one write), as the
        # original server starts; the old records beyond page 1 now count as
        # ahead of number 0: scrubbed.
        ring.write_and_sync_locked(0, codec.encode_header_page(page, 0) + ring.zero_page, "wrap")
        ring.scrub(2 * page, 0)
        return ring, Start(page)
    return _recover(core, handle)


def _is_blank(fs: FileSystem, path: str) -> bool:
    with fs.open(path, OpenMode.READ) as handle:
        head = handle.read_at(0, codec.FILE_HEADER_SIZE)
    return head.count(0) == len(head)


def _create(fs: FileSystem, path: str, page: int, size: int, preallocate: bool, *, reuse: bool) -> FileHandle:
    # A new journal is built whole under a temporary name (header page, zero
    # page 1, the preallocated rest), synced, and only then renamed into place
    # and the directory synced: a crash during creation leaves no journal or a
    # complete one, never a header on a file too short to open.  A reused blank
    # file is initialised in place (it already has its size).  The caller
    # holds the writer lock, so no other process builds the same journal.
    first = codec.encode_header_page(page, 0) + bytes(page)
    final_path = path
    if not reuse:
        path = path + CREATING_SUFFIX
        if fs.exists(path):
            fs.unlink(path)  # left by a crash during an earlier creation
    if reuse:
        handle = fs.open(path, OpenMode.WRITE)
        try:
            handle.write_at(0, first)
            handle.fsync()
            fs.fsync_dir(parent_dir(path))
        except BaseException:
            handle.close()
            raise
    else:
        try:
            handle = create_file(fs, path, first)
        except BaseException:
            _discard(fs, path)
            raise
    try:
        if preallocate:
            # Real zeros rather than a hole: later fdatasyncs then need no
            # block allocation (the original journald server expects a
            # preallocated file).
            # A reused file keeps what it has (stale records past the zero
            # page 1 are scrubbed by the caller, see RingFile.scrub).
            chunk = bytes(PREALLOC_CHUNK)
            offset = max(2 * page, handle.size()) if reuse else 2 * page
            while offset < size:
                n = min(PREALLOC_CHUNK, size - offset)
                handle.write_at(offset, chunk if n == PREALLOC_CHUNK else bytes(n))
                offset += n
        else:
            handle.truncate(size)
        crashpoint("streams.create.before-fsync")
        handle.fsync()  # the size is metadata: a full fsync
        crashpoint("streams.create.after-fsync")
        if not reuse:
            fs.rename(path, final_path)
            handle.path = final_path  # the same inode, now under its real name
            crashpoint("streams.create.before-dir-fsync")
            fs.fsync_dir(parent_dir(final_path))
            crashpoint("streams.create.after-dir-fsync")
    except BaseException:
        handle.close()
        if not reuse and handle.path == path:  # not renamed yet
            _discard(fs, path)
        raise
    return handle


def _discard(fs: FileSystem, path: str) -> None:
    """Remove the temporary file of a creation that failed (a full disk, Ctrl-C):
    a failed open leaves nothing behind.  If even that fails, the next creation
    removes it, as after a crash."""
    try:
        if fs.exists(path):
            fs.unlink(path)
    except OSError:
        pass


def _recover(core: StoreCore, handle: FileHandle) -> tuple[RingFile, Start]:
    """Read the journal to its end, cut a torn transaction, zero stale pages
    past the end, mark a file the original wrote; report each repair."""
    path = core.path
    # Not strict: intact records past a clean end are what a crash leaves
    # when a torn transaction's first page never reached the disk but a later
    # one did (any transaction over a page, and the early page writes of one
    # over SPILL_SIZE).  They are cut below, with the torn tail.
    scan = JournalScan(path, core.fs, handle=handle, strict_end=False)
    end = scan.run()
    assert scan.header is not None
    page = scan.header.page_size
    size = scan.file_size - scan.file_size % page
    if size // page < codec.MIN_PAGES:
        raise CorruptFileError(path, scan.file_size, f"at least {codec.MIN_PAGES} pages of {page} bytes")
    ring = RingFile(handle, path, page, size)
    start = codec.page_ceil(end.position, page)
    # Pages of the torn transaction that did reach the disk (or of an earlier
    # crash's) hold intact records numbered at or ahead of the next one.  Left
    # there, a strict reader would take them for damage (the journal going on
    # past its end) and, worse, the numbers the writer hands out next would
    # catch up with them.  Zero each such page before anything is written.
    scrubbed = ring.scrub(start + page if start + page <= size else start, end.next_global)
    report = core.report
    if not end.clean:
        # What follows the last good record up to the zero page written below
        # (or to the end of the file, when recovery starts a new lap instead).
        report.cut(path, end.position, min(start + page, size) - end.position, f"torn transaction: {end.reason}")
    if scrubbed:
        report.cut(path, end.position, scrubbed * page,
                   f"zeroed {scrubbed} page(s) holding intact records numbered {end.next_global} "
                   "or later past the end (a torn transaction's pages)")
    wrap = start + page > size
    if not scan.marked and not wrap:
        # A file the original server (or an older engine) wrote: now that
        # nothing stale is numbered ahead of the end, mark page 0 so readers
        # probe past the end for damage (the header bytes are unchanged).
        ring.mark(scan.header.first_global)
        log.info("journal %s: page 0 marked as written by engine's writer", path)
    if not wrap and not end.clean:
        ring.cut(end.position, start)
    orphans = tuple(
        # A new lap (wrap) holds no INFO of theirs yet.
        Lane(st.number, st.ident, total=st.offset, records=st.record, info_written=not wrap)
        for st in scan.open_streams.values()
    )
    if orphans:
        # Their writer is gone: they can never end.  The journal aborts them.
        report.add("undone", path, len(orphans), "streams", detail="left open by the previous writer: aborted")
    next_stream = 0 if scan.max_stream is None else (scan.max_stream + 1) & codec.U32_MASK
    return ring, Start(start, end.next_global, next_stream, wrap, orphans)
