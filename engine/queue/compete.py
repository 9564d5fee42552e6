"""Competing consumers: several processes share one reader name.

A reader name is held through its lock file ``<queue>.rlock.<reader>``:

* a consumer alone holds it *exclusively* (flock), as every reader always did,
  and delivers items without any of the machinery below;
* a second consumer of the name (another process, or another handle of the same
  process) that finds it held asks to share: it holds a read lock on byte 0 of the
  file (an open file description lock, ``F_OFD_SETLK``) while it waits.  The
  holder looks for requests every :data:`SHARE_LOOK` seconds (its checkpoint thread):
  it checkpoints, claims the items it has open (below), and turns its flock into
  a shared one; the newcomer takes the flock shared.  From then on every consumer
  of the name *competes*; a consumer that finds the flock held shared competes
  from the start.

Competing consumers share the reader's checkpoint file and claim each item
before delivering it: an exclusive OFD lock on byte ``CLAIM_BASE + id`` of the
lock file, held while the item is open and, once confirmed, until the
consumer's next checkpoint has written the confirmation (so that a consumer
that claims it after that reads it as done).  A consumer that finds an item
claimed keeps it aside and tries again every ``poll_interval``: it is free once
its holder confirmed and checkpointed it (done: dropped), aborted it, or died
(the kernel drops a dead process's locks): then it is delivered here with
``error_count + 1``, as an abort does.  Each consumer's checkpoint merges the
file's state with its own under an OFD lock on byte ``MUTEX`` (every id done
for either is done), and takes the merged state in.

OFD locks are Linux's (3.15); on another file system than the real one (the
crash simulator) a second consumer of a name gets ``LockedError`` as before.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from engine.errors import LockedError
from engine.fs import FileHandle, HeldLock, lock_handle

#: How long a consumer asking to share a reader name waits for its holder (seconds).
SHARE_WAIT = 5.0
#: How often a holder looks for such a request between two checkpoint rounds.
SHARE_LOOK = 0.25

REQUEST = 0
MUTEX = 1
CLAIM_BASE = 2


class Claims:
    """One consumer's range locks (:meth:`FileHandle.lock_range`) on its handle of
    the reader lock file: a byte per open item (its id past :data:`CLAIM_BASE`),
    the mutex of the merged checkpoint and the share request."""

    def __init__(self, handle: FileHandle) -> None:
        self.handle = handle

    @classmethod
    def of(cls, handle: FileHandle) -> Claims | None:
        """The claims of ``handle`` (None where its file system has no range locks)."""
        return cls(handle) if handle.supports_range_locks else None

    def claim(self, xid: int) -> bool:
        """Hold item ``xid``; False if another consumer holds it."""
        return self.handle.lock_range(CLAIM_BASE + xid)

    def release(self, xid: int) -> None:
        self.handle.unlock_range(CLAIM_BASE + xid)

    def lock_mutex(self) -> None:
        self.handle.lock_range(MUTEX, blocking=True)

    def unlock_mutex(self) -> None:
        self.handle.unlock_range(MUTEX)

    def request(self) -> None:
        self.handle.lock_range(REQUEST, exclusive=False)

    def drop_request(self) -> None:
        self.handle.unlock_range(REQUEST)

    def requested(self) -> bool:
        """Whether another consumer asks to share the name."""
        return self.handle.range_locked(REQUEST)


def wait_round(stop: threading.Event, interval: float, asked: Callable[[], bool]) -> bool:
    """Wait for the next checkpoint round: ``interval`` seconds, or less once a
    consumer asks to share a reader name (``asked``, looked at every
    :data:`SHARE_LOOK` seconds).  False once ``stop`` is set."""
    deadline = time.monotonic() + interval
    while True:
        left = deadline - time.monotonic()
        if stop.wait(min(max(left, 0.0), SHARE_LOOK)):
            return False
        if left <= SHARE_LOOK or asked():
            return True


def lock_consumer(handle: FileHandle, path: str, what: str, patience: float, share_wait: float) -> HeldLock:
    """Lock the open reader lock file ``handle``: exclusively when nobody holds it
    (a consumer alone), else shared (competing), asking the holder to share and
    waiting up to ``share_wait`` seconds for it.  LockedError past that, or when
    OFD locks cannot be had."""
    try:
        lock_handle(handle, exclusive=True, wait=patience, what=what)
        return HeldLock(path, handle, True)
    except LockedError:
        claims = Claims.of(handle)
        if claims is None:
            raise
    deadline = time.monotonic() + share_wait
    claims.request()
    try:
        while True:
            try:
                lock_handle(handle, exclusive=False, wait=0.0, what=what)
                return HeldLock(path, handle, False)
            except LockedError:
                if time.monotonic() >= deadline:
                    raise LockedError(
                        f"{path}: the {what} is held by another process, which did not share it "
                        f"(waited {share_wait:g} s)",
                        path,
                    ) from None
                time.sleep(0.01)
    finally:
        claims.drop_request()
