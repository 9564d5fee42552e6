"""One stream of a :class:`~engine.streams.journal.StreamJournal`.

A :class:`Stream` is the handle ``journal.open_stream(ident)`` returns: it
buffers what is written, and the journal turns it into records (see
:mod:`engine.streams.journal`, which does the work under its locks).  It lives
in a module of its own so the journal module stays about writing the file.
"""

from __future__ import annotations

from types import TracebackType
from typing import TYPE_CHECKING

from engine.conventions import require_bytes

if TYPE_CHECKING:
    from engine.streams.journal import StreamJournal


def stream_ident(ident: object) -> bytes:
    """A stream identifier as bytes: ``str`` (encoded as UTF-8) or bytes-like.

    Anything else is a TypeError naming ``ident`` (``bytes(5)`` would silently
    be five NUL bytes)."""
    if isinstance(ident, str):
        return ident.encode()
    if isinstance(ident, (bytes, bytearray, memoryview)):
        return bytes(ident)
    raise TypeError(f"ident must be bytes or str, not {type(ident).__name__} {ident!r}")


class Stream:
    """One stream of a :class:`StreamJournal`: ``write`` then ``close`` or ``abort``.

    Data is buffered into records of up to ``record_size`` bytes; nothing is
    durable until :meth:`close` returns.  As a context manager, a clean exit
    closes the stream and an exception aborts it.
    """

    def __init__(self, journal: StreamJournal, number: int, ident: bytes) -> None:
        self.journal = journal
        self.number = number
        self.ident = ident
        self.total = 0  # data bytes journaled so far (the INFO offset)
        self.records = 0  # records written (INFO excluded)
        self.state = "open"  # open | closing | closed | aborted | failed
        self._buf = b""  # data not journaled yet: at most one record's worth
        self._wrote_info = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        """Add ``data`` to the stream (journaled in full records as they fill).

        ``data`` is bytes-like; a ``str`` (or anything else) is a TypeError that
        says so."""
        if not isinstance(data, (bytes, bytearray, memoryview)):
            require_bytes(data, "data", serializers=False)
        self.journal._write(self, (data,))

    def close(self) -> None:
        """End the stream (EOS); returns once all of it is durable."""
        self.journal._close_stream(self)

    def abort(self) -> None:
        """Abandon the stream: readers will report it aborted, never complete."""
        self.journal._abort_stream(self)

    def __enter__(self) -> Stream:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self.state != "open":
            return
        if exc_type is None:
            self.close()
        else:
            self.abort()

    def __repr__(self) -> str:
        return f"<Stream #{self.number} {self.ident!r} {self.state} {self.total + len(self._buf)} bytes>"
