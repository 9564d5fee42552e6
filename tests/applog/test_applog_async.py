"""The asyncio face of the append log's follow: ``async for record in log.follow_async()``.

No timed assertions: the loop's liveness is shown by a ticking task that must
advance while the follow waits; waits end on events.  Every coroutine runs under
asyncio.wait_for with a generous bound so that a hang fails instead of stalling.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import pathlib
import threading
from collections.abc import Awaitable, Callable
from typing import TypeVar

import pytest

from engine.applog import AppendLog, LogReader
from engine.errors import ConfigError

BOUND = 30.0  # seconds: only a hang gets near it
T = TypeVar("T")


def run(coro: Callable[[], Awaitable[T]]) -> T:
    async def bounded() -> T:
        return await asyncio.wait_for(coro(), BOUND)

    return asyncio.run(bounded())


@pytest.fixture
def path(tmp_path: pathlib.Path) -> str:
    return str(tmp_path / "log")


async def tick_until(count: list[int], more: int) -> None:
    """Count loop turns (one per ms) until ``more`` of them have passed."""
    goal = count[0] + more
    while count[0] < goal:
        count[0] += 1
        await asyncio.sleep(0.001)


def test_follow_async_yields_new_records_and_never_blocks_the_loop(path: str) -> None:
    with AppendLog.open(path, sync="never", buffer_bytes=0) as log:
        log.append(b"old")

        async def main() -> list[bytes]:
            got: list[bytes] = []
            first = asyncio.Event()

            async def follow() -> None:
                async for record in log.follow_async(poll=0.005):  # from the end: "old" is not seen
                    got.append(record.data)
                    first.set()
                    if len(got) == 3:
                        return

            task = asyncio.create_task(follow())
            ticks = [0]
            await tick_until(ticks, 20)  # the loop ticks while the follow waits
            assert not task.done() and got == []
            writer = threading.Thread(target=log.append, args=(b"new0",))
            writer.start()
            await first.wait()
            writer.join()
            log.append(b"new1")
            log.append(b"new2")
            await task
            return got

        assert run(main) == [b"new0", b"new1", b"new2"]


def test_follow_async_from_a_reader_of_another_process_style(path: str) -> None:
    with AppendLog.open(path, sync="never", buffer_bytes=0) as log, LogReader.open(path) as reader:
        log.append(b"a")

        async def main() -> list[bytes]:
            got: list[bytes] = []
            async for record in reader.follow_async(0, poll=0.002):
                got.append(record.data)
                if len(got) == 1:
                    threading.Thread(target=log.append, args=(b"b",)).start()
                if len(got) == 2:
                    break
            return got

        assert run(main) == [b"a", b"b"]


def test_follow_async_timeout_and_arguments_as_follow(path: str) -> None:
    with AppendLog.open(path, serializer="json") as log:
        log.append({"n": 1})

        async def main() -> list[object]:
            records = log.follow_async(0, poll=dt.timedelta(milliseconds=5), timeout=dt.timedelta(milliseconds=20))
            return [record.value async for record in records]

        assert run(main) == [{"n": 1}]
        with pytest.raises(ConfigError, match="poll must be > 0 seconds"):
            log.follow_async(poll=0)
        with pytest.raises(TypeError, match="timeout must be a number of seconds"):
            log.follow_async(timeout="1s")  # type: ignore[arg-type]


def test_a_cancelled_follow_async_stops_cleanly(path: str) -> None:
    with AppendLog.open(path) as log:

        async def main() -> None:
            started = asyncio.Event()

            async def follow() -> None:
                started.set()
                async with contextlib.aclosing(log.follow_async(poll=0.005)) as records:
                    async for _ in records:
                        pass

            task = asyncio.create_task(follow())
            await started.wait()
            await tick_until([0], 5)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

        run(main)
        log.append(b"after")  # the log is untouched by the cancelled follow
        assert [r.data for r in log] == [b"after"]
