"""Kestrel's memcache text protocol: parsing requests and encoding replies, no I/O.

The server (:mod:`engine.queue.kestrel.server`) reads a line, asks
:func:`parse_line` what it is, reads the data block of a ``set``, and writes what
the ``encode_*`` functions return.  Everything here is pure so that it can be
tested byte for byte.

Requests (Kestrel 2's memcache dialect, its ``docs/guide.md``; a line ends with
``\\r\\n``, a bare ``\\n`` is accepted too; commands in any case):

* ``set <queue> <flags> <expiry> <bytes> [noreply]`` then ``<bytes>`` of data and
  ``\\r\\n``.  ``flags`` is ignored (0 is echoed back by ``get``).  ``expiry``:
  0 never, under 1,000,000 seconds from now, else seconds since the epoch.
* ``get <queue>[/option...]`` (or ``gets``): ``/t=<ms>``, ``/open``, ``/close``,
  ``/abort``, ``/peek``; ``<queue>`` may be ``<parent>+<reader>`` (a fanout reader).
* ``monitor <queue> <seconds> [max-items]`` and ``confirm <queue> <count>``:
  Kestrel 2's streaming read and the confirmation of what it opened.
* ``delete <queue>``, ``flush <queue>``, ``flush_all``, ``flush_expired <queue>``,
  ``flush_all_expired``, ``stats`` (and memcached's ``stats items`` and
  ``stats cachedump <slab> <limit>``, for ``memcdump``), ``dump_stats [<queue>...]``,
  ``status [<new status>]``, ``version``, ``reload``, ``shutdown``, ``quit``.

A request that cannot be understood raises :class:`ProtocolError` carrying the
reply to send (``ERROR`` for an unknown command, ``CLIENT_ERROR <why>`` for a
bad one) and whether the stream is still in step (a ``set`` whose data length
is unreadable is not: the connection closes).  Every request and every error
carries ``command``: the name the server counts it under (its metrics).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import ClassVar

from engine.errors import ConfigError
from engine.queue import naming

#: Expiry values below this are relative seconds; from it on, seconds since the epoch.
RELATIVE_EXPIRY_LIMIT = 1_000_000
#: Longest queue name (with its ``+reader``) accepted, in bytes: memcache's key limit.
MAX_KEY_BYTES = 250
#: Longest ``/t=`` wait accepted, in milliseconds (a day): a larger one is a typo.
MAX_WAIT_MS = 86_400_000

#: Every command the server knows, as its metrics name them (``gets`` is ``get``).
COMMANDS = (
    "set", "get", "monitor", "confirm", "delete", "flush", "flush_all", "flush_expired", "flush_all_expired",
    "stats", "dump_stats", "status", "version", "reload", "shutdown", "quit",
)
#: The server statuses ``status <name>`` may set (Kestrel's, upper case as it prints
#: them); ``DOWN`` exists only while a server stops.
STATUSES = ("UP", "WRITEAVOID", "READONLY", "QUIESCENT")

CRLF = b"\r\n"
STORED = b"STORED\r\n"
NOT_STORED = b"NOT_STORED\r\n"
DELETED = b"DELETED\r\n"
END = b"END\r\n"
ERROR = b"ERROR\r\n"
#: ``flush_all``'s reply: memcache's (Kestrel said ``Flushed all queues.``, which
#: libmemcached's ``memcflush`` reports as a failure and pymemcache's
#: ``flush_all()`` as False).
FLUSHED_ALL = b"OK\r\n"
RELOADED = b"Reloaded config.\r\n"


class ProtocolError(Exception):
    """A request the server refuses: ``reply`` is what to send back; ``fatal``:
    the stream is out of step (or the client misbehaved): close the connection."""

    def __init__(self, reply: bytes, *, fatal: bool = False, skip: int = 0) -> None:
        super().__init__(reply.decode("ascii", "replace").strip())
        self.reply = reply
        self.fatal = fatal
        #: Bytes to read and drop before replying: the data block of a refused ``set``.
        self.skip = skip
        #: The command refused (one of :data:`COMMANDS`, or "unknown").
        self.command = "unknown"


def client_error(why: str, *, fatal: bool = False, skip: int = 0) -> ProtocolError:
    """A ``CLIENT_ERROR <why>`` reply (one line: control characters removed)."""
    text = "".join(c if c.isprintable() else "?" for c in why)
    return ProtocolError(b"CLIENT_ERROR " + text.encode("utf-8", "replace") + CRLF, fatal=fatal, skip=skip)


def server_error(why: str) -> bytes:
    """A ``SERVER_ERROR <why>`` reply line (the request was valid; the server failed)."""
    text = "".join(c if c.isprintable() else "?" for c in why)
    return b"SERVER_ERROR " + text.encode("utf-8", "replace") + CRLF


@dataclass(frozen=True)
class Target:
    """A queue as a client names it: ``queue`` and the engine reader that serves
    it (``""``, the default reader, for ``<queue>``; ``r`` for ``<queue>+r``)."""

    queue: str
    reader: str

    @property
    def key(self) -> str:
        """The name as Kestrel shows it (``queue`` or ``queue+reader``)."""
        return f"{self.queue}+{self.reader}" if self.reader else self.queue


@dataclass(frozen=True)
class SetRequest:
    command: ClassVar[str] = "set"
    target: Target
    expiry: int
    size: int
    noreply: bool


@dataclass(frozen=True)
class GetRequest:
    command: ClassVar[str] = "get"
    target: Target
    #: The key as the client sent it, options included: echoed in ``VALUE``
    #: (memcache clients match the reply's key against the one they asked for).
    key: str
    #: ``/t=``: how long to wait for an item, in ms (None: do not wait).
    wait_ms: int | None = None
    open: bool = False
    close: bool = False
    abort: bool = False
    peek: bool = False


@dataclass(frozen=True)
class MonitorRequest:
    """``monitor <queue> <seconds> [max-items]``: open each item that comes within
    ``seconds``, up to ``max_items`` (None: as many as the open-read limit allows)."""

    command: ClassVar[str] = "monitor"
    target: Target
    seconds: int
    max_items: int | None


@dataclass(frozen=True)
class ConfirmRequest:
    """``confirm <queue> <count>``: confirm the ``count`` oldest open reads."""

    command: ClassVar[str] = "confirm"
    target: Target
    count: int


@dataclass(frozen=True)
class StatsRequest:
    """``stats`` (``group`` ""), memcached's ``stats items`` and ``stats cachedump
    <slab> <limit>`` (the queues as items of slab 1, for ``memcdump``)."""

    command: ClassVar[str] = "stats"
    group: str = ""
    slab: int = 0
    limit: int = 0


@dataclass(frozen=True)
class DumpStatsRequest:
    """``dump_stats [<queue>...]``: every queue's figures grouped (or those named)."""

    command: ClassVar[str] = "dump_stats"
    targets: tuple[Target, ...] = ()


