"""The asyncio faces of a queue reader: get_async, read_async, async for.

No timed assertions: the event loop's liveness is shown by a ticking task that
must advance while a get waits, and waits end on events, not on sleeps.  Every
coroutine runs under asyncio.wait_for with a generous bound so that a hang
fails the test instead of stalling the suite.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

from engine.errors import ClosedError
from engine.queue import Queue
from engine.queue.reader import Reader

NOCKPT: dict[str, Any] = {"checkpoint_interval": 3600}
BOUND = 30.0  # seconds: only a hang ever gets near it

T = TypeVar("T")


def run(coro: Callable[[], Awaitable[T]]) -> T:
    async def bounded() -> T:
        return await asyncio.wait_for(coro(), BOUND)

    return asyncio.run(bounded())


async def until(check: Callable[[], bool]) -> None:
    """Yield to the loop until ``check()`` holds (state set by other tasks)."""
    while not check():
        await asyncio.sleep(0)


class Ticker:
    """A task that counts loop turns (one per ms); ``reached(n)`` is an event set
    once it has ticked ``n`` more times."""

    def __init__(self) -> None:
        self.count = 0
        self._goals: list[tuple[int, asyncio.Event]] = []
        self.task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        while True:
            self.count += 1
            for goal, event in self._goals:
                if self.count >= goal:
                    event.set()
            await asyncio.sleep(0.001)

    def reached(self, more: int) -> asyncio.Event:
        event = asyncio.Event()
        self._goals.append((self.count + more, event))
        return event

    async def stop(self) -> None:
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task


def waiting(q: Queue | Any) -> bool:
    return bool(getattr(q, "_source", q)._callbacks)


def test_get_async_waits_without_blocking_the_loop_and_is_woken_by_a_put(tmp_path: Path) -> None:
    q = Queue.open(str(tmp_path), "jobs", **NOCKPT)
    r = q.reader("r")

    async def main() -> None:
        ticker = Ticker()
        get = asyncio.create_task(r.get_async())  # no timeout: for ever
        await until(lambda: waiting(q))  # registered on the queue's own wake-up
        before = ticker.count
        await ticker.reached(20).wait()  # the loop keeps ticking while the get waits
        assert ticker.count > before and not get.done()
        threading.Thread(target=q.put, args=(b"hello",)).start()  # a put from another thread
        item = await get
        assert item is not None and item.data == b"hello" and r.open_ids == [item.id]
        assert not waiting(q) and q._source.waiters == 0
        r.confirm(item.id)
        await ticker.stop()

    run(main)
    q.close()


def test_a_put_from_the_same_loop_wakes_it(tmp_path: Path) -> None:
    q = Queue.open(str(tmp_path), "jobs", sync="always", **NOCKPT)
    r = q.reader()

    async def main() -> list[bytes]:
        get = asyncio.create_task(r.get_async(datetime.timedelta(seconds=BOUND)))
        await until(lambda: waiting(q))
        q.put(b"one")
        item = await get
        assert item is not None
        r.confirm(item.id)
        return [item.data]

    assert run(main) == [b"one"]
    q.close()


def test_get_async_returns_at_once_when_an_item_is_there_and_none_on_timeout(tmp_path: Path) -> None:
    q = Queue.open(str(tmp_path), "jobs", **NOCKPT)
    r = q.reader()
    q.put(b"ready")

    async def main() -> None:
        item = await r.get_async(0)
        assert item is not None and item.data == b"ready"
        assert await r.get_async(0) is None
        assert await r.get_async(0.01) is None
        assert await r.get_async(datetime.timedelta(milliseconds=10)) is None
        assert not waiting(q) and q._source.waiters == 0

    run(main)
    with pytest.raises(TypeError):
        run(lambda: r.get_async("1"))  # type: ignore[arg-type]
    q.close()


def test_a_cancelled_get_async_holds_no_item_and_leaves_no_waiter(tmp_path: Path) -> None:
    q = Queue.open(str(tmp_path), "jobs", **NOCKPT)
    r = q.reader()

    async def main() -> None:
        get = asyncio.create_task(r.get_async())
        await until(lambda: waiting(q))
        get.cancel()
        with pytest.raises(asyncio.CancelledError):
            await get
        assert not waiting(q) and q._source.waiters == 0 and r.open_ids == []
        q.put(b"kept")  # not taken by the cancelled get
        item = await r.get_async(0)
        assert item is not None and item.data == b"kept"
        r.confirm(item.id)

    run(main)
    q.close()


def test_an_abort_wakes_a_waiting_get_async(tmp_path: Path) -> None:
    q = Queue.open(str(tmp_path), "jobs", **NOCKPT)
    r = q.reader()
    q.put(b"x")
    first = r.get(0)
    assert first is not None

    async def main() -> None:
        get = asyncio.create_task(r.get_async())
        await until(lambda: waiting(q))
        r.abort(first.id)
        again = await get
        assert again is not None and again.id == first.id and again.error_count == 1

    run(main)
    q.close()


def test_closing_the_queue_ends_a_waiting_get_async_with_closed_error(tmp_path: Path) -> None:
    q = Queue.open(str(tmp_path), "jobs", **NOCKPT)
    r = q.reader()

    async def main() -> None:
        get = asyncio.create_task(r.get_async())
        await until(lambda: waiting(q))
        threading.Thread(target=q.close).start()
        with pytest.raises(ClosedError):
            await get

    run(main)


def test_read_async_confirms_on_success_and_aborts_on_error(tmp_path: Path) -> None:
    q = Queue.open(str(tmp_path), "jobs", **NOCKPT)
    r = q.reader()

    async def main() -> None:
        async with r.read_async(0) as nothing:
            assert nothing is None
        q.put(b"a")
        with pytest.raises(RuntimeError):
            async with r.read_async(1) as item:
                assert item is not None
                raise RuntimeError("failed")
        assert r.open_ids == []
        async with r.read_async(1) as item:
            assert item is not None and item.data == b"a" and item.error_count == 1
        assert len(r) == 0 and r.open_ids == []

        # Cancelled inside the block: aborted, delivered again.
        q.put(b"b")
        entered = asyncio.Event()

        async def slow() -> None:
            async with r.read_async() as item:
                assert item is not None
                entered.set()
                await asyncio.Event().wait()  # until cancelled

        task = asyncio.create_task(slow())
        await entered.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        again = await r.get_async(0)
        assert again is not None and again.data == b"b" and again.error_count == 1
        r.confirm(again.id)

    run(main)
    q.close()


def test_async_for_takes_items_as_they_come_confirming_each(tmp_path: Path) -> None:
    q = Queue.open(str(tmp_path), "jobs", **NOCKPT)
    r = q.reader()
    total = 50

    def produce() -> None:
        for n in range(total):
            q.put(b"%d" % n)

    async def main() -> list[bytes]:
        got: list[bytes] = []
        threading.Thread(target=produce).start()
        async for item in r:  # waits for ever: left with break
            got.append(item.data)
            if len(got) == total:
                break
        return got

    assert run(main) == [b"%d" % n for n in range(total)]
    # The last one was open when the loop was left: aborted when asyncio finalized
    # the generator (asyncio.run closes it at the latest), so it is pending again.
    assert r.open_ids == [] and len(r) == 1
    q.close()


def test_leaving_async_for_early_aborts_the_current_item(tmp_path: Path) -> None:
    q = Queue.open(str(tmp_path), "jobs", **NOCKPT)
    r = q.reader()
    q.put_many([b"a", b"b", b"c"])

    async def main() -> None:
        async with contextlib.aclosing(r.iter_async(0)) as items:
            async for item in items:
                if item.data == b"b":
                    break
        # "a" confirmed (the next was asked for), "b" aborted: delivered again.
        assert r.open_ids == []
        rest = [item.data async for item in r.iter_async(0)]
        assert rest == [b"b", b"c"] and len(r) == 0

        q.put(b"d")
        with pytest.raises(ValueError):
            async with contextlib.aclosing(r.iter_async(0)) as items:
                async for item in items:
                    raise ValueError(item.data)
        again = await r.get_async(0)
        assert again is not None and again.data == b"d" and again.error_count == 1

    run(main)
    q.close()


def test_iter_async_with_a_timeout_ends_when_nothing_comes(tmp_path: Path) -> None:
    q = Queue.open(str(tmp_path), "jobs", **NOCKPT)
    r = q.reader()

    async def main() -> list[bytes]:
        return [item.data async for item in r.iter_async(0.01)]

    assert run(main) == []
    q.close()


def test_a_reader_in_another_process_style_waits_asynchronously(tmp_path: Path) -> None:
    q = Queue.open(str(tmp_path), "jobs", **NOCKPT)
    remote: Reader = Queue.open_reader(str(tmp_path), "jobs", "", poll_interval=0.001, **NOCKPT)

    async def main() -> None:
        ticker = Ticker()
        get = asyncio.create_task(remote.get_async())
        await ticker.reached(5).wait()  # the loop ticks while it polls the files
        assert not get.done()
        threading.Thread(target=q.put, args=(b"far",)).start()
        item = await get
        assert item is not None and item.data == b"far"
        remote.confirm(item.id)
        await ticker.stop()
        source: Any = remote._source
        assert source.waiters == 0

    run(main)
    remote.close()
    q.close()


def test_many_coroutines_wait_on_one_reader(tmp_path: Path) -> None:
    q = Queue.open(str(tmp_path), "jobs", **NOCKPT)
    r = q.reader()
    count = 8

    async def main() -> set[bytes]:
        gets = [asyncio.create_task(r.get_async()) for _ in range(count)]
        await until(lambda: len(q._source._callbacks) == count)
        q.put_many([b"%d" % n for n in range(count)])
        items = await asyncio.gather(*gets)
        assert q._source.waiters == 0
        return {item.data for item in items if item is not None}

    assert run(main) == {b"%d" % n for n in range(count)}
    q.close()
