"""``engine streams serve | dump | extract``: the original journald, journal-dump
and journal-read programs."""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
from types import FrameType

from engine.fs import atomic_write, default_fs, make_dirs
from engine.streams.journal import DEFAULT_SYNC_DELAY, StreamJournal
from engine.streams.reader import Event, JournalScan
from engine.streams.server import DEFAULT_IDLE_TIMEOUT, DEFAULT_MAX_CONNECTIONS, JournalServer
from engine.terminal import terminal_console

console = terminal_console()
err_console = terminal_console(stderr=True)

_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}


def parse_size(text: str) -> int:
    """``65536``, ``64k``, ``16M``, ``1G`` -> bytes."""
    match = re.fullmatch(r"\s*(\d+)\s*([kmgKMG]?)i?[bB]?\s*", text)
    if not match:
        raise argparse.ArgumentTypeError(f"not a size: {text!r}")
    return int(match.group(1)) * _UNITS[match.group(2).lower()]


def _cmd_serve(args: argparse.Namespace) -> int:
    journal = StreamJournal.open(
        args.file,
        size=args.size,
        reset=args.reset,
        page_size=args.page_size,
        sync_delay=args.delay_ms / 1000.0,
    )
    if journal.recovery.repaired:
        err_console.print(f"engine streams serve: recovered: {journal.recovery.summary()}")
    try:
        server = JournalServer(
            args.socket,
            journal,
            mode=int(args.mode, 8) if args.mode else None,
            max_connections=args.max_connections,
            idle_timeout=args.idle_timeout if args.idle_timeout > 0 else None,
        )
    except BaseException:
        journal.close()  # another server holds the socket, say: leave its socket alone
        raise

    def _stop(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, _stop)
    err_console.print(
        f"engine streams serve: {args.file} ({journal.size} bytes, page {journal.page_size}) on {args.socket}"
    )
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        server.remove_socket()
        journal.close()
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


def _unreadable(command: str, path: str) -> bool:
    """Print why ``path`` is not a journal file one can read (missing, a
    directory, a name the OS refuses to open) and return True; else False."""
    if not os.path.exists(path):
        problem = "no such file"
    elif os.path.isdir(path):
        problem = "is a directory, not a journal file"
    else:
        try:
            with open(path, "rb"):
                return False
        except OSError as exc:
            problem = exc.strerror or str(exc)
    err_console.print(f"engine streams {command}: {path}: {problem}", markup=False)
    return True


def _cmd_dump(args: argparse.Namespace) -> int:
    if _unreadable("dump", args.file):
        return 2
    scan = JournalScan(args.file)
    sys.stdout.flush()
    out = sys.stdout.buffer
    for event in scan:
        out.write(_dump_line(event, raw=args.raw) + b"\n")
    out.flush()
    assert scan.end is not None
    if not scan.end.clean:
        err_console.print(f"engine streams dump: {args.file}: stopped at offset {scan.end.position}: {scan.end.reason}")
    for note in scan.anomalies:
        err_console.print(f"engine streams dump: {args.file}: {note}")
    return 0


def _safe_name(ident: bytes) -> str:
    text = ident.decode("utf-8", "replace")
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text)[:80] or "stream"


def _cmd_extract(args: argparse.Namespace) -> int:
    prog = list(args.prog)
    # argparse's REMAINDER also swallows a trailing "--out DIR": take it back.
    while prog and prog[0] != "--" and prog[0].startswith("--out"):
        if prog[0] == "--out" and len(prog) > 1:
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
    if _unreadable("extract", args.file):
        return 2
    fs = default_fs()
    if args.out:
        make_dirs(fs, args.out)
    scan = JournalScan(args.file)
    status = 0
    count = 0
    for stream in scan.streams():
        if not stream.complete:
            continue
        count += 1
        if args.out:
            name = f"{stream.number:010d}-{stream.start_offset}-{_safe_name(stream.ident)}"
            atomic_write(fs, os.path.join(args.out, name), stream.data)
            console.print(f"{name}: {len(stream.data)} bytes")
        else:
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
            argv = [*prog, os.fsdecode(ident), str(stream.start_offset)]
            result = subprocess.run(argv, input=stream.data, check=False)
            if result.returncode != 0:
                err_console.print(
                    f"engine streams extract: {argv[0]} exited {result.returncode} for stream {stream.number}"
                )
                status = 1
    assert scan.end is not None
    if not scan.end.clean:
        err_console.print(
            f"engine streams extract: {args.file}: stopped at offset {scan.end.position}: {scan.end.reason}"
        )
    err_console.print(f"engine streams extract: {count} complete stream(s)")
    return status


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``engine streams ...``.

    Placeholders name what they stand for in capitals (``PATH``, ``DIR``,
    ``SIZE``, ``SECONDS``); every option says its unit and default.
    """
    top = subparsers.add_parser("streams", help="journald stream journals: serve, dump, extract")
    sub = top.add_subparsers(dest="streams_command", metavar="ACTION")
    sub.required = True

    serve = sub.add_parser("serve", help="serve the journald socket protocol on SOCKET into the journal PATH")
    serve.add_argument("socket", metavar="SOCKET",
                       help="Unix socket path to listen on; a stale socket file is replaced, one a live "
                       "server listens on is refused")
    serve.add_argument("file", metavar="PATH", help="the journal file (created if missing)")
    serve.add_argument("--size", type=parse_size, default=None, metavar="SIZE",
                       help="size of a new journal in bytes, or with a unit (64k, 16M, 1G)")
    serve.add_argument("--page-size", type=int, default=None, metavar="BYTES",
                       help="page size of a new journal in bytes (default: the file system's block size)")
    serve.add_argument(
        "--delay-ms",
        type=float,
        default=DEFAULT_SYNC_DELAY * 1000,
        metavar="MILLISECONDS",
        help=f"fsync delay while other streams are open, in milliseconds (default {DEFAULT_SYNC_DELAY * 1000:g})",
    )
    serve.add_argument(
        "--reset", action="store_true", help="start the journal over (the original journald server's behaviour)"
    )
    serve.add_argument("--mode", default=None, metavar="OCTAL",
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
        type=float,
        default=DEFAULT_IDLE_TIMEOUT,
        metavar="SECONDS",
        help=f"seconds a client may send nothing before its stream is aborted (0: never; "
        f"default {DEFAULT_IDLE_TIMEOUT:g})",
    )
    serve.set_defaults(func=_cmd_serve)

    dump = sub.add_parser("dump", help="one line per record event (journal-dump)")
    dump.add_argument("file", metavar="PATH", help="the journal file to read")
    dump.add_argument("--raw", action="store_true",
                      help="write identifiers as the bytes in the file (NUL bytes included), as the original "
                      "journal-dump does; default: control and non-UTF-8 bytes as \\xNN escapes")
    dump.set_defaults(func=_cmd_dump)

    extract = sub.add_parser("extract", help="write out or pipe each complete stream (journal-read)")
    extract.add_argument("file", metavar="PATH", help="the journal file to read")
    extract.add_argument("--out", metavar="DIR", default=None,
                         help="write each complete stream to a file in DIR (created if missing)")
    extract.add_argument(
        "prog",
        nargs=argparse.REMAINDER,
        metavar="-- PROG ARGS",
        help="run PROG ARGS once per complete stream: the stream on stdin, its identifier (cut at a NUL "
        "byte, as the original journal-read passes it) and start offset as two more arguments",
    )
    extract.set_defaults(func=_cmd_extract)
