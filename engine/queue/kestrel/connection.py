"""One client connection: bytes in, requests out, in order (an asyncio Protocol).

Requests of a connection are served one at a time, in the order they came: while
one is under way (a set waiting for its fsync, a get waiting for an item, any
command that runs in the thread pool) the connection is *busy* and what arrives
stays buffered (reading pauses past 64 KiB).  Requests that can be answered at
once (a get of an open queue with an item ready, say) are answered from
``data_received`` without a task; the others run as a task, or (a set) are
answered by the commit of the batch holding it (:mod:`.queues`).  The server's
handlers do the work (:mod:`.server`); this class only frames requests and
replies.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any

from engine.errors import EngineError
from engine.queue.kestrel import protocol as p

if TYPE_CHECKING:
    from engine.queue.kestrel.queues import OpenQueue
    from engine.queue.kestrel.server import KestrelServer

log = logging.getLogger("engine.queue.kestrel")

#: Buffered bytes past which a busy connection stops reading (TCP pushes back).
PAUSE_AT = 64 * 1024


class Connection(asyncio.Protocol):
    def __init__(self, server: KestrelServer) -> None:
        self.server = server
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.busy = False
        self.closed = False
        self.paused = False
        #: Bytes still to drop: the data of a refused set.
        self.discard = 0
        #: The request being served as a task (close() waits for it).
        self.task: asyncio.Task[Any] | None = None
        #: Open reads: the Kestrel name (``q`` or ``q+r``) -> (queue, reader, item id).
        self.open: dict[str, tuple[OpenQueue, str, int]] = {}

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

    def eof_received(self) -> bool | None:
        return None  # the transport closes; connection_lost follows

    # -- replies -------------------------------------------------------------------
    def send(self, data: bytes) -> None:
        if not self.closed and self.transport is not None:
            self.server.counters["bytes_written"] += len(data)
            self.transport.write(data)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            if self.transport is not None:
                self.transport.close()

    def refuse(self, exc: BaseException) -> None:
        """Answer a request that failed with ``exc``: its protocol reply, or
        ``SERVER_ERROR`` for a queue's failure; anything else ends the connection."""
        if isinstance(exc, p.ProtocolError):
            self.send(exc.reply)
            self.discard = exc.skip
            if exc.fatal:
                self.close()
        elif isinstance(exc, (EngineError, OSError)):
            self.send(p.server_error(str(exc)))
        else:
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
        """Serve the buffered requests, in order, until one must wait."""
        try:
            self._pump()
        except Exception as exc:  # one connection's failure never stops the server
            self.refuse(exc)

    def _pump(self) -> None:
        buffer = self.buffer
        max_line = self.server.options.max_line
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
                    self.send(p.client_error(f"request line over {max_line} bytes").reply)
                    self.close()
                return
            try:
                request = p.parse_line(bytes(buffer[: end + 1]))
            except p.ProtocolError as exc:
                del buffer[: end + 1]
                self.refuse(exc)
                continue
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
            self.spawn(server.simple(self, request))
        return True
