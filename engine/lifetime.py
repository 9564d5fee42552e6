"""Closing a store that its user dropped unclosed.

Two ways, one per kind of store: a *keeper* (below) for the queue and its
remote readers, whose background threads and readers need the whole object;
:class:`ClosedWhenDropped` (``__del__``) for the other stores, whose helpers
hold them through weak references (:func:`weak_call`): the page store's writer,
the stream journal, the event journal, the append log.

The keeper:

``weakref.finalize`` can close an object only through something that does not
keep that object alive.  A queue's state is large and keeps changing (the writer
file, the staged puts, the readers, the files), and its background threads and
its readers need all of it.  So the object ``open()`` returns and a second
object, its *keeper*, share one state: one ``__dict__`` (Python's "Borg" idiom).
The background threads, the readers and the finalizer hold the keeper; nothing
holds the object the user got but the user.  When the user's last reference goes
(``del q``, a function returning, or ``gc.collect()`` for a cycle), the finalizer
emits a ResourceWarning and closes the keeper: the staged puts are written and
synced, the readers checkpointed, the threads stopped and joined, the locks
released; the next open reports no recovery.  At interpreter exit it does the
same for anything still open.

The user's object pays for this only in attribute reads: a shared ``__dict__``
turns off CPython's inline attribute storage (within noise on the queue's put;
where it counts, use :class:`ClosedWhenDropped`).  What a method hands to something long-lived (a thread's
target, a reader's source, a callback) must be the keeper's, never ``self``:
otherwise the user's object stays reachable and is closed only at exit.  The
same holds for an exception the state keeps (its traceback holds the frames it
went through, ``self`` among their locals): keep a :func:`detached` copy.
"""

from __future__ import annotations

import copy
import os
import threading
import weakref
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from engine.conventions import warn_resource, warn_unclosed
from engine.errors import ClosedError

_T = TypeVar("_T")


def keeper_of(owner: _T) -> _T:
    """A second object of ``owner``'s class sharing ``owner``'s state (``__dict__``)."""
    keeper = object.__new__(type(owner))
    setattr(keeper, "__dict__", owner.__dict__)  # noqa: B010 (the same dict, not a copy)
    return keeper


def close_when_dropped(
    owner: object, close: Callable[[], object], threads: Callable[[], Iterable[threading.Thread | None]], what: str
) -> weakref.finalize:
    """``warn_unclosed`` for ``owner``, closing with ``close`` (the keeper's).

    A garbage cycle holding ``owner`` may be collected by whichever thread
    allocates at that moment, one of the keeper's own ``threads()`` included, which
    may hold a lock ``close`` takes (a checkpoint in progress): from those threads
    the close runs in a thread of its own (not a daemon, so exit waits for it).
    """

    def finish() -> None:
        if threading.current_thread() in set(threads()):
            threading.Thread(target=close, name=f"close {what}", daemon=False).start()
        else:
            close()

    return warn_unclosed(owner, finish, what)


def detached(exc: BaseException) -> BaseException:
    """A copy of ``exc`` to keep, without its traceback (nor cause or context).

    A kept exception's traceback holds the frames it went through and their
    locals, the object the user holds among them, which would then stay alive
    until exit.  (``exc`` itself in the rare case it cannot be copied.)
    """
    try:
        return copy.copy(exc)
    except Exception:
        return exc



class ClosedWhenDropped:
    """Mixin for a store that closes itself when dropped without the cost of a
    keeper (the event journal, the append log's views): call
    :meth:`_watch_unclosed` once opened, and :meth:`_unwatch` first in ``close``.

    A ``weakref.finalize`` callback runs after its object is gone, so it could
    close only through a second object sharing the state (a keeper), and an
    instance whose ``__dict__`` is shared (or merely asked for) loses CPython's
    inline attribute storage: every attribute read is slower (measured: 4 % on the
    event journal's one-event writes, 16 % on the append log's single append).
    So the close happens in ``__del__`` when the object is collected, and the
    finalizer (through a weak reference) only covers interpreter exit.  What the
    object hands to helpers must not refer back to it (weak references), or it is
    never collected before exit."""

    #: ``(finalizer, what, pid)`` once watched: one attribute, not three (an
    #: instance past CPython's 30 shared keys gets slower attribute access).
    _unclosed: tuple[weakref.finalize, str, int] | None = None

    def close(self) -> None:  # pragma: no cover - the store's
        raise NotImplementedError

    def _watch_unclosed(self, what: str) -> None:
        """Close this object (with a ResourceWarning naming ``what``) if it is
        collected or still open at exit."""
        ref = weakref.ref(self)

        def close_if_alive() -> None:
            owner = ref()
            if owner is not None:
                owner.close()

        self._unclosed = (warn_unclosed(self, close_if_alive, what), what, os.getpid())

    def _unwatch(self) -> None:
        """Closed by its owner: nothing to do at collection or exit."""
        if self._unclosed is not None:
            self._unclosed[0].detach()

    def __del__(self) -> None:
        # Collected while open.  The finalizer's callback would come after this and
        # could no longer reach the object: the close happens here.
        if self._unclosed is None:
            return  # never fully opened
        finalizer, what, pid = self._unclosed
        if not finalizer.detach() or os.getpid() != pid:
            return  # closed, or a forked child's copy (its parent's to close)
        warn_resource(f"unclosed {what}: closing it now (use close() or a with block)", None)
        try:
            self.close()
        except Exception as exc:  # a failed (poisoned) store may fail to close: say so, never raise here
            warn_resource(f"closing {what} failed: {exc!r}", None)


def weak_call(method: Callable[..., Any], *, required: bool = False) -> Callable[..., Any]:
    """``method`` (a bound method) called through a weak reference: the callable
    kept by a helper (group commit, background syncer, segment writer) does not
    keep its object alive, so a store dropped without ``close()`` can be collected
    (and closed, with a ResourceWarning: :class:`ClosedWhenDropped`).  Once the
    object is gone the call returns None, or raises ClosedError when ``required``."""
    ref = weakref.WeakMethod(method)

    def call(*args: Any) -> Any:
        bound = ref()
        if bound is None:
            if required:
                raise ClosedError("the store was collected without close()")
            return None
        return bound(*args)

    return call


__all__ = ["ClosedWhenDropped", "close_when_dropped", "detached", "keeper_of", "weak_call"]
