"""The queue reader behind the JVM ``engine-queue`` streaming source: ``python -m engine.spark.queuebridge``.

The JVM source (``engine.spark.QueueStream``) consumes a queue *reader*: items are
taken through the queue's one consumer protocol (:meth:`engine.queue.Queue.open_reader`,
``get``/``confirm``/``checkpoint``: reader locks are ``flock`` s, words shared
with the reader's other consumers, each consumer getting distinct items).  That
protocol has one implementation, this package's; the JVM cannot take ``flock`` s
either (see ``WriterLock.java``).  So the source's driver runs this module as a
child process holding the reader and speaks a line protocol with it over
stdin/stdout.  A child process (rather than PySpark's Py4J callback server, as
``foreachBatch`` uses) works for a session built by any client, Python or not,
is killed by its PID when the query stops, and a hung or dead one is a timeout
the JVM names, not a wedged Py4J thread.

The items themselves do not cross the pipe: the executors read them from the
journal files (the JVM's ``QueueFiles``), restricted to the ids the reader
handed out, which are answered as ranges.  One request, one reply line::

    get MAX_ITEMS MAX_BYTES SKIP CAP  -> ok COUNT LAST RANGES
        first confirm items a previous run of the query processed (ids <= SKIP);
        then take up to MAX_ITEMS items (at least one; -1: no limit) whose data
        add up to at most MAX_BYTES (-1: no limit; the first item always fits),
        none above CAP (-1: no cap: Trigger.AvailableNow's end), for up to
        :data:`TAKE_SECONDS` (then fewer: a reply stays well inside the JVM's
        timeout whatever the limits); LAST is the highest id taken (SKIP when
        none), RANGES ``a-b,c-d`` or ``-``.
    confirm UPTO  -> ok
        Spark committed the micro-batch ending at UPTO: confirm the items taken
        with ids <= UPTO and those a previous run processed, then checkpoint.
    close -> ok   (checkpoints, closes the reader and exits)

A failure is ``error <type>: <message>`` on one line, and the process exits.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable
from typing import Any, TextIO

from engine.errors import ConfigError
from engine.queue import Queue

#: Bound of a request's items when the query sets none: the JVM source always
#: sends one; this only guards a malformed request.
_NO_LIMIT = -1
#: Seconds a ``get`` takes items for at most (the JVM waits a minute for a reply).
TAKE_SECONDS = 10.0


def ranges(ids: Iterable[int]) -> str:
    """Sorted ids as ``a-b,c-d`` runs (``-`` when there is none)."""
    out: list[str] = []
    lo = hi = None
    for i in sorted(ids):
        if hi is not None and i == hi + 1:
            hi = i
            continue
        if lo is not None:
            out.append(f"{lo}-{hi}")
        lo = hi = i
    if lo is not None:
        out.append(f"{lo}-{hi}")
    return ",".join(out) or "-"


class Bridge:
    """One reader of one queue, its items taken and not yet confirmed, and the
    one item taken ahead (above a cap or a processed id) and given back next."""

    def __init__(self, reader: Any) -> None:
        self.reader = reader
        self.delivered: dict[int, int] = {}  # id -> data bytes, not yet confirmed
        self.ahead: Any = None

    def _next(self) -> Any:
        if self.ahead is not None:
            item, self.ahead = self.ahead, None
            return item
        return self.reader.get(timeout=0)

    def skip(self, upto: int) -> None:
        """Confirm the items a previous run of the query processed (ids <= upto)."""
        while (item := self._next()) is not None:
            if item.id > upto:
                self.ahead = item
                return
            self.reader.confirm([item.id])

    def get(self, max_items: int, max_bytes: int, skip: int, cap: int) -> str:
        self.skip(skip)
        taken: list[int] = []
        size = 0
        deadline = time.monotonic() + TAKE_SECONDS
        while (max_items == _NO_LIMIT or len(taken) < max_items) and (not taken or time.monotonic() < deadline):
            item = self._next()
            if item is None:
                break
            n = len(item.data)
            if (cap != _NO_LIMIT and item.id > cap) or (taken and max_bytes != _NO_LIMIT and size + n > max_bytes):
                self.ahead = item
                break
            taken.append(item.id)
            self.delivered[item.id] = n
            size += n
        last = max([skip, *taken])
        return f"ok {len(taken)} {last} {ranges(taken)}"

    def confirm(self, upto: int) -> str:
        ids = [i for i in self.delivered if i <= upto]
        if ids:
            self.reader.confirm(ids)
            for i in ids:
                del self.delivered[i]
        self.skip(upto)
        self.reader.checkpoint()
        return "ok"


def serve(bridge: Bridge, requests: TextIO, replies: TextIO) -> None:
    """Answer requests until ``close`` or the end of input (the JVM went away)."""
    for line in requests:
        words = line.split()
        if not words:
            continue
        if words[0] == "close":
            break
        if words[0] == "get" and len(words) == 5:
            reply = bridge.get(*(int(w) for w in words[1:]))
        elif words[0] == "confirm" and len(words) == 2:
            reply = bridge.confirm(int(words[1]))
        else:
            raise ConfigError(f"queuebridge: unknown request {line.strip()!r}")
        replies.write(reply + "\n")
        replies.flush()
    bridge.reader.close()
    replies.write("ok\n")
    replies.flush()


def main(argv: list[str] | None = None) -> int:
    """``python -m engine.spark.queuebridge DIRECTORY QUEUE READER``."""
    args = sys.argv[1:] if argv is None else argv
    out = sys.stdout
    try:
        if len(args) != 3:
            raise ConfigError("usage: python -m engine.spark.queuebridge DIRECTORY QUEUE READER")
        bridge = Bridge(Queue.open_reader(args[0], args[1], args[2]))
        out.write("ready\n")
        out.flush()
        serve(bridge, sys.stdin, out)
    except Exception as exc:  # every failure is one line the JVM reports
        message = " ".join(str(exc).split())
        out.write(f"error {type(exc).__name__}: {message}\n")
        out.flush()
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
