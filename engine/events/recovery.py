"""Opening an event journal: reading both files, and the writer's crash recovery.

On open, each id is rolled forward along the links from meta's last block (meta
is a cache synced in rounds; a link is only written once what it points to is
durable, or cannot be torn).  The committed end of ``data`` is the end of the
furthest chain tip; what lies past it is zeros the writer reserved (ignored) or
a torn or uncommitted batch (cut off, provided it looks like what one crash
leaves; more is damage, refused unless ``salvage``).  Every repair is recorded
in the journal's :class:`~engine.fs.RecoveryReport`:

* ``removed`` – a ``meta.tmp`` left by an interrupted atomic meta rewrite;
* ``cut`` – an uncommitted meta block past the header's size, an uncommitted or
  torn batch past the committed end of ``data``;
* ``reset`` – the ``next`` link of a chain tip left pointing at such a batch, the
  data header's length;
* ``rebuilt`` – meta entries brought up to the chains' ends (normal after a crash
  of a ``sync="always"`` writer: meta is synced in rounds); checksum entries of
  ``data.crc`` / ``meta.crc`` missing for committed blocks and ids (synced in
  rounds too; all of them for a journal written before the side files existed);
* ``reset`` – also a meta block's ``first`` that disagrees with the first live
  sequence number its checksummed ``meta.crc`` entry holds (a crash between the
  two writes of ``delete_to``, or damage to ``first``): the entry wins.

Every meta block with a ``meta.crc`` entry must match its checksum (its size,
id and first live sequence number), else the journal is corrupt.

A reader runs the same load without repairing: it sees what was committed.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.errors import ConfigError, CorruptFileError
from engine.events.blocks import BlockReader
from engine.events.codec import (
    BLOCK_HEADER_SIZE,
    BLOCK_NEXT_FIELD,
    DATA_HEADER_SIZE,
    DATA_LENGTH_FIELD,
    I32,
    MAX_DATA_SIZE,
    META_BLOCK_FIXED_SIZE,
    META_FIELDS_OFFSET,
    META_HEADER_SIZE,
    BlockHeader,
    MetaBlock,
    decode_data_header,
    decode_meta_blocks,
    decode_meta_header,
    encode_data_header,
    encode_meta_header,
    sector_crossing,
)
from engine.events.layout import Entry
from engine.events.metafile import MetaFile
from engine.events.sumfiles import MetaSums
from engine.events.sums import id_crc, id_sum_offset
from engine.fs import FileHandle, FileSystem, OpenMode, RecoveryReport, crashpoint, create_file


@dataclass
class Loaded:
    """What :func:`load` found: the committed meta bytes and every id's entry."""

    magic: bytes
    meta_committed: bytes
    entries: dict[str, Entry]
    end: int  # the committed end of ``data`` (header included)
    rolled: list[str]  # ids whose chain runs past meta's last block
    refirsted: list[str]  # ids whose meta ``first`` was corrected from meta.crc


def remove_stray_tmp(fs: FileSystem, directory: str, tmp: str, report: RecoveryReport) -> None:
    """Delete a ``meta.tmp`` a crash during an atomic meta rewrite left (the old
    meta file is intact: the rename is the rewrite's commit)."""
    if fs.exists(tmp):
        fs.unlink(tmp)
        fs.fsync_dir(directory)
        report.add("removed", tmp, 1, "files", detail="left by an interrupted meta rewrite")


def open_files(fs: FileSystem, directory: str, data_path: str, meta_path: str,
               create: bool) -> tuple[FileHandle, FileHandle]:
    """Open ``data`` and ``meta`` for writing; when one is missing or empty, first
    create the journal or finish a creation a crash cut short (:func:`create_missing`).

    The caller holds the writer lock.  (Opening first is the common case's cost:
    two opens and two ``fstat``, where checking each name first would add four
    ``stat`` calls to every open.)
    """
    handles: list[FileHandle] = []
    try:
        try:
            for path in (data_path, meta_path):
                handles.append(fs.open(path, OpenMode.WRITE))
            if handles[0].size() and handles[1].size():
                return handles[0], handles[1]
        except FileNotFoundError:
            pass
        for handle in handles:
            handle.close()
        handles = []
        create_missing(fs, directory, data_path, meta_path, create)
        for path in (data_path, meta_path):
            handles.append(fs.open(path, OpenMode.WRITE))
        return handles[0], handles[1]
    except BaseException:
        for handle in handles:
            handle.close()
        raise


