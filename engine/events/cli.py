"""``engine events ...``: list ids, replay one id, show statistics (read-only).

Every command takes ``--json``: ``ids`` and ``replay`` list records (one JSON
object per line), ``stats`` prints one document (the keys of
:meth:`EventJournal.stats`).  The keys are documented in
``docs/guide/events.md`` ("Command line") and stable.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from rich.table import Table

from engine.clireport import add_json_option, bytes_fields, human_bytes, print_json
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
    with EventJournal.open_reader(args.directory) as journal:
        infos = journal.ids()
    if args.json:
        for info in infos:
            print_json({"persistence_id": info.persistence_id, "lowest_sequence_nr": info.lowest,
                        "highest_sequence_nr": info.highest, "live_events": info.live})
        return 0
    table = Table(title=f"{args.directory}: persistence ids")
    for column in ("persistence id", "lowest", "highest", "live events"):
        table.add_column(column, justify="left" if column == "persistence id" else "right")
    for info in infos:
        table.add_row(info.persistence_id, str(info.lowest), str(info.highest), str(info.live))
    console.print(table)
    return 0


def _cmd_replay(args: argparse.Namespace) -> int:
    with EventJournal.open_reader(args.directory) as journal:
        if args.id not in journal:
            print(f"engine events replay: {args.directory} has no persistence id {args.id!r}", file=sys.stderr)
            return 1
        for event in journal.replay(args.id, args.from_seq, args.to_seq, args.max):
            if args.json:
                print_json({"persistence_id": args.id, "sequence_nr": event.sequence_nr,
                            **bytes_fields("payload", event.payload)})
            else:
                # Plain tab-separated lines (not rich) so that the output pipes into tools.
                sys.stdout.write(f"{event.sequence_nr}\t{_show_payload(event.payload, args.hex)}\n")
    return 0


def _stat_row(key: str, value: object) -> tuple[str, str]:
    """A stats() entry in words: sizes with their unit, the fraction as a percent."""
    if key.endswith("_fraction") and isinstance(value, float):
        percent = f"{100 * value:.4f} %"
        if 0 < value < 0.000_000_5:  # would show as 0.0000 %
            percent = "< 0.0001 %"
        return key[: -len("_fraction")].replace("_", " "), percent
    label = key.replace("_", " ")
    if value is None:
        return label, "-"
    if isinstance(value, bool):
        return label, "yes" if value else "no"
    if "bytes" in key.split("_") and isinstance(value, int):
        label = label.replace(" bytes", "")
        return label, human_bytes(value) if value < 1024 else f"{human_bytes(value)} ({value} B)"
    return label, str(value)


def _cmd_stats(args: argparse.Namespace) -> int:
    with EventJournal.open_reader(args.directory) as journal:
        stats = journal.stats()
    if args.json:
        print_json(stats)
        return 0
    table = Table(title=f"{args.directory}: event journal", show_header=False)
    table.add_column("field", style="bold")
    table.add_column("value")
    for key, value in stats.items():
        table.add_row(*_stat_row(key, value))
    console.print(table)
    return 0


def register(subparsers: Any) -> None:
    """Add ``engine events`` and its sub-commands."""
    parser = subparsers.add_parser("events", help="event journals (akka file-journal format)")
    sub = parser.add_subparsers(dest="events_command", metavar="SUBCOMMAND", help="what to do with the journal")
    sub.required = True
    where = "the event journal's directory (opened read-only)"

    ids = sub.add_parser("ids", help="list persistence ids with their sequence-number ranges")
    ids.add_argument("directory", metavar="DIR", help=where)
    add_json_option(ids)
    ids.set_defaults(func=_cmd_ids)

    replay = sub.add_parser("replay", help="print one id's events (sequence number, payload)")
    replay.add_argument("directory", metavar="DIR", help=where)
    replay.add_argument("id", metavar="ID", help="the persistence id to replay (exit 1 if the journal has none)")
    replay.add_argument("--from", dest="from_seq", type=int, default=1, metavar="SEQ",
                        help="first sequence number to print (default 1)")
    replay.add_argument("--to", dest="to_seq", type=int, default=None, metavar="SEQ",
                        help="last sequence number to print (default: the highest)")
    replay.add_argument("--max", type=int, default=None, metavar="COUNT",
                        help="print at most this many events")
    replay.add_argument("--hex", action="store_true", help="always print payloads as hex (text output)")
    add_json_option(replay)
    replay.set_defaults(func=_cmd_replay)

    stats = sub.add_parser("stats", help="counts, sizes and how much of the 2 GiB data limit is used")
    stats.add_argument("directory", metavar="DIR", help=where)
    add_json_option(stats)
    stats.set_defaults(func=_cmd_stats)
