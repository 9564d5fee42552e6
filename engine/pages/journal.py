"""The JRNL journal file next to a page store (``<store path>-journal``).

:func:`scan` walks the transaction chain of a journal image and decides what
recovery must cut (it never writes); :class:`Journal` is the writer's open journal:
it appends transactions with one ``fdatasync`` each, and resets the file once every
transaction in it is applied to the store and the store is synced.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field

from engine.errors import CorruptFileError, FormatError, LockedError
from engine.fs import FileHandle, FileSystem, OpenMode, crashpoint, lock_handle
from engine.pages import codec
from engine.pages.codec import ParsedTx

#: Most pieces a commit hands to one vectored write (Linux IOV_MAX is 1024).
MAX_PARTS = 1024

JOURNAL_SUFFIX = "-journal"

#: The writer extends a journal that its next commit would outgrow by whole steps of
#: this many bytes (a sparse extension: ``truncate``, no data written), so that a
#: commit's durable write lands inside the file instead of growing it.  A write that
#: changes the file's size makes its sync write the inode too: one more device write
#: per commit and ~1.4x the sync time on this machine's disk (docs/benchmarks.md,
#: "Durable single put, session 6"); SQLite's WAL avoids the same cost by reusing its
#: file.  The extension is zeros past the chain, which a reader of the journal already
#: takes for its end (slack, as the space kept between checkpoints).
GROW_BYTES = 64 << 10


def journal_path(store_path: str) -> str:
    """Where the journal of the store at ``store_path`` lives."""
    return store_path + JOURNAL_SUFFIX


@dataclass
class JournalScan:
    """What a journal image holds and what recovery has to repair.

    ``txs`` is the chain after cutting an unfinished tail; ``size`` is where it
    ends.  Bytes after it are *slack*: space of transactions from before the last
    reset, which engine's writer overwrites (reusing the file's blocks keeps the
    commit fdatasync free of size changes, like SQLite's WAL).  When
    ``needs_repair`` (something was cut), the file gets header ``(first, last)``,
    the last transaction's ``next`` zeroed (``clear_next_at``) and is truncated to
    ``size`` as the JRNL format prescribes.
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
    #: Transactions found past the header's ``last`` by following pre-linked ``next``
    #: pointers (commits of a writer that does not rewrite the header each time).
    linked: int = 0

    @property
    def needs_repair(self) -> bool:
        return self.cut or (self.first, self.last) != (self.header.first, self.header.last) or self.clear_next_at != 0

    @property
    def pending(self) -> list[ParsedTx]:
        """Transactions not yet flagged JRNL_COMPLETE (to be redone or undone)."""
        return [tx for tx in self.txs if not tx.applied]


