"""A journald-protocol server over a Unix stream socket, backed by StreamJournal.

Per connection (the original journald server's ``socketio.c`` states; one thread
each here, at most ``max_connections`` of them):

1. read the identifier length (u32, MSB first) and the identifier;
2. read length-prefixed strings, feeding their bytes to the stream (which cuts
   them into records of up to 8 KiB, whatever the client's string sizes);
3. a zero length ends the stream: ``Stream.close()`` returns once the stream is
   durable, then the server sends one byte, 1, and closes the connection;
4. a client that disconnects before the zero length gets its stream aborted.

Any failure (journal full, poisoned by an fsync error, an identifier longer than
the original journald server's 1024 bytes) is answered with a 0 byte.

Bounded: at most ``max_connections`` connections are served at once (a thread
each; the original server served a fixed 10 with ``select``); one more is
answered with a 0 byte and closed at once, with a log line.  A connection idle
for ``idle_timeout`` seconds (no byte from the client) is closed, its stream
aborted, with a log line; so is a malformed one (an identifier too long).  Group commit comes from
the journal: a closing stream's fsync waits ``sync_delay`` (10 ms by default)
while other streams are open, so concurrent connections share it.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import os
import socket
import socketserver
import stat
import struct
import threading
import weakref
from types import TracebackType
from typing import Any

from engine.conventions import duration_seconds, warn_unclosed
from engine.errors import ConfigError, EngineError, LockedError
from engine.fs import as_path, default_fs
from engine.streams.journal import MAX_IDENT, StreamJournal

log = logging.getLogger("engine.streams")

# Every number on the wire: u32, MSB first.
LENGTH = struct.Struct(">I")
assert LENGTH.size == 4

#: Bytes received from a connection at a time (its receive buffer).
READ_SIZE = 256 * 1024

#: Connections served at once by default; more are refused (answered 0).
DEFAULT_MAX_CONNECTIONS = 256
#: Seconds a connection may send nothing before it is closed (stream aborted).
DEFAULT_IDLE_TIMEOUT = 60.0

#: Seconds the connect probe of an existing socket file may take.
PROBE_TIMEOUT = 2.0

ACK_OK = b"\x01"
ACK_FAIL = b"\x00"


class _Receiver:
    """One connection's receive buffer: ``READ_SIZE`` bytes, filled by
    ``recv_into`` (no buffered reader copying each string out).  Views handed
    out by :meth:`strings` are valid until the next :meth:`fill`."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._buf = bytearray(READ_SIZE)
        self._view = memoryview(self._buf)
        self._start = 0  # unread bytes are _buf[_start:_end]
        self._end = 0

    def fill(self, need: int) -> bool:
        """Receive until ``need`` (<= READ_SIZE) bytes are unread; False if the
        client closed the connection first.  Moves the unread bytes to the
        front of the buffer (earlier views must no longer be in use)."""
        if self._end - self._start >= need:
            return True
        unread = self._end - self._start
        if unread:
            self._buf[:unread] = bytes(self._view[self._start : self._end])  # a copy: they may overlap
        self._start, self._end = 0, unread
        while self._end < need:
            got = self._sock.recv_into(self._view[self._end :])
            if not got:
                return False
            self._end += got
        return True

    def length(self) -> int:
        """The next u32 (MSB first), which :meth:`fill` has received."""
        (value,) = LENGTH.unpack_from(self._buf, self._start)
        self._start += LENGTH.size
        return int(value)

    def take(self, size: int) -> bytes:
        """The next ``size`` bytes, which :meth:`fill` has received, as bytes."""
        data = bytes(self._view[self._start : self._start + size])
        self._start += size
        return data

    def strings(self, remaining: int) -> tuple[list[memoryview], int, bool]:
        """Parse the unread bytes as the rest of a stream's strings: ``remaining``
        bytes of the current string, then length-prefixed strings.  Returns views
        of their data (up to the end of the unread bytes), the bytes of the last
        string still to come, and whether the zero length that ends the stream
        was read (the bytes after it stay unread).  One tight loop per receive,
        not a call per string."""
        parts: list[memoryview] = []
        buf, view, start, end = self._buf, self._view, self._start, self._end
        unpack = LENGTH.unpack_from
        while True:
            if remaining:
                take = min(remaining, end - start)
                if not take:
                    break
                parts.append(view[start : start + take])
                start += take
                remaining -= take
                if remaining:
                    break
            if end - start < LENGTH.size:
                break
            (remaining,) = unpack(buf, start)
            start += LENGTH.size
            if not remaining:
                self._start = start
                return parts, 0, True
        self._start = start
        return parts, remaining, False


class _Handler(socketserver.BaseRequestHandler):
    server: JournalServer

    def handle(self) -> None:
        self.server.serve_connection(self.request)


class JournalServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    """Serve ``journal`` on ``socket_path``.

    A stale socket file (nobody listening) is replaced; a socket a live server
    listens on raises :class:`LockedError` (see :func:`_remove_stale_socket`).

    ``serve_forever()`` in the calling thread, :meth:`start` for a background
    thread, or ``await serve_async()`` in asyncio (:meth:`stop_async`, ``async
    with``); :meth:`stop` shuts down and removes the socket (as does leaving a
    ``with`` block, and interpreter exit for a server never stopped, with a
    :class:`ResourceWarning`).  The journal stays open (its owner closes it).
    ``socket_path`` is a str or :class:`os.PathLike`; ``idle_timeout`` a
    :class:`~datetime.timedelta` or seconds (None: never).  Counters:
    ``committed``, ``aborted``, ``rejected``, ``refused`` (over
    ``max_connections``), ``timed_out``; :meth:`stats` returns them as a dict.
    """

    daemon_threads = True
    allow_reuse_address = False
    request_queue_size = 128  # the original journald server's listen backlog

    def __init__(
        self,
        socket_path: str | os.PathLike[str],
        journal: StreamJournal,
        *,
        mode: int | None = None,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        idle_timeout: float | dt.timedelta | None = DEFAULT_IDLE_TIMEOUT,
    ) -> None:
        socket_path = as_path(socket_path, "socket_path")
        if isinstance(max_connections, bool) or not isinstance(max_connections, int):
            raise TypeError(f"max_connections must be an int, not {type(max_connections).__name__}")
        if max_connections < 1:
            raise ConfigError(f"max_connections must be at least 1, not {max_connections}")
        self.socket_path = socket_path
        self.journal = journal
        self.max_connections = max_connections
        self.idle_timeout = duration_seconds(idle_timeout, "idle_timeout", allow_none=True)
        self.committed = 0
        self.aborted = 0
        self.rejected = 0
        self.refused = 0
        self.timed_out = 0
        self.connections = 0  # served now
        self._finalizer: weakref.finalize | None = None
        self._count_lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(max_connections)
        self._thread: threading.Thread | None = None
        _remove_stale_socket(socket_path)
        super().__init__(socket_path, _Handler)
        self._inode: int | None = os.lstat(socket_path).st_ino
        if mode is not None:
            os.chmod(socket_path, mode)
        # Stopped at exit if the user forgets (a bound method: kept alive until then).
        self._finalizer = warn_unclosed(self, self.stop, f"journald server on {socket_path}")

    def _count(self, name: str, add: int = 1) -> None:
        with self._count_lock:
            setattr(self, name, getattr(self, name) + add)

    def stats(self) -> dict[str, object]:
        """The server's counters and settings (a dict, snake_case keys, numbers;
        ``idle_timeout_seconds`` None when connections may idle for ever)."""
        with self._count_lock:
            return {
                "connections": self.connections,
                "max_connections": self.max_connections,
                "idle_timeout_seconds": self.idle_timeout,
                "committed": self.committed,
                "aborted": self.aborted,
                "rejected": self.rejected,
                "refused": self.refused,
                "timed_out": self.timed_out,
            }

    def process_request(self, request: Any, client_address: Any) -> None:
        """Serve the connection in a thread of its own if a slot is free; else
        answer 0 and close it now (the accepting thread never blocks)."""
        if not self._slots.acquire(blocking=False):
            self._count("refused")
            log.warning(
                "journald: refused a connection: %d connections open (max_connections)", self.max_connections
            )
            try:
                request.sendall(ACK_FAIL)
            except OSError:
                pass
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        self._count("connections")
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._count("connections", -1)
            self._slots.release()

    def serve_connection(self, sock: socket.socket) -> None:
        """Serve one client on ``sock`` (the request handler's call, in the
        connection's thread): run the protocol and send the answer byte."""
        sock.settimeout(self.idle_timeout)
        try:
            answer = self._run_protocol(_Receiver(sock))
            if answer is not None:
                sock.sendall(answer)
        except TimeoutError:
            self._count("timed_out")
            log.warning("journald: closed a connection idle for %s s (its stream aborted)", self.idle_timeout)
        except OSError as exc:  # the client went away while we answered
            log.debug("journald connection: %s", exc)

    def _run_protocol(self, rx: _Receiver) -> bytes | None:
        """The per-connection state machine; returns the byte to answer, if any.

        The stream's data is handed to the journal a whole receive at a time:
        views of the receive buffer, one per string (or part of one) in it, in
        one ``write`` (one lock, records cut straight from the buffer), before
        the buffer is reused."""
        if not rx.fill(LENGTH.size):
            return None  # gone before naming a stream: nothing was started
        ident_len = rx.length()
        if ident_len > MAX_IDENT:
            self._count("rejected")
            log.warning("journald: refused a client: identifier of %d bytes (at most %d)", ident_len, MAX_IDENT)
            return ACK_FAIL
        if not rx.fill(ident_len):
            return None
        ident = rx.take(ident_len)
        try:
            stream = self.journal.open_stream(ident)
        except EngineError as exc:
            log.error("journald: cannot open a stream: %s", exc)
            self._count("rejected")
            return ACK_FAIL
        write = stream.write_parts
        try:
            remaining = 0  # bytes of the current string still to come
            while True:
                parts, remaining, ended = rx.strings(remaining)
                if parts:
                    write(parts)
                if ended:
                    stream.close()  # returns once the stream is durable
                    self._count("committed")
                    return ACK_OK
                if not rx.fill(1 if remaining else LENGTH.size):
                    stream.abort()  # early disconnect
                    self._count("aborted")
                    return None
        except EngineError as exc:
            log.error("journald: stream #%d failed: %s", stream.number, exc)
            stream.abort()
            self._count("rejected")
            return ACK_FAIL
        except BaseException:
            stream.abort()  # an idle timeout too (TimeoutError): the stream never ends
            self._count("aborted")
            raise

    def start(self) -> threading.Thread:
        """Serve from a daemon thread; returns it."""
        thread = threading.Thread(target=self.serve_forever, name="journald-server", daemon=True)
        thread.start()
        self._thread = thread
        return thread

    def stop(self) -> None:
        """Stop accepting, close the listening socket and remove its file.
        Connections being served go on in their threads until the journal is closed."""
        if self._finalizer is not None:
            self._finalizer.detach()
        if self._thread is not None:
            self.shutdown()
            self._thread.join()
            self._thread = None
        self.server_close()
        self.remove_socket()

    def __enter__(self) -> JournalServer:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # -- asyncio ---------------------------------------------------------------------
    async def serve_async(self) -> None:
        """Serve until :meth:`stop` / :meth:`stop_async` (or leaving ``async with``),
        or until the awaiting task is cancelled, which stops the server.

        For an asyncio program: ``await server.serve_async()`` (or a task running
        it).  The accept loop runs in a daemon thread, as with :meth:`start`, and
        connections in threads of their own (their stream writes and fsyncs block);
        the coroutine only awaits a future that the accept thread resolves when it
        ends (``loop.call_soon_threadsafe``): the event loop is never blocked, and
        nothing polls.  An error that ends the accept loop is raised here.
        """
        if self._thread is not None:
            raise ConfigError(f"journald server on {self.socket_path} is already serving")
        loop = asyncio.get_running_loop()
        ended: asyncio.Future[None] = loop.create_future()

        def serve() -> None:
            failure: BaseException | None = None
            try:
                self.serve_forever()
            except BaseException as exc:
                failure = exc
            try:
                loop.call_soon_threadsafe(_settle, ended, failure)
            except RuntimeError:
                pass  # the loop is closed: nobody awaits the end any more

        thread = threading.Thread(target=serve, name="journald-server", daemon=True)
        self._thread = thread
        thread.start()
        try:
            await ended
        except asyncio.CancelledError:
            await self.stop_async()
            raise

    async def stop_async(self) -> None:
        """:meth:`stop` without blocking the event loop (it waits for the accept
        loop to notice, up to half a second, in a worker thread)."""
        await asyncio.to_thread(self.stop)

    async def __aenter__(self) -> JournalServer:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop_async()

    def remove_socket(self) -> None:
        """Remove the socket file this server bound (never one another server bound since)."""
        _remove_own_socket(self.socket_path, self._inode)


