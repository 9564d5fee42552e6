"""The asyncio face of an append log's wait: ``follow_async``.

:meth:`~engine.applog.view.LogView.follow` waits for new records by looking
again every ``poll`` seconds: a writer (in this process or another) announces
nothing, and a :class:`~engine.applog.reader.LogReader` learns of new records only
by re-reading the directory and the index sizes.  ``follow_async`` waits the
same way, with ``await asyncio.sleep(poll)`` instead of ``time.sleep(poll)``, so
the event loop runs on between looks; reading a chunk of records (at most
:data:`~engine.applog.view.CHUNK_RECORDS`) is a short read of files under the
log's lock, which no writer holds across an fsync.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from engine.applog.segment import Record
    from engine.applog.view import LogView


async def follow_async(
    view: LogView, start: int | None, poll: float, timeout: float | None
) -> AsyncGenerator[Record, None]:
    """:meth:`LogView.follow`'s steps for a coroutine (arguments already checked)."""
    for step in view._follow_steps(start, poll, timeout):
        if isinstance(step, float):
            await asyncio.sleep(step)
        else:
            for record in step:
                yield record
