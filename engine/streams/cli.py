"""``engine streams serve | dump | list | stats | extract``: the original
journald, journal-dump and journal-read programs, and two reports.

``--json`` (dump, list, stats, extract) prints JSON instead of text: one line
per event / stream (JSON Lines) or one document (stats), with the keys the
guide's table lists (``docs/guide/streams.md``)."""

from __future__ import annotations

import argparse
import errno
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from types import FrameType
from typing import cast

from engine.clireport import (
    add_json_option,
    bytes_fields,
    human_bytes,
    human_size,
    parse_duration_ns,
    parse_port,
    print_json,
)
from engine.fs import atomic_write, default_fs, make_dirs
from engine.streams.journal import DEFAULT_SYNC_DELAY, StreamJournal
from engine.streams.reader import Event, JournalScan, StreamData
from engine.streams.server import DEFAULT_IDLE_TIMEOUT, DEFAULT_MAX_CONNECTIONS, JournalServer, check_socket_free
from engine.terminal import terminal_console

console = terminal_console()
err_console = terminal_console(stderr=True)

_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}


def parse_size(text: str) -> int:
    """``65536``, ``64k``, ``16M``, ``1G`` -> bytes."""
    match = re.fullmatch(r"\s*(\d+)\s*([kmgKMG]?)i?[bB]?\s*", text)
    if not match:
        raise argparse.ArgumentTypeError(f"--size: {text!r} is not a size (bytes, or with a unit: 64k, 16M, 1G)")
    return int(match.group(1)) * _UNITS[match.group(2).lower()]


def parse_delay_ms(text: str) -> float:
    """``--delay-ms``: a plain number is milliseconds (as the option's name
    says); one with a unit (``10ms``, ``0.01s``) is read as written."""
    try:
        value = float(text)
    except ValueError:
        return parse_duration_ns(text, "--delay-ms") / 1e6
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"--delay-ms: {text!r} is not a delay (milliseconds, 0 or more)")
    return value


def parse_idle_timeout(text: str) -> float | None:
    """``--idle-timeout``: seconds, or a duration with a unit (``90s``, ``2m``);
    0 means never (None)."""
    ns = parse_duration_ns(text, "--idle-timeout")
    return ns / 1e9 if ns else None


def parse_mode(text: str) -> int:
    """``--mode``: socket file permissions in octal (``660``, ``0o660``)."""
    try:
        mode = int(text.removeprefix("0o"), 8)
    except ValueError:
        mode = -1
    if not 0 <= mode <= 0o7777:
        raise argparse.ArgumentTypeError(f"--mode: {text!r} is not octal permissions (like 660)")
    return mode


def _cmd_serve(args: argparse.Namespace) -> int:
    if args.size is None and not os.path.exists(args.file):
        err_console.print(f"engine streams serve: {args.file}: no such journal; give --size BYTES to create it")
        return 2
    check_socket_free(args.socket)  # a live server there: refuse before creating the journal
    metrics = live = None
    if args.metrics_port is not None:  # a bad --metrics-host too: refused before any file is made
        from engine.metrics import LiveCollector, serve_metrics

        live = LiveCollector()
        metrics = serve_metrics(live, port=args.metrics_port, host=args.metrics_host)
    try:
        journal = StreamJournal.open(
            args.file,
            size=args.size,
            reset=args.reset,
            page_size=args.page_size,
            sync_delay=args.delay_ms / 1000.0,
        )
    except BaseException:
        if metrics is not None:
            metrics.stop()
        raise
    if journal.recovery.repaired:
        err_console.print(f"engine streams serve: recovered: {journal.recovery.summary()}")
    try:
        server = JournalServer(
            args.socket,
            journal,
            mode=args.mode,
            max_connections=args.max_connections,
            idle_timeout=args.idle_timeout,
        )
    except BaseException:
        journal.close()  # another server holds the socket, say: leave its socket alone
        if metrics is not None:
            metrics.stop()
        raise

    if live is not None and metrics is not None:
        live.watch_server(args.socket, server)
        live.watch_store(args.file, journal)
        err_console.print(f"engine streams serve: metrics at {metrics.url}")

    def _stop(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, _stop)
    err_console.print(
        f"engine streams serve: {args.file} ({human_bytes(journal.size)}, page {human_bytes(journal.page_size)}) "
        f"on {args.socket}"
    )
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        if metrics is not None:
            metrics.stop()
        server.stop()
        journal.close()
    stats = server.stats()
    err_console.print(
        "engine streams serve: stopped: "
        + ", ".join(f"{stats[k]} {k.replace('_', ' ')}" for k in ("committed", "aborted", "rejected", "refused",
                                                                  "timed_out"))
    )
    return 0


