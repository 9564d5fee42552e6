"""A reader's confirmation state: the head and the out-of-order done set.

``head`` = every id <= head is done (READ_HEAD); ``done`` = ids > head confirmed out
of order (READ_DONE).  Confirming head + 1 advances the head and swallows following
ids that were already done, so the done set only holds the "holes" ahead of the
head.  Pure logic, no I/O: property-tested against a plain set model.

``done`` is a :class:`SortedSet` (READ_DONE is written sorted, and clamping walks it
in order); ``members`` mirrors it as a plain set because membership is tested once
per item delivered, and a plain set answers that from C.
"""

from __future__ import annotations

from collections.abc import Iterable

from sortedcontainers import SortedSet  # type: ignore[import-untyped]


class ReaderState:
    """Head + done set, with the libkestrel load-time clamping rules."""

    def __init__(self, head: int = 0, done: Iterable[int] = ()) -> None:
        self.head = head
        self.done: SortedSet = SortedSet(i for i in done if i > head)
        self.members: set[int] = set(self.done)
        self._swallow()

    # -- the only mutators of ``done`` (they keep ``members`` in step) -------------
    def _add(self, xid: int) -> None:
        self.done.add(xid)
        self.members.add(xid)

    def _pop_first(self) -> int:
        xid: int = self.done.pop(0)
        self.members.discard(xid)
        return xid

    def _discard(self, xid: int) -> None:
        self.done.discard(xid)
        self.members.discard(xid)

    def _swallow(self) -> None:
        """Advance the head over the run of done ids right after it."""
        while self.members and self.head + 1 in self.members:
            self.head = self._pop_first()

    # -- operations ------------------------------------------------------------------
    def is_done(self, xid: int) -> bool:
        return xid <= self.head or xid in self.members

    def confirm(self, xid: int) -> bool:
        """Mark ``xid`` done; returns False if it already was."""
        if self.is_done(xid):
            return False
        if xid == self.head + 1:
            self.head = xid
            self._swallow()
        else:
            self._add(xid)
        return True

    def advance_to(self, xid: int) -> None:
        """Everything <= ``xid`` is done (used when ids below it no longer exist)."""
        if xid <= self.head:
            return
        self.head = xid
        while self.done and self.done[0] <= self.head:
            self._pop_first()
        self._swallow()

    def skip_missing(self, low: int, high: int) -> None:
        """Ids ``low..high`` do not exist in the journal (a repair cut them out, or
        they were never written): count them as done so the head can pass them."""
        if high < low:
            return
        if low <= self.head + 1:
            self.advance_to(high)
        else:
            for xid in range(low, high + 1):
                self._add(xid)

    def clamp(self, earliest: int | None, tail: int) -> list[str]:
        """Clamp the head into [earliest - 1, tail]; drop done ids outside (head, tail].

        Returns notes describing what changed (reported by the caller).  ``earliest``
        is the first id still in the journal, None when the journal holds no item.
        """
        notes = []
        low = (earliest - 1) if earliest is not None else tail
        if self.head > tail:
            notes.append(f"head {self.head} is past the journal tail {tail}: clamped")
            self.head = tail
        if self.head < low:
            self.head = low  # ids below the journal's first item are gone: done
        dropped = [i for i in self.done if i <= self.head or i > tail]
        if dropped:
            notes.append(f"dropped {len(dropped)} done ids outside ({self.head}, {tail}]")
            for i in dropped:
                self._discard(i)
        self._swallow()
        return notes

    def pending(self, tail: int) -> int:
        """How many ids in (head, tail] are not done."""
        return max(0, tail - self.head - len(self.members))

    def snapshot(self) -> tuple[int, tuple[int, ...]]:
        return self.head, tuple(self.done)
