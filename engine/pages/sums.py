"""Per-page checksums in ``<store>-sums`` (ENGSUMS, engine's own): damage to page bytes is detected.

The JRNL journal repairs torn writes of committed pages, but nothing in the store
format would notice a flipped bit in a page at rest.  This file keeps a checksum
of every page (layout in :mod:`engine.pages.store_codec`): CRC-32C in files made
by this version ("ENGSUMS2"), zlib CRC-32 in files of earlier versions
("ENGSUMS1", kept as they are); reads from the store file and ``verify()`` check it.

Crash safety follows the store's: entries are written during a flush, only for
pages being flushed (all of them still in the journal), each entry 4 bytes at a
4-aligned offset, so a torn write can only damage entries that recovery
recomputes from the redone pages.  The file is synced with the store at each
checkpoint, before the journal is reset.  A missing or unreadable sums file (a
store from before this file existed, a crash while creating it) is rebuilt from
the store by the writer and listed in its recovery report.
"""

from __future__ import annotations

import sys
from array import array
from collections.abc import Callable, Collection, Iterable, Sequence

from engine.errors import CorruptFileError
from engine.fs import FileHandle, FileSystem, OpenMode, RecoveryReport, crashpoint, create_file, parent_dir
from engine.pages import store_codec
from engine.pages.storefile import file_present

SUMS_SUFFIX = "-sums"

ReadPage = Callable[[int], bytes]


def sums_path(store_path: str) -> str:
    return store_path + SUMS_SUFFIX