@dataclass(frozen=True)
class StatusRequest:
    """``status`` (``new`` None: say it) or ``status <new>`` (one of :data:`STATUSES`)."""

    command: ClassVar[str] = "status"
    new: str | None = None


@dataclass(frozen=True)
class SimpleRequest:
    """``delete``, ``flush``, ``flush_expired`` (with a target), ``flush_all``,
    ``flush_all_expired``, ``version``, ``reload``, ``shutdown``, ``quit`` (without)."""

    command: str
    target: Target | None = None
    noreply: bool = False


Request = (
    SetRequest | GetRequest | MonitorRequest | ConfirmRequest | StatsRequest | DumpStatsRequest | StatusRequest
    | SimpleRequest
)


@functools.lru_cache(maxsize=4096)
def parse_target(name: bytes) -> Target:
    """Check a client's queue name and split off its fanout reader.

    Refused (``CLIENT_ERROR``): not UTF-8, control characters, over
    :data:`MAX_KEY_BYTES`, more than one ``+``, and anything the queue's own file
    naming refuses (``/``, ``~``, NUL, ``.`` or ``..``, names colliding with
    another queue's files): a name never leads outside the server's directory.
    """
    if not name:
        raise client_error("a queue name is required")
    if len(name) > MAX_KEY_BYTES:
        raise client_error(f"queue name of {len(name)} bytes is too long (at most {MAX_KEY_BYTES})")
    try:
        text = name.decode("utf-8")
    except UnicodeDecodeError:
        raise client_error("queue name is not UTF-8") from None
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in text):
        raise client_error("queue name contains control characters")
    queue, plus, reader = text.partition("+")
    if plus and (not reader or "+" in reader):
        raise client_error(f"bad fanout name {text!r}: use <queue>+<reader>")
    try:
        naming.check_queue_name(queue)
        naming.check_reader_name(queue, reader)
    except ConfigError as exc:
        raise client_error(str(exc)) from None
    return Target(queue, reader)