def _escape_ident(ident: bytes) -> str:
    """``ident`` for a terminal: UTF-8 text as is, other bytes and control
    characters (a NUL, say) as ``\\xNN`` escapes."""
    text = ident.decode("utf-8", "backslashreplace")
    return "".join(c if c.isprintable() else f"\\x{ord(c):02x}" if ord(c) < 0x100 else c.encode(
        "unicode_escape").decode("ascii") for c in text)


def _dump_line(event: Event, *, raw: bool = False) -> bytes:
    """One ``journal-dump`` line (without the newline); ``raw`` keeps the
    identifier's bytes as they are in the file (NUL bytes included), as the
    original journal-dump writes them."""
    prefix = f"stream {event.stream:>10} record {event.record:>10} offset {event.offset:>10} "
    if event.kind == "init":
        ident = event.ident if raw else _escape_ident(event.ident).encode()
        return f"{prefix}init ident({len(event.ident)})='".encode() + ident + b"'"
    if event.kind == "append":
        return (prefix + f"append bytes {len(event.data)}").encode()
    if event.kind == "unfinished":
        return (prefix + "open (no end before the end of the journal)").encode()
    return (prefix + event.kind).encode()


def _event_json(event: Event) -> dict[str, object]:
    """One ``dump --json`` line: the event's numbers, the identifier as text and
    hex (:func:`bytes_fields`), the data's length (not the data)."""
    return {
        "event": event.kind,
        "stream": event.stream,
        "record": event.record,
        "offset": event.offset,
        "position": event.position if event.position >= 0 else None,
        "global_record": event.global_record if event.global_record >= 0 else None,
        **bytes_fields("ident", event.ident),
        "data_bytes": len(event.data) if event.kind == "append" else None,
    }


def _check_readable(path: str) -> None:
    """Raise the OSError the engine command line reports (one line, exit 1) when
    ``path`` is not a journal file one can read: missing, a directory, a name
    the OS refuses to open."""
    if os.path.isdir(path):
        raise IsADirectoryError(errno.EISDIR, "is a directory, not a journal file", path)
    with open(path, "rb"):
        pass


def _lap_note(scan: JournalScan) -> str:
    """What this lap holds, in words: whether the journal wrapped (and so
    evicted every stream that ended before the lap began) and which stream
    numbers inside the lap's range have no record in it."""
    assert scan.header is not None
    if scan.wrapped:
        text = (f"wrapped: this lap starts at global record {scan.header.first_global}; streams that ended "
                "before it were overwritten (the journal is a ring)")
    else:
        text = "not wrapped"
    absent = scan.absent_streams()
    if absent:
        shown = ", ".join(map(str, absent[:10])) + (", ..." if len(absent) > 10 else "")
        text += (f"; {len(absent)} stream number(s) between the lowest and highest here have no record in this "
                 f"lap: {shown} (ended before the wrap, aborted before writing, or still buffered by a live "
                 "writer)")
    return text


def _report_end(command: str, scan: JournalScan) -> None:
    """The end of a scan that was not clean, its anomalies, and the streams a
    wrap evicted from between the ones listed, on stderr."""
    assert scan.end is not None
    if scan.wrapped and scan.absent_streams():
        err_console.print(f"engine streams {command}: {scan.path}: {_lap_note(scan)}")
    if not scan.end.clean:
        err_console.print(
            f"engine streams {command}: {scan.path}: stopped at offset {scan.end.position}: {scan.end.reason}"
        )
    for note in scan.anomalies:
        err_console.print(f"engine streams {command}: {scan.path}: {note}")


def _cmd_dump(args: argparse.Namespace) -> int:
    _check_readable(args.file)
    with StreamJournal.open_reader(args.file) as reader, reader.events() as scan:
        if args.json:
            for event in scan:
                print_json(_event_json(event))
        else:
            sys.stdout.flush()
            out = sys.stdout.buffer
            for event in scan:
                out.write(_dump_line(event, raw=args.raw) + b"\n")
            out.flush()
    _report_end("dump", scan)
    return 0


def _stream_rows(scan: JournalScan) -> Iterator[dict[str, object]]:
    """One row per stream (complete, aborted, or left open at the end), in the
    order their ends are read, from the events: no stream data is kept."""
    seen: dict[int, dict[str, object]] = {}
    for event in scan:
        if event.kind == "init":
            seen[event.stream] = {
                "stream": event.stream,
                "status": "open",
                **bytes_fields("ident", event.ident),
                "start_offset": event.offset,
                "data_bytes": 0,
                "records": 0,
                "position": event.position,
            }
            continue
        row = seen.get(event.stream)
        if row is None:
            continue
        if event.kind == "append":
            row["data_bytes"] = cast(int, row["data_bytes"]) + len(event.data)
            row["records"] = cast(int, row["records"]) + 1
        elif event.kind in ("end", "abort", "unfinished"):
            row["status"] = {"end": "complete", "abort": "aborted"}.get(event.kind, "open")
            yield seen.pop(event.stream)


