"""Abandoned readers: who pins the journal, the warning, ``reader_expiry``.

A writer file is retired once every reader has passed it, so one idle or
forgotten reader keeps every file behind it (Kestrel's most reported disk
problem).  This module is the writer's watch over that:

* the files a reader *pins* are those the other readers have all passed and that
  could be retired but for it (:func:`engine.queue.retire.pinned_files`): a lone
  reader pins nothing, what it holds is its backlog;
* ``pin_warning`` (a share of the journal's bytes, default 0.5): when one reader
  pins more, one warning on the ``engine.queue`` logger per crossing (re-armed
  once it pins no more than half that share) and an entry in ``stats()["warnings"]``
  while it lasts;
* ``reader_expiry`` (a duration, default None: never): a reader is retired (its
  file removed, so the files only it kept can go) when nobody holds it, it has
  not checkpointed for that long, the writer has not seen it held for that long
  (it probes the lock of each reader not open in its process at every round), and
  its oldest unconfirmed item is older than that.  A reader caught up with
  the queue holds nothing and is left alone.  Retiring it is one warning line,
  counted in ``stats()["readers_expired"]``.  A retired reader that comes back
  is a new reader (Kestrel's fanout queues): it starts at the tail and never
  sees the items it left; in the writer's process, its return adds a ``reset``
  action to ``q.recovery`` (logged) saying how many items it lost.

The queue calls :func:`retire_round` wherever it retired files before (every
checkpoint interval, ``checkpoint()``, ``close()``, ``remove_reader``), never on
a put.  :func:`readers_report` is ``engine queue readers``: the same figures from
the files alone.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from engine.clireport import human_bytes, human_duration_ns, human_time_ms
from engine.errors import LockedError
from engine.fs import FileSystem, RecoveryReport, crashpoint, probe_lock
from engine.queue import checkpoint, naming
from engine.queue.attach import lock_reader, reader_files, remove_reader_files
from engine.queue.diagnose import (
    add_pins,
    disk_reader_stats,
    last_checkpoint_ns,
    oldest_pending,
)
from engine.queue.retire import Pin, durable_heads, pinned_files, remove_files, retirable
from engine.queue.segments import Segment, find_tail, list_segments
from engine.queue.state import ReaderState
from engine.queue.view import QueueStats, QueueView, ReaderStats

log = logging.getLogger("engine.queue")


@dataclass(frozen=True)
class RetiredReader:
    """A reader ``reader_expiry`` retired: where it was and what it left."""

    reader: str
    head: int
    items: int
    tail: int
    at_ms: int


class ReaderWatch:
    """The writer's memory of its readers: which ones it warned about, which ones
    it retired, and when it last saw each one held by a live process."""

    def __init__(self, queue: str, pin_warning: float | None, reader_expiry: float | None) -> None:
        self.queue = queue
        self.pin_warning = pin_warning
        self.expiry_ns = None if reader_expiry is None else int(reader_expiry * 1e9)
        self.expired_count = 0
        self.retired: dict[str, RetiredReader] = {}
        self._over: set[str] = set()
        self._seen_held: dict[str, int] = {}
        self._lock = threading.Lock()

    def warnings(self, pins: Mapping[str, Pin], journal_bytes: int) -> list[dict[str, object]]:
        """One entry per reader pinning more than ``pin_warning`` of ``journal_bytes``;
        logs a warning for each reader that crossed it since the last call, and
        re-arms the readers back at half the share or less."""
        share_limit = self.pin_warning
        if share_limit is None:
            return []
        found: list[dict[str, object]] = []
        with self._lock:
            for name, pin in pins.items():
                share = pin.bytes / journal_bytes if journal_bytes > 0 else 0.0
                if share > share_limit:
                    message = (
                        f"queue {self.queue}: reader {name!r} pins {share:.0%} of the journal "
                        f"({len(pin.paths)} file(s), {human_bytes(pin.bytes)} of {human_bytes(journal_bytes)}) "
                        f"that could be retired but for it (pin_warning={share_limit:g})"
                    )
                    found.append({"kind": "pinning", "reader": name, "pinned_files": len(pin.paths),
                                  "pinned_bytes": pin.bytes, "pinned_share": share, "message": message})
                    if name not in self._over:
                        self._over.add(name)
                        log.warning("%s", message)
                elif share <= share_limit / 2:
                    self._over.discard(name)
            self._over &= set(pins)
        return found

    def note_return(self, name: str, report: RecoveryReport) -> None:
        """Reader ``name`` is being attached again: if this writer retired it, say so
        in ``report`` (a ``reset`` of the items it will not see)."""
        with self._lock:
            retired = self.retired.pop(name, None)
        if retired is not None:
            detail = (
                f"reader retired by reader_expiry at {human_time_ms(retired.at_ms)}: it starts again as a new "
                f"reader; the {retired.items} item(s) it had not confirmed (ids {retired.head + 1}.."
                f"{retired.tail}) are not delivered to it"
            )
            report.add("reset", report.path, retired.items, "items", detail=detail)

    # -- reader_expiry --------------------------------------------------------------
    def expire(self, q: QueueView, now_ms: int) -> list[RetiredReader]:
        """Retire the readers idle for ``reader_expiry`` (see the module docstring)."""
        expiry = self.expiry_ns
        if expiry is None:
            return []
        now_ns = now_ms * 1_000_000
        fs, directory, queue = q.fs, q.directory, q.name
        live = set(q.live_readers())
        tail = q.current_tail()
        retired = []
        files = reader_files(fs, directory, queue)
        for name, path in files.items():
            written = last_checkpoint_ns(fs, path)
            if name in live or written is None:
                if name in live:
                    self._seen_held[name] = now_ns
                continue
            idle = now_ns - max(written, self._seen_held.get(name, 0))
            if idle < expiry:  # watch it: a reader held now gets a whole expiry once it lets go
                if probe_lock(fs, naming.join(directory, naming.reader_lock_name(queue, name))):
                    self._seen_held[name] = now_ns
                continue
            try:
                lock = lock_reader(fs, directory, queue, name, patience=False)
            except LockedError:
                self._seen_held[name] = now_ns
                continue
            with lock:
                gone = self._retire_one(fs, directory, queue, name, path, now_ns, tail)
            if gone is not None:
                retired.append(gone)
        for gone in retired:
            q.forget_reader(gone.reader)
        for name in set(self._seen_held) - set(files):
            del self._seen_held[name]
        return retired

    def _retire_one(
        self, fs: FileSystem, directory: str, queue: str, name: str, path: str, now_ns: int, tail: int
    ) -> RetiredReader | None:
        """Under the reader's lock: check again (it may have checkpointed just before
        letting go), then remove its file durably.  None if it stays."""
        expiry = self.expiry_ns
        assert expiry is not None
        try:
            written = fs.mtime_ns(path)
            head, done = checkpoint.load_reader_file(fs, path)
        except FileNotFoundError:
            return None
        if now_ns - written < expiry:
            return None
        state = ReaderState(head, done)
        oldest = oldest_pending(fs, directory, queue, state)
        if oldest is None or now_ns - oldest.add_time * 1_000_000 < expiry:
            return None  # it holds nothing, or nothing for that long: leave it
        items = state.pending(max(tail, head))
        remove_reader_files(fs, directory, queue, name)  # (its mark first: not a deleted checkpoint)
        crashpoint("queue.expire-reader.before-dir-fsync")
        fs.fsync_dir(directory)  # gone for good before any file it kept is retired
        crashpoint("queue.expire-reader.after-dir-fsync")
        self._seen_held.pop(name, None)
        gone = RetiredReader(name, head, items, tail, now_ns // 1_000_000)
        with self._lock:  # before its lock goes: a return in this process finds the record
            self.expired_count += 1
            self.retired[name] = gone
        idle = human_duration_ns(now_ns - written)
        log.warning(
            "queue %s: reader %r retired by reader_expiry: no checkpoint for %s, %d unconfirmed item(s) "
            "released (ids %d..%d, the oldest put %s ago); it starts at the tail if it comes back",
            queue, name, idle, items, head + 1, tail, human_duration_ns(now_ns - oldest.add_time * 1_000_000),
        )
        return gone


def retire_round(q: QueueView, watch: ReaderWatch) -> list[str]:
    """``Queue.retire_files`` (its caller holds its retire lock): retire the readers
    ``reader_expiry`` allows, then the writer files every reader passed; check who
    pins what is left against ``pin_warning``.  Returns the retired files' paths."""
    fs = q.fs
    if watch.expiry_ns is not None:
        watch.expire(q, q.now_ms())
    heads = durable_heads(fs, q.directory, q.name, q.live_readers())
    if heads is None:
        return []
    segments, tail = q.files_now()
    doomed = retirable(segments, min(heads.values(), default=tail))
    paths = [seg.path for seg in doomed]
    if doomed:
        remove_files(fs, q.directory, doomed, q.config.archive_dir)
        gone = {seg.number for seg in doomed}
        q.deleted_files.extend(paths)
        segments = [s for s in segments if s.number not in gone]
    if watch.pin_warning is not None:
        pins = pinned_files(segments, heads, tail, lambda seg: fs.file_size(seg.path))
        pinning = any(pin.paths for pin in pins.values())
        watch.warnings(pins, q.journal_bytes() if pinning else 0)  # nothing pinned: re-arms only
    return paths


