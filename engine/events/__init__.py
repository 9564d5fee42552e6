"""Event-sourcing journal on the akka-persistence-file-journal format (seed 003).

``EventJournal.open(directory)`` gives Akka persistence's journal contract: atomic
batch writes per persistence id, replay of a sequence-number range, the highest
sequence number (kept across deletion) and delete-to.  ``open_read_only`` is the
lock-free reader used by tools and the Spark pipeline.
"""

from __future__ import annotations

from engine.events.codec import MAX_DATA_SIZE
from engine.events.journal import DATA_NAME, META_NAME, Event, EventJournal, IdInfo, SequenceNumberError

__all__ = ["DATA_NAME", "MAX_DATA_SIZE", "META_NAME", "Event", "EventJournal", "IdInfo", "SequenceNumberError"]
