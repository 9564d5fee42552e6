"""Event-sourcing journal on the akka-persistence-file-journal format (the file journal).

``EventJournal.open(directory)`` gives Akka persistence's journal contract: atomic
batch writes per persistence id, replay of a sequence-number range, the highest
sequence number (kept across deletion) and delete-to.  ``EventJournal.open_reader`` (an :class:`EventReader`) is
the lock-free reader used by tools and the Spark pipeline.  What opening repaired is
``journal.recovery`` (an :class:`engine.fs.RecoveryReport`).  Payloads are bytes,
or objects with ``serializer=`` (``event.value``); ``len(journal)``, ``pid in
journal`` and iteration are over the persistence ids; ``stats()`` is a dict of
numbers.  See ``docs/guide/events.md``.
"""

from __future__ import annotations

from engine.events.codec import MAX_DATA_SIZE
from engine.events.journal import EventJournal, SequenceNumberError
from engine.events.layout import DATA_NAME, LOCK_NAME, META_NAME, IdInfo
from engine.events.reader import EventReader
from engine.events.runs import Event

__all__ = [
    "DATA_NAME",
    "LOCK_NAME",
    "MAX_DATA_SIZE",
    "META_NAME",
    "Event",
    "EventJournal",
    "EventReader",
    "IdInfo",
    "SequenceNumberError",
]
