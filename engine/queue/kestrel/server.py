"""A Kestrel-compatible server: every queue of a directory over Kestrel 2's
memcache text protocol, on asyncio (``engine queue serve DIR``; docs/guide/server.md).

:class:`KestrelServer` runs on an event loop (``await start()``, ``await
close()``); :func:`serve_in_thread` runs one on a thread of its own, for tests,
examples and programs that are not asyncio.  Parsing and encoding are
:mod:`.protocol`'s; framing each connection's requests and replies,
:mod:`.connection`'s; the open queues, batched sets and waiting gets,
:mod:`.queues`'; gets, monitors and the reads connections hold open,
:mod:`.reads`'; the figures of ``stats``, :mod:`.stats`'; the Prometheus
endpoint, :mod:`.metrics`'.  This module holds the server's life, its
connections, sets, and the other commands.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from typing import Any

from engine import __version__
from engine.conventions import naming_the_host
from engine.errors import EngineError
from engine.fs import FileSystem, as_path, default_fs, make_dirs
from engine.queue.diagnose import queue_names
from engine.queue.kestrel import protocol as p
from engine.queue.kestrel.connection import Connection
from engine.queue.kestrel.queues import OpenQueue, delete_queue_files
from engine.queue.kestrel.reads import Reads
from engine.queue.kestrel.stats import QueueReport, cachedump, items_stats, queue_figures
from engine.queue.queue import Queue
from engine.queue.segments import list_segments

log = logging.getLogger("engine.queue.kestrel")

#: The Kestrel release whose memcache protocol the server speaks.
KESTREL_VERSION = "2.4.7"
#: What ``version`` and ``stats`` say: Kestrel's numeric form first, as memcache
#: tools parse it (libmemcached reads ``<major>.<minor>.<micro>`` and refuses a
#: major 0), then engine's own version as semver build metadata.
VERSION = f"{KESTREL_VERSION}+engine-{__version__}"


@dataclass(frozen=True)
class ServerOptions:
    """The server's settings (``engine queue serve``'s options).

    ``sync``: the sync mode of the queues it opens: "always" (``STORED`` once
    fsynced), a period in seconds (fsync in the background), or "never".
    ``max_item_size``: bytes per item; ``max_line``: bytes per request line;
    ``max_connections``: clients at once; ``max_open_reads``: reads a connection
    may hold open per queue name (Kestrel's ``maxOpenTransactions``); ``threads``:
    the pool that runs blocking engine calls.  ``allow_shutdown``: accept the
    ``shutdown`` command.  ``metrics_port``: serve Prometheus' ``/metrics`` there
    (None: no; 0: a free port), on ``metrics_host``.
    """

    host: str = "127.0.0.1"
    port: int = 22133
    sync: Any = "always"
    max_item_size: int = 1024 * 1024
    max_line: int = 2048
    max_connections: int = 1024
    max_open_reads: int = 1
    threads: int = 8
    allow_shutdown: bool = False
    metrics_port: int | None = None
    metrics_host: str = "127.0.0.1"


class KestrelServer:
    """Serve every queue in ``directory`` (opened on first use, kept open)."""

    def __init__(
        self, directory: str | os.PathLike[str], options: ServerOptions | None = None, *, fs: FileSystem | None = None
    ) -> None:
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
        self._ticker: asyncio.Task[None] | None = None
        self._metrics: Any = None  # a metrics.MetricsEndpoint once started with a metrics port
        self._started = time.monotonic()
        self.port = self.options.port
        #: Where ``/metrics`` is served: (address, port), once started (None: not asked).
        self.metrics_address: tuple[str, int] | None = None
        self.max_open_reads = self.options.max_open_reads
        #: Kestrel's server status: UP, WRITEAVOID, READONLY (no set, delete,
        #: flush) or QUIESCENT (no get either; open reads may still be confirmed).
        self.status = "UP"
        self.reads = Reads(self, self._queues)
        #: A get (:meth:`Reads.get_request`; bound here: it is every get's first call).
        self.get_request = self.reads.get_request
        self.counters = dict.fromkeys(
            ("total_items", "total_connections", "refused_connections", "cmd_get", "cmd_set", "cmd_peek",
             "get_hits", "get_misses", "bytes_read", "bytes_written", "queue_creates", "queue_deletes"),
            0,
        )
        self.requests = dict.fromkeys((*p.COMMANDS, "unknown"), 0)
        self.errors = dict.fromkeys(("ERROR", "CLIENT_ERROR", "SERVER_ERROR"), 0)

    # -- life ----------------------------------------------------------------------
    async def start(self) -> None:
        """Listen (``port`` 0: any free port; :attr:`port` says which), serve
        ``/metrics`` if asked, then create the directory if missing: a server that
        cannot listen creates nothing."""
        loop = self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        # The pool first: a client may connect as soon as the socket listens.
        self._pool = ThreadPoolExecutor(self.options.threads, thread_name_prefix="kestrel")
        host = self.options.host
        try:
            with naming_the_host(host):
                self._server = await loop.create_server(lambda: Connection(self), host, self.options.port)
            self.port = self._server.sockets[0].getsockname()[1]
            if self.options.metrics_port is not None:
                self._start_metrics()
            make_dirs(self.fs, self.directory)
        except BaseException:
            await self._stop_listening()
            self._pool.shutdown(wait=False)
            self._pool = None
            raise
        self._started = time.monotonic()
        self._ticker = loop.create_task(self._tick())
        log.info("serving queues of %s on %s:%d", self.directory, host, self.port)

    def _start_metrics(self) -> None:
        from engine.queue.kestrel.metrics import KestrelCollector, MetricsEndpoint

        host, port = self.options.metrics_host, self.options.metrics_port
        assert port is not None
        try:
            with naming_the_host(host, "metrics host"):
                self._metrics = MetricsEndpoint(KestrelCollector(self.metrics_snapshot), host, port)
        except OSError as exc:
            raise OSError(exc.errno, f"cannot serve metrics on {host}:{port}: {exc.strerror}") from None
        self.metrics_address = self._metrics.address

    async def _stop_listening(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        if self._metrics is not None:
            await asyncio.get_running_loop().run_in_executor(None, self._metrics.close)
            self._metrics = None

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
        if self._ticker is not None:
            self._ticker.cancel()
            self._ticker = None
        for conn in list(self._connections):
            self.reads.give_back_all(conn)
            conn.close()
        slots = list(self._queues.values())
        self._queues.clear()  # (the dict the reads hold)
        for slot in slots:
            slot.closed = True
            slot.wake()  # waiting gets answer END now
        tasks = [conn.task for conn in self._connections if conn.task is not None]
        if tasks:
            _, late = await asyncio.wait(tasks, timeout=10)
            for task in late:
                task.cancel()
        await self._stop_listening()
        if self._pool is not None:
            loop = asyncio.get_running_loop()
            for slot in slots:
                try:
                    await loop.run_in_executor(self._pool, slot.queue.close)
                except (EngineError, OSError) as exc:
                    log.error("closing queue %s: %s", slot.name, exc)
            self._pool.shutdown(wait=True)
            self._pool = None

    async def _tick(self) -> None:
        """Every second: look for journal files started since (``journal_rotations``)."""
        while True:
            await asyncio.sleep(1.0)
            for slot in list(self._queues.values()):
                try:
                    await self._run(slot.observe_files)
                except (EngineError, OSError) as exc:
                    log.warning("queue %s: listing journal files: %s", slot.name, exc)

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
                slot = await self._run(self._open, name)
                self._queues[name] = slot
                if not existed:
                    self.counters["queue_creates"] += 1
        return slot

    def _open(self, name: str) -> OpenQueue:
        # sync="always": the server fsyncs each batch of sets itself (OpenQueue: one
        # put_many and one sync() per batch, on the loop), not the queue per put.
        sync = "never" if self.options.sync == "always" else self.options.sync
        queue = Queue.open(self.directory, name, fs=self.fs, sync=sync)
        assert self._loop is not None and self._pool is not None
        loop = self._loop
        def created() -> None:  # in the pool: counted on the loop
            loop.call_soon_threadsafe(self._count, "queue_creates")

        return OpenQueue(queue, loop, self._pool, fsync=self.options.sync == "always", on_create=created)

    def _count(self, name: str) -> None:
        self.counters[name] += 1

    async def _existing(self, name: str) -> OpenQueue | None:
        """Queue ``name`` if it exists (open here, or with files in the directory):
        commands that only act on a queue (flush, delete) never create one."""
        slot = self._queues.get(name)
        if slot is None and name in await self._run(queue_names, self.fs, self.directory):
            slot = await self.open_queue(name)
        return slot

    async def _all_queues(self) -> list[OpenQueue]:
        """Every queue of the directory, opened (those another process holds in a
        way that refuses this one are left out, with a warning)."""
        names = set(await self._run(queue_names, self.fs, self.directory)) | set(self._queues)
        slots = []
        for name in sorted(names):
            try:
                slots.append(await self.open_queue(name))
            except EngineError as exc:
                log.warning("queue %s left out: %s", name, exc)
        return slots

    # -- status --------------------------------------------------------------------
    def reads_allowed(self) -> bool:
        return self.status != "QUIESCENT"

    def check_reads(self) -> None:
        """Refuse to take items while QUIESCENT (``SERVER_ERROR``, as Kestrel)."""
        if not self.reads_allowed():
            raise p.ProtocolError(p.server_error(f"the server is {self.status.lower()}: no reads"))

    def check_writes(self) -> None:
        """Refuse to change queues while READONLY or QUIESCENT."""
        if self.status in ("READONLY", "QUIESCENT"):
            raise p.ProtocolError(p.server_error(f"the server is {self.status.lower()}: no writes"))

    # -- connections ---------------------------------------------------------------
    def admit(self, conn: Connection) -> bool:
        """A new connection: False if there are already ``max_connections``."""
        if len(self._connections) >= self.options.max_connections:
            self.counters["refused_connections"] += 1
            return False
        self._connections.add(conn)
        self.counters["total_connections"] += 1
        return True

    def release(self, conn: Connection) -> None:
        """A connection ended: its open reads are given back."""
        self._connections.discard(conn)
        self.reads.give_back_all(conn)

    def connections(self) -> Iterable[Connection]:
        return list(self._connections)

    # -- set -----------------------------------------------------------------------
    def set_request(self, conn: Connection, request: p.SetRequest, block: bytes) -> None:
        """A set with its data block: STORED once the batch holding it is durable
        (:meth:`_stored`, called by the queue; a task only to open the queue first)."""
        self.counters["cmd_set"] += 1
        if block[-2:] != p.CRLF:
            raise p.client_error("bad data chunk: the data must be followed by \\r\\n", fatal=True)
        target = request.target
        if target.reader:
            raise p.client_error(f"cannot set to fanout reader {target.key!r}: set to queue {target.queue!r}")
        if self.status != "UP":
            self.check_writes()
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

    # -- the other commands --------------------------------------------------------
    async def command(self, conn: Connection, request: p.Request) -> bool:
        """Run ``request`` (anything but a set or get); False when the connection
        must end (``quit``, ``shutdown``)."""
        reply: bytes | None
        if isinstance(request, p.MonitorRequest):
            await self.reads.monitor(conn, request)
            return True
        if isinstance(request, p.ConfirmRequest):
            reply = self.reads.confirm(conn, request)
        elif isinstance(request, p.StatsRequest):
            reply = await self._stats_reply(request)
        elif isinstance(request, p.DumpStatsRequest):
            reply = await self._dump_stats_reply(request)
        elif isinstance(request, p.StatusRequest):
            reply = self._status(request)
        else:
            assert isinstance(request, p.SimpleRequest)
            reply = await self._simple(request)
            if reply is None:
                return False
            if request.noreply:
                return True
        conn.send(reply)
        return True

    def _status(self, request: p.StatusRequest) -> bytes:
        if request.new is None:
            return p.encode_line(self.status)
        if request.new != self.status:
            log.warning("server status: %s (was %s)", request.new, self.status)
            self.status = request.new
        return p.END

    async def _simple(self, request: p.SimpleRequest) -> bytes | None:
        """The reply to ``request`` (None: end the connection)."""
        command, target = request.command, request.target
        if command == "version":
            return p.encode_version(VERSION)
        if command == "reload":
            return p.RELOADED  # the settings are the command line's: nothing to re-read
        if command == "quit":
            return None
        if command == "shutdown":
            if not self.options.allow_shutdown:
                raise p.client_error("shutdown is disabled (start the server with --allow-shutdown)")
            self.request_stop()
            return None
        self.check_writes()
        if command == "flush_all":
            await self._flush_all(expired_only=False)
            return p.FLUSHED_ALL
        if command == "flush_all_expired":
            return p.encode_line(str(await self._flush_all(expired_only=True)))
        assert target is not None
        if command == "delete":
            await self._delete(target)
            return p.DELETED
        slot = await self._existing(target.queue)
        if slot is None or not await self._run(slot.has_reader, target.reader):
            return p.END if command == "flush" else p.encode_line("0")  # no such queue: nothing to do
        if command == "flush":
            await self._flush(slot, target.reader, expired_only=False)
            return p.END
        return p.encode_line(str(await self._flush(slot, target.reader, expired_only=True)))

    async def _flush(self, slot: OpenQueue, reader: str, *, expired_only: bool) -> int:
        if expired_only:
            count: int = await self._run(slot.flush_expired, reader)
            return count
        count = await self._run(slot.flush_reader, reader)
        slot.counters(reader)["total_flushes"] += 1
        return count

    async def _flush_all(self, *, expired_only: bool) -> int:
        """``flush`` (or ``flush_expired``) of every reader of every queue in the
        directory (the default reader of a queue with none); how many went."""
        count = 0
        for slot in await self._all_queues():
            for reader in await self._run(slot.queue.reader_names) or [""]:
                count += await self._flush(slot, reader, expired_only=expired_only)
        return count

    async def _delete(self, target: p.Target) -> None:
        slot = await self._existing(target.queue)
        if slot is None:
            return  # no such queue: nothing to delete (DELETED all the same, as Kestrel)
        if target.reader:
            existed = await self._run(slot.has_reader, target.reader)
            self.reads.forget(target.queue, target.reader)
            slot.drop_reader(target.reader)
            await self._run(slot.queue.remove_reader, target.reader)
            if existed:
                self.counters["queue_deletes"] += 1
            return
        # Under the queue's opening lock: a set or get of this name meanwhile waits
        # and then opens a new, empty queue (never one whose files are being deleted).
        async with self._opening.setdefault(target.queue, asyncio.Lock()):
            self.reads.forget(target.queue, None)
            if self._queues.pop(target.queue, None) is not slot:
                return  # deleted by another connection meanwhile
            slot.closed = True
            slot.wake()
            await self._run(slot.queue.close)
            await self._run(delete_queue_files, self.fs, self.directory, target.queue)
        self.counters["queue_deletes"] += 1

    # -- statistics ----------------------------------------------------------------
    async def reports(self) -> list[QueueReport]:
        """The figures of every queue of the directory (:func:`stats.queue_figures`)."""
        return [await self._run(queue_figures, slot, self.fs, self.directory) for slot in await self._all_queues()]

    async def stats(self) -> list[tuple[str, object]]:
        """Kestrel's ``stats``: server figures, then ``queue_<name>_<figure>`` for every
        queue in the directory and each of its fanout readers (``<queue>+<reader>``)."""
        reports = await self.reports()
        names = [n for report in reports for n in report.names]
        expires = sum(report.expired_readers for report in reports)
        c = self.counters
        server: list[tuple[str, object]] = [
            ("uptime", int(time.monotonic() - self._started)),
            ("time", int(time.time())),
            ("version", VERSION),
            ("curr_items", sum(n.items for n in names)),
            ("total_items", c["total_items"]),
            ("bytes", sum(n.bytes for n in names)),
            ("reserved_memory_ratio", "0.000"),  # engine reserves no memory for queues
            ("curr_connections", len(self._connections)),
            *[(name, c[name]) for name in ("total_connections", "cmd_get", "cmd_set", "cmd_peek", "get_hits",
                                          "get_misses", "bytes_read", "bytes_written", "queue_creates")],
            ("queue_deletes", c["queue_deletes"] + expires),
            ("queue_expires", expires),
        ]
        return server + [(f"queue_{n.name}_{figure}", value) for n in names for figure, value in n.figures]

    async def _stats_reply(self, request: p.StatsRequest) -> bytes:
        if request.group == "":
            return p.encode_stats(await self.stats())
        names = [n for report in await self.reports() for n in report.names]
        if request.group == "items":
            return p.encode_stats(items_stats(names))
        return p.encode_cachedump(cachedump(names, request.slab, request.limit))

    async def _dump_stats_reply(self, request: p.DumpStatsRequest) -> bytes:
        names = {n.name: n.figures for report in await self.reports() for n in report.names}
        wanted = [t.key for t in request.targets] or list(names)
        return p.encode_dump_stats([(name, names.get(name, [])) for name in wanted])

    def metrics_snapshot(self) -> Any:
        """The figures Prometheus scrapes (:class:`metrics.Snapshot`; on the HTTP
        server's thread: plain copies of integers the loop keeps)."""
        from engine.queue.kestrel.metrics import Snapshot, wall_time_of

        readers = [
            (slot.name, name, c["open_transactions"], c["waiters"])
            for slot in list(self._queues.values())
            for name, c in list(slot.stats_by_reader.items())
        ]
        return Snapshot(wall_time_of(self._started), len(self._connections), dict(self.counters),
                        dict(self.requests), dict(self.errors), readers)


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
        #: Where ``/metrics`` is served (None: not asked for).
        self.metrics_port = None if server.metrics_address is None else server.metrics_address[1]
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


def serve_in_thread(directory: str | os.PathLike[str], *, timeout: float = 30.0, **options: Any) -> RunningServer:
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


async def serve(directory: str | os.PathLike[str], options: ServerOptions, *, ready: Any = None) -> None:
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
