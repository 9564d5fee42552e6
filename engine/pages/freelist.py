"""The writer's free list: the free pages of the committed state, in list order.

The list itself lives in the store file (each free page's first 8 bytes link to
the next, the header holds the head; ``docs/formats/pagestore.md``).  This is
the writer's copy in memory, loaded once at open and kept in step by every
commit and shrink, so an allocation or a liveness check never reads the file.
"""

from __future__ import annotations

from collections.abc import Iterable

from engine.pages.recovery import ReadAt, walk_free_list
from engine.pages.store_codec import StoreHeader
from engine.pages.storefile import free_tail_prefix


class FreeList:
    """The free page ids in free-list order (the next allocation first), and the
    same ids as a set.

    :attr:`members` is the one set object for the store's whole life (changed in
    place), so a transaction may hold it for its fast checks: read it, never
    change it.
    """

    __slots__ = ("_order", "members")

    def __init__(self, order: Iterable[int]) -> None:
        self._order = list(order)
        #: The free pages as a set (read only for everyone but this class).
        self.members: set[int] = set(self._order)

    @classmethod
    def load(cls, path: str, header: StoreHeader, read_at: ReadAt) -> FreeList:
        """Walk the list in the store file (CorruptFileError on a link out of
        range or a cycle)."""
        return cls(walk_free_list(path, header, read_at))

    def __len__(self) -> int:
        return len(self._order)

    def pages(self) -> list[int]:
        """The free page ids, in list order (a copy)."""
        return list(self._order)

    def same_as(self, order: list[int]) -> bool:
        """Whether ``order`` (a walk of the list on disk) is this list."""
        return order == self._order and set(order) == self.members

    def apply(self, allocated: set[int], freed: list[int]) -> None:
        """A commit: ``allocated`` were taken off the head of the list, ``freed``
        (oldest first) pushed onto it.  LIFO: the pages this transaction freed
        (newest first), then what it left of the old list."""
        self.members.difference_update(allocated)
        self.members.update(freed)
        self._order = freed[::-1] + self._order[len(allocated) :]

    def tail_run(self, page_count: int) -> int:
        """How many of the list's first entries are exactly the last pages of the
        store (pages ``page_count - n + 1 .. page_count`` in any order): what a
        shrink can cut off with one header write."""
        return free_tail_prefix(self._order, page_count)

    def head_after(self, drop: int, page_size: int) -> int:
        """The list's head offset once its first ``drop`` entries are gone (0: empty)."""
        rest = self._order[drop:]
        return rest[0] * page_size if rest else 0

    def drop(self, count: int) -> None:
        """Forget the first ``count`` entries (a shrink cut those pages off)."""
        del self._order[:count]
        self.members.clear()
        self.members.update(self._order)
