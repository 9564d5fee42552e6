"""Snapshots of a directory's stores over time, and the rates between them.

:class:`Tracker` keeps the recent :class:`~engine.metrics.Snapshot`\\ s of a
directory (``engine top`` and ``engine dashboard`` take one every few seconds)
and answers what a person watching asks: which reader is falling behind and how
fast its backlog grows, how much disk each store takes and how fast that grows,
how many records per second each store takes in.  A rate is the change over
the samples of the last :attr:`Tracker.window` seconds (None until there are two).
"""

from __future__ import annotations

import collections
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from engine.fs import FileSystem
from engine.metrics import Snapshot, scan

#: Seconds of history a rate looks back over.
DEFAULT_WINDOW = 60.0
#: Samples kept (the dashboard's charts show them).
DEFAULT_KEEP = 720


def _rate(now: float | None, then: float | None, seconds: float) -> float | None:
    if now is None or then is None or seconds <= 0:
        return None
    return (now - then) / seconds


class Tracker:
    """The recent snapshots of ``root`` (thread-safe: the dashboard samples in
    a thread while requests read)."""

    def __init__(self, root: str | os.PathLike[str], *, fs: FileSystem | None = None, window: float = DEFAULT_WINDOW,
                 keep: int = DEFAULT_KEEP, clock: Callable[[], float] = time.time) -> None:
        self.root = os.fspath(root)
        self.fs = fs
        self.window = window
        self.clock = clock
        self._lock = threading.Lock()
        self._samples: collections.deque[Snapshot] = collections.deque(maxlen=keep)

    def sample(self) -> Snapshot:
        """Scan the directory now and keep the snapshot."""
        snap = scan(self.root, self.fs, self.clock)
        with self._lock:
            self._samples.append(snap)
        return snap

    def samples(self) -> list[Snapshot]:
        with self._lock:
            return list(self._samples)

    def view(self) -> dict[str, Any]:
        """The latest snapshot with rates (JSON-ready, stable snake_case keys):

        ``stores``: kind, name, disk_bytes, files, records, error, and
        ``disk_bytes_per_s`` / ``records_per_s``; ``readers``: store, queue,
        reader, backlog_items, backlog_bytes, oldest_age_s, confirmed, and
        ``backlog_per_s`` (> 0: falling behind) / ``confirmed_per_s``, the
        reader most behind first; ``behind``: that reader's entry when its
        backlog is not empty, else None; ``window_s``: the seconds the rates span.
        """
        samples = self.samples()
        if not samples:
            samples = [self.sample()]
        last = samples[-1]
        first = next((s for s in samples if last.time - s.time <= self.window), last)
        span = last.time - first.time
        before = {(s.kind, s.name): s for s in first.stores}
        before_readers = {(s.name, r.reader): r for s in first.stores for r in s.readers}
        stores: list[dict[str, Any]] = []
        readers: list[dict[str, Any]] = []
        for s in last.stores:
            old = before.get((s.kind, s.name))
            stores.append({
                "kind": s.kind, "name": s.name, "disk_bytes": s.disk_bytes, "files": s.files, "records": s.records,
                "commits": s.commits, "pending_repairs": s.pending_repairs, "error": s.error,
                "disk_bytes_per_s": _rate(s.disk_bytes, old.disk_bytes if old else None, span),
                "records_per_s": _rate(s.records, old.records if old else None, span),
            })
            for r in s.readers:
                was = before_readers.get((s.name, r.reader))
                readers.append({
                    "store": s.name, "queue": r.queue, "reader": r.reader, "backlog_items": r.backlog_items,
                    "backlog_bytes": r.backlog_bytes, "oldest_age_s": r.oldest_age_s, "confirmed": r.confirmed,
                    "backlog_per_s": _rate(r.backlog_items, was.backlog_items if was else None, span),
                    "confirmed_per_s": _rate(r.confirmed, was.confirmed if was else None, span),
                })
        readers.sort(key=lambda r: (-(r["backlog_per_s"] or 0.0), -r["backlog_items"], r["store"], r["reader"]))
        behind = readers[0] if readers and readers[0]["backlog_items"] else None
        return {"root": last.root, "time_ns": int(last.time * 1e9), "window_s": span, "stores": stores,
                "readers": readers, "behind": behind, "errors": list(last.errors)}

    def history(self) -> dict[str, Any]:
        """Every sample kept, as series for charts: ``times_ns``, ``backlog``
        ({"store/reader": [items per sample]}), ``disk`` ({store: [bytes]}) and
        ``records`` ({store: [records]}); a series missing in a sample is None there."""
        samples = self.samples()
        backlog: dict[str, list[int | None]] = {}
        disk: dict[str, list[int | None]] = {}
        records: dict[str, list[int | None]] = {}
        for k, snap in enumerate(samples):
            for s in snap.stores:
                disk.setdefault(s.name, [None] * k).append(s.disk_bytes)
                records.setdefault(s.name, [None] * k).append(s.records)
                for r in s.readers:
                    backlog.setdefault(f"{s.name}: {r.reader}", [None] * k).append(r.backlog_items)
            for series in (backlog, disk, records):
                for values in series.values():
                    values.extend([None] * (k + 1 - len(values)))
        return {"times_ns": [int(s.time * 1e9) for s in samples], "backlog": backlog, "disk": disk,
                "records": records}
