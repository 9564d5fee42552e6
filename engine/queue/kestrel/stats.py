"""Kestrel's statistics: ``stats``, ``dump_stats``, and memcached's ``stats items``
and ``stats cachedump`` (what ``memcdump`` asks), from the open queues.

Every Kestrel queue name gets every figure Kestrel's ``stats`` prints
(:data:`FIGURES`, in its order), with a number: a fanout reader ``q+r`` is
Kestrel's fanout queue; the bare ``q`` is the default reader, or, while the
queue has no reader at all, the whole queue (every item in it is what its
first reader will get), or, when it has fanout readers only, a default reader
as it would start now (at the tail: nothing).  ``items`` and ``bytes`` count
what waits, not the reads open on connections (``open_transactions``), as in
Kestrel.  Figures only a process holding a reader knows (items it expired or
discarded) count what the server's own readers did since it opened them.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.fs import FileSystem
from engine.queue.diagnose import backlog_bytes
from engine.queue.kestrel.queues import OpenQueue
from engine.queue.state import ReaderState

#: Kestrel's per-queue figures, in the order its ``stats`` prints them; ``age_msec``
#: (an admin gauge of Kestrel's, the same as ``age``) follows, then ``children``
#: on a queue with fanout readers.
FIGURES = (
    "items", "bytes", "total_items", "logsize", "expired_items", "mem_items", "mem_bytes", "age", "discarded",
    "waiters", "open_transactions", "transactions", "canceled_transactions", "total_flushes", "journal_rewrites",
    "journal_rotations",
)


@dataclass(frozen=True)
class QueueFigures:
    """One Kestrel queue name's figures (``name``: ``q`` or ``q+r``)."""

    name: str
    figures: list[tuple[str, object]]
    items: int
    bytes: int
    #: Seconds the oldest waiting item has waited (None: nothing waits, or unknown).
    oldest_age_s: float | None


@dataclass(frozen=True)
class QueueReport:
    """:func:`queue_figures` of one queue: its names' figures, and how many
    readers its handle retired as idle (Kestrel's ``queue_expires``)."""

    names: list[QueueFigures]
    expired_readers: int


def queue_figures(slot: OpenQueue, fs: FileSystem, directory: str) -> QueueReport:
    """In the pool: the figures of every Kestrel name of ``slot``'s queue (the
    default reader first, then fanout readers by name)."""
    slot.observe_files()
    stats = slot.queue.stats()
    entries = {str(entry["reader"]): entry for entry in _list(stats["readers"])}
    tail = _int(stats["tail_id"])
    shared = {
        "total_items": max(0, tail - slot.tail_at_open),
        "logsize": _int(stats["journal_bytes"]),
        "journal_rotations": slot.rotations,
    }
    if "" not in entries:
        if entries:  # fanout readers only: a default reader made now starts at the tail
            entries[""] = {"items": 0, "backlog_bytes": 0, "oldest_age_s": None}
        else:  # no reader at all: the first one will get every item
            size = backlog_bytes(fs, directory, slot.name, ReaderState(0, ()), tail)
            entries[""] = {"items": len(slot.queue), "backlog_bytes": size, "oldest_age_s": None}
    fanout = sorted(name for name in entries if name)
    out = []
    for reader in ["", *fanout]:
        entry = entries[reader]
        counters = slot.counters(reader)
        items = max(0, _int(entry["items"]) - counters["open_transactions"])
        size = max(0, _int(entry["backlog_bytes"]) - counters["open_bytes"])
        values: dict[str, object] = {
            **shared,
            "items": items,
            "bytes": size,
            "expired_items": _int(entry.get("expired")),
            # engine keeps no queue in memory: a reader reads the journal files
            "mem_items": 0,
            "mem_bytes": 0,
            "age": counters["age"] if items else 0,
            "discarded": _int(entry.get("discarded")),
            "waiters": counters["waiters"],
            "open_transactions": counters["open_transactions"],
            "transactions": counters["transactions"],
            "canceled_transactions": counters["canceled_transactions"],
            "total_flushes": counters["total_flushes"],
            # engine never rewrites a journal: files are deleted whole once passed
            "journal_rewrites": 0,
        }
        figures = [(name, values[name]) for name in FIGURES]
        figures.append(("age_msec", values["age"]))
        if not reader and fanout:
            figures.append(("children", ",".join(f"{slot.name}+{r}" for r in fanout)))
        oldest = entry.get("oldest_age_s")
        out.append(QueueFigures(
            f"{slot.name}+{reader}" if reader else slot.name,
            figures,
            items,
            size,
            None if not isinstance(oldest, (int, float)) else float(oldest),
        ))
    return QueueReport(out, _int(stats.get("readers_expired")))


def items_stats(names: list[QueueFigures]) -> list[tuple[str, object]]:
    """memcached's ``stats items`` over the queues, as one slab class (1) holding
    one entry per Kestrel queue name: ``number`` of them and the ``age`` in
    seconds of the oldest waiting item (what ``memcdump`` and memcached-tool read);
    nothing when there is no queue, as memcached lists only slabs in use."""
    if not names:
        return []
    ages = [n.oldest_age_s for n in names if n.oldest_age_s is not None]
    return [("items:1:number", len(names)), ("items:1:age", int(max(ages, default=0.0)))]


def cachedump(names: list[QueueFigures], slab: int, limit: int) -> list[tuple[str, int]]:
    """memcached's ``stats cachedump <slab> <limit>``: every Kestrel queue name with
    the bytes waiting in it, in slab 1 (``limit`` 0: all); other slabs are empty."""
    if slab != 1:
        return []
    entries = [(n.name, n.bytes) for n in names]
    return entries[:limit] if limit else entries


def _list(value: object) -> list[dict[str, object]]:
    assert isinstance(value, list)
    return value


def _int(value: object) -> int:
    """A figure as an int (None, what a reader file cannot tell, counts 0)."""
    if value is None:
        return 0
    assert isinstance(value, (int, float))
    return int(value)
