"""``engine queue ...``: stats, dump, put, get, repair.

Every command that prints a report or items takes ``--json``: ``stats``, ``put``
and ``repair`` print one JSON document, ``dump`` and ``get`` one per record or
item (JSON Lines).  The keys are stable and listed in docs/guide/queue.md; they
are the ones of ``Queue.stats()`` and ``Item`` (``add_time_ms``,
``expire_time_ms``, ``backlog_bytes``...).  Text output shows times as UTC dates
and sizes with their units.
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import time
from typing import Any

from rich.table import Table

from engine.clireport import (
    add_json_option,
    bytes_fields,
    human_bytes,
    human_duration_ns,
    human_time_ms,
    human_time_ns,
    parse_duration_ns,
    parse_instant_ns,
    print_json,
)
from engine.conventions import datetime_from_ns
from engine.fs import FileSystem, default_fs
from engine.queue import census, codec
from engine.queue.diagnose import iter_file_records, queue_names, queue_stats
from engine.queue.repair import repair
from engine.queue.segments import list_segments
from engine.terminal import terminal_console

console = terminal_console()


def _preview(data: bytes, width: int = 60) -> str:
    text = data[:width].decode("utf-8", "backslashreplace")
    return text + ("…" if len(data) > width else "")


def _seconds(option: str) -> Any:
    """An argparse ``type``: a duration as typed (``90s``, ``1h``, ``2.5``) in seconds."""
    return lambda text: parse_duration_ns(text, option) / 1e9


def _no_queue(fs: FileSystem, directory: str, name: str, command: str) -> bool:
    """Say so on stderr (a "not found" answer, exit 1) when ``directory`` holds no queue ``name``."""
    if list_segments(fs, directory, name):
        return False
    known = queue_names(fs, directory)
    there = f" (queues there: {', '.join(known)})" if known else " (no queue there)"
    print(f"engine queue {command}: no queue {name!r} in {directory}{there}", file=sys.stderr)
    return True


def put_json(put: codec.Put) -> dict[str, object]:
    """An item for ``--json`` (``dump``, ``get``): the fields of ``Item``, exact."""
    fields: dict[str, object] = {
        "id": put.xid,
        "add_time_ms": put.add_time,
        "expire_time_ms": put.expire_time,
        "error_count": put.error_count,
        "size_bytes": len(put.data),
    }
    return fields | bytes_fields("data", put.data)


def _put_text(put: codec.Put) -> str:
    expires = "never" if put.expire_time is None else human_time_ms(put.expire_time)
    return (
        f"added {human_time_ms(put.add_time)}, expires {expires}, errors {put.error_count}, "
        f"{human_bytes(len(put.data))} {_preview(put.data)!r}"
    )


def _cmd_stats(args: argparse.Namespace) -> int:
    fs = default_fs()
    if _no_queue(fs, args.directory, args.name, "stats"):
        return 1
    stats = queue_stats(fs, args.directory, args.name)
    readers = stats["readers"]
    file_rows = stats["files"]
    assert isinstance(readers, list) and isinstance(file_rows, list)
    if args.json:
        files = [{"path": path, "bytes": size, "first_id": first} for path, size, first in file_rows]
        print_json({**stats, "directory": args.directory, "files": files})
        return 0
    size = human_bytes(stats["journal_bytes"])  # type: ignore[arg-type]
    counts = f"{stats['journal_files']} writer file(s), {size}"
    title = f"queue {args.name} in {args.directory} — tail id {stats['tail_id']}, {counts}"
    table = Table(title=title)
    for column in ("reader", "head", "items", "backlog", "open reads", "done out of order", "oldest item's age"):
        table.add_column(column)
    for r in readers:
        age = r["oldest_age_s"]
        table.add_row(
            repr(r["reader"]),
            str(r["head"]),
            str(r["items"]),
            human_bytes(r["backlog_bytes"]),
            "n/a (not journaled)" if r["open_reads"] is None else str(r["open_reads"]),
            str(r["done_out_of_order"]),
            "-" if age is None else human_duration_ns(int(age * 1e9)),
        )
    console.print(table)
    files_table = Table(title="writer files")
    files_table.add_column("file")
    files_table.add_column("size", justify="right")
    files_table.add_column("first id", justify="right")
    for path, size, first in file_rows:
        files_table.add_row(path, human_bytes(size), "-" if first is None else str(first))
    console.print(files_table)
    return 0


def _cmd_dump(args: argparse.Namespace) -> int:
    fs = default_fs()
    if fs.isdir(args.path):
        if not args.name:
            print("engine queue dump: a directory needs a queue NAME", file=sys.stderr)
            return 1
        if _no_queue(fs, args.path, args.name, "dump"):
            return 1
        from engine.queue.cursor import JournalCursor, PollingSource

        source = PollingSource(fs, args.path, args.name, 0.001)
        cursor = JournalCursor(source, 0)
        shown = 0
        try:
            while args.limit is None or shown < args.limit:
                put = cursor.next()
                if put is None:
                    break
                if args.json:
                    print_json(put_json(put))
                else:
                    console.print(f"id {put.xid}: {_put_text(put)}")
                shown += 1
        finally:
            cursor.close()
        return 0
    side = census.side_file(os.path.basename(args.path))
    if side is not None and fs.exists(args.path):
        with fs.open(args.path) as handle:
            head = handle.read_at(0, codec.MAGIC_SIZE)
        if head not in (codec.WRITER_MAGIC, codec.READER_MAGIC):
            described = census.describe_side_file(fs, args.path, side[0])  # not a journal: what it is
            if args.json:
                print_json({"path": args.path, **described})
            else:
                for key, value in described.items():
                    console.print(f"{key}: {value}")
            return 0
    for shown, (offset, record) in enumerate(iter_file_records(fs, args.path)):
        if args.limit is not None and shown >= args.limit:
            break
        if args.json:
            print_json({"offset": offset} | _record_json(record))
        else:
            console.print(f"{offset:>10}  {_record_text(record)}")
    return 0


def _record_json(record: codec.Record) -> dict[str, object]:
    if isinstance(record, codec.Put):
        return {"record": "PUT"} | put_json(record)
    if isinstance(record, codec.ReadHead):
        return {"record": "READ_HEAD", "id": record.xid}
    if isinstance(record, codec.ReadDone):
        return {"record": "READ_DONE", "ids": list(record.xids)}
    if isinstance(record, codec.Check):
        return {"record": "CHECK", "crc32": record.crc, "covered_bytes": record.length}
    return {"record": "UNKNOWN", "command": record.command, "header_hex": record.header.hex()} | bytes_fields(
        "data", record.data
    )


def _record_text(record: codec.Record) -> str:
    if isinstance(record, codec.Put):
        return f"PUT id={record.xid} {_put_text(record)}"
    if isinstance(record, codec.ReadHead):
        return f"READ_HEAD {record.xid}"
    if isinstance(record, codec.ReadDone):
        return f"READ_DONE {list(record.xids)}"
    if isinstance(record, codec.Check):
        return f"CHECK crc32={record.crc:#010x} over {human_bytes(record.length)}"
    return f"UNKNOWN command {record.command} ({len(record.header)} header, {len(record.data)} data bytes)"


def _cmd_put(args: argparse.Namespace) -> int:
    from engine.queue.queue import Queue

    items: list[Any] = (
        [d.encode() for d in args.data] if args.data else [line.rstrip(b"\n") for line in sys.stdin.buffer]
    )
    expire: float | datetime.datetime | None = None
    if args.expire_in is not None:
        expire = time.time() + args.expire_in
    elif args.expire_at is not None:
        expire = datetime_from_ns(args.expire_at)  # exact to the microsecond (a float is not)
    with Queue.open(args.directory, args.name) as q:
        if q.recovery.repaired and not args.json:
            console.print(f"recovered: {q.recovery.summary()}")
        ids = q.put_many([(item, expire) for item in items])
        recovery = q.recovery.to_dict()
    if args.json:
        print_json({"queue": args.name, "directory": args.directory, "ids": ids, "recovery": recovery})
    else:
        console.print(f"put {len(ids)} item(s): ids {ids[0]}..{ids[-1]}" if ids else "nothing to put")
    return 0


def _cmd_get(args: argparse.Namespace) -> int:
    from engine.queue.queue import Queue

    fs = default_fs()
    if _no_queue(fs, args.directory, args.name, "get"):
        return 1
    reader = Queue.open_reader(args.directory, args.name, args.reader, fs=fs)
    try:
        got = 0
        while got < args.count:
            item = reader.get(timeout=args.timeout)
            if item is None:
                break
            if args.json:
                put = codec.Put(item.id, item.data, item.add_time_ms, item.expire_time_ms, item.error_count)
                print_json(put_json(put))
            else:
                sys.stdout.buffer.write(item.data + b"\n")
            if args.no_confirm:
                reader.abort(item.id)
            else:
                reader.confirm(item.id)
            got += 1
    finally:
        reader.close()
    return 0 if got else 3


def _cmd_readers(args: argparse.Namespace) -> int:
    """Each reader's lag, the files it pins, its last checkpoint and whether a live
    process holds it (JSON Lines with ``--json``: one line per reader)."""
    from engine.queue.pinning import readers_report

    fs = default_fs()
    if _no_queue(fs, args.directory, args.name, "readers"):
        return 1
    rows = readers_report(fs, args.directory, args.name, time.time)
    if args.json:
        for row in rows:
            print_json(row)
        return 0
    if not rows:
        console.print(f"queue {args.name} in {args.directory}: no reader")
        return 0
    now_ns = time.time_ns()
    table = Table(title=f"readers of queue {args.name} in {args.directory}")
    for column in ("reader", "lag", "oldest item's age", "pins", "last checkpoint", "holder"):
        table.add_column(column)
    for r in rows:
        age, share, stamp = r["oldest_age_s"], r["pinned_share"], r["last_checkpoint_ns"]
        pins = f"{r['pinned_files']} file(s), {human_bytes(r['pinned_bytes'])} ({share:.0%} of the journal)"
        when = "-" if stamp is None else f"{human_time_ns(stamp)} ({human_duration_ns(now_ns - stamp)} ago)"
        table.add_row(
            repr(r["reader"]),
            f"{r['items']} item(s), {human_bytes(r['backlog_bytes'])}",
            "-" if age is None else human_duration_ns(int(age * 1e9)),
            pins,
            when,
            _holder(r),
        )
    console.print(table)
    return 0


def _holder(row: dict[str, object]) -> str:
    """"held by pid N", "held" (the system does not say by whom) or "free"."""
    if not row["held"]:
        return "free"
    pids = row.get("holder_pids")
    if isinstance(pids, list) and pids:
        return "held by pid " + ", ".join(map(str, pids))
    return "held"


def _cmd_repair(args: argparse.Namespace) -> int:
    report = repair(default_fs(), args.directory, args.name)
    if args.json:
        print_json({"queue": args.name, "directory": args.directory} | report.to_dict())
        return 0
    if not report.repaired:
        console.print(f"queue {args.name}: nothing to repair")
        return 0
    for action in report.actions:
        console.print(f"repaired: {action}")
    return 0


def _queue_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("directory", metavar="DIR", help="the directory holding the queue's files")
    p.add_argument("name", metavar="NAME", help="the queue's name (its files' names start with NAME.)")


def register(subparsers: Any) -> None:
    """Add ``engine queue`` and its sub-commands."""
    parser = subparsers.add_parser("queue", help="persistent multi-reader queues (libkestrel journals)")
    sub = parser.add_subparsers(dest="queue_command", metavar="ACTION")
    sub.required = True

    p = sub.add_parser("stats", help="per reader: items, backlog, open reads, oldest age; files on disk")
    _queue_arguments(p)
    add_json_option(p)
    p.set_defaults(func=_cmd_stats)

    p = sub.add_parser("dump", help="records of a journal FILE, or items of queue NAME in DIR")
    p.add_argument("path", metavar="PATH", help="a writer or reader file, or the queue's directory")
    p.add_argument("name", nargs="?", metavar="NAME", help="the queue's name (when PATH is a directory)")
    p.add_argument("--limit", type=int, default=None, metavar="COUNT", help="show at most COUNT items or records")
    add_json_option(p)
    p.set_defaults(func=_cmd_dump)

    p = sub.add_parser("put", help="add items (arguments, or one per stdin line)")
    _queue_arguments(p)
    p.add_argument("data", nargs="*", metavar="DATA", help="the items, as text (none: one item per stdin line)")
    when = p.add_mutually_exclusive_group()
    when.add_argument(
        "--expire-in",
        type=_seconds("--expire-in"),
        default=None,
        metavar="SECONDS",
        help="the items expire after this long: seconds, or with a unit (90s, 15m, 1h, 7d)",
    )
    when.add_argument(
        "--expire-at",
        type=lambda text: parse_instant_ns(text, "--expire-at"),
        default=None,
        metavar="TIME",
        help="the items expire then: a date (2026-11-24T01:00, UTC unless it has an offset) or seconds since the epoch",
    )
    add_json_option(p)
    p.set_defaults(func=_cmd_put)

    p = sub.add_parser("get", help="take items (printed one per line) as a reader; exit status 3 if none came")
    _queue_arguments(p)
    p.add_argument("--reader", default="", metavar="NAME", help="the reader's name (default: the default reader '')")
    p.add_argument("--count", type=int, default=1, metavar="COUNT", help="take at most COUNT items (default 1)")
    p.add_argument(
        "--timeout",
        type=_seconds("--timeout"),
        default=0.0,
        metavar="SECONDS",
        help="how long to wait for each item: seconds, or with a unit (500ms, 90s); default 0, no wait",
    )
    p.add_argument("--no-confirm", action="store_true", help="abort instead of confirming (peek)")
    add_json_option(p)
    p.set_defaults(func=_cmd_get)

    p = sub.add_parser("readers", help="per reader: lag, journal files it pins, last checkpoint, held or free")
    _queue_arguments(p)
    add_json_option(p)
    p.set_defaults(func=_cmd_readers)

    p = sub.add_parser("repair", help="make a damaged queue openable; reports what it dropped")
    _queue_arguments(p)
    add_json_option(p)
    p.set_defaults(func=_cmd_repair)

    # engine queue serve: the Kestrel-compatible server (its options: engine/queue/kestrel/cli.py)
    from engine.queue.kestrel.cli import register_serve

    register_serve(sub)
