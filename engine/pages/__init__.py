"""Transactional page store protected by the JRNL write-ahead log (seed 001).

``PageStore.open(path)`` gives a file of fixed-size pages with a free list;
``with store.transaction() as tx:`` allocates, writes and frees pages atomically and
durably.  See ``docs/guide/pages.md`` and ``docs/formats/pagestore.md`` / ``jrnl.md``.
"""

from __future__ import annotations

from engine.pages.journal import journal_path
from engine.pages.store import PageError, PageStore, RecoveryNeededError, RecoveryReport, Transaction

__all__ = ["PageError", "PageStore", "RecoveryNeededError", "RecoveryReport", "Transaction", "journal_path"]