def _cmd_list(args: argparse.Namespace) -> int:
    _check_readable(args.file)
    with StreamJournal.open_reader(args.file) as reader, reader.events() as scan:
        for row in _stream_rows(scan):
            if args.status and row["status"] != args.status:
                continue
            if args.json:
                print_json(row)
                continue
            ident = _escape_ident(bytes.fromhex(cast(str, row["ident_hex"])))
            size = cast(int, row["data_bytes"])
            console.print(
                f"stream {row['stream']:>10} {row['status']:<8} {human_bytes(size):>10} "
                f"from offset {row['start_offset']} at position {row['position']}  {ident}"
            )
    _report_end("list", scan)
    return 0


def _cmd_stats(args: argparse.Namespace) -> int:
    _check_readable(args.file)
    with StreamJournal.open_reader(args.file) as reader, reader.events() as scan:
        stats = scan.stats()
    if args.json:
        print_json({"path": args.file, **stats})
        return 0
    page = cast(int, stats["page_size"])
    size = cast(int, stats["file_size_bytes"])
    rows = [
        ("journal", args.file),
        ("format", f"journald version {stats['version']}"),
        ("file size", f"{human_bytes(size)} ({size} bytes, {size // page} pages of {human_bytes(page)})"),
        ("records", f"{stats['records']} (the next global record is {stats['next_global_record']})"),
        ("streams", f"{stats['streams_complete']} complete, {stats['streams_aborted']} aborted, "
                    f"{stats['streams_open']} open"),
        ("data", human_size(cast(int, stats["data_bytes"]))),
        ("end", f"offset {stats['end_position']}: "
                + ("clean" if stats["clean_end"] else f"torn: {stats['end_reason']}")),
        ("anomalies", str(stats["anomalies"])),
        ("lap", _lap_note(scan)),
    ]
    for name, value in rows:
        console.print(f"{name + ':':<11} {value}")
    for note in scan.anomalies:
        console.print(f"  {note}")
    return 0


def _safe_name(ident: bytes) -> str:
    text = ident.decode("utf-8", "replace")
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text)[:80] or "stream"


def _cmd_extract(args: argparse.Namespace) -> int:
    prog = list(args.prog)
    # argparse's REMAINDER also swallows trailing options: take --out and --json back.
    while prog and prog[0] != "--" and (prog[0].startswith("--out") or prog[0] == "--json"):
        if prog[0] == "--json":
            args.json, prog = True, prog[1:]
        elif prog[0] == "--out" and len(prog) > 1:
            args.out, prog = prog[1], prog[2:]
        elif prog[0].startswith("--out="):
            args.out, prog = prog[0][len("--out=") :], prog[1:]
        else:
            break
    if prog and prog[0] == "--":
        prog = prog[1:]
    if bool(prog) == bool(args.out):
        err_console.print("engine streams extract: give either --out DIR or -- PROG ARGS")
        return 2
    _check_readable(args.file)
    fs = default_fs()
    if args.out:
        make_dirs(fs, args.out)
    status = 0
    count = 0
    with StreamJournal.open_reader(args.file) as reader, reader.events() as scan:
        for stream in scan.streams():
            if not stream.complete:
                continue
            count += 1
            row: dict[str, object] = {
                "stream": stream.number,
                **bytes_fields("ident", stream.ident),
                "start_offset": stream.start_offset,
                "data_bytes": len(stream.data),
            }
            if args.out:
                name = f"{stream.number:010d}-{stream.start_offset}-{_safe_name(stream.ident)}"
                path = os.path.join(args.out, name)
                atomic_write(fs, path, stream.data)
                row["file"] = path
                if not args.json:
                    console.print(f"{name}: {human_size(len(stream.data))}")
            else:
                returncode = _run_prog(prog, stream)
                row["exit_code"] = returncode
                if returncode != 0:
                    err_console.print(
                        f"engine streams extract: {prog[0]} exited {returncode} for stream {stream.number}"
                    )
                    status = 1
            if args.json:
                print_json(row)
    _report_end("extract", scan)
    err_console.print(f"engine streams extract: {count} complete stream(s)")
    return status


