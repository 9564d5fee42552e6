"""Consumers of one reader name: the claims every consumer takes, alone or not.

Any number of consumers (processes, or handles in one process) may hold one
reader name; one consumer alone is the case with nobody else there, not a mode.
Every consumer:

* holds the reader's lock file ``<queue>.rlock.<reader>`` with a *shared*
  flock for as long as it is open (probes of the lock, retiring files,
  ``reader_expiry`` see it held; ``engine queue repair`` takes it exclusively),
  and a shared range lock on byte :data:`PRESENCE`, by which the others see it
  is there;
* **claims** every item before it delivers it: an exclusive range lock (an
  open file description lock, ``F_OFD_SETLK``) on byte ``CLAIM_BASE + id``.  A
  claim is held while the item is open and, once confirmed, until the
  consumer's checkpoint has written the confirmation; an abort (or an open
  read's timeout) drops it at once.  A consumer that finds an item claimed
  keeps it aside and tries again every ``poll_interval``: it is free once its
  holder confirmed and checkpointed it (done: dropped), aborted it, or died
  (the kernel drops a dead process's locks): then it is delivered here, as an
  abort would (``error_count + 1``);
* claims items **ahead** in one range lock, up to :data:`CLAIM_AHEAD` of the
  items it has decoded, while nobody else holds the name (one system call per
  run of items instead of one per item), and one at a time once the presence
  lock says another consumer is there;
* writes the shared checkpoint (the reader file) under an exclusive range lock
  on byte :data:`MUTEX`, with the file's state merged into its own (an id done
  for either is done), then bumps the **generation**, a u64 word of the lock
  file that every consumer maps (bytes 8-15), and only then drops the claims of
  the items it wrote as done.  After taking a claim a consumer looks at the
  generation and, when another consumer's checkpoint changed it, merges the
  reader file first: an item another consumer confirmed is never delivered
  again while that consumer lives.

At-least-once: items confirmed by a consumer that died before its next
checkpoint are delivered again.  Never is an item open in two live consumers at
once, nor delivered again after a live consumer confirmed it.

Where the file system has no range locks (not Linux), a consumer holds the
flock exclusively and its claims always succeed: a second consumer of the name
gets LockedError.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable

from engine.errors import LockedError
from engine.fs import FileHandle, HeldLock, SharedWords, lock_handle
from engine.queue.census import GEN_WORD, RLOCK_WORDS

#: How long a consumer waits for another's flock to be shared (its take of the
#: shared flock only conflicts with ``engine queue repair``'s exclusive one).
SHARE_WAIT = 5.0
#: Items claimed ahead in one lock while a consumer is alone: one system call per
#: run of this many items; another consumer arriving meanwhile skips at most
#: this many (they are given back at the holder's next checkpoint round if it
#: has not delivered them by then).
CLAIM_AHEAD = 1024
#: How long a look at the presence lock is trusted (seconds).
PRESENCE_LOOK = 0.05

PRESENCE = 0
MUTEX = 1
CLAIM_BASE = 2


class Claims:
    """One consumer's locks on its reader's lock file (see the module docstring):
    the ranges of item ids it claimed, the mutex of the shared checkpoint, the
    generation word, and whether others are there."""

    __slots__ = ("_alone_until", "_handle", "_ranges", "_words", "high", "low", "ranged", "seen_gen")

    def __init__(self, lock: HeldLock) -> None:
        self._handle: FileHandle = lock.handle
        self.ranged = self._handle.supports_range_locks
        self._words: SharedWords = self._handle.map_words(RLOCK_WORDS)
        self._ranges: list[list[int]] = []  # claimed ids, as sorted disjoint [low, high] ranges
        #: The newest claimed range (a get's one comparison decides "claimed").
        self.low = 1
        self.high = 0
        self._alone_until = 0.0
        # Never a generation: the first claim merges the reader file.  The state
        # the consumer opened with was loaded before this word could be read, and
        # a checkpoint written in between (its claims released) would otherwise
        # look already merged: an item another consumer confirmed, delivered again.
        self.seen_gen = -1
        if self.ranged:
            self._handle.lock_range(PRESENCE, exclusive=False)

    # -- presence ------------------------------------------------------------------------
    def others_present(self) -> bool:
        """Whether another consumer holds the reader name now (looked at most
        every :data:`PRESENCE_LOOK` while alone)."""
        if not self.ranged:
            return False
        now = time.monotonic()
        if now < self._alone_until:
            return False
        present = self._handle.range_locked(PRESENCE)
        if not present:
            self._alone_until = now + PRESENCE_LOOK
        return present

    # -- claims --------------------------------------------------------------------------
    def holds(self, xid: int) -> bool:
        if self.low <= xid <= self.high:
            return True
        return any(low <= xid <= high for low, high in self._ranges)

    def claim(self, xid: int, ahead_to: int) -> bool:
        """Claim ``xid`` (and the ids after it up to ``ahead_to`` when nobody else
        holds the name); False when another consumer holds ``xid``."""
        if not self.ranged:
            self._add(xid, xid)
            return True
        high = xid
        if ahead_to > xid and not self.others_present():
            high = min(ahead_to, xid + CLAIM_AHEAD - 1)
            if self._handle.lock_range(CLAIM_BASE + xid, high - xid + 1):
                self._add(xid, high)
                return True
            high = xid
        if not self._handle.lock_range(CLAIM_BASE + xid):
            return False
        self._add(xid, xid)
        return True

    def _add(self, low: int, high: int) -> None:
        ranges = self._ranges
        if ranges and ranges[-1][1] + 1 == low:
            ranges[-1][1] = high
        elif not ranges or ranges[-1][1] < low:
            ranges.append([low, high])
        else:
            ranges.append([low, high])
            ranges.sort()
        self.low, self.high = ranges[-1]

    def release(self, low: int, high: int | None = None) -> None:
        """Let the ids ``low..high`` go (those held; ``high`` None: just ``low``)."""
        high = low if high is None else high
        kept: list[list[int]] = []
        dropped: list[tuple[int, int]] = []
        for lo, hi in self._ranges:
            if hi < low or high < lo:
                kept.append([lo, hi])
                continue
            if lo < low:
                kept.append([lo, low - 1])
            if high < hi:
                kept.append([high + 1, hi])
            dropped.append((max(lo, low), min(hi, high)))
        self._ranges = kept
        self.low, self.high = kept[-1] if kept else (1, 0)
        if self.ranged:
            for lo, hi in dropped:
                self._handle.unlock_range(CLAIM_BASE + lo, hi - lo + 1)

    def release_done(self, head: int, done: Iterable[int], keep: set[int]) -> None:
        """After a checkpoint wrote ``head`` and ``done``: let go of the claimed
        ids it wrote as done, except those in ``keep`` (open reads).  Claimed
        ids above ``head`` that are not done stay (claimed ahead, or open)."""
        for lo, _ in [r for r in self._ranges if r[0] <= head]:
            start = lo
            for xid in sorted(x for x in keep if lo <= x <= head):
                if start < xid:
                    self.release(start, xid - 1)
                start = xid + 1
            if start <= head:
                self.release(start, head)
        for xid in done:
            if xid not in keep and self.holds(xid):
                self.release(xid)

    def release_ahead(self, head: int, keep: set[int]) -> None:
        """Let go of the claimed ids above ``head`` except ``keep`` (open reads):
        items claimed ahead and not delivered yet, so that a consumer that came
        meanwhile can have them (this one claims again before it delivers)."""
        for lo, hi in [(lo, hi) for lo, hi in self._ranges if hi > head]:
            start = max(lo, head + 1)
            for xid in sorted(x for x in keep if start <= x <= hi):
                if start < xid:
                    self.release(start, xid - 1)
                start = xid + 1
            if start <= hi:
                self.release(start, hi)

    def held_ids(self) -> list[tuple[int, int]]:
        """The claimed ranges (for tests and reports)."""
        return [(lo, hi) for lo, hi in self._ranges]

    # -- the shared checkpoint ------------------------------------------------------------
    def lock_mutex(self) -> None:
        if self.ranged:
            self._handle.lock_range(MUTEX, blocking=True)

    def unlock_mutex(self) -> None:
        if self.ranged:
            self._handle.unlock_range(MUTEX)

    def generation(self) -> int:
        """The shared checkpoint's generation now."""
        return self._words.get64(GEN_WORD)

    def changed(self) -> bool:
        """Whether another consumer checkpointed since this one last merged or wrote."""
        return self._words.get64(GEN_WORD) != self.seen_gen

    def bump(self) -> None:
        """This consumer wrote the checkpoint (under the mutex): a new generation."""
        self.seen_gen = (self._words.get64(GEN_WORD) + 1) & 0xFFFFFFFFFFFFFFFF
        self._words.set64(GEN_WORD, self.seen_gen)

    def close(self) -> None:
        """Unmap the words (the lock file's handle, and with it every lock, goes
        with the reader's lock)."""
        self._words.close()


def wait_round(stop: threading.Event, interval: float) -> bool:
    """Wait for the next checkpoint round (``interval`` seconds); False once
    ``stop`` is set."""
    return not stop.wait(interval)


def lock_consumer(handle: FileHandle, path: str, what: str, patience: float) -> HeldLock:
    """Lock the open reader lock file ``handle`` for a consumer: shared (the
    reader's other consumers hold it shared too), or exclusively where the file
    system has no range locks.  LockedError when ``engine queue repair`` holds it
    (after ``patience`` seconds), or another consumer where claims cannot be had."""
    exclusive = not handle.supports_range_locks
    lock_handle(handle, exclusive=exclusive, wait=max(patience, 0.0), what=what)
    return HeldLock(path, handle, exclusive)


__all__ = ["CLAIM_AHEAD", "Claims", "LockedError", "lock_consumer", "wait_round"]
