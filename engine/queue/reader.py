"""A queue reader: open reads, confirm / abort, checkpoints.

Each reader has its own view of the queue (fanout): a :class:`ReaderState` (what is
confirmed), a :class:`JournalCursor` (where it is in the writer files), the items it
handed out and not yet confirmed ("open reads", never journaled: after a crash they
are delivered again), and the aborted items waiting to be delivered again first.

A reader lives in a producer's process (``Queue.reader``) or in any other
(``Queue.open_reader``); either way it is one *consumer* of its reader name,
which any number of consumers may hold at once, and it runs the consumers'
protocol of :mod:`engine.queue.compete` whether others are there or not: it
claims every item before delivering it, and writes the shared checkpoint merged
with the others' confirmations.
"""

from __future__ import annotations

import bisect
import datetime
import logging
import threading
import time
import warnings
from collections.abc import AsyncGenerator, Callable, Iterable, Iterator
from contextlib import AbstractAsyncContextManager, contextmanager
from dataclasses import dataclass, replace
from typing import Any

from engine.conventions import Serializer, datetime_from_ms, decoding_class
from engine.errors import ClosedError, EngineError
from engine.fs import FileSystem, HeldLock
from engine.queue import aio, census, checkpoint, codec, naming
from engine.queue.compete import Claims
from engine.queue.config import QueueConfig
from engine.queue.cursor import JournalCursor, JournalSource
from engine.queue.diagnose import backlog_bytes, last_checkpoint_ns
from engine.queue.state import ReaderState
from engine.queue.view import ReaderStats

log = logging.getLogger("engine.queue")

#: Called to move an item to another queue of the same directory (error / expired).
Punt = Callable[[str, "Item"], None]


@dataclass(slots=True)
class Item:
    """One queue item as delivered to a reader.

    ``data`` is the payload as stored (bytes); ``value`` is what was put (the
    serializer's ``loads(data)`` when the queue has one, else ``data``).  Times:
    ``add_time_ms`` / ``expire_time_ms`` are exact milliseconds since the epoch
    (the libkestrel journal's unit); ``added_at`` / ``expires_at`` are aware UTC
    datetimes and ``add_timestamp`` / ``expire_timestamp`` seconds since the
    epoch (the unit ``put(expire_at=)`` takes).

    Treat it as read-only.  (Not ``frozen``: a frozen dataclass costs twice as
    much to build, and one is built per item delivered.)
    """

    id: int
    data: bytes
    add_time_ms: int
    expire_time_ms: int | None = None
    error_count: int = 0

    @property
    def value(self) -> Any:
        """The item as put: ``data`` itself when the queue has no serializer."""
        return self.data

    @property
    def added_at(self) -> datetime.datetime:
        return datetime_from_ms(self.add_time_ms)

    @property
    def expires_at(self) -> datetime.datetime | None:
        return None if self.expire_time_ms is None else datetime_from_ms(self.expire_time_ms)

    @property
    def add_time(self) -> int:
        """Deprecated: milliseconds since the epoch; use ``add_time_ms`` (or ``added_at``)."""
        warnings.warn("Item.add_time is deprecated: use add_time_ms or added_at", DeprecationWarning, stacklevel=2)
        return self.add_time_ms

    @property
    def expire_time(self) -> int | None:
        """Deprecated: milliseconds since the epoch; use ``expire_time_ms`` (or ``expires_at``)."""
        message = "Item.expire_time is deprecated: use expire_time_ms or expires_at"
        warnings.warn(message, DeprecationWarning, stacklevel=2)
        return self.expire_time_ms

    @property
    def add_timestamp(self) -> float:
        return self.add_time_ms / 1000

    @property
    def expire_timestamp(self) -> float | None:
        return None if self.expire_time_ms is None else self.expire_time_ms / 1000


def item_class(serializer: Serializer | None) -> type[Item]:
    """The class a reader builds its items with: :class:`Item`, or a subclass whose
    ``value`` is ``serializer.loads(data)`` (:func:`engine.conventions.decoding_class`,
    chosen once per reader, so a get without a serializer costs nothing more)."""
    return decoding_class(Item, serializer, "data")


