"""Reading data blocks with read-ahead: one id's chain without touching the others.

Each id's blocks are a linked list through the data file.  Blocks written in one
batch are adjacent, so a chain usually runs forward in long contiguous stretches;
:class:`BlockReader` keeps one window of the file and serves every block that
falls inside it without another read.  Blocks of other ids are never parsed: the
reader only follows the links it is given.
"""

from __future__ import annotations

from engine.errors import CorruptFileError
from engine.events.codec import BLOCK_HEADER, BLOCK_HEADER_SIZE, DATA_HEADER_SIZE, BlockHeader
from engine.fs import FileHandle

#: Default size of one read-ahead window.
DEFAULT_READAHEAD = 256 * 1024


class BlockReader:
    """Blocks of the data file below ``limit`` (the committed length).

    Anything at or past ``limit`` is not committed and is never read, so a reader
    is safe against a writer appending concurrently.
    """

    def __init__(self, handle: FileHandle, path: str, limit: int, readahead: int = DEFAULT_READAHEAD) -> None:
        self.handle = handle
        self.path = path
        self.limit = limit
        self.readahead = max(readahead, BLOCK_HEADER_SIZE)
        self._buf = b""
        self._start = 0
        self.reads = 0  # how many read_at calls were made (tests check read-ahead)

    def _window(self, offset: int, length: int) -> tuple[bytes, int]:
        """A buffer holding [offset, offset+length) and the index of ``offset`` in it."""
        start = self._start
        if start <= offset and offset + length <= start + len(self._buf):
            return self._buf, offset - start
        want = min(max(length, self.readahead), self.limit - offset)
        self._buf = self.handle.read_at(offset, want)
        self._start = offset
        self.reads += 1
        return self._buf, 0

    def header(self, offset: int) -> BlockHeader:
        """The validated header of the block at ``offset``."""
        if offset < DATA_HEADER_SIZE or offset + BLOCK_HEADER_SIZE > self.limit:
            raise CorruptFileError(self.path, offset, f"a block link inside [8, {self.limit})", str(offset))
        buf, at = self._window(offset, BLOCK_HEADER_SIZE)
        if len(buf) - at < BLOCK_HEADER_SIZE:
            raise CorruptFileError(self.path, offset, "a 24-byte block header", "end of file")
        size, own, previous, next_, seq = BLOCK_HEADER.unpack_from(buf, at)
        if own != offset:
            raise CorruptFileError(self.path, offset, f"a block whose own-offset field is {offset}", str(own))
        if size < BLOCK_HEADER_SIZE or offset + size > self.limit:
            raise CorruptFileError(self.path, offset, f"a block size in [24, {self.limit - offset}]", str(size))
        if previous < 0 or next_ < 0:
            raise CorruptFileError(self.path, offset, "non-negative links", f"previous={previous} next={next_}")
        return BlockHeader(size, own, previous, next_, seq)

    def payload(self, header: BlockHeader) -> bytes:
        """The payload of a block whose header was just read."""
        n = header.payload_size
        if n == 0:
            return b""
        buf, at = self._window(header.offset, header.size)
        if len(buf) - at < header.size:
            raise CorruptFileError(self.path, header.offset, f"{header.size} bytes of block", "end of file")
        return buf[at + BLOCK_HEADER_SIZE : at + header.size]


def locate(reader: BlockReader, first: int, last: int, first_seq: int, highest: int, lo: int) -> BlockHeader:
    """The header of the block with sequence number ``lo`` in the chain from
    ``first`` (sequence number ``first_seq``) to ``last`` (``highest``), walking
    from whichever end is nearer and checking every link on the way (a broken
    one is a CorruptFileError)."""
    path = reader.path
    if lo - first_seq <= highest - lo:
        offset, header = first, reader.header(first)
        while header.sequence_nr < lo:
            if offset == last:
                raise CorruptFileError(path, offset, f"a link onward to sequence number {lo}", "the last block")
            nxt = header.next
            expected_seq = header.sequence_nr + 1
            header = reader.header(nxt)
            if header.sequence_nr != expected_seq or header.previous != offset:
                raise CorruptFileError(path, nxt, f"sequence number {expected_seq} linked back to {offset}",
                                       f"{header.sequence_nr} linked back to {header.previous}")
            offset = nxt
    else:
        offset, header = last, reader.header(last)
        while header.sequence_nr > lo:
            prv = header.previous
            expected_seq = header.sequence_nr - 1
            header = reader.header(prv)
            if header.sequence_nr != expected_seq or header.next != offset:
                raise CorruptFileError(path, prv, f"sequence number {expected_seq} linked to {offset}",
                                       f"{header.sequence_nr} linked to {header.next}")
            offset = prv
    if header.sequence_nr != lo:
        raise CorruptFileError(path, offset, f"sequence number {lo}", str(header.sequence_nr))
    return header
