"""asyncio faces of a queue reader's waits: ``get_async``, ``read_async``, ``async for``.

A coroutine waits on the same wake-up as a thread in :meth:`Reader.get`: it reads
the source's version, looks for an item (without blocking), and if there is none
registers a callback with the source (:meth:`~engine.queue.cursor.WakeUps.add_waiter`)
that resolves a future on its event loop (``loop.call_soon_threadsafe``) at the
next put, abort or close.  No thread is blocked and nothing sleeps in a loop: the
event loop runs on while the coroutine waits.

The one bound on a wait besides the caller's timeout is the threaded path's own:
:meth:`Reader._wait_step` (the next open read's timeout, at most 1 s), and for a
reader in another process (``Queue.open_reader``) its ``poll_interval``, since
puts made by another process are found by looking at the files again (the
threaded reader waits the same period on its condition variable).

Cancelling a waiting coroutine is clean: it holds no item (an item is taken and
returned in one step, with no ``await`` between) and its callback is removed.
"""

from __future__ import annotations

import asyncio
import datetime
import time
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import asynccontextmanager
from typing import Protocol, TypeVar

from engine.conventions import timeout_seconds
from engine.queue.cursor import JournalSource


class AsyncItem(Protocol):
    @property
    def id(self) -> int: ...


ItemT = TypeVar("ItemT", bound=AsyncItem)
ItemT_co = TypeVar("ItemT_co", bound=AsyncItem, covariant=True)


class Waitable(Protocol[ItemT_co]):
    """What the asyncio faces need of a reader (:class:`engine.queue.reader.Reader`)."""

    @property
    def source(self) -> JournalSource: ...

    def wait_step(self, deadline: float | None) -> float | None: ...

    def get(self, timeout: float | datetime.timedelta | None = None) -> ItemT_co | None: ...

    def confirm(self, ids: int) -> int: ...

    def abort(self, ids: int) -> int: ...


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


async def wait_for_change(source: JournalSource, version: int, timeout: float | None) -> None:
    """Return once ``source.version`` is no longer ``version``, or after ``timeout``
    seconds (None: no limit but the source's ``poll_period``), without blocking
    the running event loop."""
    poll = source.poll_period
    if poll is not None:
        timeout = poll if timeout is None else min(timeout, poll)
    if timeout is not None and timeout <= 0:
        return
    loop = asyncio.get_running_loop()
    future: asyncio.Future[None] = loop.create_future()

    def wake() -> None:  # called by notify(), in whichever thread put or aborted
        try:
            loop.call_soon_threadsafe(_resolve, future)
        except RuntimeError:
            pass  # the loop is closed: nobody waits any more

    if not source.add_waiter(version, wake):
        return  # changed already (or closed): look again at once
    timer = None if timeout is None else loop.call_later(timeout, _resolve, future)
    try:
        await future
    finally:
        if timer is not None:
            timer.cancel()
        source.remove_waiter(wake)


def wait_seconds(timeout: float | datetime.timedelta | None) -> float | None:
    """A wait's ``timeout`` as seconds: a number as given (None: for ever, 0: no
    wait), a timedelta converted, anything else a ConfigError / TypeError naming it."""
    if timeout is None or (isinstance(timeout, (int, float)) and not isinstance(timeout, bool) and timeout >= 0):
        return timeout  # the common case, without the full parse
    return timeout_seconds(timeout)


async def get_async(reader: Waitable[ItemT], timeout: float | datetime.timedelta | None = None) -> ItemT | None:
    """:meth:`Reader.get` for a coroutine (see :meth:`Reader.get_async`)."""
    wait = wait_seconds(timeout)
    source = reader.source
    deadline: float | None = None
    while True:
        # Read before looking, so a put between the look and the wait wakes us.
        version = source.version
        item = reader.get(0)
        if item is not None or wait == 0:
            return item
        if wait is not None:
            now = time.monotonic()
            if deadline is None:
                deadline = now + wait
            if now >= deadline:
                return None
        # Until the deadline or the next open read's timeout, at most 1 s (as get()).
        await wait_for_change(source, version, reader.wait_step(deadline))


@asynccontextmanager
async def read_async(
    reader: Waitable[ItemT], timeout: float | datetime.timedelta | None = None
) -> AsyncIterator[ItemT | None]:
    """:meth:`Reader.read` for a coroutine (see :meth:`Reader.read_async`)."""
    item = await get_async(reader, timeout)
    if item is None:
        yield None
        return
    try:
        yield item
    except BaseException:
        reader.abort(item.id)
        raise
    reader.confirm(item.id)


async def iter_async(
    reader: Waitable[ItemT], timeout: float | datetime.timedelta | None = None
) -> AsyncGenerator[ItemT, None]:
    """:meth:`Reader.iter_async`: each item confirmed when the next is asked for."""
    wait = wait_seconds(timeout)
    while True:
        async with read_async(reader, wait) as item:
            if item is None:
                return
            yield item
