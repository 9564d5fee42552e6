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
from collections.abc import AsyncGenerator, Iterator

from engine.applog.segment import Record


async def follow_async(steps: Iterator[list[Record] | float]) -> AsyncGenerator[Record, None]:
    """Following's ``steps`` (:meth:`LogView._follow_steps
    <engine.applog.view.LogView._follow_steps>`: chunks of records, or seconds
    to wait) for a coroutine."""
    for step in steps:
        if isinstance(step, float):
            await asyncio.sleep(step)
        else:
            for record in step:
                yield record
