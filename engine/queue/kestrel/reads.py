"""Taking items: ``get`` with its options, ``monitor`` and ``confirm``, and the
reads each connection holds open (Kestrel's reliable reads).

A plain ``get`` removes the item at once (confirmed on the reader before the
reply is written: at most once).  ``/open`` and ``monitor`` open reads: the
item is sent and stays open on the connection, oldest first, until ``/close``
or ``confirm`` (confirmed) or ``/abort`` (given back: it is delivered next); a
connection that ends for any reason gives back what it holds.  At most
``max_open_reads`` reads are open per queue name and connection (Kestrel's
``maxOpenTransactions``, default 1: the guide's one open read per connection);
a plain get beside an open read is refused (``ERROR``), as Kestrel does.

A get that must wait (``/t=``) and every ``monitor`` run as a task of their
connection; the others are answered at once, on the event loop.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Coroutine, Iterable
from functools import partial
from typing import Any, Protocol

from engine.errors import EngineError
from engine.queue.kestrel import protocol as p
from engine.queue.kestrel.connection import Connection, HeldReads
from engine.queue.kestrel.queues import OpenQueue
from engine.queue.reader import Item, Reader

log = logging.getLogger("engine.queue.kestrel")


class ReadService(Protocol):
    """What the reads need of the server (:class:`~.server.KestrelServer`)."""

    counters: dict[str, int]
    max_open_reads: int
    #: UP, WRITEAVOID, READONLY or QUIESCENT (no reads).
    status: str

    async def open_queue(self, name: str) -> OpenQueue: ...

    def check_reads(self) -> None: ...

    def reads_allowed(self) -> bool: ...

    def connections(self) -> Iterable[Connection]: ...


class Reads:
    """The get, monitor and confirm handlers, and every connection's open reads.
    ``queues``: the server's open queues by name (read on every get)."""

    def __init__(self, server: ReadService, queues: dict[str, OpenQueue]) -> None:
        self.server = server
        self._queues = queues

    # -- get -----------------------------------------------------------------------
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
        slot = await self.server.open_queue(request.target.queue)
        reader = await slot.open_reader(request.target.reader)
        waiting = self._get_now(conn, request, slot, reader)
        if waiting is not None:
            await waiting

    def _get_now(
        self, conn: Connection, request: p.GetRequest, slot: OpenQueue, reader: Reader
    ) -> Coroutine[Any, Any, None] | None:
        """Serve ``request``; a coroutine to await when it must wait for an item."""
        server = self.server
        target = request.target
        counters = slot.counters(target.reader)
        held = self._held(conn, target.key, slot) if conn.open else None  # (the common case: none)
        if request.abort:
            if held is not None:
                self._give_back(conn, target.key, held, 1, reader)
            conn.send(p.END)
            return None
        if request.close and held is not None:
            self._confirm(conn, target.key, held, 1, reader)
            held = self._held(conn, target.key, slot)
        if request.close and not request.open:
            conn.send(p.END)
            return None
        if server.status == "QUIESCENT":
            server.check_reads()  # takes no item (confirming is fine)
        if request.peek:
            server.counters["cmd_peek"] += 1
            take: Callable[[], Item | None] = reader.peek
        else:
            server.counters["cmd_get"] += 1
            pending = 0 if held is None else len(held)
            if request.open:
                if pending >= server.max_open_reads:
                    raise p.ProtocolError(p.ERROR)  # Kestrel: too many open reads
                counters["transactions"] += 1
            elif pending:
                raise p.ProtocolError(p.ERROR)  # Kestrel: no plain get beside an open read
            take = partial(reader.get, 0)
        item = take()
        if item is None and request.wait_ms and not slot.closed:
            return self._get_wait(conn, request, slot, reader, take)
        self._got(conn, request, slot, reader, item)
        return None

    async def _get_wait(self, conn: Connection, request: p.GetRequest, slot: OpenQueue, reader: Reader,
                        take: Callable[[], Item | None]) -> None:
        item = await slot.wait_for_item(lambda: None if slot.closed or reader.closed else take(), request.wait_ms,
                                        request.target.reader, looked=True)
        self._got(conn, request, slot, reader, item)

    def _got(self, conn: Connection, request: p.GetRequest, slot: OpenQueue, reader: Reader,
             item: Item | None) -> None:
        """Reply to a get with ``item`` (None: ``END``); open it, or confirm it."""
        counters = self.server.counters
        if item is None:
            counters["get_misses"] += 1
            conn.send(p.END)
            return
        if not request.peek:
            if conn.closed:  # the client left while it waited: the item was never sent
                reader.abort(item.id)
                slot.wake()
                return
            if request.open:
                self._hold(conn, request.target.key, slot, request.target.reader, item)
            else:
                reader.confirm(item.id)
            slot.counters(request.target.reader)["age"] = _age_ms(item)
        counters["get_hits"] += 1
        conn.send(p.encode_value(request.key, item.data))

    # -- monitor and confirm ------------------------------------------------------------
    async def monitor(self, conn: Connection, request: p.MonitorRequest) -> None:
        """Open each item that comes within ``request.seconds`` (up to its
        ``max_items`` and the open-read limit), sending each as a ``get`` reply,
        then a bare ``END`` (Kestrel 2's ``monitor``)."""
        server = self.server
        server.check_reads()
        target = request.target
        slot = await server.open_queue(target.queue)
        reader = await slot.open_reader(target.reader)
        counters = slot.counters(target.reader)
        deadline = time.monotonic() + request.seconds
        limit = server.max_open_reads if request.max_items is None else request.max_items
        take = partial(reader.get, 0)
        sent = 0
        while sent < limit and not conn.closed and not slot.closed and not reader.closed and server.reads_allowed():
            held = self._held(conn, target.key, slot)
            if held is not None and len(held) >= server.max_open_reads:
                break
            remaining_ms = (deadline - time.monotonic()) * 1000
            if remaining_ms <= 0:
                break
            counters["transactions"] += 1
            item = await slot.wait_for_item(lambda: None if slot.closed or reader.closed else take(), remaining_ms,
                                            target.reader)
            if item is None:
                server.counters["get_misses"] += 1
                break
            if conn.closed:
                reader.abort(item.id)
                slot.wake()
                return
            self._hold(conn, target.key, slot, target.reader, item)
            counters["age"] = _age_ms(item)
            server.counters["get_hits"] += 1
            conn.send(p.encode_value(target.key, item.data))
            sent += 1
        conn.send(p.END)

    def confirm(self, conn: Connection, request: p.ConfirmRequest) -> bytes:
        """``confirm <queue> <count>``: confirm the ``count`` oldest reads open on
        this connection (``END``); ``ERROR`` if it holds fewer (or ``count`` is 0),
        and then nothing is confirmed, as Kestrel."""
        key = request.target.key
        held = conn.open.get(key)
        if held is None or request.count == 0 or request.count > len(held):
            return p.ERROR
        reader = held.slot.readers.get(held.reader)
        if held.slot.closed or reader is None or reader.closed:
            del conn.open[key]  # its queue or reader was deleted meanwhile
            return p.ERROR
        self._confirm(conn, key, held, request.count, reader)
        return p.END

    # -- the reads a connection holds -------------------------------------------------
    @staticmethod
    def _held(conn: Connection, key: str, slot: OpenQueue) -> HeldReads | None:
        held = conn.open.get(key)
        if held is not None and held.slot is not slot:  # its queue was deleted meanwhile
            del conn.open[key]
            return None
        return held

    @staticmethod
    def _hold(conn: Connection, key: str, slot: OpenQueue, reader: str, item: Item) -> None:
        held = conn.open.get(key)
        if held is None:
            held = conn.open[key] = HeldReads(slot, reader)
        held.items.append((item.id, len(item.data)))
        counters = slot.counters(reader)
        counters["open_transactions"] += 1
        counters["open_bytes"] += len(item.data)

    @staticmethod
    def _release(conn: Connection, key: str, held: HeldReads, count: int) -> list[int]:
        """Take the ``count`` oldest reads off ``held`` (their counters too)."""
        taken = [held.items.popleft() for _ in range(count)]
        if not held.items:
            del conn.open[key]
        counters = held.slot.counters(held.reader)
        counters["open_transactions"] -= count
        counters["open_bytes"] -= sum(size for _, size in taken)
        return [xid for xid, _ in taken]

    def _confirm(self, conn: Connection, key: str, held: HeldReads, count: int, reader: Reader) -> None:
        reader.confirm(self._release(conn, key, held, count))

    def _give_back(self, conn: Connection, key: str, held: HeldReads, count: int, reader: Reader) -> None:
        slot = held.slot
        reader.abort(self._release(conn, key, held, count))
        slot.counters(held.reader)["canceled_transactions"] += count
        slot.wake()

    def give_back_all(self, conn: Connection) -> None:
        """Give back every read open on ``conn`` (it is ending)."""
        for key, held in list(conn.open.items()):
            slot = held.slot
            reader = slot.readers.get(held.reader)
            if slot.closed or reader is None or reader.closed:
                del conn.open[key]
                continue
            try:
                self._give_back(conn, key, held, len(held), reader)
            except EngineError as exc:
                conn.open.pop(key, None)
                log.error("queue %s: giving back %d open reads: %s", slot.name, len(held), exc)

    def forget(self, queue: str, reader: str | None) -> None:
        """Drop every connection's open reads of ``queue`` (of its ``reader`` only,
        unless None): the queue or reader is being deleted."""
        for conn in self.server.connections():
            for key, held in list(conn.open.items()):
                if held.slot.name == queue and (reader is None or held.reader == reader):
                    self._release(conn, key, held, len(held))


def _age_ms(item: Item) -> int:
    """How long ``item`` waited in the queue, in ms (Kestrel's ``age``)."""
    return max(0, int(time.time() * 1000) - item.add_time_ms)
