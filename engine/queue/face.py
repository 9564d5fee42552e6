"""The queue's familiar face: ``queue.Queue``'s methods over the default reader.

A user of ``queue.Queue`` (or persist-queue) writes::

    q.put(b"job")
    job = q.get(timeout=1)        # queue.Empty (engine.EmptyError) when none comes
    handle(job.data)
    q.task_done()                 # confirmed: gone for good
    q.join()                      # every item got and done

``get`` opens a read on the queue's default reader (``q.reader()``, the name
``""``) and returns the :class:`Taken` item: its ``data`` / ``value``, its id,
and ``with q.get() as job:`` confirms it when the block ends and gives it back
(abort: delivered again, ``error_count + 1``) when it raises.  ``task_done()``
confirms, as ``queue.Queue``'s marks, the oldest item this *thread* got and has
not confirmed: a thread that gets then calls ``task_done`` confirms what it got,
whatever other threads do.  ``qsize`` / ``empty`` / ``full`` are the default
reader's backlog (its items not confirmed, open ones included) and
``max_items``.  Nothing here is a second path: every call is the reader's own
(:meth:`Reader.get`, :meth:`Reader.confirm`, :meth:`Reader.abort`).
"""

from __future__ import annotations

import datetime
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from engine.errors import EmptyError
from engine.queue.reader import Item, Reader


class Taken:
    """An item ``Queue.get`` opened: the item's fields (``id``, ``data``,
    ``value``, ``add_time_ms``...), :meth:`confirm` / :meth:`abort`, and a context
    manager that confirms on success and aborts on an exception."""

    __slots__ = ("_face", "item", "reader")

    def __init__(self, item: Item, reader: Reader, face: DefaultConsumer) -> None:
        self.item = item
        #: The reader it was got from (its consumer confirms or aborts it).
        self.reader = reader
        self._face = face

    def __getattr__(self, name: str) -> Any:
        return getattr(self.item, name)  # id, data, value, add_time_ms, added_at, ...

    @property
    def id(self) -> int:
        return self.item.id

    @property
    def data(self) -> bytes:
        return self.item.data

    @property
    def value(self) -> Any:
        return self.item.value

    def confirm(self) -> None:
        """Gone for good (as ``task_done`` for this item)."""
        self._face.settle(self, confirm=True)

    def abort(self) -> None:
        """Give it back: delivered again, ``error_count + 1``."""
        self._face.settle(self, confirm=False)

    def __enter__(self) -> Taken:
        return self

    def __exit__(self, kind: object, *rest: object) -> None:
        if kind is None:
            self.confirm()
        else:
            self.abort()

    def __repr__(self) -> str:
        return f"<Taken id={self.item.id} {len(self.item.data)} bytes>"


class DefaultConsumer:
    """The state behind the face: the reader, and per thread the items got and not
    yet confirmed (what ``task_done`` confirms, oldest first)."""

    def __init__(self, reader: Callable[[], Reader], max_items: int | None) -> None:
        self._reader_of = reader  # the queue's reader(""), opened on first use
        self._max_items = max_items
        self._local = threading.local()
        self._lock = threading.Lock()
        self._settled = threading.Condition(self._lock)

    def _mine(self) -> deque[Taken]:
        got = getattr(self._local, "got", None)
        if got is None:
            got = self._local.got = deque()
        return got  # type: ignore[no-any-return]

    def get(self, block: bool, timeout: float | datetime.timedelta | None) -> Taken:
        reader = self._reader_of()
        item = reader.get(timeout if block else 0)
        if item is None:
            raise EmptyError("no item" + ("" if not block else " within the timeout"))
        taken = Taken(item, reader, self)
        self._mine().append(taken)
        return taken

    def settle(self, taken: Taken, *, confirm: bool) -> None:
        mine = self._mine()
        if taken in mine:
            mine.remove(taken)
        if confirm:
            taken.reader.confirm(taken.item.id)
        else:
            taken.reader.abort(taken.item.id)
        with self._settled:
            self._settled.notify_all()

    def task_done(self) -> None:
        mine = self._mine()
        if not mine:
            raise ValueError("task_done() called more times than items this thread got")
        self.settle(mine[0], confirm=True)

    def qsize(self) -> int:
        return len(self._reader_of())

    def full(self) -> bool:
        return self._max_items is not None and self.qsize() >= self._max_items

    def join(self, timeout: float | None) -> bool:
        """Block until the default reader has no item left (every item got and
        confirmed, by any consumer of it); False when ``timeout`` passed first."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.qsize():
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return False
            with self._settled:
                self._settled.wait(0.05 if left is None else min(left, 0.05))  # (others may confirm too)
        return True