def create_missing(fs: FileSystem, directory: str, data_path: str, meta_path: str, create: bool) -> None:
    """Create the files of a new journal, or finish a creation a crash interrupted.

    The caller holds the writer lock, so no other process creates them meanwhile.
    ``data`` is created first, then ``meta`` (each fsynced with its directory).  A
    lone file is only completed when it holds no committed blocks; otherwise the
    missing partner means real damage.
    """
    has_data, has_meta = fs.exists(data_path), fs.exists(meta_path)
    if has_data and has_meta and fs.file_size(data_path) and fs.file_size(meta_path):
        return
    for path, exists in ((data_path, has_data), (meta_path, has_meta)):
        if exists and fs.file_size(path) == 0 and create:
            # An empty file is a creation cut short before its header was written
            # (a real file system may keep the name without the data): start over.
            fs.unlink(path)
            fs.fsync_dir(directory)
    has_data, has_meta = fs.exists(data_path), fs.exists(meta_path)
    if has_data and has_meta:
        return
    if not has_data and not has_meta and not create:
        raise ConfigError(f"{directory}: no event journal here (create=False)")
    if has_meta and not has_data:
        with fs.open(meta_path) as handle:
            _magic, size = decode_meta_header(handle.read_at(0, META_HEADER_SIZE), meta_path)
        if size:
            raise CorruptFileError(data_path, 0, "the data file the meta file points into", "missing")
    if has_data and not has_meta:
        with fs.open(data_path) as handle:
            if decode_data_header(handle.read_at(0, DATA_HEADER_SIZE), data_path):
                raise CorruptFileError(meta_path, 0, "the meta file describing the data file", "missing")
    if not has_data:
        create_file(fs, data_path, encode_data_header(0)).close()
    if not has_meta:
        create_file(fs, meta_path, encode_meta_header(0)).close()


