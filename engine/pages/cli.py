"""``engine pages ...``: stats, page dumps and the journal's transactions."""

from __future__ import annotations

import argparse
import datetime
from typing import Any

from rich.table import Table

from engine.errors import CorruptFileError
from engine.fs import default_fs
from engine.pages import codec, diagnose
from engine.pages.journal import journal_path
from engine.terminal import terminal_console

console = terminal_console()


def _cmd_stats(args: argparse.Namespace) -> int:
    table = Table(title=f"{args.path}", show_header=False)
    table.add_column("field", style="bold")
    table.add_column("value")
    for key, value in diagnose.summarize(default_fs(), args.path).items():
        table.add_row(str(key), str(value))
    console.print(table)
    return 0


def _hexdump(data: bytes, base: int) -> list[str]:
    lines = []
    for i in range(0, len(data), 16):
        chunk = data[i : i + 16]
        text = "".join(chr(b) if 32 <= b < 127 else "." for b in chunk)
        lines.append(f"{base + i:08x}  {chunk.hex(' '):<47}  {text}")
    return lines


def _cmd_dump(args: argparse.Namespace) -> int:
    path = diagnose.store_path_of(args.path)
    fs = default_fs()
    info = diagnose.read_store(fs, path)
    ps = info.header.page_size
    if args.page is not None:
        data = diagnose.read_page(fs, path, args.page)
        state = "free" if args.page in set(info.free) else "live"
        console.print(f"page {args.page} ({state}) at byte offset {args.page * ps}, {ps} bytes")
        lines = _hexdump(data, args.page * ps)
        if not args.all:
            # Collapse runs of zero lines, like hexdump does.
            out: list[str] = []
            zero = "00 " * 15 + "00"
            for line in lines:
                if zero in line and out and out[-1] == "*":
                    continue
                out.append("*" if zero in line and out and zero in out[-1] else line)
            lines = out
        for line in lines:
            console.print(line, markup=False)
        return 0
    free = set(info.free)
    table = Table(title=f"{path}: {info.header.page_count} pages of {ps} bytes")
    table.add_column("page", justify="right")
    table.add_column("offset", justify="right")
    table.add_column("state")
    table.add_column("first 16 bytes")
    pages = range(1, info.header.page_count + 1)
    for page, data in zip(pages, diagnose.iter_pages(fs, info, pages), strict=True):  # checked pages only
        table.add_row(str(page), str(page * ps), "free" if page in free else "live", data[:16].hex(" "))
    console.print(table)
    return 0


def _cmd_journal(args: argparse.Namespace) -> int:
    jpath = args.path if args.path.endswith("-journal") else journal_path(args.path)
    state = diagnose.read_journal(default_fs(), jpath)
    console.print(
        f"{jpath}: header first={state.header.first} last={state.header.last}, "
        f"{len(state.txs)} transaction(s), {state.file_size} bytes"
    )
    if state.linked:
        console.print(
            f"  {state.linked} transaction(s) past the header's last, found through pre-linked next "
            "pointers (the writer brings the header up to date when it resets the journal)"
        )
    for note in state.notes:
        console.print(f"  note: {note} (repaired on the next writable open)")
    for tx in state.txs:
        when = (
            datetime.datetime.fromtimestamp(tx.created, datetime.UTC).isoformat()
            if 0 <= tx.created < 2**37
            else tx.created
        )
        kind = "rolled back" if tx.rolled_back else ("applied" if tx.applied else "complete, not flagged")
        console.print(
            f"[bold]tx @{tx.offset}[/bold] prev={tx.prev} next={tx.next} created={when} "
            f"flags=0x{tx.flags:02x} ({kind}), {tx.end - tx.offset} bytes"
            + (", CRC ok" if tx.crc_checked else "")
            + (f", chain salt {tx.salt:#018x}" if tx.salt is not None else "")
        )
        for op, at in zip(tx.ops, tx.op_offsets, strict=True):
            console.print(f"    @{at} {codec.describe_op(op)}", markup=False)
    return 0


def register(subparsers: Any) -> None:
    """Add ``engine pages stats|dump|journal``."""
    pages = subparsers.add_parser("pages", help="page store (JRNL-protected) tools")
    sub = pages.add_subparsers(dest="pages_command", metavar="SUBCOMMAND")
    sub.required = True
    stats = sub.add_parser("stats", help="header, page counts and journal state")
    stats.add_argument("path", metavar="PATH")
    stats.set_defaults(func=_cmd_stats)
    dump = sub.add_parser("dump", help="list pages, or hex-dump one page")
    dump.add_argument("path", metavar="PATH")
    dump.add_argument("page", metavar="PAGE", type=int, nargs="?")
    dump.add_argument("--all", action="store_true", help="do not collapse zero lines")
    dump.set_defaults(func=_cmd_dump)
    journal = sub.add_parser("journal", help="list the journal's transactions and operations")
    journal.add_argument("path", metavar="PATH", help="the store or its -journal file")
    journal.set_defaults(func=_cmd_journal)


__all__ = ["CorruptFileError", "register"]
