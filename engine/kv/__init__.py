"""An ordered key-value store on the page store: B+trees in JRNL-protected transactions.

``KV.open(path)`` gives a dict-like store of ``bytes`` keys (in bytewise order)
and ``bytes`` values of any size, with named trees (``kv.tree("users")``),
atomic multi-key transactions (``with kv.transaction() as tx:``), lazy range and
prefix scans, snapshot readers in other processes (``KV.open_reader(path)``),
consistent backups and compaction.  See ``docs/guide/kv.md`` and
``docs/formats/kv.md``.
"""

from __future__ import annotations

from engine.kv.api import TreeView
from engine.kv.reader import KVReader
from engine.kv.store import KV, KVTransaction

__all__ = ["KV", "KVReader", "KVTransaction", "TreeView"]
