"""How long this process waits for the disk to make data durable.

Every fsync and fdatasync through the seam (:class:`engine.fs.base.FileHandle`)
and every ``O_DSYNC`` write (``write_durable_at``) is timed and counted in a
histogram per directory, the unit a store lives in (an append log's directory,
the directory of a page store file).  :mod:`engine.metrics` exports it as
``engine_fsync_seconds``; :func:`snapshot` is the read side.

Recording costs two clock reads and a lock per sync, against a sync's
hundreds of microseconds to milliseconds.  Keys are directories, so a queue
that rotates its journal files does not grow the table.
"""

from __future__ import annotations

import bisect
import posixpath
import threading
from dataclasses import dataclass, field

#: Upper bounds of the histogram's buckets, in seconds (the last is +Inf).
BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


@dataclass
class SyncHistogram:
    """Counts per bucket (``len(BUCKETS) + 1``: the last is above every bound),
    the number of syncs and their total seconds."""

    buckets: list[int] = field(default_factory=lambda: [0] * (len(BUCKETS) + 1))
    count: int = 0
    total_seconds: float = 0.0


_lock = threading.Lock()
_by_directory: dict[str, SyncHistogram] = {}


def record(path: str, seconds: float) -> None:
    """Count one sync of the file ``path`` that took ``seconds``."""
    directory = posixpath.dirname(path) or "."
    with _lock:
        hist = _by_directory.get(directory)
        if hist is None:
            hist = _by_directory[directory] = SyncHistogram()
        hist.buckets[bisect.bisect_left(BUCKETS, seconds)] += 1
        hist.count += 1
        hist.total_seconds += seconds


def snapshot() -> dict[str, SyncHistogram]:
    """A copy of every directory's histogram."""
    with _lock:
        return {d: SyncHistogram(list(h.buckets), h.count, h.total_seconds) for d, h in _by_directory.items()}
