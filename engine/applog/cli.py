"""``engine log ...``: look at and maintain append logs from the shell.

``stats``, ``tail [-f]``, ``get`` and ``between`` read through
:class:`~engine.applog.LogReader` (no lock: safe next to a running writer);
``expire`` opens the writer, so it fails with LockedError while one runs.
"""

from __future__ import annotations

import argparse
import datetime

from rich.table import Table

from engine.applog.log import AppendLog
from engine.applog.reader import LogReader
from engine.applog.segment import Record
from engine.terminal import terminal_console

console = terminal_console()


def _when(time_ns: int | None) -> str:
    if time_ns is None:
        return "-"
    try:
        stamp = datetime.datetime.fromtimestamp(time_ns / 1e9, tz=datetime.UTC)
    except (OverflowError, OSError, ValueError):
        return str(time_ns)
    return f"{stamp.isoformat(timespec='microseconds')} ({time_ns})"


def _ns(value: int | None) -> str:
    return "-" if value is None else str(value)


def _data(data: bytes, limit: int) -> str:
    shown = data[:limit]
    try:
        text = repr(shown.decode("utf-8"))
    except UnicodeDecodeError:
        text = "0x" + shown.hex()
    return text + (f" ... ({len(data)} bytes)" if len(data) > limit else "")


def _print(rec: Record, args: argparse.Namespace) -> None:
    # Plain print, not rich: tab-separated lines for pipes, and record data must
    # never be read as rich markup.
    print(f"{rec.index}\t{_when(rec.time_ns)}\tflags=0x{rec.flags:x}\t{_data(rec.data, args.width)}", flush=True)


def _cmd_stats(args: argparse.Namespace) -> int:
    with LogReader.open(args.dir) as reader:
        segs = reader.segments()
        console.print(f"{args.dir}: records [{reader.first_index}, {reader.next_index})", soft_wrap=True, markup=False)
        table = Table()
        for col in ("first index", "records", "first time_ns", "last time_ns", "ttl_ns", "log bytes"):
            table.add_column(col, overflow="fold")
        for s in segs:
            table.add_row(
                str(s.first_index), str(s.count), _ns(s.first_time_ns), _ns(s.last_time_ns),
                str(s.ttl_ns), f"{s.log_bytes:,}",
            )
        if segs and segs[0].first_time_ns is not None:
            console.print(f"times: {_when(segs[0].first_time_ns)} .. {_when(segs[-1].last_time_ns)}", soft_wrap=True)
        console.print(table)
    return 0


def _cmd_tail(args: argparse.Namespace) -> int:
    with LogReader.open(args.dir) as reader:
        end = reader.next_index
        for rec in reader.scan(max(reader.first_index, end - args.n), end):
            _print(rec, args)
        if args.follow:
            for rec in reader.follow(end):
                _print(rec, args)
    return 0


def _cmd_get(args: argparse.Namespace) -> int:
    with LogReader.open(args.dir) as reader:
        try:
            rec = reader.get(args.index)
        except IndexError as exc:
            print(f"engine log get: {exc}")
            return 1
        _print(rec, args)
    return 0


def _cmd_between(args: argparse.Namespace) -> int:
    with LogReader.open(args.dir) as reader:
        for rec in reader.between(args.t0, args.t1):
            _print(rec, args)
    return 0


def _cmd_expire(args: argparse.Namespace) -> int:
    with AppendLog.open(args.dir, create=False, sync="always") as log:
        if log.recovery.repaired:
            console.print(f"recovered on open: {log.recovery.summary()}", soft_wrap=True, markup=False)
        removed = log.expire(args.now)
        console.print(f"expired {removed} records; records now [{log.first_index}, {log.next_index})", markup=False)
    return 0


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``engine log ...``."""
    parser = subparsers.add_parser("log", help="TTL'd append logs (LOG/IDX segments)")
    sub = parser.add_subparsers(dest="log_command", metavar="ACTION")
    sub.required = True

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("dir", metavar="DIR", help="the log directory")
        p.add_argument("--width", type=int, default=80, help="bytes of data to show per record")

    p = sub.add_parser("stats", help="segments, index and time ranges")
    p.add_argument("dir", metavar="DIR")
    p.set_defaults(func=_cmd_stats)
    p = sub.add_parser("tail", help="the newest records; -f keeps following")
    common(p)
    p.add_argument("-n", type=int, default=10, help="how many records (default 10)")
    p.add_argument("-f", "--follow", action="store_true", help="wait for new records")
    p.set_defaults(func=_cmd_tail)
    p = sub.add_parser("get", help="one record by index")
    common(p)
    p.add_argument("index", type=int, metavar="INDEX")
    p.set_defaults(func=_cmd_get)
    p = sub.add_parser("between", help="records with T0 <= time_ns < T1")
    common(p)
    p.add_argument("t0", type=int, metavar="T0", help="nanoseconds since the epoch")
    p.add_argument("t1", type=int, metavar="T1")
    p.set_defaults(func=_cmd_between)
    p = sub.add_parser("expire", help="delete segments whose records outlived the TTL (takes the writer lock)")
    p.add_argument("dir", metavar="DIR")
    p.add_argument("--now", type=int, default=None, help="the current time in ns (default: the clock)")
    p.set_defaults(func=_cmd_expire)
