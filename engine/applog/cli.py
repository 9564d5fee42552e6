"""``engine log ...``: look at and maintain append logs from the shell.

``stats``, ``tail [-f]``, ``get`` and ``between`` read through
:class:`~engine.applog.LogReader` (no lock: safe next to a running writer);
``expire`` opens the writer, so it fails with LockedError while one runs.

Text output shows times as UTC dates and sizes and TTLs with their units;
``--json`` prints the stable keys documented in ``docs/guide/applog.md`` (one
document for a report, one per line for records).  Time arguments take what a
user types (``2026-11-24T01:00``, seconds since the epoch, ``...ns``).
"""

from __future__ import annotations

import argparse
import errno
import os
import sys
from typing import Any

from rich.table import Table

from engine.applog.log import AppendLog
from engine.applog.reader import LogReader
from engine.applog.segment import Record
from engine.applog.view import LOCK_FILE
from engine.clireport import (
    add_json_option,
    bytes_fields,
    human_bytes,
    human_duration_ns,
    human_time_ns,
    parse_instant_ns,
    print_json,
)
from engine.terminal import terminal_console


def _ttl(ttl_ns: int) -> str:
    return human_duration_ns(ttl_ns) if ttl_ns > 0 else "never"


def _data(data: bytes, limit: int) -> str:
    shown = data[:limit]
    try:
        text = repr(shown.decode("utf-8"))
    except UnicodeDecodeError:
        text = "0x" + shown.hex()
    return text + (f" ... ({len(data)} bytes)" if len(data) > limit else "")


def record_json(rec: Record) -> dict[str, Any]:
    """A record's ``--json`` document: ``index``, ``time_ns``, ``flags``,
    ``data`` (text, or null when not UTF-8) and ``data_hex`` (the exact bytes)."""
    return {"index": rec.index, "time_ns": rec.time_ns, "flags": rec.flags, **bytes_fields("data", rec.data)}


def _print(rec: Record, args: argparse.Namespace) -> None:
    if args.json:
        print_json(record_json(rec))
        sys.stdout.flush()
        return
    # Plain print, not rich: tab-separated lines for pipes, and record data must
    # never be read as rich markup.
    print(f"{rec.index}\t{human_time_ns(rec.time_ns)}\tflags=0x{rec.flags:x}\t{_data(rec.data, args.width)}",
          flush=True)


def _open(directory: str) -> LogReader:
    """A reader of the append log in ``directory``; "no such append log" (exit 1)
    for a directory that holds none: an empty or unrelated directory is not an
    empty log (a log's writer leaves its lock file there from its first open)."""
    reader = AppendLog.open_reader(directory)
    if not reader.segments() and not os.path.exists(os.path.join(directory, LOCK_FILE)):
        reader.close()
        raise FileNotFoundError(errno.ENOENT, "no such append log (no segments, no lock file)", directory)
    return reader


def _cmd_stats(args: argparse.Namespace) -> int:
    with _open(args.dir) as reader:
        stats = reader.stats()
        segs = reader.segments()
    rows: list[dict[str, Any]] = [
        {
            "first_index": s.first_index, "next_index": s.next_index, "records": s.count,
            "first_time_ns": s.first_time_ns, "last_time_ns": s.last_time_ns, "ttl_ns": s.ttl_ns,
            "log_bytes": s.log_bytes, "log_path": s.log_path,
        }
        for s in segs
    ]
    if args.json:
        print_json({**stats, "segments": rows})
        return 0
    console = terminal_console()
    console.print(
        f"{stats['directory']}: {stats['records']:,} records, indexes [{stats['first_index']}, "
        f"{stats['next_index']}), {stats['segment_count']} segments, {human_bytes(stats['log_bytes'])} of logs, "
        f"TTL {_ttl(stats['ttl_ns'])}"
    )
    if stats["first_time_ns"] is not None:
        console.print(f"times: {human_time_ns(stats['first_time_ns'])} .. {human_time_ns(stats['last_time_ns'])} "
                      f"({stats['first_time_ns']} .. {stats['last_time_ns']} ns)")
    table = Table()
    for col in ("first index", "records", "first time", "last time", "TTL", "log size"):
        table.add_column(col, justify="right" if col in ("first index", "records", "log size") else "left")
    for row in rows:
        table.add_row(
            str(row["first_index"]), f"{row['records']:,}", human_time_ns(row["first_time_ns"]),
            human_time_ns(row["last_time_ns"]), _ttl(row["ttl_ns"]), human_bytes(row["log_bytes"]),
        )
    console.print(table)
    return 0


