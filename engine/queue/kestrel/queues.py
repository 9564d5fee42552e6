"""The server's open queues: one :class:`Queue` per name, opened on first use and
kept open, with its batched sets, its waiting gets and its Kestrel counters.

What runs where: the event loop stages sets (``put_many``: the records go to an
in-memory buffer), makes them durable (``sync="always"``: ``sync()``, one write
and one fsync per batch, as Redis's ``appendfsync always`` does in its event
loop) and takes items that are already readable (``get(timeout=0)``, ``peek``,
``confirm``, ``abort``: memory or page-cache reads).  The other calls that may
block run in the server's bounded thread pool: opening a queue or a reader
(recovery; a reader file written and fsynced), ``flush``, ``delete``,
``stats()``, closing.  A waiting get (``/t=``) holds no thread and does not
poll: it waits on an asyncio future that this module resolves when its queue
may have a new item (sets were committed, an item was given back, the queue was
deleted).  Other processes may put into the same queues (``Queue.open``: many
producers); the server's readers then find their items by polling every
``poll_interval`` (a waiting get looks again every poll period once another
producer has written, once a second before), staging a set may wait for another
producer's append lock (held for at most about 50 ms), and a sync for another
producer's fsync under way (one fsync covers both).

Sets are batched per queue (group commit): those read in a loop turn and the
next one are committed together, one ``put_many`` and (``always``) one
``sync()``, and each client gets ``STORED`` straight after, from that same
callback.  While the loop is in the fsync, the next sets collect in the
sockets; the next turn reads them all and commits them in one batch.  No thread
hops: the fsync on the loop costs less than handing it to the pool and back
(each hop and each return of the GIL to a thread that waits for it took longer
than the fsync itself on the development machine).  ``STORED`` means durable
under the sync mode: fsynced (``always``), or staged in the queue (a period: the
queue writes it out and fsyncs in the background; ``never``).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from engine.errors import EngineError
from engine.fs import FileSystem
from engine.queue import naming
from engine.queue.queue import Queue
from engine.queue.reader import Item, Reader
from engine.queue.shared import state_name, sync_name

log = logging.getLogger("engine.queue.kestrel")


class OpenQueue:
    """One queue the server has open: its readers and Kestrel's counters."""

    def __init__(
        self, queue: Queue, loop: asyncio.AbstractEventLoop, pool: ThreadPoolExecutor, *, fsync: bool = False
    ) -> None:
        self.queue = queue
        self.name = queue.name
        self._loop = loop
        self._pool = pool
        self.readers: dict[str, Reader] = {}
        self._attach_lock = threading.Lock()
        self._pending: list[tuple[bytes, float | None, Callable[[int | BaseException], None]]] = []
        self._scheduled = False
        #: ``fsync``: the server makes each batch durable itself (``sync()`` on the
        #: loop) before its sets are answered; the queue runs with sync="never".
        self._fsync = fsync
        self._waiters: set[asyncio.Future[None]] = set()
        self.closed = False
        # Kestrel's per-queue counters (server lifetime).
        self.total_items = 0
        self.total_flushes = 0
        self.waiting = 0
        self.stats_by_reader: dict[str, dict[str, int]] = {}

    def counters(self, reader: str) -> dict[str, int]:
        """The per-reader counters (``age``, transactions...) Kestrel shows per queue."""
        found = self.stats_by_reader.get(reader)
        if found is None:
            found = {"age": 0, "transactions": 0, "canceled_transactions": 0, "open_transactions": 0}
            self.stats_by_reader[reader] = found
        return found

    def reader(self, name: str) -> Reader:
        """Reader ``name`` (opened on first use, in the pool: attaching writes and
        fsyncs its file; a new fanout reader starts at the tail, or takes over the
        default reader's backlog if that is the only reader on disk)."""
        found = self.readers.get(name)
        if found is None or found.closed:
            with self._attach_lock:  # two first gets at once attach it once
                found = self.readers.get(name)
                if found is None or found.closed:
                    found = self.queue.reader(name)
                    self.readers[name] = found
        return found

    async def open_reader(self, name: str) -> Reader:
        """:meth:`reader`, attached in the pool if it is not open yet."""
        found = self.readers.get(name)
        if found is not None and not found.closed:
            return found
        return await self._loop.run_in_executor(self._pool, self.reader, name)

    # -- sets ----------------------------------------------------------------------
    def put(self, data: bytes, expire_at: float | None, done: Callable[[int | BaseException], None]) -> None:
        """Add an item; ``done(id)`` (or ``done(error)``) is called on the loop once
        the item is durable under the server's sync mode (see the module's docstring)."""
        self._pending.append((data, expire_at, done))
        if not self._scheduled:
            self._scheduled = True
            # A timer due now, not call_soon: asyncio runs it after the callbacks of
            # the next loop turn's reads, so that the sets read then (those that
            # arrived during the last fsync, most of them) join this batch.
            self._loop.call_later(0, self._commit)

    def _commit(self) -> None:
        """On the loop: stage the pending sets (one ``put_many``), make them durable
        (``always``: one ``sync()``, one write and one fsync), answer them."""
        self._scheduled = False
        batch, self._pending = self._pending, []
        results: list[int | BaseException]
        try:
            results = self._put_batch(batch)
            if self._fsync:
                self.queue.sync()
        except Exception as exc:  # handed to each waiting set
            results = [exc] * len(batch)
        self._settle(batch, results)

    def _settle(self, batch: list[Any], ids: list[int | BaseException]) -> None:
        self.total_items += sum(1 for i in ids if isinstance(i, int))
        for (_, _, done), result in zip(batch, ids, strict=True):
            try:
                done(result)
            except Exception:  # one connection's failure never stops the others' answers
                log.exception("queue %s: answering a set", self.name)
        self.wake()

    def _put_batch(self, batch: list[tuple[bytes, float | None, Any]]) -> list[int | BaseException]:
        """One ``put_many`` for the batch; if it fails (a full queue, say), each
        item on its own so that each set gets its own answer."""
        try:
            return list(self.queue.put_many([(data, expire) for data, expire, _ in batch]))
        except EngineError:
            if len(batch) == 1:
                raise
        results: list[int | BaseException] = []
        for data, expire, _ in batch:
            try:
                results.append(self.queue.put(data, expire_at=expire))
            except EngineError as exc:
                results.append(exc)
        return results

    # -- waiting gets --------------------------------------------------------------
    def wake(self) -> None:
        """Tell every waiting get to look again (on the event loop's thread)."""
        waiters, self._waiters = self._waiters, set()
        for future in waiters:
            if not future.done():
                future.set_result(None)

    async def wait_for_item(
        self, take: Callable[[], Item | None], wait_ms: int | None, *, looked: bool = False
    ) -> Item | None:
        """``take()`` now (unless the caller just ``looked``), and if nothing came
        and ``wait_ms`` is given, again each time the queue may have a new item,
        until ``wait_ms`` have passed."""
        item = None if looked else take()
        if item is not None or not wait_ms or self.closed:
            return item
        deadline = time.monotonic() + wait_ms / 1000
        self.waiting += 1
        try:
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or self.closed:
                    return None
                future: asyncio.Future[None] = self._loop.create_future()
                self._waiters.add(future)
                # Items put by another process wake nobody here: every poll
                # interval, look whether the tail moved (one read of the
                # producers' shared record) and only then at the reader.
                tail = self.queue.current_tail()
                step = min(remaining, self.queue.config.poll_interval)
                try:
                    await asyncio.wait_for(future, step)
                except TimeoutError:
                    if step >= remaining:
                        return take()
                    if self.queue.current_tail() == tail:
                        continue
                finally:
                    self._waiters.discard(future)
                item = take()
                if item is not None:
                    return item
        finally:
            self.waiting -= 1

    # -- whole-queue operations (in the pool) ----------------------------------------
    def flush_reader(self, name: str) -> int:
        """Confirm every item ``name`` has not been given yet (Kestrel's flush);
        items open on connections stay open.  Returns how many went."""
        return sum(1 for _ in self.reader(name))  # iterating confirms each item

    def close(self) -> None:
        """Close the queue (readers checkpointed, locks released)."""
        self.closed = True
        self.queue.close()


def delete_queue_files(fs: FileSystem, directory: str, name: str) -> int:
    """Delete every file of queue ``name`` in ``directory`` (writer and reader files,
    checkpoint temporaries, lock files); the queue must be closed.  Returns how many."""
    count = 0
    for filename in fs.listdir(directory):
        if (
            naming.parse_writer(name, filename) is not None
            or naming.parse_reader(name, filename) is not None
            or naming.parse_reader_lock(name, filename) is not None
            or naming.is_temp(name, filename)
            or filename in (naming.writer_lock_name(name), state_name(name), sync_name(name))
        ):
            fs.unlink(naming.join(directory, filename))
            count += 1
    if count:
        fs.fsync_dir(directory)
    return count
