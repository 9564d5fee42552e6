"""``max_items`` / ``max_size``: every reader of the queue counts, in every process.

A put is refused (``FullError``) when it would take any reader past a limit:

* readers open in the putting producer's process are counted exactly, as they
  always were (their backlog; ``discard_old_when_full`` drops their oldest items
  instead of refusing);
* every other reader (open in another producer's process, or through
  ``Queue.open_reader`` anywhere, or not open at all) is counted from its
  checkpoint file: its backlog there, plus every item put since (by any
  producer); its size, the bytes of the writer files that still hold ids above
  its head.  Both over-estimate by what it confirmed since its last checkpoint
  (``checkpoint_interval``); the files are read again at most every
  :data:`REFRESH` seconds, not at every put.  Such a reader cannot be made room
  for from here: the put raises ``FullError`` naming it.
"""

from __future__ import annotations

import time

from engine.errors import FullError
from engine.queue import checkpoint
from engine.queue.attach import reader_files
from engine.queue.diagnose import journal_bytes_after, unread_journal_bytes
from engine.queue.state import ReaderState
from engine.queue.view import QueueView

#: Seconds between two readings of the other readers' checkpoint files.
REFRESH = 0.1


class Limits:
    """``max_items`` / ``max_size`` of one producer (see the module docstring):
    the backlogs of the readers not open in its process, cached."""

    def __init__(self) -> None:
        self._at = float("-inf")
        self._tail_at = 0
        self._written_at = 0
        self._figures: dict[str, tuple[int, int]] = {}

    def _others(self, q: QueueView, live: set[str], tail: int, written: int) -> dict[str, tuple[int, int]]:
        """Reader name -> (items, bytes) of its backlog now (an over-estimate)."""
        now = time.monotonic()
        if now - self._at >= REFRESH:
            self._at = now
            self._tail_at, self._written_at = tail, written
            segments = q.files_now()[0]
            figures = {}
            for name, path in reader_files(q.fs, q.directory, q.name).items():
                if name in live:
                    continue
                try:
                    head, done = checkpoint.load_reader_file(q.fs, path)
                except FileNotFoundError:
                    continue  # removed meanwhile
                items = ReaderState(head, done).pending(max(tail, head))
                figures[name] = (items, journal_bytes_after(q.fs, segments, head, tail))
            self._figures = figures
        grown_items, grown_bytes = tail - self._tail_at, max(0, written - self._written_at)
        return {name: (items + grown_items, size + grown_bytes) for name, (items, size) in self._figures.items()}

    def make_room(self, q: QueueView, adding: int, nbytes: int) -> None:
        """Refuse (FullError) a put of ``adding`` items of ``nbytes`` that would take a
        reader past ``max_items`` / ``max_size``; for readers open here, drop their
        oldest items instead with ``discard_old_when_full``."""
        cfg = q.config
        live = q.live_readers()
        if live and cfg.max_size is not None:
            segments = q.files_now()[0]
            newest_end = q.fs.file_size(segments[-1].path)
        for reader in live.values():
            while True:
                pending = len(reader)
                over_items = cfg.max_items is not None and pending + adding > cfg.max_items
                over_size = cfg.max_size is not None and nbytes + unread_journal_bytes(
                    q.fs, segments, newest_end, q.staged_bytes, reader.cursor_position()
                ) > cfg.max_size
                if not (over_items or over_size):
                    break
                if not cfg.discard_old_when_full or pending == 0 or not reader.discard_oldest():
                    raise FullError(f"queue {q.name!r} is full for reader {reader.name!r} ({pending} items)")
        others = self._others(q, set(live), q.current_tail(), q.written_position + q.staged_bytes)
        for name, (items, size) in others.items():
            if (cfg.max_items is not None and items + adding > cfg.max_items) or (
                cfg.max_size is not None and size + nbytes > cfg.max_size
            ):
                raise FullError(
                    f"queue {q.name!r} is full for reader {name!r} ({items} items; not open in this process)"
                )
