"""TTL'd, segmented append logs on the LOG/IDX format.

* :class:`AppendLog` — the writer (one per directory): ``append``, ``append_many``,
  ``get``, ``scan``, ``between``, ``expire``, ``truncate_before``, ``follow``,
  ``stats``; ``len(log)``, ``log[i]``, ``i in log``, iteration; a context manager;
* :class:`LogReader` — a read-only view that takes no lock, for other processes
  (and the Spark data source): the same queries plus ``segments()``; open it
  with ``AppendLog.open_reader(directory)`` (= ``LogReader.open``);
* :class:`Record` — ``(index, time_ns, flags, data)``, with ``time`` (an aware UTC
  datetime) and ``value`` (the object, with ``serializer=``);

Time arguments follow :mod:`engine.conventions` (durations: seconds or a
timedelta; instants: a datetime or seconds since the epoch; exact values:
``_ns`` integers), see :mod:`engine.applog.args`.  A log or reader left open is
closed when collected or at exit, with a ResourceWarning.
* :class:`SegmentInfo` — one segment's index and time range and file paths;
* :class:`~engine.applog.writer.SegmentWriter` — the one writer of segments, used
  by :class:`AppendLog` and by the Spark sink.

``log.recovery`` is the shared :class:`engine.fs.RecoveryReport` of what opening
repaired.

Formats and guarantees: ``docs/formats/applog.md``; usage: ``docs/guide/applog.md``.
"""

from __future__ import annotations

from engine.applog.log import AppendLog
from engine.applog.reader import LogReader
from engine.applog.segment import Record
from engine.applog.view import SegmentInfo

__all__ = ["AppendLog", "LogReader", "Record", "SegmentInfo"]
