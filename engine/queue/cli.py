"""``engine queue ...``: stats, dump, put, get, repair."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from rich.table import Table

from engine.fs import default_fs
from engine.queue import codec
from engine.queue.diagnose import iter_file_records, queue_stats, repair
from engine.terminal import terminal_console

console = terminal_console()


def _preview(data: bytes, width: int = 60) -> str:
    text = data[:width].decode("utf-8", "backslashreplace")
    return text + ("…" if len(data) > width else "")


def _cmd_stats(args: argparse.Namespace) -> int:
    stats = queue_stats(default_fs(), args.directory, args.name)
    table = Table(title=f"queue {args.name} — tail id {stats['tail_id']}")
    for column in ("reader", "head", "items", "backlog bytes", "open reads", "done out of order", "oldest age (s)"):
        table.add_column(column)
    readers = stats["readers"]
    assert isinstance(readers, list)
    for r in readers:
        age = r["oldest_age_s"]
        table.add_row(
            repr(r["reader"]),
            str(r["head"]),
            str(r["items"]),
            str(r["backlog_bytes"]),
            "n/a (not journaled)" if r["open_reads"] is None else str(r["open_reads"]),
            str(r["done_out_of_order"]),
            "-" if age is None else f"{age:.1f}",
        )
    console.print(table)
    files = Table(title=f"writer files: {stats['journal_files']}, {stats['journal_bytes']} bytes")
    files.add_column("file")
    files.add_column("bytes", justify="right")
    files.add_column("first id", justify="right")
    file_rows = stats["files"]
    assert isinstance(file_rows, list)
    for path, size, first in file_rows:
        files.add_row(path, str(size), "-" if first is None else str(first))
    console.print(files)
    return 0


def _cmd_dump(args: argparse.Namespace) -> int:
    fs = default_fs()
    if fs.isdir(args.path):
        if not args.name:
            console.print("engine queue dump: a directory needs a queue NAME")
            return 1
        from engine.queue.cursor import JournalCursor, PollingSource

        source = PollingSource(fs, args.path, args.name, codec.DEFAULT_MAX_ITEM_SIZE, 0.001)
        cursor = JournalCursor(source, 0)
        shown = 0
        try:
            while args.limit is None or shown < args.limit:
                put = cursor.next()
                if put is None:
                    break
                console.print(
                    f"id {put.xid} add {put.add_time} exp {put.expire_time} err {put.error_count} "
                    f"{len(put.data)} B {_preview(put.data)!r}"
                )
                shown += 1
        finally:
            cursor.close()
        return 0
    for offset, record in iter_file_records(fs, args.path):
        if isinstance(record, codec.Put):
            text = (
                f"PUT id={record.xid} add_time={record.add_time} expire={record.expire_time} "
                f"errors={record.error_count} {len(record.data)} B {_preview(record.data)!r}"
            )
        elif isinstance(record, codec.ReadHead):
            text = f"READ_HEAD {record.xid}"
        elif isinstance(record, codec.ReadDone):
            text = f"READ_DONE {list(record.xids)}"
        elif isinstance(record, codec.Check):
            text = f"CHECK crc32={record.crc:#010x} over {record.length} B"
        else:
            text = f"UNKNOWN command {record.command} ({len(record.header)} header, {len(record.data)} data bytes)"
        console.print(f"{offset:>10}  {text}")
    return 0


def _cmd_put(args: argparse.Namespace) -> int:
    from engine.queue.queue import Queue

    items: list[Any] = (
        [d.encode() for d in args.data] if args.data else [line.rstrip(b"\n") for line in sys.stdin.buffer]
    )
    expire = None if args.expire_in is None else time.time() + args.expire_in
    with Queue.open(args.directory, args.name) as q:
        if q.recovery.repaired:
            console.print(f"recovered: {q.recovery.summary()}")
        ids = q.put_many([(item, expire) for item in items])
    console.print(f"put {len(ids)} item(s): ids {ids[0]}..{ids[-1]}" if ids else "nothing to put")
    return 0


def _cmd_get(args: argparse.Namespace) -> int:
    from engine.queue.queue import Queue

    reader = Queue.open_reader(args.directory, args.name, args.reader)
    try:
        got = 0
        while got < args.count:
            item = reader.get(timeout=args.timeout)
            if item is None:
                break
            sys.stdout.buffer.write(item.data + b"\n")
            if args.no_confirm:
                reader.abort(item.id)
            else:
                reader.confirm(item.id)
            got += 1
    finally:
        reader.close()
    return 0 if got else 3


def _cmd_repair(args: argparse.Namespace) -> int:
    report = repair(default_fs(), args.directory, args.name)
    if not report.repaired:
        console.print(f"queue {args.name}: nothing to repair")
        return 0
    for action in report.actions:
        console.print(f"repaired: {action}")
    return 0


def register(subparsers: Any) -> None:
    """Add ``engine queue`` and its sub-commands."""
    parser = subparsers.add_parser("queue", help="persistent multi-reader queues (libkestrel journals)")
    sub = parser.add_subparsers(dest="queue_command", metavar="ACTION")
    sub.required = True

    p = sub.add_parser("stats", help="per reader: items, open reads, oldest age; files on disk")
    p.add_argument("directory")
    p.add_argument("name")
    p.set_defaults(func=_cmd_stats)

    p = sub.add_parser("dump", help="records of a journal FILE, or items of queue NAME in DIR")
    p.add_argument("path", help="a writer/reader file, or the queue directory")
    p.add_argument("name", nargs="?", help="queue name (when PATH is a directory)")
    p.add_argument("--limit", type=int, default=None)
    p.set_defaults(func=_cmd_dump)

    p = sub.add_parser("put", help="add items (arguments, or one per stdin line)")
    p.add_argument("directory")
    p.add_argument("name")
    p.add_argument("data", nargs="*")
    p.add_argument("--expire-in", type=float, default=None, metavar="SECONDS")
    p.set_defaults(func=_cmd_put)

    p = sub.add_parser("get", help="take items (printed one per line) as a reader")
    p.add_argument("directory")
    p.add_argument("name")
    p.add_argument("--reader", default="")
    p.add_argument("--count", type=int, default=1)
    p.add_argument("--timeout", type=float, default=0.0)
    p.add_argument("--no-confirm", action="store_true", help="abort instead of confirming (peek)")
    p.set_defaults(func=_cmd_get)

    p = sub.add_parser("repair", help="make a damaged queue openable; reports what it dropped")
    p.add_argument("directory")
    p.add_argument("name")
    p.set_defaults(func=_cmd_repair)
