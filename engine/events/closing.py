"""Closing an event journal the user forgot to close, as Python's files are.

A journal left open is closed, with a :class:`ResourceWarning`, when it is
garbage-collected (:meth:`ClosedWhenDropped.__del__`) or at interpreter exit
(:func:`engine.conventions.warn_unclosed`, whose finalizer reaches the journal
through a weak reference so as not to keep it alive).  Its close then leaves the
files as a clean close does: the next open reports no recovery.

Why ``__del__`` and not only the finalizer: a ``weakref.finalize`` callback runs
after its object is gone, so it could close the journal only through a second
object sharing the journal's state (its ``__dict__``), and an instance whose
``__dict__`` is shared loses CPython's fast attribute access: every write would
be slower (measured: about 4 % for one-event batches).
"""

from __future__ import annotations

import os
import warnings
import weakref

from engine.conventions import warn_unclosed


class ClosedWhenDropped:
    """Mixin of :class:`engine.events.journal.EventJournal`: call
    :meth:`_watch_unclosed` once opened, and :meth:`_unwatch` first in ``close``."""

    #: ``(finalizer, what, pid)`` once watched: one attribute, not three (the
    #: journal is near CPython's 30 shared instance keys, past which every
    #: attribute access is slower).
    _unclosed: tuple[weakref.finalize, str, int] | None = None

    def close(self) -> None:  # pragma: no cover - the journal's
        raise NotImplementedError

    def _watch_unclosed(self, what: str) -> None:
        """Close this object (with a ResourceWarning naming ``what``) if it is
        collected or still open at exit."""
        ref = weakref.ref(self)

        def close_if_alive() -> None:
            journal = ref()
            if journal is not None:
                journal.close()

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
        warnings.warn(f"unclosed {what}: closing it now (use close() or a with block)", ResourceWarning, stacklevel=1)
        try:
            self.close()
        except Exception as exc:  # a failed (poisoned) journal may fail to close: say so, never raise here
            warnings.warn(f"closing {what} failed: {exc!r}", ResourceWarning, stacklevel=1)
