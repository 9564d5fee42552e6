"""A Kestrel-compatible server: every queue of a directory over Kestrel's memcache
text protocol, on asyncio (``engine queue serve DIR``; docs/guide/server.md).

:class:`KestrelServer` runs on an event loop (``await start()``, ``await
close()``); :func:`serve_in_thread` runs one on a thread of its own, for tests,
examples and programs that are not asyncio.  Parsing and encoding are
:mod:`.protocol`'s; framing each connection's requests and replies,
:mod:`.connection`'s; the open queues, batched sets and waiting gets,
:mod:`.queues`'.  This module holds the commands' handlers.

Each connection keeps its open reads (``get <queue>/open``): at most one per
queue name, as Kestrel; they are confirmed by ``/close``, given back by
``/abort``, and given back when the connection ends for any reason (the client
left, a protocol error, the server stopping).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from typing import Any

from engine import __version__
from engine.errors import EngineError
from engine.fs import FileSystem, as_path, default_fs, make_dirs
from engine.queue.diagnose import backlog_bytes, queue_names
from engine.queue.kestrel import protocol as p
from engine.queue.kestrel.connection import Connection
from engine.queue.kestrel.queues import OpenQueue, delete_queue_files
from engine.queue.queue import Queue
from engine.queue.reader import Item, Reader
from engine.queue.segments import list_segments
from engine.queue.state import ReaderState

log = logging.getLogger("engine.queue.kestrel")

VERSION = f"engine-{__version__}"


@dataclass(frozen=True)
class ServerOptions:
    """The server's settings (``engine queue serve``'s options).

    ``sync``: the sync mode of the queues it opens: "always" (``STORED`` once
    fsynced), a period in seconds (fsync in the background), or "never".
    ``max_item_size``: bytes per item; ``max_line``: bytes per request line;
    ``max_connections``: clients at once; ``threads``: the pool that runs blocking
    engine calls.  ``allow_shutdown``: accept the ``shutdown`` command.
    """

    host: str = "127.0.0.1"
    port: int = 22133
    sync: Any = "always"
    max_item_size: int = 1024 * 1024
    max_line: int = 2048
    max_connections: int = 1024
    threads: int = 8
    allow_shutdown: bool = False


class KestrelServer:
    """Serve every queue in ``directory`` (opened on first use, kept open)."""

    def __init__(self, directory: str, options: ServerOptions | None = None, *, fs: FileSystem | None = None) -> None:
        self.directory = as_path(directory, "directory")
        self.options = options or ServerOptions()
        self.fs = fs or default_fs()
        self._queues: dict[str, OpenQueue] = {}
        self._opening: dict[str, asyncio.Lock] = {}
        self._connections: set[Connection] = set()
        self._server: asyncio.base_events.Server | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._started = time.monotonic()
        self.port = self.options.port
        self.counters = dict.fromkeys(
            ("total_items", "total_connections", "cmd_get", "cmd_set", "cmd_peek", "get_hits", "get_misses",
             "bytes_read", "bytes_written", "queue_creates", "queue_deletes"),
            0,
        )

    # -- life ----------------------------------------------------------------------
    async def start(self) -> None:
        """Listen (``port`` 0: any free port; :attr:`port` says which)."""
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        self._pool = ThreadPoolExecutor(self.options.threads, thread_name_prefix="kestrel")
        make_dirs(self.fs, self.directory)
        self._server = await self._loop.create_server(
            lambda: Connection(self), self.options.host, self.options.port
        )
        self.port = self._server.sockets[0].getsockname()[1]
        self._started = time.monotonic()
        log.info("serving queues of %s on %s:%d", self.directory, self.options.host, self.port)

    def request_stop(self) -> None:
        """Ask :meth:`wait_stopped` to return (signal handlers, ``shutdown``)."""
        if self._stop is not None:
            self._stop.set()

    async def wait_stopped(self) -> None:
        assert self._stop is not None, "start() first"
        await self._stop.wait()

    async def close(self) -> None:
        """Stop listening, end every connection (their open reads given back), close
        every queue (readers checkpointed, locks released)."""
        if self._server is not None:
            self._server.close()
        for conn in list(self._connections):
            self._give_back(conn)
            conn.close()
        slots, self._queues = list(self._queues.values()), {}
        for slot in slots:
            slot.closed = True
            slot.wake()  # waiting gets answer END now
        tasks = [conn.task for conn in self._connections if conn.task is not None]
        if tasks:
            _, late = await asyncio.wait(tasks, timeout=10)
            for task in late:
                task.cancel()
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None
        if self._pool is not None:
            loop = asyncio.get_running_loop()
            for slot in slots:
                try:
                    await loop.run_in_executor(self._pool, slot.queue.close)
                except (EngineError, OSError) as exc:
                    log.error("closing queue %s: %s", slot.name, exc)
            self._pool.shutdown(wait=True)
            self._pool = None

    # -- queues --------------------------------------------------------------------
    async def _run(self, fn: Any, *args: Any) -> Any:
        assert self._loop is not None and self._pool is not None
        return await self._loop.run_in_executor(self._pool, fn, *args)

    async def open_queue(self, name: str) -> OpenQueue:
        """Queue ``name`` (already checked by the protocol), opened if needed."""
        slot = self._queues.get(name)
        if slot is not None:
            return slot
        lock = self._opening.setdefault(name, asyncio.Lock())
        async with lock:
            slot = self._queues.get(name)
            if slot is None:
                existed = bool(await self._run(list_segments, self.fs, self.directory, name))
                queue = await self._run(self._open, name)
                assert self._loop is not None and self._pool is not None
                slot = OpenQueue(queue, self._loop, self._pool, fsync=self.options.sync == "always")
                self._queues[name] = slot
                if not existed:
                    self.counters["queue_creates"] += 1
        return slot

    def _open(self, name: str) -> Queue:
        # sync="always": the server fsyncs each batch of sets itself (OpenQueue: one
        # put_many and one sync() per batch, on the loop), not the queue per put.
        sync = "never" if self.options.sync == "always" else self.options.sync
        return Queue.open(self.directory, name, fs=self.fs, sync=sync)

    # -- connections ---------------------------------------------------------------
    def admit(self, conn: Connection) -> bool:
        """A new connection: False if there are already ``max_connections``."""
        if len(self._connections) >= self.options.max_connections:
            return False
        self._connections.add(conn)
        self.counters["total_connections"] += 1
        return True

    def release(self, conn: Connection) -> None:
        """A connection ended: its open reads are given back."""
        self._connections.discard(conn)
        self._give_back(conn)

    def set_request(self, conn: Connection, request: p.SetRequest, block: bytes) -> None:
        """A set with its data block: STORED once the batch holding it is durable
        (:meth:`_stored`, called by the queue; a task only to open the queue first)."""
        self.counters["cmd_set"] += 1
        if block[-2:] != p.CRLF:
            raise p.client_error("bad data chunk: the data must be followed by \\r\\n", fatal=True)
        target = request.target
        if target.reader:
            raise p.client_error(f"cannot set to fanout reader {target.key!r}: set to queue {target.queue!r}")
        slot = self._queues.get(target.queue)
        if slot is None:
            conn.spawn(self._set_after_open(conn, request, block))
            return
        conn.busy = True
        slot.put(block[:-2], p.expire_at(request.expiry, time.time()), partial(self._stored, conn, request))

    async def _set_after_open(self, conn: Connection, request: p.SetRequest, block: bytes) -> None:
        slot = await self.open_queue(request.target.queue)
        assert self._loop is not None
        done: asyncio.Future[int | BaseException] = self._loop.create_future()
        slot.put(block[:-2], p.expire_at(request.expiry, time.time()), partial(_resolve, done))
        result = await done
        if isinstance(result, BaseException):
            raise result
        self.counters["total_items"] += 1
        if not request.noreply:
            conn.send(p.STORED)

    def _stored(self, conn: Connection, request: p.SetRequest, result: int | BaseException) -> None:
        if isinstance(result, BaseException):
            conn.refuse(result)
        else:
            self.counters["total_items"] += 1
            if not request.noreply:
                conn.send(p.STORED)
        conn.resume()

    def get_request(self, conn: Connection, request: p.GetRequest) -> None:
        """A get: answered at once when its queue and reader are open and it need
        not wait; else as a task."""
        slot = self._queues.get(request.target.queue)
        reader = None if slot is None else slot.readers.get(request.target.reader)
        if slot is None or reader is None or reader.closed:
            conn.spawn(self._get_after_open(conn, request))
            return
        waiting = self._get_now(conn, request, slot, reader)
        if waiting is not None:
            conn.spawn(waiting)

    async def _get_after_open(self, conn: Connection, request: p.GetRequest) -> None:
        slot = await self.open_queue(request.target.queue)
        reader = await slot.open_reader(request.target.reader)
        waiting = self._get_now(conn, request, slot, reader)
        if waiting is not None:
            await waiting

    def _get_now(
        self, conn: Connection, request: p.GetRequest, slot: OpenQueue, reader: Reader
    ) -> Coroutine[Any, Any, None] | None:
        """Serve ``request``; a coroutine to await when it must wait for an item."""
        target = request.target
        key = target.key
        counters = slot.counters(target.reader)
        held = conn.open.get(key)
        if held is not None and held[0] is not slot:  # its queue was deleted meanwhile
            del conn.open[key]
            held = None
        if request.abort:
            if held is not None:
                del conn.open[key]
                reader.abort(held[2])
                counters["open_transactions"] -= 1
                counters["canceled_transactions"] += 1
                slot.wake()
            conn.send(p.END)
            return None
        if request.close and held is not None:
            del conn.open[key]
            reader.confirm(held[2])
            counters["open_transactions"] -= 1
            held = None
        if request.close and not request.open:
            conn.send(p.END)
            return None
        if request.peek:
            self.counters["cmd_peek"] += 1
            take: Callable[[], Item | None] = reader.peek
        else:
            self.counters["cmd_get"] += 1
            if held is not None:
                # Kestrel: one open read per queue and connection, and no plain get beside it.
                raise p.ProtocolError(p.ERROR)
            if request.open:
                counters["transactions"] += 1
            take = partial(reader.get, 0)
        item = take()
        if item is None and request.wait_ms and not slot.closed:
            return self._get_wait(conn, request, slot, reader, take)
        self._got(conn, request, slot, reader, item)
        return None

    async def _get_wait(self, conn: Connection, request: p.GetRequest, slot: OpenQueue, reader: Reader,
                        take: Callable[[], Item | None]) -> None:
        item = await slot.wait_for_item(lambda: None if slot.closed else take(), request.wait_ms, looked=True)
        self._got(conn, request, slot, reader, item)

    def _got(self, conn: Connection, request: p.GetRequest, slot: OpenQueue, reader: Reader,
             item: Item | None) -> None:
        """Reply to a get with ``item`` (None: ``END``); open it, or confirm it."""
        if item is not None and not request.peek:
            counters = slot.counters(request.target.reader)
            if request.open and conn.closed:
                reader.abort(item.id)  # the client left while it waited
                slot.wake()
                return
            if request.open:
                conn.open[request.target.key] = (slot, request.target.reader, item.id)
                counters["open_transactions"] += 1
            else:
                reader.confirm(item.id)
            counters["age"] = max(0, int(time.time() * 1000) - item.add_time_ms)
        if item is None:
            self.counters["get_misses"] += 1
            conn.send(p.END)
            return
        self.counters["get_hits"] += 1
        conn.send(p.encode_value(request.key, item.data))

    def _give_back(self, conn: Connection) -> None:
        """Abort every read open on ``conn`` (it is ending)."""
        opened, conn.open = conn.open, {}
        for slot, name, xid in opened.values():
            if slot.closed:
                continue
            try:
                slot.reader(name).abort(xid)
            except EngineError as exc:
                log.error("queue %s: giving back item %d: %s", slot.name, xid, exc)
                continue
            counters = slot.counters(name)
            counters["open_transactions"] -= 1
            counters["canceled_transactions"] += 1
            slot.wake()

    def _forget(self, queue: str, reader: str | None) -> None:
        """Drop every connection's open reads of ``queue`` (of its ``reader`` only,
        unless None): the queue or reader is being deleted."""
        for conn in self._connections:
            for key, (slot, name, _) in list(conn.open.items()):
                if slot.name == queue and (reader is None or name == reader):
                    del conn.open[key]
                    slot.counters(name)["open_transactions"] -= 1

    # -- the other commands --------------------------------------------------------
    async def simple(self, conn: Connection, request: p.SimpleRequest) -> bool:
        """Run ``request``; False when the connection must end."""
        command, target = request.command, request.target
        reply: bytes
        if command == "delete":
            assert target is not None
            await self._delete(target)
            reply = p.END
        elif command == "flush":
            assert target is not None
            slot = await self.open_queue(target.queue)
            await self._run(slot.flush_reader, target.reader)
            slot.counters(target.reader)["total_flushes"] = slot.counters(target.reader).get("total_flushes", 0) + 1
            reply = p.END
        elif command == "flush_all":
            await self._flush_all()
            reply = b"Flushed all queues.\r\n"
        elif command == "stats":
            reply = p.encode_stats(await self.stats())
        elif command == "version":
            reply = p.encode_version(VERSION)
        elif command == "quit":
            return False
        else:  # shutdown
            if not self.options.allow_shutdown:
                raise p.client_error("shutdown is disabled (start the server with --allow-shutdown)")
            self.request_stop()
            return False
        if not request.noreply:
            conn.send(reply)
        return True

    async def _delete(self, target: p.Target) -> None:
        slot = await self.open_queue(target.queue)
        if target.reader:
            self._forget(target.queue, target.reader)
            slot.readers.pop(target.reader, None)
            slot.stats_by_reader.pop(target.reader, None)
            await self._run(slot.queue.remove_reader, target.reader)
            return
        # Under the queue's opening lock: a set or get of this name meanwhile waits
        # and then opens a new, empty queue (never one whose files are being deleted).
        async with self._opening.setdefault(target.queue, asyncio.Lock()):
            self._forget(target.queue, None)
            if self._queues.pop(target.queue, None) is not slot:
                return  # deleted by another connection meanwhile
            slot.closed = True
            slot.wake()
            await self._run(slot.queue.close)
            await self._run(delete_queue_files, self.fs, self.directory, target.queue)
        self.counters["queue_deletes"] += 1

    async def _flush_all(self) -> None:
        names = set(await self._run(queue_names, self.fs, self.directory)) | set(self._queues)
        for name in sorted(names):
            slot = await self.open_queue(name)
            for reader in slot.queue.reader_names() or [""]:
                await self._run(slot.flush_reader, reader)
                counters = slot.counters(reader)
                counters["total_flushes"] = counters.get("total_flushes", 0) + 1

    async def stats(self) -> list[tuple[str, object]]:
        """Kestrel's ``stats``: server figures, then ``queue_<name>_<figure>`` for every
        queue in the directory and each of its fanout readers (``<queue>+<reader>``)."""
        names = set(await self._run(queue_names, self.fs, self.directory)) | set(self._queues)
        slots = []
        for name in sorted(names):
            try:
                slots.append(await self.open_queue(name))
            except EngineError as exc:  # another process holds it, say: not served here
                log.warning("stats: queue %s left out: %s", name, exc)
        per_queue: list[tuple[str, object]] = []
        items_sum = bytes_sum = 0
        for slot in slots:
            for key, figures in await self._run(self._queue_figures, slot):
                items_sum += int(figures["items"])
                bytes_sum += int(figures["bytes"])
                per_queue += [(f"queue_{key}_{name}", value) for name, value in figures.items()]
        c = self.counters
        server: list[tuple[str, object]] = [
            ("uptime", int(time.monotonic() - self._started)),
            ("time", int(time.time())),
            ("version", VERSION),
            ("curr_items", items_sum),
            ("total_items", c["total_items"]),
            ("bytes", bytes_sum),
            ("curr_connections", len(self._connections)),
            *[(name, c[name]) for name in ("total_connections", "cmd_get", "cmd_set", "cmd_peek", "get_hits",
                                          "get_misses", "bytes_read", "bytes_written", "queue_creates",
                                          "queue_deletes")],
        ]
        return server + per_queue

    def _queue_figures(self, slot: OpenQueue) -> list[tuple[str, dict[str, object]]]:
        """In the pool: Kestrel's per-queue figures for each reader of ``slot`` (the
        whole queue under its own name when it has no reader yet)."""
        stats = slot.queue.stats()
        logsize = stats["journal_bytes"]
        readers = stats["readers"]
        assert isinstance(readers, list)
        if not readers:
            tail = slot.queue.tail_id
            size = backlog_bytes(self.fs, self.directory, slot.name, ReaderState(0, ()), tail)
            readers = [{"reader": "", "items": len(slot.queue), "backlog_bytes": size}]
        out = []
        for entry in readers:
            name = str(entry["reader"])
            counters = slot.counters(name)
            figures: dict[str, object] = {
                "items": entry["items"],
                "bytes": entry["backlog_bytes"],
                "total_items": slot.total_items,
                "logsize": logsize,
                "expired_items": entry.get("expired", 0),
                "age": counters["age"],
                "age_msec": counters["age"],
                "discarded": entry.get("discarded", 0),
                "waiters": slot.waiting,
                "open_transactions": counters["open_transactions"],
                "transactions": counters["transactions"],
                "canceled_transactions": counters["canceled_transactions"],
                "total_flushes": counters.get("total_flushes", 0),
            }
            out.append((f"{slot.name}+{name}" if name else slot.name, figures))
        return out


def _resolve(future: asyncio.Future[Any], result: object) -> None:
    if not future.done():  # not cancelled meanwhile (the server stopping)
        future.set_result(result)


class RunningServer:
    """A :class:`KestrelServer` on a thread of its own (:func:`serve_in_thread`):
    ``host``, ``port``; ``stop()`` (or ``with``) stops it and closes its queues."""

    def __init__(self, server: KestrelServer, thread: threading.Thread, loop: asyncio.AbstractEventLoop) -> None:
        self.server = server
        self.host = server.options.host
        self.port = server.port
        self._thread = thread
        self._loop = loop

    def stop(self, timeout: float = 30.0) -> None:
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self.server.request_stop)
            self._thread.join(timeout)

    def __enter__(self) -> RunningServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def serve_in_thread(directory: str, *, timeout: float = 30.0, **options: Any) -> RunningServer:
    """Start a server for ``directory`` on a new thread (``options``: the fields of
    :class:`ServerOptions`; ``port=0`` picks a free port) and return once it listens."""
    server = KestrelServer(directory, ServerOptions(**options))
    started = threading.Event()
    failure: list[BaseException] = []
    loops: list[asyncio.AbstractEventLoop] = []

    async def main() -> None:
        loops.append(asyncio.get_running_loop())
        try:
            await server.start()
        except BaseException as exc:  # handed to each waiting set
            failure.append(exc)
            started.set()
            await server.close()
            return
        started.set()
        try:
            await server.wait_stopped()
        finally:
            await server.close()

    thread = threading.Thread(target=asyncio.run, args=(main(),), name="kestrel-server", daemon=True)
    thread.start()
    if not started.wait(timeout):
        raise TimeoutError(f"the server did not start within {timeout} s")
    if failure:
        thread.join(timeout)
        raise failure[0]
    return RunningServer(server, thread, loops[0])


async def serve(directory: str, options: ServerOptions, *, ready: Any = None) -> None:
    """Run a server until SIGINT/SIGTERM (or ``shutdown``), then close it cleanly.
    ``ready(server)`` is called once it listens."""
    import signal

    server = KestrelServer(directory, options)
    await server.start()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, server.request_stop)
    try:
        if ready is not None:
            ready(server)
        await server.wait_stopped()
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
        await server.close()