def load(raw: bytes, page_size: int) -> tuple[array[int], store_codec.PageSum] | None:
    """The checksums in ``raw`` (index = page id; index 0 unused) and the function
    that computes them (by the file's magic), or None if the header is bad or made
    for another page size.  There may be fewer entries than pages (appends not yet
    checkpointed): the caller fills them in."""
    try:
        file_page_size, crc32c = store_codec.decode_sums_header(raw)
    except ValueError:
        return None
    if file_page_size != page_size:
        return None
    body = raw[store_codec.SUMS_HEADER_SIZE :]
    values = array("I")
    assert values.itemsize == store_codec.SUM.size
    values.frombytes(bytes(body[: len(body) // 4 * 4]))
    if sys.byteorder != "little":  # pragma: no cover - the file is little-endian
        values.byteswap()
    values.insert(0, 0)
    return values, store_codec.sum_function(crc32c)


def load_present(fs: FileSystem, store_path: str, page_size: int) -> tuple[array[int], store_codec.PageSum] | None:
    """A reader's :func:`load` of ``<store>-sums``: None when there is no such file
    (a store from before it, or a crash before it was made: nothing to check
    against, and a writer's open rebuilds it); CorruptFileError naming it when it
    is there but unusable, since then no page could be checked (a writer's open
    rebuilds it too, but a reader must not read on as if every page were checked)."""
    path = sums_path(store_path)
    if not file_present(fs, path, "the page checksum file"):
        return None
    with fs.open(path, OpenMode.READ) as handle:
        loaded = load(handle.read_all(), page_size)
    if loaded is None:
        raise CorruptFileError(
            path,
            0,
            f"an ENGSUMS header for {page_size}-byte pages",
            "a damaged or foreign header (the next writable open rebuilds the file from the store)",
        )
    return loaded


def check_read(
    store_path: str, page: int, data: bytes, page_size: int, sums: Sequence[int] | None, page_sum: store_codec.PageSum
) -> bytes:
    """``data``, page ``page`` as a reader read it from the store file, checked: a
    short read or a page not matching its checksum in ``sums`` (entries past its
    end: pages appended since the last checkpoint, not summed yet) is
    CorruptFileError naming the store file and the page's offset, never bytes
    returned.  The one check of every read-only path (readers, Spark, the CLI)."""
    if len(data) < page_size:
        raise CorruptFileError(
            store_path, page * page_size + len(data), f"page {page} of {page_size} bytes", "end of file"
        )
    if sums is not None and page < len(sums) and page_sum(data) != sums[page]:
        raise CorruptFileError(
            store_path, page * page_size, f"page {page} matching its checksum", "a different CRC (damaged)"
        )
    return data


class PageSums:
    """The writer's checksums: in memory (``values``) and in the sums file."""

    def __init__(self, store_path: str, handle: FileHandle, values: array[int], page_sum: store_codec.PageSum) -> None:
        self.store_path = store_path
        self.handle = handle
        self.values = values
        self.page_sum = page_sum  # the file's kind of entry (zlib CRC-32 or CRC-32C)

    @classmethod
    def open(
        cls,
        fs: FileSystem,
        store_path: str,
        page_size: int,
        page_count: int,
        read_page: ReadPage,
        report: RecoveryReport,
    ) -> PageSums:
        """Open the sums file, rebuilding it from the store if it is missing or unusable.

        An existing file keeps its kind of entry (an ENGSUMS1 file of an earlier
        version stays zlib CRC-32); created or rebuilt files get CRC-32C.  A
        rebuild is recorded in ``report``.
        """
        path = sums_path(store_path)
        if not file_present(fs, path, "the page checksum file"):
            create_file(fs, path, store_codec.encode_sums_header(page_size, True)).close()
        handle = fs.open(path, OpenMode.WRITE)
        try:
            loaded = load(handle.read_all(), page_size)
            if loaded is not None:
                values, page_sum = loaded
            else:
                page_sum = store_codec.sum_function(True)
                values = array("I", [0] * (page_count + 1))
                for page in range(1, page_count + 1):
                    values[page] = page_sum(read_page(page))
                handle.truncate(0)
                header = store_codec.encode_sums_header(page_size, True)
                handle.write_at(0, header + _pack(values, 1, page_count + 1))
                handle.fsync()
                fs.fsync_dir(parent_dir(path))
                report.add("rebuilt", path, page_count, "checksums", detail="missing or unusable file, from the store")
        except BaseException:
            handle.close()
            raise
        return cls(store_path, handle, values, page_sum)

    def check(self, page: int, data: bytes | bytearray, page_size: int) -> None:
        """Raise CorruptFileError if ``data`` (page ``page`` as read from the store) is damaged."""
        if page >= len(self.values):
            raise CorruptFileError(self.store_path, page * page_size, f"a checksum for page {page}", "none")
        if self.page_sum(data) != self.values[page]:
            raise CorruptFileError(
                self.store_path,
                page * page_size,
                f"page {page} matching its checksum {self.values[page]:#010x}",
                f"{self.page_sum(data):#010x} (damaged)",
            )

    def update(self, images: dict[int, bytes | bytearray]) -> None:
        """Record and write the checksums of these page images (part of a flush)."""
        values = self.values
        page_sum = self.page_sum
        top = max(images, default=0)
        if top >= len(values):
            values.extend([0] * (top + 1 - len(values)))
        for page, image in images.items():
            values[page] = page_sum(image)
        self._write(images)

    def recompute(self, pages: Iterable[int], read_page: ReadPage) -> None:
        """Checksums of ``pages`` from the store as it is now (after a redo)."""
        fresh: dict[int, bytes | bytearray] = {page: read_page(page) for page in pages}
        self.update(fresh)

    def truncate_to(self, page_count: int) -> None:
        """Forget entries past ``page_count`` (an undone append)."""
        del self.values[page_count + 1 :]

    def fill_missing(self, page_count: int, read_page: ReadPage, report: RecoveryReport) -> None:
        """Compute entries the file lacks (pages appended but never checkpointed
        whose journal was lost); recorded in ``report``, since their damage could
        not be detected."""
        if len(self.values) > page_count:
            return
        missing = range(len(self.values), page_count + 1)
        self.recompute(missing, read_page)
        report.add("rebuilt", sums_path(self.store_path), len(missing), "checksums", detail="missing entries")

    def _write(self, pages: Collection[int]) -> None:
        # Runs of consecutive pages become one write; never an entry of a page
        # that is not being written (see the module docstring).
        if len(pages) == 1:  # the usual commit: one page
            (page,) = pages
            self.handle.write_at(store_codec.sum_offset(page), _pack(self.values, page, page + 1))
            return
        # All runs in one batch (a bulk commit flushes hundreds of scattered pages),
        # found in one pass; a run's offset and bytes computed inline (sum_offset
        # and _pack's work, without two frames per run: most runs are one page).
        ordered = sorted(pages)
        if not ordered or sys.byteorder != "little":  # pragma: no cover - the file is little-endian
            self.handle.write_many_at([(store_codec.sum_offset(p), _pack(self.values, p, p + 1)) for p in ordered])
            return
        writes: list[tuple[int, bytes]] = []
        values = self.values
        base = store_codec.sum_offset(0)
        size = store_codec.SUM.size
        first = prev = ordered[0]
        for page in ordered:
            if page > prev + 1:
                writes.append((base + size * first, values[first : prev + 1].tobytes()))
                first = page
            prev = page
        writes.append((base + size * first, values[first : prev + 1].tobytes()))
        self.handle.write_many_at(writes)

    def sync(self, what: str) -> None:
        crashpoint(f"pages.{what}.before-sums-fsync")
        self.handle.fdatasync()
        crashpoint(f"pages.{what}.after-sums-fsync")

    def close(self) -> None:
        self.handle.close()


def _pack(values: array[int], start: int, stop: int) -> bytes:
    """Entries ``start..stop-1`` as the file stores them (u32 little-endian): one
    slice of the array, not one ``struct.pack`` per entry."""
    run = values[start:stop]
    if sys.byteorder != "little":  # pragma: no cover - the file is little-endian
        run.byteswap()
    return run.tobytes()
