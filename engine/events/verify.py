"""The journal's full self-check: every block, every chain, every meta entry.

Invariants checked (see docs/formats/events.md):

* the blocks tile ``data`` from offset 8 to the committed end, each block's
  own-offset field equal to where it sits;
* each id's chain, walked back from its last block to its head, has sequence
  numbers falling by one, ``previous``/``next`` links that agree both ways, and its
  head's ``previous`` is 0;
* meta's highest equals the last block's sequence number, and meta's first (when
  not 0) is a block of the same chain;
* every block belongs to exactly one id's chain (no orphans);
* the data header's length equals the committed length.
"""

from __future__ import annotations

from engine.errors import CorruptFileError
from engine.events.blocks import BlockReader
from engine.events.codec import DATA_HEADER_SIZE, decode_data_header
from engine.events.sumfiles import DataSums, MetaSums
from engine.fs import FileHandle


def verify_journal(
    data: FileHandle,
    data_path: str,
    end: int,
    meta_path: str,
    entries: list[tuple[str, int, int, int]],
    *,
    strict_links: bool,
) -> list[str]:
    """Check ``data`` up to ``end`` against ``entries`` = (id, first, last, highest).

    ``strict_links``: the last block's ``next`` must be 0 (a writer repairs it on
    open; a reader may legitimately see a writer's batch in progress).
    """
    notes: list[str] = []
    size = data.size()
    if size < end:
        raise CorruptFileError(data_path, size, f"data up to the committed end {end}", "end of file")
    length = decode_data_header(data.read_at(0, DATA_HEADER_SIZE), data_path)
    if length != end - DATA_HEADER_SIZE:
        if strict_links:
            raise CorruptFileError(data_path, 4, f"data length {end - DATA_HEADER_SIZE}", str(length))
        notes.append(f"data header length {length} differs from the committed {end - DATA_HEADER_SIZE} "
                     "(a writer is active or recovery is pending)")
    if size > end and any(data.read_at(start, min(1 << 20, size - start)).strip(b"\0")
                          for start in range(end, size, 1 << 20)):
        notes.append(f"non-zero bytes in the {size - end} bytes past the committed end (uncommitted batch)")

    reader = BlockReader(data, data_path, end, readahead=1 << 20)
    # (previous, next, sequence_nr) of every block, by offset.
    blocks: dict[int, tuple[int, int, int]] = {}
    pos = DATA_HEADER_SIZE
    while pos < end:
        header = reader.header(pos)
        blocks[pos] = (header.previous, header.next, header.sequence_nr)
        pos = header.end
    owner: dict[int, str] = {}
    for pid, first, last, highest in entries:
        if last == 0:
            if first != 0:
                raise CorruptFileError(meta_path, 0, f"first 0 for {pid!r} whose last is 0", str(first))
            continue
        if last not in blocks:
            raise CorruptFileError(data_path, last, f"a block start (last of {pid!r})", "the middle of a block")
        prev, nxt, seq = blocks[last]
        if seq != highest:
            raise CorruptFileError(data_path, last, f"sequence number {highest} (highest of {pid!r})", str(seq))
        if nxt != 0:
            if strict_links:
                raise CorruptFileError(data_path, last, f"next 0 in the last block of {pid!r}", str(nxt))
            notes.append(f"{pid!r}: last block links on to {nxt} (a writer's batch in progress)")
        chain: set[int] = set()
        offset = last
        while True:
            if offset in owner:
                raise CorruptFileError(data_path, offset, f"a block of {pid!r} only",
                                       f"also in the chain of {owner[offset]!r}")
            owner[offset] = pid
            chain.add(offset)
            prev, _nxt, seq = blocks[offset]
            if prev == 0:
                break
            if prev not in blocks:
                raise CorruptFileError(data_path, offset, "a previous link to a block start", str(prev))
            _, pnext, pseq = blocks[prev]
            if pnext != offset or pseq != seq - 1:
                raise CorruptFileError(data_path, prev, f"next {offset} and sequence number {seq - 1}",
                                       f"next {pnext} and sequence number {pseq}")
            offset = prev
        if seq < 1:
            raise CorruptFileError(data_path, offset, f"a first sequence number >= 1 for {pid!r}", str(seq))
        if first != 0 and first not in chain:
            raise CorruptFileError(meta_path, 0, f"first offset of {pid!r} inside its own chain", str(first))
    orphans = [o for o in blocks if o not in owner]
    if orphans:
        raise CorruptFileError(data_path, orphans[0], "every block in some id's chain",
                               f"{len(orphans)} orphan block(s)")
    return notes


def verify_sums(data_sums: DataSums, meta_sums: MetaSums, data: FileHandle, data_path: str, end: int,
                ids: int, *, strict: bool) -> list[str]:
    """Check every batch below ``end`` against ``data.crc`` and that the side
    files cover the journal: all of it for a writer (``strict``: recovery
    completed them), a note for a reader (a crashed writer's unsynced entries).
    The meta entries' checksums were checked when the journal was loaded."""
    notes: list[str] = []
    if not data_sums.present or not meta_sums.present:
        missing = [s.path for s in (data_sums, meta_sums) if not s.present]
        if strict:
            raise CorruptFileError(missing[0], 0, "a checksum side file", "missing")
        return [f"no checksums: {', '.join(missing)} missing (a writer's open adds them)"]
    data_sums.check_all(data.read_at, min(end, data_sums.covered), data_path)
    gaps = []
    if data_sums.covered != end:
        gaps.append(f"{data_sums.path} covers data up to {data_sums.covered}, the committed end is {end}")
    if len(meta_sums.entries) < ids:
        gaps.append(f"{meta_sums.path} has {len(meta_sums.entries)} entries for {ids} persistence ids")
    if gaps and strict:
        raise CorruptFileError(data_sums.path, 0, "checksums of everything committed", "; ".join(gaps))
    notes.extend(f"{gap} (a writer's open rebuilds the rest)" for gap in gaps)
    return notes