def _number(token: bytes, what: str, *, fatal: bool = False) -> int:
    if not token.isdigit() or len(token) > 19:
        raise client_error(f"bad {what} {token[:32]!r}: a non-negative integer", fatal=fatal)
    return int(token)


@functools.lru_cache(maxsize=4096)
def parse_get_options(key: bytes) -> GetRequest:
    """``<queue>[/t=<ms>][/open][/close][/abort][/peek]`` (any order), checked as
    Kestrel does: ``/peek`` and ``/abort`` combine with neither ``/open`` nor
    ``/close`` nor each other.  Unknown options are refused (Kestrel ignored them)."""
    name, *options = key.split(b"/")
    target = parse_target(name)
    wait: int | None = None
    flags = {"open": False, "close": False, "abort": False, "peek": False}
    for option in options:
        if option.startswith(b"t="):
            wait = _number(option[2:], "/t= wait (milliseconds)")
            if wait > MAX_WAIT_MS:
                raise client_error(f"/t= wait of {wait} ms is over the limit of {MAX_WAIT_MS} ms")
        elif option.decode("ascii", "replace") in flags:
            flags[option.decode("ascii")] = True
        else:
            raise client_error(f"unknown get option {option[:32].decode('utf-8', 'replace')!r}")
    peek, abort = flags["peek"], flags["abort"]
    if ((peek or abort) and (flags["open"] or flags["close"])) or (peek and abort):
        raise client_error("/peek and /abort combine with neither /open nor /close nor each other")
    return GetRequest(target, key.decode("utf-8"), wait, flags["open"], flags["close"], abort, peek)


def parse_line(line: bytes) -> Request:
    """One request line (its ``\\r\\n`` or ``\\n`` included or not).  Commands are
    case-insensitive, as in Kestrel."""
    tokens = line.rstrip(b"\r\n").split()
    if not tokens:
        raise ProtocolError(ERROR)
    command = tokens[0].lower()
    try:
        if command == b"get" and len(tokens) == 2:  # the common case first
            return parse_get_options(tokens[1])
        return _parse(command, tokens[1:])
    except ProtocolError as exc:
        name = "get" if command == b"gets" else command.decode("ascii", "replace")
        exc.command = name if name in COMMANDS else "unknown"
        raise


def _parse(command: bytes, args: list[bytes]) -> Request:
    if command == b"set":
        # The data length is needed to stay in step: a line without a readable one
        # cannot be followed, so the connection closes.
        if len(args) not in (4, 5) or (len(args) == 5 and args[4] != b"noreply"):
            raise client_error("usage: set <queue> <flags> <expiry> <bytes> [noreply]", fatal=True)
        size = _number(args[3], "byte count", fatal=True)
        try:
            target = parse_target(args[0])
            _number(args[1], "flags")
            expiry = _number(args[2], "expiry (seconds)")
        except ProtocolError as exc:
            exc.skip = size + 2  # its data block follows: drop it, to stay in step
            raise
        return SetRequest(target, expiry, size, len(args) == 5)
    if command == b"get" or command == b"gets":
        if len(args) != 1:
            raise client_error("usage: get <queue>[/t=<ms>][/open][/close][/abort][/peek] (one queue per get)")
        return parse_get_options(args[0])
    if command == b"monitor":
        if len(args) not in (2, 3):
            raise client_error("usage: monitor <queue> <seconds> [max-items]")
        seconds = _number(args[1], "monitor time (seconds)")
        if seconds * 1000 > MAX_WAIT_MS:
            raise client_error(f"monitor time of {seconds} s is over the limit of {MAX_WAIT_MS // 1000} s")
        limit = _number(args[2], "max-items") if len(args) == 3 else None
        return MonitorRequest(parse_target(args[0]), seconds, limit)
    if command == b"confirm":
        if len(args) != 2:
            raise client_error("usage: confirm <queue> <count>")
        return ConfirmRequest(parse_target(args[0]), _number(args[1], "count"))
    if command in (b"delete", b"flush", b"flush_expired"):
        noreply = len(args) == 2 and args[1] == b"noreply"
        if len(args) != 1 and not noreply:
            raise client_error(f"usage: {command.decode()} <queue> [noreply]")
        return SimpleRequest(command.decode(), parse_target(args[0]), noreply)
    if command == b"stats":
        return _parse_stats(args)
    if command == b"dump_stats":
        return DumpStatsRequest(tuple(parse_target(arg) for arg in args))
    if command == b"status":
        if not args:
            return StatusRequest()
        new = args[0].decode("ascii", "replace").upper()
        if len(args) != 1 or new not in STATUSES:
            raise client_error(f"unknown status {args[0][:32].decode('ascii', 'replace')!r}: one of "
                               + ", ".join(s.lower() for s in STATUSES))
        return StatusRequest(new)
    if command in (b"flush_all", b"flush_all_expired", b"version", b"reload", b"shutdown", b"quit"):
        # flush_all may carry a delay (memcache); it is ignored, as Kestrel did.
        noreply = bool(args) and args[-1] == b"noreply"
        return SimpleRequest(command.decode(), None, noreply)
    raise ProtocolError(ERROR)


