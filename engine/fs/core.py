"""The store core: one store's life cycle, written once.

Every store (queue, page store, key-value store, stream journal, append log,
event journal) is a thin class over one :class:`StoreCore`, and every reader
class over one opened with ``writer=False``.  The core owns what each of them
would otherwise write again:

* **open**, as one sequence (:meth:`StoreCore.opening`)::

      core = StoreCore(fs, path, "event journal", policy=SyncPolicy.parse(sync))
      with core.opening():                 # any failure: what was kept is released
          core.lock(lock_path, wait=0)     # 1. the writer lock (LockedError if held)
          data = core.keep(fs.open(...))   # 2. the files, through the seam
          state = recover(..., core.report)  # 3. recovery, into the report
          store = cls(core, state)         # 4. the store installs what recovery found
      core.opened(store, log)              # 5. report logged; unclosed use watched

  A failure at any step releases what the earlier steps took, newest first, and
  leaves the files as recovery left them (recovery only ever repairs what a crash
  can leave, so a second open finds the same state);
* **the failure latch** (:class:`~engine.fs.latch.FailureLatch`): after a failed
  write or fsync the store refuses every later write until a reopen
  (:meth:`check_writable`, :meth:`fail`);
* **the sync policy** (``sync=``: ``"always"``, ``"never"`` or a period) and its
  driver (:class:`SyncDriver`): group commit for ``always``, one background thread
  for a period (and for ``never`` when the store stages writes);
* **close**, once (:meth:`begin_close`, :meth:`finish_close`): the driver stopped,
  then the store's own final writes, then every kept resource released newest
  first; and the **unclosed-use warning** (a store dropped or left open at exit
  is closed with a ResourceWarning: :meth:`watch`);
* **read-only access** in one shape: a reader class per store whose ``open``
  builds a core with ``writer=False`` (no writer lock, no repair: its report only says what it cannot show, no sync) and
  the same ``opening`` sequence.
"""

from __future__ import annotations

import datetime
import logging
import os
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Protocol, TypeVar

from engine.conventions import warn_resource, warn_unclosed
from engine.errors import ClosedError, ConfigError, PoisonedError
from engine.fs.base import FileSystem
from engine.fs.durable import GroupCommit, SyncPolicy
from engine.fs.latch import FailureLatch
from engine.fs.lock import HeldLock, take_lock
from engine.fs.recovery import RecoveryReport

__all__ = ["TICK", "Closeable", "StoreCore", "SyncDriver"]

#: How often a background sync thread wakes up at most (seconds): a store that
#: stages writes has them written within this long.
TICK = 0.05


class Closeable(Protocol):
    """Anything a store keeps open: a file handle, a mapping, a reader."""

    def close(self) -> None: ...


_R = TypeVar("_R", bound=Closeable)


class _Release:
    """A held lock as a :class:`Closeable` (``close`` releases it)."""

    __slots__ = ("_lock",)

    def __init__(self, lock: HeldLock) -> None:
        self._lock = lock

    def close(self) -> None:
        self._lock.release()


class SyncDriver:
    """The sync policy in motion, one object for every policy and every store.

    ``always``: no thread; writers share fsyncs through :attr:`group` (a
    :class:`GroupCommit` over ``sync``), or, for a store whose writers are
    processes too (the queue), through the store's own commit.  A period: one
    thread that calls ``flush`` every :data:`TICK` seconds at most and ``sync``
    once per period while ``dirty()``.  ``never``: that thread only when the
    store stages writes (``flush`` given), and no fsync until close.

    A failure of the thread trips the store's latch, so the next write raises it:
    a background fsync failure is never swallowed.
    """

    __slots__ = (
        "_dirty",
        "_flush",
        "_latch",
        "_next_sync",
        "_path",
        "_stop",
        "_sync",
        "_thread",
        "group",
        "policy",
    )

    def __init__(
        self,
        policy: SyncPolicy,
        latch: FailureLatch,
        path: str,
        *,
        sync: Callable[[], None],
        flush: Callable[[], None] | None = None,
        dirty: Callable[[], bool] | None = None,
        group_delay: float = 0.0,
        name: str = "engine-sync",
    ) -> None:
        self.policy = policy
        self._sync = sync
        self._flush = flush
        self._dirty = dirty
        self._latch = latch
        self._path = path
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._next_sync = 0.0
        #: ``always``: the group commit writers wait on (None otherwise).
        self.group: GroupCommit | None = None
        if policy.mode == "always":
            self.group = GroupCommit(sync, delay=group_delay, name=path)
        elif policy.mode == "periodic" or flush is not None:
            self._next_sync = time.monotonic() + policy.period
            self._thread = threading.Thread(target=self._run, name=name, daemon=True)
            self._thread.start()

    @property
    def thread(self) -> threading.Thread | None:
        """The background thread (None when the policy needs none)."""
        return self._thread

    def _run(self) -> None:
        tick = TICK if self.policy.mode == "never" else min(self.policy.period, TICK)
        while not self._stop.wait(tick):
            try:
                self.tick()
            except BaseException as exc:
                # Kept in the latch and raised by the store's next write.
                self._latch.trip(exc, self._path, "background sync")
                return

    def tick(self) -> None:
        """Write what is staged; with a period, fsync once the period has passed."""
        if self.policy.mode == "periodic" and time.monotonic() >= self._next_sync:
            self._next_sync = time.monotonic() + self.policy.period
            if self._dirty is None or self._dirty():
                self._sync()
        if self._flush is not None:
            self._flush()

    def commit(self) -> None:
        """``always``: return once everything written so far is durable (one
        group commit shared with the writers waiting meanwhile); otherwise nothing."""
        group = self.group
        if group is not None:
            group.wait(group.ticket())

    def stop(self) -> None:
        """Stop the thread (it does not sync: the store syncs on close)."""
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()


