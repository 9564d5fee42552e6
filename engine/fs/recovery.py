"""What opening a store repaired: one report type for every store.

Every store's ``open()`` leaves a :class:`RecoveryReport` in ``store.recovery``.
It lists each repair as a :class:`RecoveryAction`: what was done (``kind``), to
which file, where, and how much.  A clean open has no actions.  The report is
logged the same way by every store (:meth:`RecoveryReport.log`: one warning line
on the ``engine.<store>`` logger when anything was repaired), shown by the CLI,
and given as a dict to ``--json``.

The kinds:

* ``cut`` – bytes of a torn or zeroed tail removed (``offset`` is the new end);
* ``redone`` – committed work replayed from a log (journal transactions);
* ``undone`` – uncommitted work rolled back;
* ``rebuilt`` – derived data written again from the primary data (index entries,
  checksums, a meta block);
* ``dropped`` – derived data that pointed past the primary data, removed;
* ``removed`` – whole files left by an interrupted operation, deleted;
* ``reset`` – a link or header field put back to a consistent value.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, field

#: The kinds of repair, in the order a report lists them.
KINDS = ("cut", "redone", "undone", "rebuilt", "dropped", "removed", "reset")


@dataclass(frozen=True)
class RecoveryAction:
    """One repair: ``count`` ``unit`` (bytes, records, transactions, entries,
    files, links) of ``path``, at ``offset`` where that means something."""

    kind: str
    path: str
    count: int
    unit: str
    offset: int | None = None
    detail: str = ""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown recovery kind {self.kind!r} (one of {', '.join(KINDS)})")

    def __str__(self) -> str:
        where = f" at offset {self.offset}" if self.offset is not None else ""
        why = f" ({self.detail})" if self.detail else ""
        return f"{self.kind} {self.count} {self.unit} of {self.path}{where}{why}"


@dataclass
class RecoveryReport:
    """Everything one open repaired; empty (``repaired`` is False) when the store
    was closed cleanly or opened read-only."""

    path: str = ""
    actions: list[RecoveryAction] = field(default_factory=list)

    def add(
        self, kind: str, path: str, count: int, unit: str, *, offset: int | None = None, detail: str = ""
    ) -> RecoveryAction:
        """Record one repair (nothing is recorded for a count of 0)."""
        action = RecoveryAction(kind, path, int(count), unit, offset, detail)
        if count:
            self.actions.append(action)
        return action

    def cut(self, path: str, offset: int, nbytes: int, detail: str = "") -> None:
        """``nbytes`` torn bytes cut off ``path``; ``offset`` is its new end."""
        self.add("cut", path, nbytes, "bytes", offset=offset, detail=detail)

    @property
    def repaired(self) -> bool:
        return bool(self.actions)

    def total(self, kind: str, unit: str | None = None) -> int:
        """The sum of the counts of every action of ``kind`` (and ``unit``)."""
        return sum(a.count for a in self.actions if a.kind == kind and (unit is None or a.unit == unit))

    def of(self, kind: str) -> list[RecoveryAction]:
        """The actions of one kind, in the order they happened."""
        return [a for a in self.actions if a.kind == kind]

    def summary(self) -> str:
        """One line: ``"clean"`` or the actions joined by ``"; "``."""
        return "; ".join(map(str, self.actions)) if self.actions else "clean"

    def to_dict(self) -> dict[str, object]:
        """A JSON-ready form (``--json`` output)."""
        return {"path": self.path, "repaired": self.repaired, "actions": [asdict(a) for a in self.actions]}

    def log(self, logger: logging.Logger) -> None:
        """One warning line when anything was repaired, nothing otherwise."""
        if self.actions:
            logger.warning("%s: recovered: %s", self.path, self.summary())

    def __str__(self) -> str:
        return self.summary()