def load(
    data: FileHandle,
    meta: FileHandle,
    data_path: str,
    meta_path: str,
    *,
    report: RecoveryReport | None,
    meta_sums: MetaSums,
    salvage: bool = False,
) -> Loaded:
    """Read meta, check every id's anchors in data, and find the committed end.

    With a ``report`` (the writer) the tails are repaired and recorded; without
    (a reader) nothing is written.  ``meta_sums`` is re-read after meta (a
    writer writes an id's entry before the meta size that commits the id).
    """
    meta_bytes = meta.read_all()
    sums = meta_sums.reload()
    magic, blocks_size = decode_meta_header(meta_bytes[:META_HEADER_SIZE], meta_path)
    committed_meta = META_HEADER_SIZE + blocks_size
    if len(meta_bytes) < committed_meta:
        raise CorruptFileError(meta_path, len(meta_bytes),
                               f"{blocks_size} bytes of meta blocks (header's size)", "end of file")
    blocks = decode_meta_blocks(meta_bytes[META_HEADER_SIZE:committed_meta], meta_path)
    stale_meta = len(meta_bytes) - committed_meta

    header_length = decode_data_header(data.read_at(0, DATA_HEADER_SIZE), data_path)
    # No limit from the size just read: a writer may append and link while we
    # walk, and a link we see was written after the blocks it leads to (the file
    # size read before it could cut a batch in half).  Reads past the end come
    # back short, which the block reader reports like any broken link.
    reader = BlockReader(data, data_path, MAX_DATA_SIZE, readahead=4096)
    entries: dict[str, Entry] = {}
    end = DATA_HEADER_SIZE
    dangling: list[int] = []
    rolled: list[str] = []
    refirsted: list[str] = []
    if len(sums) > len(blocks) + 1 and not salvage:
        # A crash leaves at most one checksummed id past the committed meta blocks
        # (the new id in flight); more means meta lost committed blocks.
        raise CorruptFileError(meta_path, 4, f"at most one id past the {len(blocks)} committed meta blocks "
                               f"({meta_sums.path})", f"{len(sums)} checksummed ids (meta lost blocks; open "
                               "with salvage=True to cut them anyway)")
    for index, block in enumerate(blocks):
        first_seq = block.highest + 1
        raw_id = block.persistence_id.encode("utf-8")
        summed = sums[index] if index < len(sums) else None
        if summed is not None and id_crc(raw_id, summed[0]) != summed[1]:
            raise CorruptFileError(meta_path, block.offset,
                                   f"a meta block matching its checksum {summed[1]:08x} in {meta_sums.path}",
                                   f"checksum {id_crc(raw_id, summed[0]):08x} (id {block.persistence_id!r}, "
                                   f"first live sequence number {summed[0]})")
        if block.last == 0:
            if block.first != 0:
                raise CorruptFileError(meta_path, block.offset + META_FIELDS_OFFSET,
                                       "first offset 0 when the last offset is 0", str(block.first))
            if summed is not None and summed[0] != first_seq:
                raise CorruptFileError(meta_path, block.offset + META_FIELDS_OFFSET,
                                       f"first live sequence number {summed[0]} of {block.persistence_id!r} "
                                       f"({meta_sums.path})", f"no blocks and highest {block.highest}")
        else:
            last = reader.header(block.last)
            if last.sequence_nr != block.highest:
                raise CorruptFileError(data_path, block.last,
                                       f"sequence number {block.highest} (meta's highest for "
                                       f"{block.persistence_id!r})", str(last.sequence_nr))
            # Meta may lag behind the chain (its updates are synced in rounds):
            # follow the links.  A link is only written once what it points to
            # is durable (or cannot be torn), so every block reached is whole.
            tip, grown = _roll_forward(reader, last)
            first_seq = tip.sequence_nr + 1
            if block.first != 0:
                try:
                    first = reader.header(block.first)
                    if not 1 <= first.sequence_nr <= tip.sequence_nr:
                        raise CorruptFileError(data_path, block.first,
                                               f"a sequence number in [1, {tip.sequence_nr}] for "
                                               f"{block.persistence_id!r}", str(first.sequence_nr))
                    first_seq = first.sequence_nr
                except CorruptFileError:
                    if summed is None:
                        raise
                    first_seq = -1  # damaged: meta.crc's number says where the first block is
            if grown:
                rolled.append(block.persistence_id)
                if block.first == 0:
                    first_seq = last.sequence_nr + 1
                block = MetaBlock(block.persistence_id, block.first or last.next, tip.offset, tip.sequence_nr,
                                  block.offset)
            if tip.next != 0:
                dangling.append(tip.offset)
            end = max(end, tip.end)
            if summed is not None and summed[0] != first_seq:
                # meta's ``first`` disagrees with the checksummed first live number.
                offset = _first_block(reader, tip, summed[0], block, data_path, meta_path)
                block = MetaBlock(block.persistence_id, offset, block.last, block.highest, block.offset)
                first_seq = summed[0]
                refirsted.append(block.persistence_id)
        entries[block.persistence_id] = Entry(block.persistence_id, block.offset, block.first,
                                              block.last, block.highest, first_seq)
    # Past the committed end there may be zeros the writer reserved (not news) and
    # the bytes of a batch that never committed (reported and cut off).  A reader
    # only skips the tail, whatever it holds.
    data_size = data.size()
    if data_size < end:
        raise CorruptFileError(data_path, data_size, f"data up to the end of the last blocks, {end}", "end of file")
    if report is not None:
        tail = 0 if _all_zero(data, end, data_size) else data_size - end
        if not salvage:
            # Before cutting anything, make sure it looks like what a crash leaves:
            # at most one uncommitted batch / one uncommitted meta block.  More means
            # the meta file lost entries (damage), and cutting would destroy data.
            if stale_meta:
                _check_meta_tail(meta_bytes, committed_meta, meta_path)
            if tail:
                lasts = {e.last for e in entries.values() if e.last}
                _check_data_tail(data, end, data_size, lasts, data_path)
        if stale_meta:
            meta.truncate(committed_meta)
            meta.fdatasync()
            report.cut(meta_path, committed_meta, stale_meta, "uncommitted meta block")
        if tail or header_length != end - DATA_HEADER_SIZE or dangling:
            # Blocks past the committed end belong to a batch whose commit never
            # became durable: it is not part of the journal.  Cut it, point every
            # last block's ``next`` back to 0, and fix the header length.
            if tail:
                data.truncate(end)
            for offset in dangling:
                data.write_at(offset + BLOCK_NEXT_FIELD, I32.pack(0))
            data.write_at(DATA_LENGTH_FIELD, I32.pack(end - DATA_HEADER_SIZE))
            crashpoint("events.recover.before-fsync")
            data.fdatasync()
            crashpoint("events.recover.after-fsync")
            report.cut(data_path, end, tail, "uncommitted or torn batch")
            report.add("reset", data_path, len(dangling), "links",
                       detail="next link of a chain's last block, left pointing at an uncommitted batch")
            if header_length != end - DATA_HEADER_SIZE:
                report.add("reset", data_path, 1, "header fields", offset=DATA_LENGTH_FIELD,
                           detail=f"data length {header_length} corrected to {end - DATA_HEADER_SIZE}")
    return Loaded(magic, bytes(meta_bytes[:committed_meta]), entries, end, rolled, refirsted)


