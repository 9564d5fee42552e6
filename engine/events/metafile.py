"""The writer's side of the ``meta`` file: a cache of where each id's chain ends.

A batch for an id that already has a chain is committed by the link in ``data``;
its meta update (new ``last``/``highest``) only caches that, so it is written in
place and synced in rounds (every :data:`META_SYNC_EVERY` writes and on close),
and recovery rolls a stale entry forward along the links.  Deletes and a new id's
first batch are committed by their meta write, which is synced at once.

Only the bytes that differ from the file are written, and an in-place write never
straddles a 512-byte sector (a torn straddling write could mix old and new
fields); such an update waits for the next sync, which then replaces the whole
file atomically (``meta.tmp``, fsync, rename, directory fsync).
"""

from __future__ import annotations

from engine.events.codec import (
    I32,
    META_FIELDS_OFFSET,
    META_HEADER_SIZE,
    META_MAGIC,
    META_SIZE_FIELD,
    MetaBlock,
    encode_meta_block,
    encode_meta_fields,
    sector_crossing,
)
from engine.events.layout import Entry
from engine.fs import FileHandle, FileSystem, OpenMode, atomic_write, crashpoint

#: Deferred meta writes are synced after this many (bounds recovery's roll-forward).
META_SYNC_EVERY = 256


class MetaFile:
    """The open ``meta`` file with its in-memory image.

    ``image`` is the file as it should be; ``disk`` as last written to the file
    (possibly not yet synced); they differ for the ids in ``deferred``.  With
    ``durable`` False (``sync="never"``) nothing is synced before :meth:`close`.
    """

    def __init__(self, fs: FileSystem, path: str, tmp_path: str, handle: FileHandle, *, durable: bool) -> None:
        self.fs = fs
        self.path = path
        self.tmp_path = tmp_path
        self.handle = handle
        self.durable = durable
        self.magic = META_MAGIC
        self.image = bytearray()
        self.disk = bytearray()
        self.deferred: set[str] = set()
        self.unsynced = 0  # meta writes since the last meta fdatasync
        #: How many atomic rewrites ran (tests and benchmarks).
        self.rewrites = 0

    def reset(self, magic: bytes, committed: bytes) -> None:
        """Start from the committed bytes just read (on open and on refresh)."""
        self.magic = magic
        self.disk = bytearray(committed)
        self.image = bytearray(committed)
        self.deferred = set()
        self.unsynced = 0

    def reopen_read(self) -> None:
        """Reader only: the writer may have replaced the file; open it anew."""
        self.handle.close()
        self.handle = self.fs.open(self.path, OpenMode.READ)

    def set_fields(self, entry: Entry, first: int, last: int, highest: int, *, durable: bool) -> None:
        """Record new (first, last, highest) for one id.

        ``durable``: the meta write is the commit (deletes, an id without a chain)
        and is synced before returning.  Otherwise the write is a cache update,
        synced later (see the module docstring).
        """
        fields = encode_meta_fields(first, last, highest)
        pos = entry.meta_offset + META_FIELDS_OFFSET
        self.image[pos : pos + len(fields)] = fields
        old = bytes(self.disk[pos : pos + len(fields)])
        if old != fields:
            # Offsets are below 2^31, so the high bytes of ``first``/``last`` and
            # usually of ``highest`` never change: the shorter the write, the
            # rarer it straddles a sector.
            a = next(i for i in range(len(fields)) if fields[i] != old[i])
            b = next(i for i in range(len(fields), 0, -1) if fields[i - 1] != old[i - 1])
            if self.durable and sector_crossing(pos + a, b - a):
                self.deferred.add(entry.pid)
            else:
                if durable and self.unsynced and self.durable:
                    # Earlier deferred-sync writes may sit in another sector of this
                    # very block: they must be on disk before this commit can be, or
                    # a crash could keep the new ``first`` beside an old ``last``.
                    self.sync()
                self.handle.write_at(pos + a, fields[a:b])
                self.disk[pos + a : pos + b] = fields[a:b]
                self.deferred.discard(entry.pid)
                self.unsynced += 1
        if durable or self.unsynced >= META_SYNC_EVERY:
            self.sync()

    def sync(self) -> None:
        """Make the file durable as it should be (atomically if ids are deferred)."""
        if not self.durable:
            return
        if self.deferred:
            self.rewrite()
        elif self.unsynced:
            crashpoint("events.meta.before-fsync")
            self.handle.fdatasync()
            crashpoint("events.meta.after-fsync")
        self.unsynced = 0

    def append_block(self, pid: str, first: int, last: int, highest: int) -> int:
        """Add a new id's meta block (its commit); returns its offset in the file."""
        block = encode_meta_block(MetaBlock(pid, first, last, highest))
        offset = len(self.image)
        self.handle.write_at(offset, block)
        if self.durable:
            # The block is invisible until the header's size covers it; it must be
            # durable before that size is, or the size could cover garbage.
            crashpoint("events.new-id.before-block-fsync")
            self.handle.fdatasync()
        self.image += block
        self.disk += block
        size_field = I32.pack(len(self.image) - META_HEADER_SIZE)
        self.image[META_SIZE_FIELD : META_SIZE_FIELD + 4] = size_field
        self.disk[META_SIZE_FIELD : META_SIZE_FIELD + 4] = size_field
        self.handle.write_at(META_SIZE_FIELD, size_field)
        if self.durable:
            crashpoint("events.new-id.before-size-fsync")
            self.handle.fdatasync()
            crashpoint("events.new-id.after-size-fsync")
            self.unsynced = 0  # those syncs covered the deferred writes too
        return offset

    def rewrite(self) -> None:
        """Replace the file with the in-memory image, atomically, and reopen it."""
        atomic_write(self.fs, self.path, bytes(self.image), tmp_path=self.tmp_path)
        self.handle.close()
        self.handle = self.fs.open(self.path, OpenMode.WRITE)
        self.disk = bytearray(self.image)
        self.deferred.clear()
        self.unsynced = 0
        self.rewrites += 1

    def flush(self) -> None:
        """On close: everything written durable (deferred updates included)."""
        if self.durable:
            self.sync()
        else:
            self.handle.fdatasync()

    def close(self) -> None:
        self.handle.close()
