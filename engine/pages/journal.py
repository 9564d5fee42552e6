"""The JRNL journal file next to a page store (``<store path>-journal``).

:func:`scan` walks the transaction chain of a journal image and decides what
recovery must cut (it never writes); :class:`Journal` is the writer's open journal:
it appends transactions with one ``fdatasync`` each, and resets the file once every
transaction in it is applied to the store and the store is synced.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from engine.errors import CorruptFileError, FormatError, LockedError
from engine.fs import FileHandle, FileSystem, OpenMode, crashpoint
from engine.pages import codec
from engine.pages.codec import ParsedTx

log = logging.getLogger("engine.pages")

JOURNAL_SUFFIX = "-journal"
#: Transactions up to this size are written with one ``pwrite`` (header, ops and
#: COMPLETE joined); larger ones with three, since the join would copy the ops again.
_JOIN_LIMIT = 64 << 10


def journal_path(store_path: str) -> str:
    """Where the journal of the store at ``store_path`` lives."""
    return store_path + JOURNAL_SUFFIX


@dataclass
class JournalScan:
    """What a journal image holds and what recovery has to repair.

    ``txs`` is the chain after cutting an unfinished tail; ``size`` is where it
    ends.  Bytes after it are *slack*: space of transactions from before the last
    reset, which the writer overwrites (ours: reusing the file's blocks keeps the
    commit fdatasync free of size changes, like SQLite's WAL).  When
    ``needs_repair`` (something was cut), the file gets header ``(first, last)``,
    the last transaction's ``next`` zeroed (``clear_next_at``) and is truncated to
    ``size`` as the seed prescribes.
    """

    header: codec.FileHeader
    txs: list[ParsedTx] = field(default_factory=list)
    first: int = 0
    last: int = 0
    size: int = codec.FILE_HEADER_SIZE
    clear_next_at: int = 0
    notes: list[str] = field(default_factory=list)
    cut_bytes: int = 0
    file_size: int = 0
    cut: bool = False

    @property
    def needs_repair(self) -> bool:
        return self.cut or (self.first, self.last) != (self.header.first, self.header.last) or self.clear_next_at != 0

    @property
    def pending(self) -> list[ParsedTx]:
        """Transactions not yet flagged JRNL_COMPLETE (to be redone or undone)."""
        return [tx for tx in self.txs if not tx.applied]


def scan(path: str, data: bytes) -> JournalScan:
    """Walk the chain of journal bytes ``data``; raise CorruptFileError on real damage.

    The header's ``last`` is the commit point: our writer updates it (one 20-byte
    write at offset 0) after the transaction bytes and the previous ``next`` link,
    all under one fsync.  So a transaction at or after ``last`` that is not whole is
    an append the crash interrupted and is cut off (the seed's rollback); damage to a
    transaction before ``last`` is corruption of committed data.
    """
    try:
        header = codec.decode_file_header(data)
    except ValueError as exc:
        if len(data) >= 4 and data[:4] != codec.MAGIC:
            raise FormatError(path, 0, "JRNL magic", data[:4].hex(" ")) from exc
        raise CorruptFileError(path, 0, "a 20-byte JRNL header", f"{len(data)} bytes") from exc
    result = JournalScan(header, file_size=len(data))
    first, last = header.first, header.last
    if first == 0:
        if last != 0:
            result.notes.append(f"header names last transaction {last} but no first: unlinked append cut off")
            result.cut = True
        _finish(result, [], len(data))
        return result
    if last == 0:
        raise CorruptFileError(path, 12, "a last transaction offset when first is set", "0")
    txs: list[ParsedTx] = []
    off = first
    link_at = 4  # where the pointer to ``off`` is stored (header's first field)
    while True:
        prev_off = txs[-1].offset if txs else 0
        bad: tuple[str, str] | None = None
        problem_at = link_at
        if off < codec.FILE_HEADER_SIZE or off >= len(data):
            bad = (f"a transaction offset inside the file (size {len(data)})", str(off))
        elif txs and off < txs[-1].end:
            bad = (f"a next pointer past the previous transaction's end {txs[-1].end}", str(off))
        else:
            tx = codec.parse_transaction(data, off)
            if off + codec.TX_HEADER_SIZE <= len(data) and tx.prev != prev_off:
                bad, problem_at = (f"prev pointer {prev_off}", str(tx.prev)), off
            elif tx.problem is not None:
                bad, problem_at = ("a whole transaction", tx.problem), tx.problem_offset
        if bad is not None:
            if off >= last:
                result.notes.append(f"unfinished transaction at {off} cut off ({bad[0]}, found {bad[1]})")
                result.cut = True
                break
            raise CorruptFileError(path, problem_at, bad[0], bad[1])
        txs.append(tx)
        if off == last:
            if tx.next != 0:
                result.clear_next_at = off + codec.TX_NEXT_OFFSET
                result.notes.append(f"last transaction's next pointer {tx.next} cleared (unfinished append)")
                result.cut = True
            break
        if tx.next == 0:
            if last > off:
                result.notes.append(f"header's last {last} is past the chain's end {off}: cut off")
                result.cut = True
                break
            raise CorruptFileError(path, 12, f"last transaction offset on the chain (chain ends at {off})", str(last))
        if off < last < tx.next:
            raise CorruptFileError(path, 12, "last transaction offset on the chain", str(last))
        link_at = off + codec.TX_NEXT_OFFSET
        off = tx.next
    _finish(result, txs, len(data))
    return result


def _finish(result: JournalScan, txs: list[ParsedTx], file_size: int) -> None:
    result.txs = txs
    result.first = txs[0].offset if txs else 0
    result.last = txs[-1].offset if txs else 0
    result.size = txs[-1].end if txs else codec.FILE_HEADER_SIZE
    if result.cut:
        result.cut_bytes = file_size - result.size


def scan_if_idle(fs: FileSystem, path: str) -> JournalScan | None:
    """Scan the journal unless a live writer holds it (then ``None``).

    A writer rewrites its journal while it runs (appends, resets, reuse of the
    space), so another handle could read a torn mixture; a shared lock on the
    journal excludes the writer for the duration of the scan.
    """
    with fs.open(path, OpenMode.READ) as handle:
        try:
            handle.lock(exclusive=False, blocking=False)
        except LockedError:
            return None
        return scan(path, handle.read_all())


class Journal:
    """The writer's journal: appends transactions, flags them applied, resets.

    ``handle`` must be open for writing and hold the writer's exclusive lock.
    """

    def __init__(self, path: str, handle: FileHandle, state: JournalScan, *, keep_bytes: int = 64 << 20) -> None:
        self.path = path
        self.keep_bytes = keep_bytes
        self.handle = handle
        self.first = state.first
        self.last = state.last
        self.end = state.size
        self.tx_offsets = [tx.offset for tx in state.txs]
        self.unapplied = [tx.offset for tx in state.txs if not tx.applied]

    def repair(self, state: JournalScan) -> None:
        """Write what :func:`scan` decided (cut tail, fixed header), then fsync."""
        if state.clear_next_at:
            self.handle.write_at(state.clear_next_at, codec.U64.pack(0))
        self.handle.write_at(0, codec.encode_file_header(state.first, state.last))
        if state.cut:
            self.handle.truncate(state.size)
        crashpoint("pages.recover.before-journal-fsync")
        self.handle.fdatasync()
        crashpoint("pages.recover.after-journal-fsync")

    @property
    def size(self) -> int:
        return self.end

    @property
    def empty(self) -> bool:
        return self.first == 0

    def append(self, created: int, ops: list[bytes | bytearray | memoryview]) -> int:
        """Make one transaction durable; returns its offset.

        Order, all under one fdatasync: the whole transaction (next = 0, ending
        with COMPLETE and its checksum) at the end of the file, then the previous
        transaction's ``next``, then the header's ``first``/``last``.  The header
        write (20 bytes at offset 0, inside one sector) is the commit point that
        recovery trusts; the checksum catches a disk that reordered the unsynced
        writes.  One sync instead of the original's two is what makes commits cheap.
        """
        off = self.end
        head, body, complete = codec.encode_transaction_parts(self.last, created, ops, codec.WRITER_CRC)
        size = len(head) + len(body) + len(complete)
        if size <= _JOIN_LIMIT:
            self.handle.write_at(off, b"".join((head, body, complete)))  # a small copy saves two system calls
        else:
            # Three writes, back to back: joining to an 800 KB body would copy it again.
            self.handle.write_at(off, head)
            self.handle.write_at(off + len(head), body)
            self.handle.write_at(off + len(head) + len(body), complete)
        if self.last:
            self.handle.write_at(self.last + codec.TX_NEXT_OFFSET, codec.U64.pack(off))
            first = self.first
        else:
            first = off
        self.handle.write_at(0, codec.encode_file_header(first, off))
        crashpoint("pages.commit.before-fsync")
        self.handle.fdatasync()
        crashpoint("pages.commit.after-fsync")
        self.first, self.last, self.end = first, off, off + size
        self.tx_offsets.append(off)
        self.unapplied.append(off)
        return off

    def reset(self) -> None:
        """Flag every transaction JRNL_COMPLETE, then empty the journal.

        The caller synced the store first: only then are the transactions really
        in the storage file.  Flags and the zeroed header share one fdatasync; a
        crash in between leaves either the old chain (flags set or not, redo is
        idempotent) or an empty one.  The file keeps its size (the next
        transactions overwrite the old ones, so their fdatasync changes no file
        size) unless it grew past ``keep_bytes``; then it is truncated to 20 bytes.
        """
        for off in self.unapplied:
            self.handle.write_at(off + codec.TX_FLAGS_OFFSET, bytes([codec.JRNL_COMPLETE]))
        self.handle.write_at(0, codec.encode_file_header(0, 0))
        if self.end > self.keep_bytes:
            self.handle.truncate(codec.FILE_HEADER_SIZE)
        crashpoint("pages.checkpoint.before-journal-fsync")
        self.handle.fdatasync()
        crashpoint("pages.checkpoint.after-journal-fsync")
        self.first = self.last = 0
        self.end = codec.FILE_HEADER_SIZE
        self.tx_offsets = []
        self.unapplied = []
