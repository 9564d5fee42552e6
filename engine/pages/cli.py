"""``engine pages ...``: stats, page dumps and the journal's transactions.

Every command reads the files without writing or recovering anything (beside a
live writer too) and takes ``--json``: ``stats`` and ``journal`` print one JSON
document, ``dump`` one document per page (JSON Lines).  The keys are listed in
``docs/guide/pages.md`` and are stable.  A page id the store file does not hold
is a "not found" answer (one line on stderr, exit 1).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from rich.table import Table

from engine.clireport import add_json_option, bytes_fields, human_bytes, human_time_ns, print_json
from engine.fs import default_fs
from engine.pages import codec, diagnose
from engine.pages.codec import Alloc, Marker, Modify, ParsedTx, Remove
from engine.pages.journal import JOURNAL_SUFFIX, journal_path
from engine.pages.recovery import page_range
from engine.terminal import terminal_console

NS_PER_S = 1_000_000_000


def _cmd_stats(args: argparse.Namespace) -> int:
    fs = default_fs()
    if args.json:
        print_json(diagnose.file_stats(fs, args.path))
        return 0
    table = Table(title=f"{args.path}", show_header=False)
    table.add_column("field", style="bold")
    table.add_column("value")
    for key, value in diagnose.summarize(fs, args.path).items():
        table.add_row(str(key), str(value))
    terminal_console().print(table)
    return 0


def _hexdump(data: bytes, base: int, collapse: bool) -> list[str]:
    """``hexdump -C``-like lines; runs of all-zero lines become one ``*``."""
    lines: list[str] = []
    zero = bytes(16)
    for i in range(0, len(data), 16):
        chunk = data[i : i + 16]
        if collapse and chunk == zero and i and data[i - 16 : i] == zero:
            if lines[-1] != "*":
                lines.append("*")
            continue
        text = "".join(chr(b) if 32 <= b < 127 else "." for b in chunk)
        lines.append(f"{base + i:08x}  {chunk.hex(' '):<47}  {text}")
    return lines


def _cmd_dump(args: argparse.Namespace) -> int:
    path = diagnose.store_path_of(args.path)
    fs = default_fs()
    info = diagnose.read_store(fs, path)
    ps = info.header.page_size
    count = info.header.page_count
    free = set(info.free)
    if args.page is not None:
        if not 1 <= args.page <= count:
            print(
                f"engine pages dump: {path} has no page {args.page}: the store file holds {page_range(count)}",
                file=sys.stderr,
            )
            return 1
        data = diagnose.read_page(fs, path, args.page)
        state = "free" if args.page in free else "live"
        if args.json:
            print_json(
                {"page": args.page, "offset": args.page * ps, "page_size": ps, "state": state}
                | bytes_fields("data", data)
            )
            return 0
        print(f"page {args.page} ({state}) at byte offset {args.page * ps}, {human_bytes(ps)}")
        for line in _hexdump(data, args.page * ps, collapse=not args.all):
            print(line)
        return 0
    pages = range(1, count + 1)
    rows = zip(pages, diagnose.iter_pages(fs, info, pages), strict=True)  # checked pages only
    if args.json:
        for page, data in rows:
            state = "free" if page in free else "live"
            print_json({"page": page, "offset": page * ps, "state": state} | bytes_fields("first_bytes", data[:16]))
        return 0
    table = Table(title=f"{path}: {count} pages of {human_bytes(ps)}")
    table.add_column("page", justify="right")
    table.add_column("byte offset", justify="right")
    table.add_column("state")
    table.add_column("first 16 bytes")
    for page, data in rows:
        table.add_row(str(page), str(page * ps), "free" if page in free else "live", data[:16].hex(" "))
    terminal_console().print(table)
    return 0


def _tx_state(tx: ParsedTx) -> str:
    if tx.rolled_back:
        return "rolled_back"
    return "checkpointed" if tx.applied else "committed"


_TX_WORDS = {
    "rolled_back": "rolled back",
    "checkpointed": "checkpointed into the store file",
    "committed": "committed, not yet checkpointed into the store file",
}


def _op_json(op: codec.Op, at: int) -> dict[str, object]:
    """One journal operation for ``--json``: its kind, where it is and what it does."""
    if isinstance(op, Alloc):
        return {
            "op": "alloc",
            "at": at,
            "page_offset": op.page_offset,
            "free_head_before": op.head_before,
            "free_head_after": op.head_after,
        }
    if isinstance(op, Remove):
        return {"op": "remove", "at": at, "page_offset": op.page_offset, "next_free": op.head_before}
    if isinstance(op, Modify):
        return {
            "op": "modify",
            "at": at,
            "page_offset": op.page_offset,
            "offset": op.offset,
            "bytes": len(op.after),
        }
    assert isinstance(op, Marker)
    name = codec.OP_NAMES.get(op.type, f"unknown_0x{op.type:02x}")
    return {"op": name, "at": at, "data_bytes": len(op.data)}


def _tx_json(tx: ParsedTx) -> dict[str, object]:
    return {
        "offset": tx.offset,
        "prev": tx.prev,
        "next": tx.next,
        "created_s": tx.created,
        "flags": tx.flags,
        "state": _tx_state(tx),
        "bytes": tx.end - tx.offset,
        "crc_checked": tx.crc_checked,
        "salt": tx.salt,
        "ops": [_op_json(op, at) for op, at in zip(tx.ops, tx.op_offsets, strict=True)],
    }


def _cmd_journal(args: argparse.Namespace) -> int:
    jpath = args.path if args.path.endswith(JOURNAL_SUFFIX) else journal_path(args.path)
    state = diagnose.read_journal(default_fs(), jpath)
    pending = len(state.pending)
    if args.json:
        print_json(
            {
                "journal_path": jpath,
                "first": state.header.first,
                "last": state.header.last,
                "journal_bytes": state.file_size,
                "pending_transactions": pending,
                "linked_transactions": state.linked,
                "repairs": list(state.notes),
                "transactions": [_tx_json(tx) for tx in state.txs],
            }
        )
        return 0
    print(
        f"{jpath}: {len(state.txs)} transaction(s), {pending} committed and not yet checkpointed into the store "
        f"file; {human_bytes(state.file_size)}; header first={state.header.first} last={state.header.last}"
    )
    if state.linked:
        print(
            f"  {state.linked} transaction(s) past the header's last, found through pre-linked next "
            "pointers (normal while a writer is open: the header is brought up to date when the journal is reset)"
        )
    for note in state.notes:
        print(f"  to repair: {note} (the next writable open repairs it)")
    for tx in state.txs:
        # JRNL records whole seconds since the epoch.
        when = human_time_ns(tx.created * NS_PER_S)[:-11] + " UTC" if 0 <= tx.created < 2**37 else str(tx.created)
        print(
            f"tx @{tx.offset}: {_TX_WORDS[_tx_state(tx)]}, created {when}, {human_bytes(tx.end - tx.offset)}, "
            f"prev={tx.prev} next={tx.next} flags=0x{tx.flags:02x}"
            + (", CRC ok" if tx.crc_checked else "")
            + (f", chain salt {tx.salt:#018x}" if tx.salt is not None else "")
        )
        for op, at in zip(tx.ops, tx.op_offsets, strict=True):
            print(f"    @{at} {codec.describe_op(op)}")
    return 0


def register(subparsers: Any) -> None:
    """Add ``engine pages stats|dump|journal``."""
    pages = subparsers.add_parser("pages", help="page store (JRNL-protected) tools")
    sub = pages.add_subparsers(dest="pages_command", metavar="SUBCOMMAND", help="what to look at")
    sub.required = True
    store_help = "the page store file (or its -journal or -sums file)"
    stats = sub.add_parser("stats", help="header, page counts and journal state (read only)")
    stats.add_argument("path", metavar="PATH", help=store_help)
    add_json_option(stats)
    stats.set_defaults(func=_cmd_stats)
    dump = sub.add_parser("dump", help="list every page (live or free, first bytes), or hex-dump one page")
    dump.add_argument("path", metavar="PATH", help=store_help)
    dump.add_argument("page", metavar="PAGE", type=int, nargs="?", help="the page id to hex-dump (from 1)")
    dump.add_argument("--all", action="store_true", help="hex dump: print runs of zero lines instead of '*'")
    add_json_option(dump)
    dump.set_defaults(func=_cmd_dump)
    journal = sub.add_parser("journal", help="list the journal's transactions and their operations")
    journal.add_argument("path", metavar="PATH", help="the page store file or its -journal file")
    add_json_option(journal)
    journal.set_defaults(func=_cmd_journal)


__all__ = ["register"]