def _run_prog(prog: list[str], stream: StreamData) -> int:
    """Run ``prog IDENT OFFSET`` with the stream on stdin; its exit code."""
    ident = stream.ident
    if b"\0" in ident:
        # An argument cannot hold a NUL byte: pass what the original
        # journal-read passes (a C string), the identifier cut at the NUL.
        ident = ident[: ident.index(b"\0")]
        err_console.print(
            f"engine streams extract: stream {stream.number}: its identifier holds a NUL byte; "
            f"passing the part before it ({_escape_ident(ident)!r})",
            markup=False,
        )
    sys.stdout.flush()  # our lines before the program's
    result = subprocess.run([*prog, os.fsdecode(ident), str(stream.start_offset)], input=stream.data, check=False)
    return result.returncode


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``engine streams ...``.

    Placeholders name what they stand for in capitals (``PATH``, ``DIR``,
    ``BYTES``, ``SECONDS``); every option says its unit and default.
    """
    top = subparsers.add_parser("streams", help="journald stream journals: serve, dump, list, stats, extract")
    sub = top.add_subparsers(dest="streams_command", metavar="ACTION")
    sub.required = True

    serve = sub.add_parser("serve", help="serve the journald socket protocol on SOCKET into the journal PATH")
    serve.add_argument("socket", metavar="SOCKET",
                       help="Unix socket path to listen on; a stale socket file is replaced, one a live "
                       "server listens on is refused")
    serve.add_argument("file", metavar="PATH", help="the journal file (created if missing)")
    serve.add_argument("--size", type=parse_size, default=None, metavar="BYTES",
                       help="size of a new journal in bytes, or with a unit (64k, 16M, 1G)")
    serve.add_argument("--page-size", type=int, default=None, metavar="BYTES",
                       help="page size of a new journal in bytes (default: the file system's block size)")
    serve.add_argument(
        "--delay-ms",
        type=parse_delay_ms,
        default=DEFAULT_SYNC_DELAY * 1000,
        metavar="MILLISECONDS",
        help="fsync delay while other streams are open, in milliseconds (or with a unit: 10ms, 0.01s; "
        f"default {DEFAULT_SYNC_DELAY * 1000:g})",
    )
    serve.add_argument(
        "--reset", action="store_true", help="start the journal over (the original journald server's behaviour)"
    )
    serve.add_argument("--mode", type=parse_mode, default=None, metavar="OCTAL",
                       help="permissions of the socket file, octal (e.g. 660; default: from the umask)")
    serve.add_argument(
        "--max-connections",
        type=int,
        default=DEFAULT_MAX_CONNECTIONS,
        metavar="COUNT",
        help=f"connections served at once; more are answered 0 and closed (default {DEFAULT_MAX_CONNECTIONS})",
    )
    serve.add_argument(
        "--idle-timeout",
        type=parse_idle_timeout,
        default=DEFAULT_IDLE_TIMEOUT,
        metavar="SECONDS",
        help="seconds a client may send nothing before its stream is aborted, or with a unit (90s, 2m); "
        f"0: never (default {DEFAULT_IDLE_TIMEOUT:g})",
    )
    serve.add_argument("--metrics-port", type=parse_port, default=None, metavar="PORT",
                       help="serve Prometheus metrics (connections, requests, errors, fsync latency) at "
                       "http://HOST:PORT/metrics (default: none)")
    serve.add_argument("--metrics-host", default="127.0.0.1", metavar="HOST",
                       help="address of the metrics endpoint (default 127.0.0.1: this machine only)")
    serve.set_defaults(func=_cmd_serve)

    dump = sub.add_parser("dump", help="one line per record event (journal-dump)")
    dump.add_argument("file", metavar="PATH", help="the journal file to read")
    dump.add_argument("--raw", action="store_true",
                      help="write identifiers as the bytes in the file (NUL bytes included), as the original "
                      "journal-dump does; default: control and non-UTF-8 bytes as \\xNN escapes (--json always "
                      "gives ident_hex, the exact bytes)")
    add_json_option(dump)
    dump.set_defaults(func=_cmd_dump)

    listing = sub.add_parser("list", help="one line per stream: number, status, size, identifier")
    listing.add_argument("file", metavar="PATH", help="the journal file to read")
    listing.add_argument("--status", choices=("complete", "aborted", "open"), default=None, metavar="STATUS",
                         help="only the streams with this status: complete, aborted or open (default: all)")
    add_json_option(listing)
    listing.set_defaults(func=_cmd_list)

    stats = sub.add_parser("stats", help="header, record and stream counts, data size, where the journal ends")
    stats.add_argument("file", metavar="PATH", help="the journal file to read")
    add_json_option(stats)
    stats.set_defaults(func=_cmd_stats)

    extract = sub.add_parser("extract", help="write out or pipe each complete stream (journal-read)")
    extract.add_argument("file", metavar="PATH", help="the journal file to read")
    extract.add_argument("--out", metavar="DIR", default=None,
                         help="write each complete stream to a file in DIR (created if missing)")
    add_json_option(extract)
    extract.add_argument(
        "prog",
        nargs=argparse.REMAINDER,
        metavar="-- PROG ARGS",
        help="run PROG ARGS once per complete stream: the stream on stdin, its identifier (cut at a NUL "
        "byte, as the original journal-read passes it) and start offset as two more arguments",
    )
    extract.set_defaults(func=_cmd_extract)