def _first_block(reader: BlockReader, tip: BlockHeader, first_seq: int, block: MetaBlock, data_path: str,
                 meta_path: str) -> int:
    """Offset of the block numbered ``first_seq`` in the chain ending at ``tip``
    (0 when ``first_seq`` is past the tip: everything deleted), walking back."""
    if first_seq == tip.sequence_nr + 1:
        return 0
    if not 1 <= first_seq <= tip.sequence_nr:
        raise CorruptFileError(meta_path, block.offset,
                               f"a first live sequence number in [1, {tip.sequence_nr + 1}] for "
                               f"{block.persistence_id!r} (meta.crc)", str(first_seq))
    header = tip
    while header.sequence_nr > first_seq:
        prev = reader.header(header.previous)
        if prev.next != header.offset or prev.sequence_nr != header.sequence_nr - 1:
            raise CorruptFileError(data_path, prev.offset, f"next {header.offset} and sequence number "
                                   f"{header.sequence_nr - 1}", f"next {prev.next} and sequence number "
                                   f"{prev.sequence_nr}")
        header = prev
    return header.offset


def roll_meta_forward(meta: MetaFile, entries: dict[str, Entry], loaded: Loaded,
                      report: RecoveryReport) -> None:
    """Write the rolled-forward and corrected entries back to meta (durably) and record it."""
    changed = list(dict.fromkeys(loaded.rolled + loaded.refirsted))
    if not changed:
        return
    for pid in changed:
        entry = entries[pid]
        meta.set_fields(entry, entry.first, entry.last, entry.highest, durable=False)
    meta.sync()
    if loaded.rolled:
        report.add("rebuilt", meta.path, len(loaded.rolled), "entries",
                   detail="brought up to the ends of their chains in data")
    if loaded.refirsted:
        report.add("reset", meta.path, len(loaded.refirsted), "entries",
                   detail="first block moved to the first live sequence number in meta.crc")


