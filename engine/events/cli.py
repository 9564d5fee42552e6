"""``engine events ...``: list ids, replay one id, show statistics (read-only)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from rich.table import Table

from engine.events.journal import EventJournal
from engine.terminal import terminal_console

console = terminal_console()


def _show_payload(payload: bytes, as_hex: bool) -> str:
    if not as_hex:
        try:
            text = payload.decode("utf-8")
        except UnicodeDecodeError:
            pass
        else:
            if text.isprintable():
                return text
    return payload.hex(" ")


def _cmd_ids(args: argparse.Namespace) -> int:
    with EventJournal.open_read_only(args.directory) as journal:
        table = Table(title=f"{args.directory}: persistence ids")
        for column in ("persistence id", "lowest", "highest", "live events"):
            table.add_column(column, justify="left" if column == "persistence id" else "right")
        for info in journal.ids():
            table.add_row(info.persistence_id, str(info.lowest), str(info.highest), str(info.live))
        console.print(table)
    return 0


def _cmd_replay(args: argparse.Namespace) -> int:
    with EventJournal.open_read_only(args.directory) as journal:
        for event in journal.replay(args.id, args.from_seq, args.to_seq, args.max):
            # Plain tab-separated lines (not rich) so that the output pipes into tools.
            sys.stdout.write(f"{event.sequence_nr}\t{_show_payload(event.payload, args.hex)}\n")
    return 0


def _cmd_stats(args: argparse.Namespace) -> int:
    with EventJournal.open_read_only(args.directory) as journal:
        table = Table(title=f"{args.directory}: event journal", show_header=False)
        table.add_column("field", style="bold")
        table.add_column("value")
        for key, value in journal.stats().items():
            table.add_row(key, str(value))
        console.print(table)
    return 0


def register(subparsers: Any) -> None:
    """Add ``engine events`` and its sub-commands."""
    parser = subparsers.add_parser("events", help="event journals (akka file-journal format)")
    sub = parser.add_subparsers(dest="events_command", metavar="SUBCOMMAND")
    sub.required = True

    ids = sub.add_parser("ids", help="list persistence ids with their sequence-number ranges")
    ids.add_argument("directory", metavar="DIR")
    ids.set_defaults(func=_cmd_ids)

    replay = sub.add_parser("replay", help="print one id's events (sequence number, payload)")
    replay.add_argument("directory", metavar="DIR")
    replay.add_argument("id", metavar="ID")
    replay.add_argument("--from", dest="from_seq", type=int, default=1, metavar="N")
    replay.add_argument("--to", dest="to_seq", type=int, default=None, metavar="M")
    replay.add_argument("--max", type=int, default=None, metavar="K")
    replay.add_argument("--hex", action="store_true", help="always print payloads as hex")
    replay.set_defaults(func=_cmd_replay)

    stats = sub.add_parser("stats", help="counts and sizes")
    stats.add_argument("directory", metavar="DIR")
    stats.set_defaults(func=_cmd_stats)