def _item_id(item: Item) -> int:
    return item.id


def _ids(ids: int | Iterable[int]) -> list[int]:
    return [ids] if isinstance(ids, int) else list(ids)


class Reader:
    """One consumer of a named reader of a queue.  Thread-safe.  Any number of
    consumers, in any processes, may hold one reader name: they share its items
    (each is delivered to one of them) and its checkpoint (see
    :mod:`engine.queue.compete`)."""

    def __init__(
        self,
        *,
        name: str,
        queue: str,
        directory: str,
        fs: FileSystem,
        source: JournalSource,
        state: ReaderState,
        config: QueueConfig,
        lock: HeldLock,
        clock: Callable[[], float],
        punt: Punt | None,
        tail: Callable[[], int],
    ) -> None:
        self.name = name
        self.queue = queue
        self.directory = directory
        self.path = naming.join(directory, naming.reader_name(queue, name))
        self._fs = fs
        self._source = source
        self._state = state
        self._config = config
        self._reader_lock = lock
        self._clock = clock
        self._punt = punt
        self._tail = tail
        self._lock = threading.Lock()
        self._checkpoint_lock = threading.Lock()
        self._cursor = JournalCursor(source, state.head)
        #: Item, or its subclass that decodes ``value`` with the queue's serializer.
        self._item = item_class(config.payload_serializer)
        self._ready = self._cursor.ready  # the cursor's decoded batch (same deque for life)
        self._max_age = config.max_age
        self._claims = Claims(lock)
        self._others: dict[int, Item] = {}  # items another consumer held when this one came to them
        self._retry_at = 0.0
        self._open: dict[int, Item] = {}  # open reads
        self._deadlines: dict[int, float] = {}  # their open_read_timeout deadlines
        self._open_timeout = config.open_read_timeout
        # Aborted items, by id, delivered before the journal's (usually few: a list
        # kept sorted with insort; its emptiness test is the one every get pays).
        self._returned: list[Item] = []
        self._dirty = False
        self._closed = False
        self._closed_note = ""  # why, when its queue was closed for it (see Queue._close_dropped)
        self.durable_head = state.head  # head as of the last checkpoint on disk
        #: Id ranges found missing from the journal while reading (see _skip_hole).
        self.skipped_holes: list[tuple[int, int]] = []
        self.expired_count = 0
        self.discarded_count = 0
        self.confirm_count = 0  # this consumer's confirms and aborts since it opened (stats)
        self.abort_count = 0
        self.error_punted_count = 0

    # -- properties ----------------------------------------------------------------
    @property
    def head(self) -> int:
        return self._state.head

    @property
    def done_ids(self) -> tuple[int, ...]:
        with self._lock:
            return tuple(self._state.done)

    @property
    def open_ids(self) -> list[int]:
        with self._lock:
            return sorted(self._open)

    @property
    def dirty(self) -> bool:
        return self._dirty

    @property
    def closed(self) -> bool:
        return self._closed

    def __len__(self) -> int:
        """Items not yet confirmed (including open reads)."""
        with self._lock:
            return self._state.pending(max(self._tail(), self._state.head))

    def __contains__(self, item_id: object) -> bool:
        """``item_id in reader``: the id is in the queue and not yet confirmed by
        this reader (waiting, or an open read)."""
        if not isinstance(item_id, int) or isinstance(item_id, bool):
            return False
        with self._lock:
            state = self._state
            return state.head < item_id <= self._tail() and not state.is_done(item_id)

    def __enter__(self) -> Reader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def note_closed_by_queue(self, note: str) -> None:
        """Say, in the ClosedError of a later call, why this reader was closed for
        its user (its Queue was dropped)."""
        self._closed_note = note

    def mark_dirty(self) -> None:
        """Write the checkpoint at the next round even if nothing is confirmed
        (what attaching changed must reach the file)."""
        self._dirty = True

    def snapshot(self) -> tuple[int, tuple[int, ...]]:
        """``(head, done ids)`` of this consumer now."""
        with self._lock:
            return self._state.snapshot()

    @property
    def last_read_id(self) -> int:
        """The highest id this consumer has read from the journal so far."""
        return self._cursor.last_id

    def sharing(self) -> bool:
        """Whether another consumer holds this reader name now (they share its items)."""
        with self._lock:
            self._check_open()
            return self._claims.others_present()

    def cursor_position(self) -> tuple[str | None, int, int]:
        """``(file, offset, bytes decoded not yet handed out)``: where this reader
        is in the writer files (for ``max_size``)."""
        with self._lock:
            path, offset = self._cursor.position()
            return path, offset, self._cursor.ready_bytes

    def verify(self, tail: int) -> None:
        """Check this reader's state against the journal's ``tail`` (raise EngineError)."""
        with self._lock:
            head, done = self._state.snapshot()
        if any(i <= head for i in done):
            raise EngineError(f"reader {self.name!r} has done ids at or below its head {head}")
        if head > tail or any(i > tail for i in done):
            log.info("queue %s reader %r: ids above the tail %d (burnt at the next open)", self.queue, self.name,
                     tail)

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError(f"reader {self.name!r} of queue {self.queue!r} is closed{self._closed_note}")

    # -- delivering ----------------------------------------------------------------
    def _now_ms(self) -> int:
        return int(self._clock() * 1000)

    def _is_expired(self, item: Item, now_ms: int) -> bool:
        if item.expire_time_ms is None and self._config.max_age is None:
            return False
        limit = item.expire_time_ms
        if self._config.max_age is not None:
            aged = item.add_time_ms + int(self._config.max_age * 1000)
            limit = aged if limit is None else min(limit, aged)
        return limit is not None and limit <= now_ms

    def _expire(self, item: Item) -> None:
        self.expired_count += 1
        target = self._config.expired
        if target != "drop" and self._punt is not None:
            # Moved without its expiry, or it would expire again at once over there.
            self._punt(target, replace(item, expire_time_ms=None))
        self._state.confirm(item.id)
        self._dirty = True

    def _next_from_journal(self, now_ms: int | None, *, consume: bool) -> Item | None:
        # The hot path of every get: kept flat on purpose (attribute lookups hoisted).
        cursor, state, open_reads = self._cursor, self._state, self._open
        while True:
            put = cursor.peeked if cursor.peeked is not None else cursor.peek()
            if put is None:
                return None
            xid = put.xid
            head = state.head
            if xid <= head or xid in open_reads or xid in state.members:
                cursor.peeked = None
                continue
            low = (cursor.prev_id if cursor.prev_id > head else head) + 1
            if xid > low:
                # A hole in the ids (repair dropped damaged records): nothing to wait for.
                self._skip_hole(low, xid - 1)
            if put.expire_time is not None and codec.is_burnt(put):
                cursor.peeked = None
                self._skip_burnt(xid)
                continue
            item = self._item(*put)
            if (put.expire_time is not None or self._config.max_age is not None) and self._is_expired(
                item, self._now_ms() if now_ms is None else now_ms
            ):
                cursor.peeked = None
                self._expire(item)
                continue
            if consume:
                cursor.peeked = None
            return item

    def _skip_hole(self, low: int, high: int) -> None:
        """Ids ``low..high`` are not in the journal: count them done (one range) and
        say so.  Holes come from ids burnt after a crash, a repair's cut, or damage
        (an older writer file cut short at a batch boundary): never silently."""
        if any(lo <= low and high <= hi for lo, hi in self._state.gaps):
            return  # already known (ids burnt at open): nothing new to report
        self._state.skip_missing(low, high)
        self._dirty = True
        self.skipped_holes.append((low, high))
        log.warning("queue %s reader %r: ids %d..%d are not in the journal: skipped", self.queue, self.name, low, high)

    def _take_from_journal(self) -> Item | None:
        """:meth:`_next_from_journal` with consume=True, for the plain case (no
        peeked record, no expiry rules): the per-item cost of every get."""
        cursor = self._cursor
        if cursor.peeked is not None or self._config.max_age is not None:
            return self._next_from_journal(None, consume=True)
        ready, state, open_reads = cursor.ready, self._state, self._open
        while True:
            if not ready and not cursor.fill():
                return None
            put = ready.popleft()
            xid = put[0]
            head = state.head
            if xid <= head or xid in open_reads or xid in state.members:
                continue
            if xid > head + 1:  # maybe a hole in the ids (never when reading in order)
                prev = cursor.gaps.get(xid, xid - 1)
                low = (prev if prev > head else head) + 1
                if xid > low:
                    self._skip_hole(low, xid - 1)
            if put[3] is not None and codec.is_burnt(put):
                self._skip_burnt(xid)
                continue
            item = self._item(*put)  # Put's fields are Item's, in the same order
            if put[3] is not None and self._is_expired(item, self._now_ms()):
                self._expire(item)
                continue
            return item

    def _skip_burnt(self, xid: int) -> None:
        """A BURNT record (an id a crash took out of the journal, see
        :func:`codec.encode_burnt`): not an item, done for every reader."""
        self._state.confirm(xid)
        self._dirty = True

    def _next_item(self, *, consume: bool) -> Item | None:
        if self._open_timeout is not None:
            self._expire_open_reads()
        if not self._returned:
            return self._take_from_journal() if consume else self._next_from_journal(None, consume=False)
        now_ms = self._now_ms()
        while self._returned:
            item = self._returned[0]
            if self._state.is_done(item.id):
                self._returned.pop(0)
                continue
            if self._is_expired(item, now_ms):
                self._returned.pop(0)
                self._expire(item)
                continue
            if consume:
                self._returned.pop(0)
            return item
        return self._next_from_journal(now_ms, consume=consume)

    @property
    def source(self) -> JournalSource:
        """Where this reader's items come from (its wake-ups; :mod:`engine.queue.aio`)."""
        return self._source

    def wait_step(self, deadline: float | None) -> float | None:
        """How long one wait may last: until the caller's deadline, the next open
        read's timeout, and at most 1 s."""
        now = time.monotonic()
        step = 1.0
        if deadline is not None:
            step = min(step, deadline - now)
        if self._deadlines:
            step = min(step, min(self._deadlines.values()) - now)
        return max(0.0, step)

    def get(self, timeout: float | datetime.timedelta | None = None) -> Item | None:
        """Open a read: the next item, or None if none arrives within ``timeout``.

        ``timeout``: seconds or a ``datetime.timedelta``; None waits for ever, 0
        does not wait.  The item stays "open" until :meth:`confirm` (gone for this
        reader) or :meth:`abort` (comes back).
        """
        with self._lock:
            # Most gets: the next decoded record is the next item in order (head + 1),
            # already claimed (claims are taken a run ahead), nothing aborted or
            # peeked before it, no expiry or open-read timeout to look at.  Taken
            # here at the cost of one look; any other case goes on to the
            # consumers' protocol step by step (_next_claimed, below).
            ready = self._ready
            if ready and not self._returned and self._cursor.peeked is None and not self._closed:
                put = ready[0]
                xid = put[0]
                claims = self._claims
                # (head + 1 is never in the done set: confirming swallows it.)
                if (
                    xid == self._state.head + 1
                    and claims.low <= xid <= claims.high
                    and put[3] is None
                    and self._max_age is None
                    and self._open_timeout is None
                    and xid not in self._open
                ):
                    ready.popleft()
                    item = self._item(*put)  # Put's fields are Item's, in the same order
                    self._open[xid] = item
                    return item
        wait = aio.wait_seconds(timeout)
        deadline = None
        while True:
            # Read before looking, so a put between the look and the wait wakes us.
            version = self._source.version if wait != 0 else 0
            with self._lock:
                if self._closed:
                    self._check_open()
                got = self._next_claimed()
                if got is not None:
                    self._open[got.id] = got
                    if self._open_timeout is not None:
                        self._deadlines[got.id] = time.monotonic() + self._open_timeout
                    return got
            if wait == 0:
                return None
            if wait is not None:
                now = time.monotonic()
                if deadline is None:
                    deadline = now + wait
                if now >= deadline:
                    return None
            self._source.wait(version, self.wait_step(deadline))

    def _next_claimed(self) -> Item | None:
        """The next item this consumer may deliver, claimed (``_lock`` held):
        the consumers' protocol of :mod:`engine.queue.compete`."""
        claims = self._claims
        if self._others and time.monotonic() >= self._retry_at:
            self._retry_at = time.monotonic() + self._config.poll_interval
            self._retry_others()
        while True:
            item = self._next_item(consume=True)
            if item is None:
                return None
            xid = item.id
            if not claims.holds(xid):
                ready = self._ready
                ahead = ready[-1][0] if ready else xid
                if not claims.claim(xid, ahead):
                    self._others[xid] = item  # another consumer holds it
                    continue
                if claims.changed() and self._merge_checkpoint() and self._state.is_done(xid):
                    claims.release(xid)  # another consumer confirmed it meanwhile
                    continue
            return item

    def _retry_others(self) -> None:
        """Items another consumer held: free now?  Confirmed there (dropped), or
        aborted or left by a consumer that died: given back here, ``error_count + 1``."""
        claims = self._claims
        freed = []
        for xid in sorted(self._others):
            if self._state.is_done(xid):
                del self._others[xid]
            elif claims.claim(xid, xid):
                freed.append(self._others.pop(xid))
        if not freed:
            return
        self._merge_checkpoint()
        for item in freed:
            if self._state.is_done(item.id):
                claims.release(item.id)
            else:
                self._give_back(item)  # delivered again first (or to the error queue)

    def _merge_checkpoint(self) -> bool:
        """Merge the shared checkpoint (the reader file) into this consumer's
        state (``_lock`` held); False when the file is gone."""
        self._claims.seen_gen = self._claims.generation()  # before the read: a later write changes it again
        try:
            head, done = checkpoint.load_reader_file(self._fs, self.path)
        except FileNotFoundError:
            return False
        state = self._state
        if head > state.head:
            state.advance_to(head)
        for xid in done:
            if xid > state.head:
                state.confirm(xid)
        return True

    def peek(self) -> Item | None:
        """The item :meth:`get` would return now, without opening a read."""
        with self._lock:
            self._check_open()
            return self._next_item(consume=False)

    def confirm(self, ids: int | Iterable[int]) -> int:
        """Confirm open reads (any order); returns how many were confirmed."""
        if isinstance(ids, int):  # the common case, kept short
            with self._lock:
                if self._closed:
                    self._check_open()
                if self._open.pop(ids, None) is None:
                    return 0
                if self._deadlines:
                    self._deadlines.pop(ids, None)
                state = self._state
                if ids == state.head + 1 and not state.members and not state.gaps:
                    state.head = ids
                elif not state.confirm(ids):
                    return 0
                self._dirty = True
                self.confirm_count += 1
                return 1
        count = 0
        with self._lock:
            self._check_open()
            state = self._state
            for xid in (ids,) if isinstance(ids, int) else ids:
                self._deadlines.pop(xid, None)
                if self._open.pop(xid, None) is None:
                    continue
                if xid == state.head + 1 and not state.members and not state.gaps:
                    state.head = xid  # the common case: in-order confirm
                    count += 1
                elif state.confirm(xid):
                    count += 1
            if count:
                self._dirty = True
                self.confirm_count += count
        return count

    def abort(self, ids: int | Iterable[int]) -> int:
        """Give open reads back: they are delivered again first, error_count + 1."""
        count = 0
        with self._lock:
            self._check_open()
            for xid in _ids(ids):
                entry = self._open.pop(xid, None)
                self._deadlines.pop(xid, None)
                if entry is not None:
                    self._give_back(entry)
                    self._let_others_have(entry)
                    count += 1
            self.abort_count += count
        if count:
            self._source.notify()
        return count

    def _give_back(self, item: Item) -> None:
        item = replace(item, error_count=item.error_count + 1)
        limit = self._config.max_errors
        if limit is not None and item.error_count >= limit:
            self.error_punted_count += 1
            if self._config.error_queue is not None and self._punt is not None:
                self._punt(self._config.error_queue, item)
            else:
                log.warning(
                    "queue %s reader %r: item %d dropped after %d errors",
                    self.queue,
                    self.name,
                    item.id,
                    item.error_count,
                )
            self._state.confirm(item.id)
            self._dirty = True
            return
        bisect.insort(self._returned, item, key=_item_id)

    def _expire_open_reads(self) -> None:
        if self._open_timeout is None or not self._deadlines:
            return
        now = time.monotonic()
        stale = [xid for xid, deadline in self._deadlines.items() if deadline <= now]
        for xid in stale:
            del self._deadlines[xid]
            item = self._open.pop(xid, None)
            if item is None:
                continue
            log.warning("queue %s reader %r: open read %d timed out; aborted", self.queue, self.name, xid)
            self.abort_count += 1
            self._give_back(item)
            self._let_others_have(item)

    def _let_others_have(self, item: Item) -> None:
        """After an abort (or an open read's timeout): let the other consumers
        have it too, unless it was punted (done, kept until the checkpoint)."""
        if not self._state.is_done(item.id):
            self._claims.release(item.id)

    def discard_oldest(self) -> bool:
        """Drop the oldest undelivered item (discard_old_when_full)."""
        with self._lock:
            item = self._next_claimed()
            if item is None:
                return False
            self._state.confirm(item.id)
            self.discarded_count += 1
            self._dirty = True
            return True

    @contextmanager
    def read(self, timeout: float | datetime.timedelta | None = None) -> Iterator[Item | None]:
        """``with reader.read(t) as item:`` confirm on success, abort on an exception.

        ``item`` is None if nothing arrived within ``timeout``.
        """
        item = self.get(timeout)
        if item is None:
            yield None
            return
        try:
            yield item
        except BaseException:
            self.abort(item.id)
            raise
        self.confirm(item.id)

    def __iter__(self) -> Iterator[Item]:
        """Items available now, each confirmed when the next one is asked for;
        leaving the loop early (break or exception) aborts the current one."""
        while True:
            with self.read(0) as item:
                if item is None:
                    return
                yield item

    # -- asyncio (engine.queue.aio) ------------------------------------------------
    async def get_async(self, timeout: float | datetime.timedelta | None = None) -> Item | None:
        """:meth:`get` for a coroutine: ``await reader.get_async(timeout)``.

        Never blocks the event loop: while no item is there, the coroutine waits
        for the wake-up a blocked :meth:`get` waits for (a put, an abort, the
        queue's close).  Cancelled while waiting, it holds no item.
        """
        return await aio.get_async(self, timeout)

    def read_async(
        self, timeout: float | datetime.timedelta | None = None
    ) -> AbstractAsyncContextManager[Item | None]:
        """``async with reader.read_async(t) as item:`` confirm on success, abort on
        an exception (cancellation included); ``item`` is None after ``timeout``."""
        return aio.read_async(self, timeout)

    def iter_async(self, timeout: float | datetime.timedelta | None = None) -> AsyncGenerator[Item, None]:
        """``async for item in reader.iter_async(timeout)``: items as they come, each
        confirmed when the next one is asked for; ends when none comes within
        ``timeout`` (None: never).  Leaving the loop early (break, exception,
        cancellation) aborts the current item when the generator is closed:
        at once with ``contextlib.aclosing``, else when asyncio finalizes it."""
        return aio.iter_async(self, timeout)

    def __aiter__(self) -> AsyncGenerator[Item, None]:
        """``async for item in reader``: :meth:`iter_async` waiting for ever."""
        return aio.iter_async(self)

    # -- checkpoints ---------------------------------------------------------------
    def checkpoint(self, *, force: bool = False) -> bool:
        """Write the reader file if this consumer confirmed anything since its last
        write (or ``force``); returns whether it wrote.  The file's state is merged
        in first (the confirmations of the reader's other consumers), under the
        checkpoint's mutex; the claims of the items it wrote as done are let go
        after, and so are the ids it claimed ahead and has not delivered (the
        reader's other consumers may have them meanwhile)."""
        claims = self._claims
        with self._checkpoint_lock:
            wrote = False
            claims.lock_mutex()
            try:
                with self._lock:
                    if claims.changed():
                        self._merge_checkpoint()  # (nothing new for the file: no write for it)
                    wrote = self._dirty or force
                    if wrote:
                        head, done = self._state.snapshot()
                        self._dirty = False
                if wrote:
                    try:
                        checkpoint.write_reader_file(self._fs, self.path, head, done, self._now_ms())
                    except BaseException:
                        self._dirty = True
                        raise
                    claims.bump()
            finally:
                claims.unlock_mutex()
            if wrote:
                self.durable_head = head
                census.write_mark(self._reader_lock.handle)
            with self._lock:
                open_ids = set(self._open)
                if wrote:
                    claims.release_done(head, done, open_ids)
                # Not what was confirmed since the snapshot: those wait for the next
                # checkpoint, which writes them.
                state = self._state
                claims.release_ahead(state.head, open_ids | state.members)
            return wrote

    def stats(self) -> ReaderStats:
        """This consumer's figures (snake_case keys, numbers): ``items`` (its reader's
        backlog: ids not confirmed), ``backlog_bytes`` (their payload bytes: it reads
        the backlog), ``open_reads``, ``oldest_age_s``, ``last_checkpoint_ns`` (the
        reader file's), ``gets`` / ``confirms`` / ``aborts`` (this consumer's, since
        it opened), ``consumers`` (of the reader name now: 1, or 2 when others
        share it; exact counts need the system's lock table: ``engine queue
        readers``), ``expired``, ``discarded``."""
        with self._lock:
            oldest = self._next_item(consume=False) if not self._closed else None
            if self._open:
                first_open = min(self._open)
                oldest_open = self._open[first_open]
                if oldest is None or oldest_open.add_time_ms < oldest.add_time_ms:
                    oldest = oldest_open
            now = self._now_ms()
            head, done = self._state.snapshot()
            tail = max(self._tail(), head)
            figures: ReaderStats = {
                "reader": self.name,
                "head": head,
                "items": self._state.pending(tail),
                "open_reads": len(self._open),
                "done_out_of_order": len(done),
                "oldest_age_s": None if oldest is None else max(0.0, (now - oldest.add_time_ms) / 1000),
                "expired": self.expired_count,
                "discarded": self.discarded_count,
                "gets": self.confirm_count + self.abort_count + len(self._open),
                "confirms": self.confirm_count,
                "aborts": self.abort_count,
                "consumers": 2 if not self._closed and self._claims.others_present() else 1,
            }
        figures["backlog_bytes"] = backlog_bytes(self._fs, self.directory, self.queue, ReaderState(head, done), tail)
        figures["last_checkpoint_ns"] = last_checkpoint_ns(self._fs, self.path)
        return figures

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"head={self._state.head} open={len(self._open)}"
        return f"<{type(self).__name__} {self.name!r} of queue {self.queue!r} in {self.directory!r} {state}>"

    def close(self, *, checkpoint_first: bool = True) -> None:
        """Checkpoint (if possible) and release the reader's lock."""
        if self._closed:
            return
        try:
            if checkpoint_first:
                self.checkpoint()
        finally:
            with self._lock:
                self._closed = True
                self._cursor.close()
                self._claims.close()
                self._reader_lock.release()
