"""Kestrel's memcache text protocol: parsing requests and encoding replies, no I/O.

The server (:mod:`engine.queue.kestrel.server`) reads a line, asks
:func:`parse_line` what it is, reads the data block of a ``set``, and writes what
the ``encode_*`` functions return.  Everything here is pure so that it can be
tested byte for byte.

Requests (Kestrel's memcache dialect; a line ends with ``\\r\\n``, a bare
``\\n`` is accepted too):

* ``set <queue> <flags> <expiry> <bytes> [noreply]`` then ``<bytes>`` of data and
  ``\\r\\n``.  ``flags`` is ignored (0 is echoed back by ``get``).  ``expiry``:
  0 never, under 1,000,000 seconds from now, else seconds since the epoch.
* ``get <queue>[/option...]``: ``/t=<ms>``, ``/open``, ``/close``, ``/abort``,
  ``/peek``; ``<queue>`` may be ``<parent>+<reader>`` (a fanout reader).
* ``delete <queue>``, ``flush <queue>``, ``flush_all``, ``stats``, ``version``,
  ``shutdown``, ``quit``.

A request that cannot be understood raises :class:`ProtocolError` carrying the
reply to send (``ERROR`` for an unknown command, ``CLIENT_ERROR <why>`` for a
bad one) and whether the stream is still in step (a ``set`` whose data length
is unreadable is not: the connection closes).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from engine.errors import ConfigError
from engine.queue import naming

#: Expiry values below this are relative seconds; from it on, seconds since the epoch.
RELATIVE_EXPIRY_LIMIT = 1_000_000
#: Longest queue name (with its ``+reader``) accepted, in bytes: memcache's key limit.
MAX_KEY_BYTES = 250
#: Longest ``/t=`` wait accepted, in milliseconds (a day): a larger one is a typo.
MAX_WAIT_MS = 86_400_000

CRLF = b"\r\n"
STORED = b"STORED\r\n"
NOT_STORED = b"NOT_STORED\r\n"
END = b"END\r\n"
ERROR = b"ERROR\r\n"


class ProtocolError(Exception):
    """A request the server refuses: ``reply`` is what to send back; ``fatal``:
    the stream is out of step (or the client misbehaved): close the connection."""

    def __init__(self, reply: bytes, *, fatal: bool = False, skip: int = 0) -> None:
        super().__init__(reply.decode("ascii", "replace").strip())
        self.reply = reply
        self.fatal = fatal
        #: Bytes to read and drop before replying: the data block of a refused ``set``.
        self.skip = skip


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
    target: Target
    expiry: int
    size: int
    noreply: bool


@dataclass(frozen=True)
class GetRequest:
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
class SimpleRequest:
    """``delete``, ``flush`` (with a target), ``flush_all``, ``stats``, ``version``,
    ``shutdown``, ``quit`` (without)."""

    command: str
    target: Target | None = None
    noreply: bool = False


Request = SetRequest | GetRequest | SimpleRequest


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
    args = tokens[1:]
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
    if command in (b"delete", b"flush"):
        noreply = len(args) == 2 and args[1] == b"noreply"
        if len(args) != 1 and not noreply:
            raise client_error(f"usage: {command.decode()} <queue> [noreply]")
        return SimpleRequest(command.decode(), parse_target(args[0]), noreply)
    if command in (b"flush_all", b"stats", b"version", b"shutdown", b"quit"):
        # flush_all may carry a delay (memcache); it is ignored, as Kestrel did.
        noreply = bool(args) and args[-1] == b"noreply"
        if command == b"stats" and args:
            raise client_error("stats takes no argument")
        return SimpleRequest(command.decode(), None, noreply)
    raise ProtocolError(ERROR)


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
    for it (Kestrel sent the bare queue name, which they did not all accept)."""
    return b"VALUE %s 0 %d\r\n%s\r\nEND\r\n" % (key.encode("utf-8"), len(data), data)


def encode_stats(pairs: list[tuple[str, object]]) -> bytes:
    """``STAT <name> <value>`` lines and ``END``."""
    lines = [f"STAT {name} {value}".encode("utf-8", "replace") for name, value in pairs]
    return b"\r\n".join([*lines, b"END"]) + CRLF


def encode_version(version: str) -> bytes:
    return f"VERSION {version}".encode() + CRLF
