"""One stream of a stream journal: the handle the user holds, and the writer's
record of it.

Two objects, split by who owns what:

* :class:`Lane` is the writer's record of one stream (its number, identifier,
  bytes and records journaled, the data not journaled yet, whether this lap has
  its INFO record).  The journal creates it and is the only one to change it,
  under its lock (:mod:`engine.streams.journal`).
* :class:`Stream` is the handle ``journal.open_stream(ident)`` returns: it
  forwards ``write`` / ``close`` / ``abort`` to the journal through the
  :class:`StreamSink` protocol, so this module knows nothing of the journal
  (no import of it, not even for type checking).
"""

from __future__ import annotations

from collections.abc import Sequence
from types import TracebackType
from typing import Protocol

from engine.conventions import require_bytes

#: What a writer gets to write: bytes-like parts, back to back.
Parts = Sequence[bytes | bytearray | memoryview]


def stream_ident(ident: object) -> bytes:
    """A stream identifier as bytes: ``str`` (encoded as UTF-8) or bytes-like.

    Anything else is a TypeError naming ``ident`` (``bytes(5)`` would silently
    be five NUL bytes)."""
    if isinstance(ident, str):
        return ident.encode()
    if isinstance(ident, (bytes, bytearray, memoryview)):
        return bytes(ident)
    raise TypeError(f"ident must be bytes or str, not {type(ident).__name__} {ident!r}")


class Lane:
    """The writer's record of one stream (see the module docstring).

    Owned by the journal, which reads and changes it under its lock; the
    :class:`Stream` handle only reads it.
    """

    __slots__ = ("buffered", "ident", "info_written", "number", "records", "state", "total")

    def __init__(self, number: int, ident: bytes, *, total: int = 0, records: int = 0,
                 info_written: bool = False) -> None:
        self.number = number
        self.ident = ident
        #: Data bytes journaled so far (the INFO offset, modulo 2**32).
        self.total = total
        #: Records written (INFO excluded): the next record's number.
        self.records = records
        #: open | closing | closed | aborted | failed
        self.state = "open"
        #: Data not journaled yet: at most one record's worth.
        self.buffered = b""
        #: Whether this lap holds the stream's INFO record.
        self.info_written = info_written


class StreamSink(Protocol):
    """What a :class:`Stream` forwards to (the journal)."""

    def write_stream(self, lane: Lane, parts: Parts) -> None: ...

    def close_stream(self, lane: Lane) -> None: ...

    def abort_stream(self, lane: Lane) -> None: ...


class Stream:
    """One stream of a :class:`~engine.streams.journal.StreamJournal`: ``write``
    then ``close`` or ``abort``.

    Data is buffered into records of up to ``record_size`` bytes; nothing is
    durable until :meth:`close` returns.  As a context manager, a clean exit
    closes the stream and an exception aborts it.  ``number``, ``ident``,
    ``state`` (open, closing, closed, aborted, failed), ``total`` (bytes
    journaled) and ``records`` describe it.
    """

    __slots__ = ("_lane", "journal")

    def __init__(self, journal: StreamSink, lane: Lane) -> None:
        #: The journal the stream writes to.
        self.journal = journal
        self._lane = lane

    @property
    def lane(self) -> Lane:
        """The writer's record of this stream (the journal's to change)."""
        return self._lane

    @property
    def number(self) -> int:
        return self._lane.number

    @property
    def ident(self) -> bytes:
        return self._lane.ident

    @property
    def state(self) -> str:
        return self._lane.state

    @property
    def total(self) -> int:
        return self._lane.total

    @property
    def records(self) -> int:
        return self._lane.records

    def write(self, data: bytes | bytearray | memoryview) -> None:
        """Add ``data`` to the stream (journaled in full records as they fill).

        ``data`` is bytes-like; a ``str`` (or anything else) is a TypeError that
        says so."""
        if not isinstance(data, (bytes, bytearray, memoryview)):
            require_bytes(data, "data", serializers=False)
        self.journal.write_stream(self._lane, (data,))

    def write_parts(self, parts: Parts) -> None:
        """Add ``parts`` (bytes-like, back to back) in one call: records that lie
        within one part are journaled straight from it, so the parts may be
        views of a buffer the caller reuses once this returns (the server passes
        views of its receive buffer)."""
        self.journal.write_stream(self._lane, parts)

    def close(self) -> None:
        """End the stream (EOS); returns once all of it is durable."""
        self.journal.close_stream(self._lane)

    def abort(self) -> None:
        """Abandon the stream: readers will report it aborted, never complete."""
        self.journal.abort_stream(self._lane)

    def __enter__(self) -> Stream:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._lane.state != "open":
            return
        if exc_type is None:
            self.close()
        else:
            self.abort()

    def __repr__(self) -> str:
        lane = self._lane
        return f"<Stream #{lane.number} {lane.ident!r} {lane.state} {lane.total + len(lane.buffered)} bytes>"
