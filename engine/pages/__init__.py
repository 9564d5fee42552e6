"""Transactional page store protected by the JRNL write-ahead log.

``PageStore.open(path)`` gives a file of fixed-size pages with a free list;
``with store.transaction() as tx:`` allocates, writes and frees pages atomically and
durably.  ``PageStore.open_reader(path)``
gives a :class:`PageReader` for readers beside the writer.  See
``docs/guide/pages.md`` and ``docs/formats/pagestore.md`` / ``jrnl.md``.
"""

from __future__ import annotations

from engine.fs.recovery import RecoveryReport
from engine.pages.journal import journal_path
from engine.pages.reader import PageReader
from engine.pages.store import PageStore
from engine.pages.storefile import PageError, RecoveryNeededError
from engine.pages.transaction import Transaction, TransactionDelta

__all__ = [
    "PageError",
    "PageReader",
    "PageStore",
    "RecoveryNeededError",
    "RecoveryReport",
    "Transaction",
    "TransactionDelta",
    "journal_path",
]
