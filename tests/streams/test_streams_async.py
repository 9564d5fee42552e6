"""The asyncio face of the journald server: serve_async, stop_async, async with.

No timed assertions: the loop's liveness is shown by a ticking task that must
advance while the server serves; waits end on events or on the client's answer.
Every coroutine runs under asyncio.wait_for with a generous bound.
"""

from __future__ import annotations

import asyncio
import os
import pathlib
import struct
from collections.abc import Awaitable, Callable
from typing import TypeVar

import pytest

from engine.errors import ConfigError
from engine.streams import Client, StreamJournal, read_streams
from engine.streams.server import JournalServer

BOUND = 30.0
T = TypeVar("T")


def run(coro: Callable[[], Awaitable[T]]) -> T:
    async def bounded() -> T:
        return await asyncio.wait_for(coro(), BOUND)

    return asyncio.run(bounded())


async def tick_until(count: list[int], more: int) -> None:
    goal = count[0] + more
    while count[0] < goal:
        count[0] += 1
        await asyncio.sleep(0.001)


async def send_async(sock_path: str, ident: bytes, data: bytes) -> bytes:
    """One stream with asyncio's own Unix socket client; returns the server's answer."""
    reader, writer = await asyncio.open_unix_connection(sock_path)
    frame = struct.pack(">I", len(ident)) + ident + struct.pack(">I", len(data)) + data + struct.pack(">I", 0)
    writer.write(frame)
    await writer.drain()
    answer = await reader.read()
    writer.close()
    await writer.wait_closed()
    return answer


def test_serve_async_serves_without_blocking_the_loop_and_stops_on_leaving_async_with(
    tmp_path: pathlib.Path,
) -> None:
    sock_path = str(tmp_path / "s")
    journal_path = str(tmp_path / "j.jd")

    async def main() -> None:
        with StreamJournal.open(journal_path, size=2 << 20, page_size=4096) as journal:
            async with JournalServer(sock_path, journal) as server:
                serving = asyncio.create_task(server.serve_async())
                answers = await asyncio.gather(*(send_async(sock_path, b"app", b"line %d" % n) for n in range(4)))
                assert answers == [b"\x01"] * 4
                await tick_until([0], 10)  # the loop ticks while the server serves
                # A blocking client in a worker thread is served too.
                await asyncio.to_thread(Client.send, sock_path, b"other", b"data")
                assert not serving.done()
                assert server.stats()["committed"] == 5
            await serving  # leaving ``async with`` stopped it: serve_async returned
            assert not os.path.exists(sock_path)

    run(main)
    streams = sorted((s.ident, s.data, s.status) for s in read_streams(journal_path))
    expected = [(b"app", b"line %d" % n, "complete") for n in range(4)] + [(b"other", b"data", "complete")]
    assert streams == sorted(expected)


def test_cancelling_serve_async_stops_the_server(tmp_path: pathlib.Path) -> None:
    sock_path = str(tmp_path / "s")

    async def main() -> None:
        with StreamJournal.open(str(tmp_path / "j.jd"), size=2 << 20, page_size=4096) as journal:
            server = JournalServer(sock_path, journal)
            serving = asyncio.create_task(server.serve_async())
            assert await send_async(sock_path, b"x", b"y") == b"\x01"
            with pytest.raises(ConfigError, match="already serving"):
                await server.serve_async()
            serving.cancel()
            with pytest.raises(asyncio.CancelledError):
                await serving
            assert not os.path.exists(sock_path)  # stopped, socket removed
            with pytest.raises(OSError):
                await asyncio.open_unix_connection(sock_path)

    run(main)


def test_stop_async_from_another_task_ends_serve_async(tmp_path: pathlib.Path) -> None:
    sock_path = str(tmp_path / "s")

    async def main() -> None:
        with StreamJournal.open(str(tmp_path / "j.jd"), size=2 << 20, page_size=4096) as journal:
            server = JournalServer(sock_path, journal)
            serving = asyncio.create_task(server.serve_async())
            assert await send_async(sock_path, b"x", b"y") == b"\x01"
            await server.stop_async()
            await serving  # returns normally
            assert server.stats()["committed"] == 1

    run(main)