def complete_meta_sums(meta_sums: MetaSums, entries: dict[str, Entry], report: RecoveryReport) -> None:
    """Writer: drop ``meta.crc`` entries past the committed meta blocks (at most
    one: :func:`load` refused more), add the missing ones (ids committed since
    its last sync, or a journal older than it)."""
    assert meta_sums.handle is not None
    ids = list(entries.values())
    have = len(meta_sums.entries)
    if have > len(ids):
        meta_sums.handle.truncate(id_sum_offset(len(ids)))
        del meta_sums.entries[len(ids):]
        report.cut(meta_sums.path, id_sum_offset(len(ids)), id_sum_offset(have) - id_sum_offset(len(ids)),
                   "checksums of uncommitted meta blocks")
    elif have < len(ids):
        for index in range(have, len(ids)):
            meta_sums.put(index, ids[index].pid.encode("utf-8"), ids[index].first_seq)
        report.add("rebuilt", meta_sums.path, len(ids) - have, "entries",
                   detail="checksums of committed meta blocks")
    else:
        return
    meta_sums.sync()


def _roll_forward(reader: BlockReader, last: BlockHeader) -> tuple[BlockHeader, bool]:
    """Follow ``next`` from ``last`` while it leads to the id's next block."""
    tip, grown = last, False
    while tip.next > tip.offset:
        try:
            nxt = reader.header(tip.next)
        except CorruptFileError:
            break  # a link to bytes that never became durable: the batch in flight
        if nxt.previous != tip.offset or nxt.sequence_nr != tip.sequence_nr + 1:
            break
        if nxt.end > reader.handle.size():
            break  # a header whose block never fully arrived (damage; a crash cannot)
        tip, grown = nxt, True
    return tip, grown


def _check_meta_tail(meta_bytes: bytes, committed: int, path: str) -> None:
    """Refuse a meta tail holding more than the one block a crash can leave."""
    pos, whole = committed, 0
    while pos + META_BLOCK_FIXED_SIZE <= len(meta_bytes):
        size = int.from_bytes(meta_bytes[pos : pos + 2], "big", signed=True)
        if size <= META_BLOCK_FIXED_SIZE or pos + size > len(meta_bytes):
            break
        whole += 1
        pos += size
    if whole > 1:
        raise CorruptFileError(path, committed, "at most one uncommitted meta block past the header's size",
                               f"{whole} whole blocks (the size field looks damaged; open with "
                               "salvage=True to cut them anyway)")


def _check_data_tail(handle: FileHandle, end: int, size: int, lasts: set[int], path: str) -> None:
    """Refuse a data tail that is more than one uncommitted batch.

    A crash leaves at most the batch in flight: adjacent blocks, each linking to
    the next, the first one linked back to some id's last block (or to nothing, for
    a new id), the last one with ``next`` 0; then zeros or torn bytes.  Several
    such batches past the committed end mean meta lost track of committed data.
    """
    reader = BlockReader(handle, path, size, readahead=1 << 16)
    pos, batches, first = end, 0, True
    while pos + BLOCK_HEADER_SIZE <= size:
        if sector_crossing(pos, BLOCK_HEADER_SIZE):
            # A tear at the sector boundary could have garbled the header's later
            # fields while keeping its own offset: such a header proves nothing.
            return
        try:
            header = reader.header(pos)
        except CorruptFileError:
            return  # torn bytes, zeros: the end of what the crash left
        # A header inside one sector with the right own offset is what was written.
        if first and header.previous not in lasts and header.previous != 0:
            raise CorruptFileError(path, pos, "an uncommitted batch linked to an id's last block",
                                   f"a block linked back to {header.previous}")
        first = False
        if header.next == 0:
            batches += 1
            if batches > 1:
                raise CorruptFileError(path, end, "at most one uncommitted batch past the committed end",
                                       "several whole batches (the meta file looks damaged, or a sync='never' "
                                       "writer crashed: open with salvage=True to cut them)")
        elif header.next != header.end:
            raise CorruptFileError(path, pos, "adjacent blocks in an uncommitted batch",
                                   f"a link to {header.next}")
        pos = header.end


def _all_zero(handle: FileHandle, start: int, end: int) -> bool:
    """Whether bytes [start, end) of the file are all zero (read 1 MiB at a time)."""
    chunk = 1 << 20
    while start < end:
        data = handle.read_at(start, min(chunk, end - start))
        if not data or data.count(0) != len(data):
            return not data
        start += len(data)
    return True