class StoreCore:
    """One open store's (or reader's) life cycle; see the module docstring.

    A store reads :attr:`fs`, :attr:`path`, :attr:`report`, :attr:`latch`,
    :attr:`policy` and :attr:`closed`, and calls the methods; it never keeps a
    lock or handle of its own outside :meth:`keep`, so that one close releases
    everything, once, in the right order.
    """

    __slots__ = (
        "__weakref__",
        "_finalizer",
        "_kept",
        "_label",
        "_pid",
        "closed",
        "driver",
        "fs",
        "latch",
        "path",
        "policy",
        "report",
        "what",
        "writer",
    )

    def __init__(self, fs: FileSystem, path: str, what: str, *, writer: bool = True,
                 policy: SyncPolicy | None = None) -> None:
        self.fs = fs
        #: The store's path (its directory, or its file).
        self.path = path
        #: What the store is, in the user's words ("event journal"): errors and
        #: warnings name it.
        self.what = what
        #: Whether this is a writer (False: a reader, which never writes).
        self.writer = writer
        #: The ``sync=`` policy (``never`` for a reader).
        self.policy = policy if policy is not None else SyncPolicy("never")
        #: What opening repaired (empty when the store was closed cleanly; always
        #: empty for a reader, which repairs nothing).
        self.report = RecoveryReport(path)
        #: The first failed write or fsync; once set, writes are refused.
        self.latch = FailureLatch()
        #: The sync policy's driver (see :meth:`start_sync`).
        self.driver: SyncDriver | None = None
        #: Set when close begins (:meth:`begin_close`).
        self.closed = False
        self._kept: list[Closeable] = []
        self._finalizer: weakref.finalize | None = None
        self._pid = os.getpid()
        self._label = ""

    # -- opening ------------------------------------------------------------------
    @contextmanager
    def opening(self) -> Iterator[StoreCore]:
        """The open sequence's guard: if anything inside fails, every lock and
        file kept so far is released (newest first) and the error goes on."""
        try:
            yield self
        except BaseException:
            self.release_kept()
            raise

    def lock(self, path: str, *, wait: float | datetime.timedelta | None = 0.0, exclusive: bool = True,
             what: str | None = None) -> HeldLock:
        """Take the lock file ``path`` (the writer lock unless ``exclusive`` is
        False) through the seam, waiting up to ``wait`` seconds (None: forever),
        and keep it until close.  Raises LockedError naming ``what``."""
        held = take_lock(self.fs, path, wait=wait, exclusive=exclusive,
                         what=what or f"writer lock of the {self.what}")
        return self.hold(held)

    def hold(self, held: HeldLock) -> HeldLock:
        """Keep a lock taken otherwise (a queue producer's shared presence lock)
        until close, when it is released in turn with the other resources."""
        self.keep(_Release(held))
        return held

    def keep(self, resource: _R) -> _R:
        """Keep ``resource`` (a handle, a mapping, a lock) until close; returns it."""
        self._kept.append(resource)
        return resource

    def forget(self, resource: Closeable) -> None:
        """Stop keeping ``resource`` (the store closed or replaced it itself)."""
        for index in range(len(self._kept) - 1, -1, -1):
            if self._kept[index] is resource:
                del self._kept[index]
                return

    def opened(self, store: object, log: logging.Logger | None = None, *,
               close: Callable[[], object] | None = None,
               threads: Callable[[], Iterable[threading.Thread | None]] | None = None,
               name: str | None = None) -> None:
        """The last step of open: log the recovery report and watch for unclosed
        use (see :meth:`watch`)."""
        if log is not None and self.writer:
            self.report.log(log)
        self.watch(store, close=close, threads=threads, name=name)

    def watch(self, store: object, *, close: Callable[[], object] | None = None,
              threads: Callable[[], Iterable[threading.Thread | None]] | None = None,
              name: str | None = None) -> None:
        """Close ``store`` with a ResourceWarning if it is collected or still open
        at interpreter exit.

        Two ways, one per kind of store (see :mod:`engine.lifetime`): without
        ``close``, the store's ``__del__`` calls :meth:`collected` and the
        finalizer (through a weak reference) covers exit; with ``close`` (a
        keeper's, which shares the store's state), the finalizer closes through
        it, from a thread of its own if the collection happens in one of the
        store's ``threads``.  The warning names ``name`` (default: what and path).
        """
        what = name or self._name()
        self._label = what
        if close is not None:
            keeper_close = close
            owned = threads

            def finish() -> None:
                if owned is not None and threading.current_thread() in set(owned()):
                    threading.Thread(target=keeper_close, name=f"close {what}", daemon=False).start()
                else:
                    keeper_close()

            self._finalizer = warn_unclosed(store, finish, what)
            return
        ref = weakref.ref(store)

        def close_if_alive() -> None:
            owner = ref()
            if owner is not None:
                getattr(owner, "close")()  # noqa: B009 (any store's close)

        self._finalizer = warn_unclosed(store, close_if_alive, what)

    def collected(self, store: Closeable) -> None:
        """From the store's ``__del__``: it is being collected while open, so close
        it now (the finalizer's callback would come too late to reach it)."""
        finalizer = self._finalizer
        if finalizer is None or not finalizer.detach() or os.getpid() != self._pid:
            return  # never opened, closed already, or a forked child's copy (the parent's to close)
        what = self._label or self._name()
        warn_resource(f"unclosed {what}: closing it now (use close() or a with block)", None)
        try:
            store.close()
        except Exception as exc:  # a failed (poisoned) store may fail to close: say so, never raise here
            warn_resource(f"closing {what} failed: {exc!r}", None)

    def _name(self) -> str:
        return f"{self.what} {self.path!r}" if self.writer else f"{self.what} reader {self.path!r}"

    # -- writing ------------------------------------------------------------------
    def check_open(self) -> None:
        """Raise ClosedError once closed."""
        if self.closed:
            raise ClosedError(f"{self.path}: {self.what} is closed")

    def check_writable(self) -> None:
        """Raise unless writes may go on: ClosedError once closed, ConfigError for
        a reader, the latched failure (a fresh copy, typed) after a failed write."""
        if self.closed:
            raise ClosedError(f"{self.path}: {self.what} is closed")
        if not self.writer:
            raise ConfigError(f"{self.path}: the {self.what} was opened read-only")
        self.latch.check()

    def fail(self, exc: BaseException, path: str | None = None, operation: str = "write") -> PoisonedError:
        """Trip the latch with ``exc`` (a failed ``operation`` on ``path``) and
        return what every later write will raise."""
        self.latch.trip(exc, path or self.path, operation)
        failure = self.latch.failure
        assert failure is not None
        return failure

    @property
    def failed(self) -> bool:
        """Whether a write or fsync failed (writes are refused until a reopen)."""
        return self.latch.failure is not None

    # -- the sync policy ----------------------------------------------------------
    def start_sync(
        self,
        sync: Callable[[], None],
        *,
        flush: Callable[[], None] | None = None,
        dirty: Callable[[], bool] | None = None,
        group_delay: float = 0.0,
        name: str | None = None,
    ) -> SyncDriver:
        """Start the driver of this store's sync policy (see :class:`SyncDriver`).
        ``sync`` makes everything written durable; ``flush`` writes what the store
        stages; both are called through weak references by the store's choice."""
        if self.driver is not None:
            raise RuntimeError("the sync driver runs already")
        self.driver = SyncDriver(self.policy, self.latch, self.path, sync=sync, flush=flush, dirty=dirty,
                                 group_delay=group_delay, name=name or f"{self.what}-sync")
        return self.driver

    # -- closing ------------------------------------------------------------------
    def begin_close(self) -> bool:
        """The first step of close: False if closed already (close is idempotent);
        otherwise the store counts as closed from now on (:meth:`check_open`
        refuses new work), the unclosed-use watch ends and the sync thread stops.
        The store then makes its writes durable (unless :attr:`failed`) and calls
        :meth:`finish_close` (in a ``finally``)."""
        if self.closed:
            return False
        self.closed = True
        finalizer = self._finalizer
        if finalizer is not None:
            finalizer.detach()
        driver = self.driver
        if driver is not None:
            driver.stop()
        return True

    def finish_close(self) -> None:
        """The last step of close: every kept resource released, newest first.
        The first error is raised after all are released."""
        first = self.release_kept()
        if first is not None:
            raise first

    def release_kept(self) -> BaseException | None:
        """Release every kept resource, newest first; the first error, if any."""
        first: BaseException | None = None
        while self._kept:
            resource = self._kept.pop()
            try:
                resource.close()
            except BaseException as exc:
                first = first or exc
        return first

    def __repr__(self) -> str:
        state = "closed" if self.closed else ("failed" if self.failed else "open")
        role = "writer" if self.writer else "reader"
        return f"<StoreCore {self.what} {self.path!r} {role} {state} sync={self.policy}>"