def scan(path: str, data: bytes) -> JournalScan:
    """Walk the chain of journal bytes ``data``; raise CorruptFileError on real damage.

    In a JRNL journal the header's ``last`` is the commit point (a writer updates
    it after the transaction bytes and the previous ``next`` link, all under one
    fsync), so a transaction at or after ``last`` that is not whole is an append
    the crash interrupted and is cut off (the JRNL format's rollback); damage to a
    transaction before ``last`` is corruption of committed data.  engine's writer
    pre-links its transactions instead and leaves ``last`` lagging: the chain is
    followed past it (:func:`_follow_linked`).
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
        if tx.salt is not None and off != last and tx.next != tx.end:
            # engine's linked writer sets next to the transaction's end (only the chain's
            # last one, at or after the header's last, may have it cleared).
            raise CorruptFileError(path, off + codec.TX_NEXT_OFFSET, f"next pointer {tx.end}", str(tx.next))
        txs.append(tx)
        if off == last:
            if tx.salt is not None:
                _follow_linked(path, data, result, txs)
            elif tx.next != 0:
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


def _follow_linked(path: str, data: bytes, result: JournalScan, txs: list[ParsedTx]) -> None:
    """Extend the chain past the header's ``last`` through pre-linked transactions.

    engine's writer commits a transaction by writing it alone, with its ``next``
    already pointing at its own end (:class:`Journal`), and
    leaves the header and the previous transaction untouched.  So the committed
    chain goes on while the transaction at the current one's end is whole, names
    the current one as ``prev`` and carries the same chain salt (one drawn at the
    last reset: a transaction left from before it, in the space being reused, has
    another).  The first one that is not is the end: space never written since the
    reset, or an append a crash interrupted (then cut off and reported).

    Damage, not a crash, is an error (``CorruptFileError``): a transaction that is
    not whole although a whole one of the same chain follows and names it as
    ``prev`` (the writer appends only after a commit returned), or a ``next`` that
    is not the transaction's end although the chain goes on after it.  The chain's
    last transaction may carry any ``next``: its own end, 0 (cleared by a repair),
    or the remains of a repair's 8-byte write torn by a crash; the repair clears it.
    """
    tail = txs[-1]
    size = len(data)
    while True:
        at = tail.end
        if at + codec.TX_HEADER_SIZE > size:
            break
        cand = codec.parse_transaction(data, at)
        if cand.problem is None and cand.prev == tail.offset and cand.salt == tail.salt:
            if tail.next != at:
                raise CorruptFileError(path, tail.offset + codec.TX_NEXT_OFFSET, f"next pointer {at}", str(tail.next))
            txs.append(cand)
            result.linked += 1
            tail = cand
            continue
        if cand.prev == tail.offset and cand.problem is not None:
            # Looks like an append of the writer that did not finish, unless a whole successor follows.
            after = cand.next
            if at < after and after + codec.TX_HEADER_SIZE <= size:
                succ = codec.parse_transaction(data, after)
                if succ.problem is None and succ.prev == at and succ.salt == tail.salt:
                    raise CorruptFileError(path, cand.problem_offset, "a whole transaction", cand.problem)
            result.notes.append(f"unfinished transaction at {at} cut off ({cand.problem})")
            result.cut = True
        break
    if tail.next not in (0, tail.end):
        result.notes.append(f"last transaction's next pointer {tail.next} (a torn repair) cleared")
    if tail.next != 0:
        result.clear_next_at = tail.offset + codec.TX_NEXT_OFFSET


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
            lock_handle(handle, exclusive=False, wait=0, what="journal lock")
        except LockedError:
            return None
        return scan(path, handle.read_all())


class Journal:
    """The writer's journal: appends transactions, flags them applied, resets.

    ``handle`` must be open for writing and hold the writer's exclusive lock.

    A commit writes its transaction alone, pre-linked (its ``next`` points at its
    own end) and sealed with the chain's salt: **one contiguous write**, synced by
    itself (``write_durable_at``, O_DSYNC).  The header is written only by the
    first transaction after a reset (it sits at offset 20, right after the header:
    one write still), so while the writer runs its ``last`` lags behind the chain;
    recovery follows the chain past it (:func:`scan`).  One range per sync is
    SQLite's WAL pattern: on this machine's disk it syncs 1.1x-1.4x faster than
    the three places (transaction, previous ``next``, header) a commit would
    otherwise touch (``benchmarks/results/pagestore.md``).

    At rest (after a checkpoint, :meth:`PageStore.close` or recovery) the journal
    is reset: header ``first = last = 0`` and every transaction before it flagged
    JRNL_COMPLETE, which is exactly the picture the JRNL format gives of an
    empty journal; a recovery that replays transactions first writes the chain's
    real ``first``/``last`` with the last ``next`` cleared (:meth:`repair`).
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
        self.salt = _new_salt()
        #: The file's size as this writer left it: a commit ending past it first
        #: extends the file (:data:`GROW_BYTES`).
        self.file_size = handle.size()
        #: A reset was written but not synced and no commit has made the header
        #: durable since: :meth:`sync_reset` owes a sync.
        self.reset_unsynced = False

    def repair(self, state: JournalScan) -> None:
        """Write what :func:`scan` decided (cut tail, fixed header), then fsync.

        Afterwards the file is the JRNL picture of its chain: header ``first`` and
        ``last`` name its ends and the last transaction's ``next`` is 0.
        """
        if state.clear_next_at:
            self.handle.write_at(state.clear_next_at, codec.U64.pack(0))
        self.handle.write_at(0, codec.encode_file_header(state.first, state.last))
        if state.cut:
            self.handle.truncate(state.size)
            self.file_size = state.size
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

        The transaction ends with COMPLETE and its checksum, so recovery can tell
        it whole even if the disk reordered the unsynced writes.  One range is
        written and synced (see the class); the commit returns after it.  One sync
        instead of the original YeltsinDB writer's two is what makes commits cheap.
        """
        off = self.end
        last = self.last
        if len(ops) > MAX_PARTS - 3:
            # More pieces than one vectored write takes (IOV_MAX, with the header,
            # COMPLETE and maybe the file header): the ops as one buffer (a memcpy),
            # joined before the checksum so that it runs once over them, not once per
            # piece (a bulk commit's three pieces a page cost ~2k instructions each in
            # the calls around the CRC alone).
            ops = [b"".join(ops)]
        head, pieces, complete, size = codec.encode_linked_transaction_parts(off, last, created, ops, self.salt)
        if last == 0:
            if off != codec.FILE_HEADER_SIZE:  # pragma: no cover - a reset rewinds the end to 20
                raise AssertionError(f"{self.path}: empty journal ending at {off}")
            # The first transaction since a reset sits right after the header:
            # header and transaction are one range (the header is the commit point).
            at, parts = 0, [codec.encode_file_header(off, off), head, *pieces, complete]
        else:
            at, parts = off, [head, *pieces, complete]
        if off + size > self.file_size:
            # Extend the file ahead of this commit and the next ones (unsynced: the
            # file system makes the size durable with this commit's write, which
            # lands inside it; a crash before that loses only zeros past the chain).
            grown = (off + size + GROW_BYTES - 1) // GROW_BYTES * GROW_BYTES
            self.handle.truncate(grown)
            self.file_size = grown
        crashpoint("pages.commit.before-fsync")
        # One range, synced by itself (O_DSYNC): whatever else of the file is
        # unsynced (a checkpoint's flags) is not written out on this commit's time
        # (at most MAX_PARTS pieces: the ops were joined above when there were more).
        self.handle.write_durable_at(at, parts)
        crashpoint("pages.commit.after-fsync")
        if last == 0:
            self.first = off
            self.reset_unsynced = False  # the header went out with this transaction, synced
        self.last, self.end = off, off + size
        self.tx_offsets.append(off)
        self.unapplied.append(off)
        return off

    def reset(self) -> None:
        """Flag every transaction JRNL_COMPLETE, then empty the journal (unsynced).

        The caller synced the store first: only then are the transactions really
        in the storage file.  Flags, the zeroed header and a zeroed header of the
        transaction at offset 20 are written; a crash before they reach the disk
        leaves the old chain (flags set or not: recovery redoes transactions the
        store holds, which is idempotent) or an empty one.  Zeroing offset 20
        matters because the next commit writes the header and its transaction
        there in one go: if a crash let the header through but not the
        transaction, the old first transaction must not be taken for it (the rest
        of the old chain is told apart by its salt, and a new salt is drawn here).

        The reset is not synced here: the next commit's durable write covers the
        header and the wipe, and it syncs only its own range, so the flags of the
        old transactions (one scattered block each, 8 ms of writes per 4 MiB of
        one-page commits) are not waited for; most are overwritten by the next
        transactions before they ever reach the disk.  :meth:`sync_reset` makes it
        durable where the journal must be at rest (``checkpoint()``, ``close()``,
        recovery).  The file keeps its size (the next transactions overwrite the
        old ones, so their syncs change no file size) unless it grew past
        ``keep_bytes``; then it is truncated to 20 bytes and synced at once (a
        size change is not left to a later commit).
        """
        flag, at = bytes([codec.JRNL_COMPLETE]), codec.TX_FLAGS_OFFSET
        self.handle.write_many_at([(off + at, flag) for off in self.unapplied])
        self.reset_unsynced = True
        if self.end > self.keep_bytes:
            self.handle.write_at(0, codec.encode_file_header(0, 0))
            self.handle.truncate(codec.FILE_HEADER_SIZE)
            self.file_size = codec.FILE_HEADER_SIZE
            self.sync_reset()
        else:
            if self.first:
                self.handle.write_at(0, codec.encode_file_header(0, 0) + _FIRST_TX_WIPE)
            crashpoint("pages.checkpoint.journal-reset-unsynced")
        self.first = self.last = 0
        self.end = codec.FILE_HEADER_SIZE
        self.tx_offsets = []
        self.unapplied = []
        self.salt = _new_salt()

    def release_space(self) -> None:
        """At rest (empty, its reset synced): give the file's old space back to the
        file system (truncated to its 20-byte header, synced).  The space kept for
        reuse between checkpoints (``keep_bytes``) is then allocated again by the
        next commits."""
        if self.first or self.reset_unsynced or self.handle.size() <= codec.FILE_HEADER_SIZE:
            return
        self.handle.truncate(codec.FILE_HEADER_SIZE)
        self.file_size = codec.FILE_HEADER_SIZE
        self.handle.fdatasync()

    def sync_reset(self) -> None:
        """Make a reset that no commit has synced since durable (no-op otherwise)."""
        if self.reset_unsynced:
            crashpoint("pages.checkpoint.before-journal-fsync")
            self.handle.fdatasync()
            crashpoint("pages.checkpoint.after-journal-fsync")
            self.reset_unsynced = False


#: Written over the start of the transaction at offset 20 at a reset: its header and
#: first op header (30 bytes), so that it no longer parses as a whole transaction.
_FIRST_TX_WIPE = bytes(codec.TX_HEADER_SIZE + codec.OP_HEADER.size)


def _new_salt() -> int:
    """A chain salt: 64 random bits, drawn at each reset."""
    return secrets.randbits(64)