def live_stats(q: QueueView, watch: ReaderWatch) -> QueueStats:
    """``Queue.stats()``: queue-level figures and one entry per reader on disk
    (the keys of ``Reader.stats()`` plus ``backlog_bytes``, ``pinned_files``,
    ``pinned_bytes``, ``last_checkpoint_ns``); ``warnings`` lists the readers
    pinning more than ``pin_warning`` now."""
    q.flush()  # staged puts count in the tail and the backlog: put them in the file
    fs, directory, name = q.fs, q.directory, q.name
    readers: list[ReaderStats] = []
    live_readers = q.live_readers()
    for reader_name in q.reader_names():
        live = live_readers.get(reader_name)
        if live is not None:
            readers.append(live.stats())  # (its backlog bytes and last checkpoint included)
        else:
            readers.append(disk_reader_stats(fs, directory, name, reader_name, q.current_tail(), q.clock))
    segments, tail = q.files_now()
    sizes = file_sizes(q, segments)
    pins = add_pins(readers, segments, tail, lambda seg: sizes[seg.number])
    journal = sum(sizes.values())
    return {
        "queue": name,
        "tail_id": tail,
        "journal_files": len(segments),
        "journal_bytes": journal,
        "readers": readers,
        "pin_warning": watch.pin_warning,
        "reader_expiry_s": None if watch.expiry_ns is None else watch.expiry_ns / 1e9,
        "readers_expired": watch.expired_count,
        "warnings": watch.warnings(pins, journal),
    }


