"""What a writer's open does besides taking its locks: check and create the
files (:func:`prepare_files`), then recovery (:func:`recover`: cut an
unfinished tail, redo or undo what the store file lacks, reset the journal),
which returns what it found for the store to install (:class:`Recovered`).

Functions over the store's parts (:class:`~engine.pages.pagefile.StoreFile`,
:class:`~engine.pages.journal.Journal`), called by
:meth:`PageStore.open <engine.pages.store.PageStore.open>` inside the store
core's open sequence; kept out of ``store.py`` to keep that module to the
commit path.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.errors import CorruptFileError
from engine.fs import FileHandle, FileSystem, OpenMode, RecoveryReport, create_file
from engine.pages import codec, store_codec
from engine.pages.journal import Journal, JournalScan, scan
from engine.pages.pagefile import StoreFile
from engine.pages.recovery import walk_free_list
from engine.pages.store_codec import StoreHeader
from engine.pages.storefile import (
    check_store_size,
    create_store_file,
    file_present,
    header_says_journal_live,
    interrupted_creation,
    journal_present,
    missing_journal_error,
    orphan_journal_error,
)
from engine.pages.sums import sums_path


@dataclass(frozen=True)
class Recovered:
    """What recovery found, for the store to install: the committed free list
    (head first) of the store file as recovery left it."""

    free: list[int]


def prepare_files(fs: FileSystem, path: str, jpath: str, page_size: int, create: bool,
                  report: RecoveryReport) -> None:
    """Refuse a store whose journal went missing (or a journal whose store did),
    and create what a new store lacks: the store file (its header page durable
    before anything refers to it), its checksums and the empty journal.  The
    caller holds the writer lock."""
    missing = not fs.exists(path)
    has_journal = journal_present(fs, jpath)  # a broken link to it is an error, not "none"
    if missing and has_journal:
        # The journal is created after its store file, so a journal without one
        # means the store file was deleted or moved: never an empty new store
        # over it (its commits, or the store's whole contents, would be lost).
        with fs.open(jpath, OpenMode.READ) as orphan:
            held = len(scan(jpath, orphan.read_all()).txs)
        raise orphan_journal_error(path, jpath, held)
    if not missing and not has_journal and header_says_journal_live(fs, path):
        raise missing_journal_error(path, jpath)
    if missing or interrupted_creation(fs, path, jpath):
        if not create:
            if missing:
                raise FileNotFoundError(2, "No such page store", path)
            raise CorruptFileError(path, 0, "a 40-byte header", "an empty file (interrupted creation)")
        if not missing:
            report.add("rebuilt", path, 1, "files", detail="empty file left by an interrupted creation")
        header = StoreHeader(page_size, 0, 0)
        # Header page durable (data, then directory entry) before anything refers to it.
        create_store_file(fs, path, store_codec.encode_header(header) + bytes(page_size - store_codec.HEADER_SIZE))
        if not file_present(fs, sums_path(path), "the page checksum file"):
            create_file(fs, sums_path(path), store_codec.encode_sums_header(page_size, True)).close()
    if not has_journal:
        create_file(fs, jpath, codec.encode_file_header(0, 0)).close()


def read_journal(jhandle: FileHandle, jpath: str, header: StoreHeader, report: RecoveryReport) -> JournalScan:
    """Scan the journal (its handle locked by this writer); first rebuild the
    header of a new store's empty journal that a crash left without one."""
    if jhandle.size() == 0 and header.page_count == 0:
        # A crash while creating the journal of a new store left its name
        # without the header; it never held a transaction.
        jhandle.write_at(0, codec.encode_file_header(0, 0))
        jhandle.fsync()
        report.add("rebuilt", jpath, codec.FILE_HEADER_SIZE, "bytes", detail="the empty journal's header")
    return scan(jpath, jhandle.read_all())


def recover(files: StoreFile, journal: Journal, state: JournalScan, report: RecoveryReport) -> Recovered:
    """Cut an unfinished tail, redo/undo what the store lacks, reset the journal,
    complete the checksums; returns the committed free list."""
    jpath = journal.path
    if state.needs_repair:
        detail = "; ".join(state.notes)
        if state.cut_bytes:
            report.cut(jpath, state.size, state.cut_bytes, detail)
        elif state.cut:
            report.add("reset", jpath, 1, "links", offset=state.clear_next_at or 0, detail=detail)
        if (state.first, state.last) != (state.header.first, state.header.last):
            report.add(
                "reset",
                jpath,
                1,
                "headers",
                offset=0,
                detail=f"first/last {state.header.first}/{state.header.last} -> {state.first}/{state.last}",
            )
        journal.repair(state)
    if not state.txs:
        if files.clear_flush_mark():
            report.add("reset", files.path, 1, "flags", offset=0, detail="flush mark of an interrupted flush")
    else:
        redone, undone = files.replay(state.txs, jpath)
        report.add("redone", jpath, redone, "transactions")
        report.add("undone", jpath, undone, "transactions")
        journal.reset()
        journal.sync_reset()  # at rest: the JRNL picture of an empty journal
    files.fill_missing_sums(report)
    header = files.header
    check_store_size(files.path, header, files.size())
    return Recovered(walk_free_list(files.path, header, files.read_at))