def _parse_stats(args: list[bytes]) -> StatsRequest:
    if not args:
        return StatsRequest()
    group = args[0].lower()
    if group == b"items" and len(args) == 1:
        return StatsRequest("items")
    if group == b"cachedump" and len(args) == 3:
        return StatsRequest("cachedump", _number(args[1], "slab id"), _number(args[2], "limit"))
    raise client_error("usage: stats | stats items | stats cachedump <slab> <limit>")


def expire_at(expiry: int, now_s: float) -> float | None:
    """A ``set``'s expiry field as seconds since the epoch (None: never), as Kestrel
    reads it: 0 never; under :data:`RELATIVE_EXPIRY_LIMIT`, seconds from now;
    otherwise an absolute time in seconds since the epoch."""
    if expiry == 0:
        return None
    if expiry < RELATIVE_EXPIRY_LIMIT:
        return now_s + expiry
    return float(expiry)


def encode_value(key: str, data: bytes) -> bytes:
    """An item as the reply of a ``get`` (flags 0, as Kestrel), ``END`` included.
    ``key``: the key the client sent (``jobs/t=500/open``): memcache clients look
    for it (Kestrel sent the bare queue name, which they did not all accept).
    ``monitor`` sends one such reply per item, then a bare ``END``."""
    return b"VALUE %s 0 %d\r\n%s\r\nEND\r\n" % (key.encode("utf-8"), len(data), data)


def encode_line(text: str) -> bytes:
    """One reply line: a count (``flush_expired``), a status (``UP``)."""
    return text.encode("utf-8", "replace") + CRLF


def encode_stats(pairs: list[tuple[str, object]]) -> bytes:
    """``STAT <name> <value>`` lines and ``END``."""
    lines = [f"STAT {name} {value}".encode("utf-8", "replace") for name, value in pairs]
    return b"\r\n".join([*lines, b"END"]) + CRLF


def encode_dump_stats(queues: list[tuple[str, list[tuple[str, object]]]]) -> bytes:
    """Kestrel's ``dump_stats``: per queue ``queue '<name>' {``, its figures as
    ``  <name>=<value>`` lines, ``}``; then ``END``."""
    lines: list[str] = []
    for name, pairs in queues:
        lines += [f"queue '{name}' {{", *(f"  {key}={value}" for key, value in pairs), "}"]
    return "".join(line + "\r\n" for line in [*lines, "END"]).encode("utf-8", "replace")


def encode_cachedump(entries: list[tuple[str, int]]) -> bytes:
    """memcached's ``stats cachedump`` reply: ``ITEM <key> [<bytes> b; 0 s]`` per
    queue (0 s: the entry itself never expires), then ``END``."""
    lines = [f"ITEM {key} [{size} b; 0 s]\r\n" for key, size in entries]
    return "".join([*lines, "END\r\n"]).encode("utf-8", "replace")


def encode_version(version: str) -> bytes:
    return f"VERSION {version}".encode() + CRLF
