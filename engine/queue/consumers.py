"""The reader's side of competing consumers (a mixin of ``Reader``; the protocol
is :mod:`engine.queue.compete`'s).

While a consumer is alone none of this runs: ``get`` keeps its flat fast path.
Once it competes, every item it delivers is claimed first; items claimed
elsewhere wait in ``_others`` and are tried again every ``poll_interval``;
confirmed items stay claimed until the checkpoint that writes them; each
checkpoint merges the reader file with this consumer's state.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any

from engine.fs import FileSystem, HeldLock, lock_handle
from engine.queue import checkpoint
from engine.queue.compete import Claims
from engine.queue.config import QueueConfig
from engine.queue.state import ReaderState

if TYPE_CHECKING:
    from engine.queue.reader import Item


class Competing:
    """Claims, the items held elsewhere, the merged checkpoint (see the module docstring)."""

    path: str
    _fs: FileSystem
    _state: ReaderState
    _config: QueueConfig
    _reader_lock: HeldLock
    _lock: threading.Lock
    _open: dict[int, Item]
    _plain: bool
    _dirty: bool
    durable_head: int

    # The Reader's:
    def _next_item(self, *, consume: bool) -> Item | None:
        raise NotImplementedError

    def _give_back(self, item: Item) -> None:
        raise NotImplementedError

    def _now_ms(self) -> int:
        raise NotImplementedError

    def _init_competing(self, lock: HeldLock) -> None:
        self._claims = Claims.of(lock.handle)
        #: Several consumers share this reader name (the lock is held shared).
        self.competing = not lock.exclusive and self._claims is not None
        self._claimed: set[int] = set()  # ids this consumer holds (open, or done and not checkpointed)
        self._others: dict[int, Item] = {}  # items another consumer held when this one came to them
        self._retry_at = 0.0
        self._disk_mark: tuple[int, int] | None = None  # (mtime, size) of the reader file last merged
        if self.competing:
            self._plain = False

    # -- delivering --------------------------------------------------------------------
    def _compete_next(self) -> Item | None:
        """The next item this consumer may deliver, claimed (``_lock`` held)."""
        claims = self._claims
        assert claims is not None
        if self._others and time.monotonic() >= self._retry_at:
            self._retry_at = time.monotonic() + self._config.poll_interval
            self._retry_others(claims)
        while True:
            item = self._next_item(consume=True)
            if item is None:
                return None
            if item.id in self._claimed or claims.claim(item.id):
                self._claimed.add(item.id)
                if self._refresh(force=False) and self._state.is_done(item.id):
                    self._unclaim(item.id)  # another consumer confirmed it meanwhile
                    continue
                return item
            self._others[item.id] = item

    def _retry_others(self, claims: Claims) -> None:
        """Items held elsewhere: free now?  Confirmed there (dropped), or aborted
        or left by a consumer that died: given back here, ``error_count + 1``."""
        freed = []
        for xid in sorted(self._others):
            if self._state.is_done(xid):
                del self._others[xid]
            elif claims.claim(xid):
                self._claimed.add(xid)
                freed.append(self._others.pop(xid))
        if not freed:
            return
        self._refresh(force=True)
        for item in freed:
            if self._state.is_done(item.id):
                self._unclaim(item.id)
            else:
                self._give_back(item)  # delivered again first (or to the error queue)

    def _unclaim(self, xid: int) -> None:
        if xid in self._claimed:
            self._claimed.discard(xid)
            assert self._claims is not None
            self._claims.release(xid)

    def _gave_back(self, item: Item) -> None:
        """After an abort (or an open read's timeout): let the other consumers
        have it too, unless it was punted (done, kept until the checkpoint)."""
        if self.competing and not self._state.is_done(item.id):
            self._unclaim(item.id)

    # -- the shared checkpoint -----------------------------------------------------------
    def _refresh(self, *, force: bool) -> bool:
        """Merge the reader file into this consumer's state when it changed since
        the last merge (or always, ``force``); returns whether it read it."""
        try:
            mark = (self._fs.mtime_ns(self.path), self._fs.file_size(self.path))
        except FileNotFoundError:
            return False
        if not force and mark == self._disk_mark:
            return False
        self._disk_mark = mark
        try:
            head, done = checkpoint.load_reader_file(self._fs, self.path)
        except FileNotFoundError:
            return False
        self._merge(head, done)
        return True

    def _merge(self, head: int, done: Any) -> None:
        state = self._state
        if head > state.head:
            state.advance_to(head)
        for xid in done:
            if xid > state.head:
                state.confirm(xid)

    def _checkpoint_competing(self, force: bool) -> bool:
        """Checkpoint with the other consumers' confirmations merged in; then let
        go of the claims of the items it wrote as done (``_checkpoint_lock`` held)."""
        claims = self._claims
        assert claims is not None
        claims.lock_mutex()
        try:
            with self._lock:
                self._refresh(force=True)
                if not (self._dirty or force):
                    return False
                head, done = self._state.snapshot()
                self._dirty = False
            try:
                checkpoint.write_reader_file(self._fs, self.path, head, done, self._now_ms())
            except BaseException:
                self._dirty = True
                raise
            self._disk_mark = (self._fs.mtime_ns(self.path), self._fs.file_size(self.path))
        finally:
            claims.unlock_mutex()
        self.durable_head = head
        written = ReaderState(head, done)
        with self._lock:
            for xid in [x for x in self._claimed if written.is_done(x) and x not in self._open]:
                self._unclaim(xid)
        return True

    def share_requested(self) -> bool:
        """Whether another consumer asks this one (alone) to share its name."""
        if self.competing or self._claims is None:
            return False
        try:
            return self._claims.requested()
        except OSError:
            return False  # closed meanwhile

    def _share_if_asked(self, patience: float) -> None:
        """A consumer alone: when another asks for the name, compete from now on
        (its checkpoint was just written; the items open here are claimed first)."""
        claims = self._claims
        if self.competing or claims is None or not claims.requested():
            return
        with self._lock:
            for xid in self._open:
                claims.claim(xid)
                self._claimed.add(xid)
            self.competing = True
            self._plain = False
        lock_handle(self._reader_lock.handle, exclusive=False, wait=patience, what="reader lock")
        self._reader_lock.exclusive = False
