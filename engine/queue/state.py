"""A reader's confirmation state: the head and the out-of-order done set.

``head`` = every id <= head is done (READ_HEAD); ``done`` = ids > head confirmed out
of order (READ_DONE).  Confirming head + 1 advances the head and swallows following
ids that were already done, so the done set only holds the "holes" ahead of the
head.  Pure logic, no I/O: property-tested against a plain set model.

``done`` is a :class:`SortedSet` (READ_DONE is written sorted, and clamping walks it
in order); ``members`` mirrors it as a plain set because membership is tested once
per item delivered, and a plain set answers that from C.

``gaps`` are ranges of ids above the head that do not exist in the journal (a crash
took them back before they were durable, or a repair cut them out).  They count as
done, but as *ranges*: skipping a gap costs O(1) whatever its numeric width, so no
id distance (a damaged checkpoint, a crash window) can make loading or reading
walk millions of ids.  Gaps are not written to the reader file: after a reopen the
cursor finds the same hole again when it reads past it.
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
        #: Sorted, disjoint ``(low, high)`` ranges above ``head + 1`` counted as done.
        self.gaps: list[tuple[int, int]] = []
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
        """Advance the head over the run of done ids (and gaps) right after it."""
        while True:
            if self.members and self.head + 1 in self.members:
                self.head = self._pop_first()
            elif self.gaps and self.gaps[0][0] <= self.head + 1:
                high = self.gaps.pop(0)[1]
                if high > self.head:
                    self.head = high
                    self._drop_upto(high)
            else:
                return

    def _drop_upto(self, xid: int) -> None:
        """Forget done ids <= ``xid`` (now under the head): O(ids dropped)."""
        while self.done and self.done[0] <= xid:
            self._pop_first()

    # -- operations ------------------------------------------------------------------
    def is_done(self, xid: int) -> bool:
        return xid <= self.head or xid in self.members or any(lo <= xid <= hi for lo, hi in self.gaps)

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
        self._drop_upto(xid)
        self.gaps = [(max(lo, xid + 1), hi) for lo, hi in self.gaps if hi > xid]
        self._swallow()

    def skip_missing(self, low: int, high: int) -> None:
        """Ids ``low..high`` do not exist in the journal (a repair cut them out, or
        they were never written): count them as done so the head can pass them.

        O(done ids inside the range + gaps), never O(high - low): the range is kept
        as one gap, merged with the gaps it touches.
        """
        low = max(low, self.head + 1)
        if high < low:
            return
        if low == self.head + 1:
            self.advance_to(high)
            return
        # Done ids inside the gap are now covered by it (range removal, no walk).
        for xid in list(self.done.irange(low, high)):
            self._discard(xid)
        merged: list[tuple[int, int]] = []
        for lo, hi in self.gaps:
            if hi + 1 < low or lo > high + 1:
                merged.append((lo, hi))
            else:
                low, high = min(lo, low), max(hi, high)
        merged.append((low, high))
        merged.sort()
        self.gaps = merged

    def clamp(self, earliest: int | None) -> list[tuple[str, int, str, str]]:
        """Raise the head to ``earliest - 1`` when the ids before the journal's
        first item (``earliest``; None: the journal holds no item) are gone.

        Returns what changed as ``(kind, count, unit, detail)`` repairs in the terms
        of :class:`engine.fs.RecoveryReport` (the caller records them).  The head
        is never lowered, nor a done id above the journal's tail dropped (as
        libkestrel's load does): every id a reader mentions is burnt by the
        writer's next open (see ``engine.queue.recover``), so a head past the tail
        is ids a crash took back or the writer has not made visible yet, never
        ids to deliver again.
        """
        repairs: list[tuple[str, int, str, str]] = []
        if earliest is not None and self.head < earliest - 1:
            gone = earliest - 1 - self.head
            repairs.append(
                ("reset", gone, "ids", f"ids {self.head + 1}..{earliest - 1} are no longer in the journal: passed")
            )
            self.advance_to(earliest - 1)
        return repairs

    def pending(self, tail: int) -> int:
        """How many ids in (head, tail] are not done."""
        skipped = sum(min(hi, tail) - lo + 1 for lo, hi in self.gaps if lo <= tail)
        return max(0, tail - self.head - len(self.members) - skipped)

    def snapshot(self) -> tuple[int, tuple[int, ...]]:
        return self.head, tuple(self.done)