def file_sizes(q: QueueView, segments: list[Segment]) -> dict[int, int]:
    """Each writer file's bytes (the newest: with this producer's staged puts)."""
    sizes = {}
    for seg in segments:
        try:
            sizes[seg.number] = q.fs.file_size(seg.path)
        except FileNotFoundError:  # retired since the list was taken
            sizes[seg.number] = 0
    if segments:
        sizes[segments[-1].number] += q.staged_bytes
    return sizes


def _holders(fs: FileSystem, lock_path: str) -> list[int] | None:
    """The pids holding a reader's lock (competing consumers' item claims are
    open file description locks, listed with pid -1: not holders of their own)."""
    if not fs.exists(lock_path):
        return []
    pids = fs.lock_holders(lock_path)
    return None if pids is None else [pid for pid in pids if pid > 0]


def readers_report(fs: FileSystem, directory: str, queue: str, clock: Callable[[], float]) -> list[dict[str, Any]]:
    """``engine queue readers``: per reader, from the files alone (no lock kept),
    the keys of the ``stats`` readers plus ``pinned_paths``, ``pinned_share``,
    ``held`` (a live process holds its lock now), ``holder_pids`` (who, when the
    system says: Linux; None elsewhere) and ``queue``."""
    segments = list_segments(fs, directory, queue)
    tail = find_tail(fs, segments)
    sizes = {seg.number: fs.file_size(seg.path) for seg in segments}
    journal = sum(sizes.values())
    files = reader_files(fs, directory, queue)
    rows = [disk_reader_stats(fs, directory, queue, name, tail, clock) for name in sorted(files)]
    pins = add_pins(rows, segments, tail, lambda seg: sizes[seg.number])
    report = []
    for row in rows:
        name = str(row["reader"])
        pin = pins[name]
        lock_path = naming.join(directory, naming.reader_lock_name(queue, name))
        report.append(
            {"queue": queue, **row, "pinned_share": pin.bytes / journal if journal else 0.0,
             "pinned_paths": list(pin.paths), "held": probe_lock(fs, lock_path),
             "holder_pids": _holders(fs, lock_path)}
        )
    return report


__all__ = ["ReaderWatch", "RetiredReader", "live_stats", "readers_report", "retire_round"]
