"""One client connection: bytes in, requests out, in order (an asyncio Protocol).

Requests of a connection are served one at a time, in the order they came: while
one is under way (a set waiting for its fsync, a get waiting for an item, a
monitor streaming items, any command that runs in the thread pool) the
connection is *busy* and what arrives stays buffered (reading pauses past 64
KiB).  Requests that can be answered at once (a get of an open queue with an
item ready, say) are answered from ``data_received`` without a task; the others
run as a task, or (a set) are answered by the commit of the batch holding it
(:mod:`.queues`).  The server's handlers do the work (:class:`Service`); this
class only frames requests and replies, counts them, and keeps the connection's
open reads (:class:`HeldReads`).

A client that half-closes its socket (``shutdown(SHUT_WR)`` after its last
request) still gets every reply it is owed: the end of its stream is noted, the
requests before it are served, and the connection closes once they are
answered (an unfinished request at the end, a set cut short, is dropped).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any, Protocol

from engine.errors import EngineError
from engine.queue.kestrel import protocol as p

if TYPE_CHECKING:
    from engine.queue.kestrel.queues import OpenQueue

log = logging.getLogger("engine.queue.kestrel")

#: Buffered bytes past which a busy connection stops reading (TCP pushes back).
PAUSE_AT = 64 * 1024


class Limits(Protocol):
    @property
    def max_line(self) -> int: ...

    @property
    def max_item_size(self) -> int: ...

    @property
    def max_connections(self) -> int: ...


class Service(Protocol):
    """What a connection needs of the server (:class:`~.server.KestrelServer`)."""

    @property
    def options(self) -> Limits: ...

    #: Kestrel's server counters (``bytes_read``, ``cmd_set``...).
    counters: dict[str, int]
    #: Requests by command (:data:`protocol.COMMANDS` and "unknown").
    requests: dict[str, int]
    #: Error replies by kind (``ERROR``, ``CLIENT_ERROR``, ``SERVER_ERROR``).
    errors: dict[str, int]

    def admit(self, conn: Connection) -> bool: ...

    def release(self, conn: Connection) -> None: ...

    def set_request(self, conn: Connection, request: p.SetRequest, block: bytes) -> None: ...

    def get_request(self, conn: Connection, request: p.GetRequest) -> None: ...

    def command(self, conn: Connection, request: p.Request) -> Coroutine[Any, Any, bool | None]: ...


class HeldReads:
    """The reads one connection holds open on one Kestrel name (``q`` or ``q+r``),
    oldest first: ``(item id, payload bytes)``.  ``/close`` and ``/abort`` take the
    oldest, ``confirm <queue> <n>`` the ``n`` oldest, as Kestrel."""

    __slots__ = ("items", "reader", "slot")

    def __init__(self, slot: OpenQueue, reader: str) -> None:
        self.slot = slot
        self.reader = reader
        self.items: deque[tuple[int, int]] = deque()

    def __len__(self) -> int:
        return len(self.items)


class Connection(asyncio.Protocol):
    def __init__(self, server: Service) -> None:
        self.server = server
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.busy = False
        self.closed = False
        self.paused = False
        #: The client half-closed: close once what it sent is answered.
        self.eof = False
        #: Bytes still to drop: the data of a refused set.
        self.discard = 0
        #: The request being served as a task (close() waits for it).
        self.task: asyncio.Task[Any] | None = None
        #: Open reads by Kestrel name (``q`` or ``q+r``).
        self.open: dict[str, HeldReads] = {}

    # -- asyncio's side ------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        if not self.server.admit(self):
            limit = self.server.options.max_connections
            transport.write(p.server_error(f"too many connections (at most {limit})"))
            self.closed = True
            transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.server.release(self)  # its open reads are given back

    def data_received(self, data: bytes) -> None:
        if self.closed:
            return
        self.server.counters["bytes_read"] += len(data)
        self.buffer += data
        if not self.busy:
            self.pump()
        elif len(self.buffer) > PAUSE_AT and not self.paused and self.transport is not None:
            self.paused = True
            self.transport.pause_reading()

    def eof_received(self) -> bool:
        """The client sent its last byte (a half-close, or the first half of a full
        close): keep the socket open for the replies it is owed."""
        self.eof = True
        if not self.busy:
            self.close()  # everything before the end is answered (pump ran on each read)
        return True

    # -- replies -------------------------------------------------------------------
    def send(self, data: bytes) -> None:
        if not self.closed and self.transport is not None:
            self.server.counters["bytes_written"] += len(data)
            self.transport.write(data)

    def close(self) -> None:
        """Close once the replies written so far are sent (asyncio flushes first)."""
        if not self.closed:
            self.closed = True
            if self.transport is not None:
                self.transport.close()

    def refuse(self, exc: BaseException) -> None:
        """Answer a request that failed with ``exc``: its protocol reply, or
        ``SERVER_ERROR`` for a queue's failure; anything else ends the connection."""
        errors = self.server.errors
        if isinstance(exc, p.ProtocolError):
            errors[_kind(exc.reply)] += 1
            self.send(exc.reply)
            self.discard = exc.skip
            if exc.fatal:
                self.close()
        elif isinstance(exc, (EngineError, OSError)):
            errors["SERVER_ERROR"] += 1
            self.send(p.server_error(str(exc)))
        else:
            errors["SERVER_ERROR"] += 1
            log.error("connection failed", exc_info=exc)
            self.close()

    # -- serving -------------------------------------------------------------------
    def spawn(self, work: Coroutine[Any, Any, bool | None]) -> None:
        """Serve the current request as a task; the next ones wait for it.  A
        result of False ends the connection (``quit``)."""
        self.busy = True
        self.task = asyncio.get_running_loop().create_task(work)
        self.task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self.task = None
        if task.cancelled():
            self.close()
        elif task.exception() is not None:
            self.refuse(task.exception())  # type: ignore[arg-type]
        elif task.result() is False:
            self.close()
        self.resume()

    def resume(self) -> None:
        """The current request is answered: serve the next ones."""
        self.busy = False
        if self.closed:
            return
        self.pump()
        if self.paused and not self.busy and self.transport is not None:
            self.paused = False
            self.transport.resume_reading()

    def pump(self) -> None:
        """Serve the buffered requests, in order, until one must wait; after the
        client's end of stream, close once nothing is under way."""
        try:
            self._pump()
        except Exception as exc:  # one connection's failure never stops the server
            self.refuse(exc)
        if self.eof and not self.busy:
            self.close()

    def _pump(self) -> None:
        buffer = self.buffer
        max_line = self.server.options.max_line
        requests = self.server.requests
        while not self.busy and not self.closed:
            if self.discard:
                dropped = min(self.discard, len(buffer))
                del buffer[:dropped]
                self.discard -= dropped
                if self.discard:
                    return
            end = buffer.find(b"\n", 0, max_line)
            if end < 0:
                if len(buffer) >= max_line:
                    requests["unknown"] += 1
                    self.refuse(p.client_error(f"request line over {max_line} bytes", fatal=True))
                return
            try:
                request = p.parse_line(bytes(buffer[: end + 1]))
            except p.ProtocolError as exc:
                del buffer[: end + 1]
                requests[exc.command] += 1
                self.refuse(exc)
                continue
            requests[request.command] += 1
            try:
                if not self._dispatch(request, end):
                    return  # a set's data is still coming
            except Exception as exc:  # answered (the request was consumed); the next ones are served
                self.refuse(exc)

    def _dispatch(self, request: p.Request, end: int) -> bool:
        """Consume ``request`` (its line ends at ``end`` in the buffer; a set's data
        follows) and serve it; False if the set's data is not all here yet.  It is
        consumed before anything can raise."""
        buffer = self.buffer
        server = self.server
        if isinstance(request, p.SetRequest):
            size = request.size
            if size > server.options.max_item_size:
                del buffer[: end + 1]
                server.counters["cmd_set"] += 1
                if size > 1 << 31:
                    raise p.client_error(f"item of {size} bytes: too large to skip", fatal=True)
                why = f"item of {size} bytes is over the limit of {server.options.max_item_size} bytes"
                raise p.client_error(why, skip=size + 2)  # its data is dropped: the stream stays in step
            stop = end + 1 + size + 2
            if len(buffer) < stop:
                return False
            block = bytes(buffer[end + 1 : stop])
            del buffer[:stop]
            server.set_request(self, request, block)
            return True
        del buffer[: end + 1]
        if isinstance(request, p.GetRequest):
            server.get_request(self, request)
        else:
            self.spawn(server.command(self, request))
        return True


def _kind(reply: bytes) -> str:
    """The error a reply line is: ``CLIENT_ERROR``, ``SERVER_ERROR`` or ``ERROR``."""
    if reply.startswith(b"CLIENT_ERROR"):
        return "CLIENT_ERROR"
    if reply.startswith(b"SERVER_ERROR"):
        return "SERVER_ERROR"
    return "ERROR"