def _settle(future: asyncio.Future[None], failure: BaseException | None) -> None:
    if future.done():
        return
    if failure is None:
        future.set_result(None)
    else:
        future.set_exception(failure)


def _remove_stale_socket(path: str) -> None:
    """Remove ``path`` if it is a socket nobody listens on any more (see
    :func:`check_socket_free`)."""
    if check_socket_free(path):
        default_fs().unlink(path)


def check_socket_free(path: str | os.PathLike[str]) -> bool:
    """Whether a server may bind ``path``: :class:`LockedError` when a live server
    listens on it; True when it is a stale socket file (to replace), False when
    there is nothing there (or not a socket: the bind then fails naming it).

    ``engine streams serve`` asks first, so a refused start creates no journal.

    The original journald server unlinks before bind, which lets a second
    server take a live server's socket over (and delete it on exit, leaving
    the first unreachable).  Here a connect probe tells the two apart: a server
    that accepts the connection is alive, and :class:`LockedError` names its
    socket; a refused connection means a stale file (its server died), which
    is replaced.  The probe connection sends nothing, so a live journald
    server sees a client gone before naming a stream: nothing is written.
    """
    path = as_path(path, "socket_path")
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return False
    if not stat.S_ISSOCK(mode):
        return False
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(PROBE_TIMEOUT)
    try:
        probe.connect(path)
    except (ConnectionRefusedError, FileNotFoundError):
        pass  # nobody listening: stale
    except OSError as exc:
        raise LockedError(f"{path}: cannot tell whether a server listens on this socket: {exc}", path) from exc
    else:
        raise LockedError(f"{path}: another server is listening on this socket; stop it first "
                          "or give another socket path", path)
    finally:
        probe.close()
    return True


def _remove_own_socket(path: str, inode: int | None) -> None:
    """Remove the socket file this server bound (inode ``inode``), and only that one."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISSOCK(st.st_mode) and st.st_ino == inode:
        default_fs().unlink(path)