def _cmd_tail(args: argparse.Namespace) -> int:
    with _open(args.dir) as reader:
        end = reader.next_index
        for rec in reader.scan(max(reader.first_index, end - args.n), end):
            _print(rec, args)
        if args.follow:
            for rec in reader.follow(end):
                _print(rec, args)
    return 0


def _cmd_get(args: argparse.Namespace) -> int:
    with _open(args.dir) as reader:
        try:
            rec = reader.get(args.index)
        except IndexError as exc:
            print(f"engine log get: {args.dir}: {exc}", file=sys.stderr)
            return 1
        _print(rec, args)
    return 0


def _cmd_between(args: argparse.Namespace) -> int:
    with _open(args.dir) as reader:
        for rec in reader.between(start_ns=args.t0, end_ns=args.t1):
            _print(rec, args)
    return 0


def _cmd_expire(args: argparse.Namespace) -> int:
    with AppendLog.open(args.dir, create=False, sync="always") as log:
        recovered = log.recovery.summary() if log.recovery.repaired else None
        removed = log.expire(now_ns=args.now)
        first, nxt = log.first_index, log.next_index
    if args.json:
        print_json({"expired_records": removed, "first_index": first, "next_index": nxt, "recovered": recovered})
        return 0
    console = terminal_console()
    if recovered is not None:
        console.print(f"recovered on open: {recovered}")
    console.print(f"expired {removed} records; records now [{first}, {nxt})")
    return 0


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``engine log ...``."""
    parser = subparsers.add_parser("log", help="TTL'd append logs (LOG/IDX segments)")
    sub = parser.add_subparsers(dest="log_command", metavar="ACTION")
    sub.required = True

    def directory(p: argparse.ArgumentParser) -> None:
        p.add_argument("dir", metavar="DIR", help="the append log's directory")

    def records(p: argparse.ArgumentParser) -> None:
        directory(p)
        p.add_argument("--width", type=int, default=80, metavar="BYTES",
                       help="bytes of each record's data to show in text output (default 80; --json shows all)")
        add_json_option(p)

    def instant(option: str) -> Any:
        return lambda text: parse_instant_ns(text, option)

    p = sub.add_parser("stats", help="records, segments, time ranges, TTLs and sizes")
    directory(p)
    add_json_option(p)
    p.set_defaults(func=_cmd_stats)
    p = sub.add_parser("tail", help="the newest records; -f keeps following")
    records(p)
    p.add_argument("-n", type=int, default=10, metavar="COUNT", help="how many records (default 10)")
    p.add_argument("-f", "--follow", action="store_true", help="keep waiting for new records (Ctrl-C stops)")
    p.set_defaults(func=_cmd_tail)
    p = sub.add_parser("get", help="one record by index")
    records(p)
    p.add_argument("index", type=int, metavar="INDEX", help="the record's index")
    p.set_defaults(func=_cmd_get)
    p = sub.add_parser("between", help="records with START <= time < END")
    records(p)
    p.add_argument("t0", type=instant("START"), metavar="START",
                   help="from this time (included): 2026-11-24T01:00 (UTC), seconds since the epoch, "
                        "or an exact count like 1764000000000000000ns")
    p.add_argument("t1", type=instant("END"), metavar="END", help="up to this time (excluded), as START")
    p.set_defaults(func=_cmd_between)
    p = sub.add_parser("expire", help="delete segments whose records outlived the TTL (takes the writer lock)")
    directory(p)
    p.add_argument("--now", type=instant("--now"), default=None, metavar="TIME",
                   help="expire as of this time: 2026-11-24T01:00 (UTC), seconds since the epoch, or ...ns "
                        "(default: the clock)")
    add_json_option(p)
    p.set_defaults(func=_cmd_expire)
