"""Multiplexed stream journal on the journald version 2 format.

* :class:`StreamJournal` -- many streams written concurrently into one
  preallocated file, group-committed (``journal.open_stream(ident)``);
* :class:`StreamReader` (``StreamJournal.open_reader(path)``) -- read a journal
  back, record by record or stream by stream, checking every check code
  (:func:`read_events` / :func:`read_streams` are the one-call forms);
* :class:`Client` and :mod:`engine.streams.server` -- the original journald
  Unix-socket protocol, server and client.

See ``docs/formats/streams.md`` and ``docs/guide/streams.md``.
"""

from __future__ import annotations

from engine.errors import StreamRejected
from engine.streams.client import Client
from engine.streams.journal import Stream, StreamJournal
from engine.streams.reader import Event, JournalScan, ScanEnd, StreamData, StreamReader, read_events, read_streams

__all__ = [
    "Client",
    "Event",
    "JournalScan",
    "ScanEnd",
    "Stream",
    "StreamData",
    "StreamJournal",
    "StreamReader",
    "StreamRejected",
    "read_events",
    "read_streams",
]
