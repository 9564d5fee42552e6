"""Closing a store that its user dropped unclosed (the queue, its remote
readers, the page store's writer).

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

The user's object pays nothing for this: its methods run on the shared state
directly, as before.  What a method hands to something long-lived (a thread's
target, a reader's source, a callback) must be the keeper's, never ``self``:
otherwise the user's object stays reachable and is closed only at exit.  The
same holds for an exception the state keeps (its traceback holds the frames it
went through, ``self`` among their locals): keep a :func:`detached` copy.
"""

from __future__ import annotations

import copy
import threading
import weakref
from collections.abc import Callable, Iterable
from typing import TypeVar

from engine.conventions import warn_unclosed

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


__all__ = ["close_when_dropped", "detached", "keeper_of"]
