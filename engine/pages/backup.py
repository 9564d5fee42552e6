"""A consistent copy of a page store, taken beside a live writer.

:func:`copy_store` copies the store file and its checksums under a *shared* lock
on the store file, the lock readers' snapshots hold: the writer flushes pages
only under the exclusive lock, so the copy is the store exactly as of one flush
(one commit with ``apply="commit"``, else one checkpoint).  Commits go on
meanwhile: the writer puts its flushes off while the lock is shared (see
``PageStore._flush``).  The destination gets no journal (a fresh, empty one is
created by its first writable open); both files are written under temporary
names, synced and renamed (the store first, then its checksums), so a crash
leaves either no copy or a whole one.
"""

from __future__ import annotations

from dataclasses import replace

from engine.errors import ConfigError
from engine.fs import FileSystem, OpenMode, create_file, parent_dir
from engine.pages import store_codec
from engine.pages.journal import journal_path
from engine.pages.reader import check_journal_applied, flushing_error
from engine.pages.storefile import check_store_size, file_present, lock_store_shared, read_header
from engine.pages.sums import sums_path

#: Bytes copied per read/write.
CHUNK = 1 << 20
#: How long :func:`copy_store` waits for the writer to finish a flush.
DEFAULT_WAIT = 10.0


def copy_store(fs: FileSystem, path: str, dest: str, *, wait: float | None = DEFAULT_WAIT) -> int:
    """Copy the store at ``path`` (and its ``-sums``) to ``dest``; returns the
    store bytes copied.  ``dest`` (and ``dest-sums``) must not exist."""
    for target in (dest, sums_path(dest), journal_path(dest)):
        if fs.exists(target):
            raise ConfigError(f"{target}: already exists; a backup never overwrites a file")
    with fs.open(path, OpenMode.READ) as src:
        lock_store_shared(fs, path, src, wait)
        try:
            header = read_header(path, src)
            if header.flags & store_codec.FLUSHING:
                raise flushing_error(path)
            check_journal_applied(fs, journal_path(path))
            size = (header.page_count + 1) * header.page_size
            check_store_size(path, header, src.size())
            spath = sums_path(path)
            sums = b""
            if file_present(fs, spath, "the page checksum file"):
                with fs.open(spath, OpenMode.READ) as sh:
                    sums = sh.read_at(0, store_codec.sum_offset(header.page_count + 1))
            tmp = dest + ".partial"
            _remove_leftover(fs, tmp)
            with create_file(fs, tmp) as out:
                for at in range(0, size, CHUNK):
                    out.write_at(at, src.read_at(at, min(CHUNK, size - at)))
                # The copy is a closed store with no journal: its header must not
                # say that commits may be only in a journal (JOURNAL_LIVE).
                out.write_at(0, store_codec.encode_header(replace(header, flags=0)))
                out.fsync()
        finally:
            src.unlock()
    stmp = sums_path(dest) + ".partial"
    if sums:
        _remove_leftover(fs, stmp)
        with create_file(fs, stmp, sums) as out:
            out.fsync()
    # Data, fsync, then what points at it: the store first (a store without its
    # checksums file opens, the checksums rebuilt from it), its rename made durable
    # before the checksums' rename, so no crash leaves ``<dest>-sums`` without ``<dest>``.
    directory = parent_dir(dest)
    fs.rename(tmp, dest)
    fs.fsync_dir(directory)
    if sums:
        fs.rename(stmp, sums_path(dest))
        fs.fsync_dir(directory)
    return size


def _remove_leftover(fs: FileSystem, tmp: str) -> None:
    """A temporary file left by a backup that crashed: never a finished copy."""
    if fs.exists(tmp):
        fs.unlink(tmp)
