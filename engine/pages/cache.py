"""A bounded LRU cache of committed page images (the writer's read path)."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable


class PageCache:
    """Up to ``capacity`` pages, least recently used evicted first.

    Holds committed bytes only; a transaction's uncommitted writes live in the
    transaction.  ``hits``/``misses`` are kept for tests and ``engine pages stats``.
    """

    def __init__(self, capacity: int) -> None:
        self.capacity = max(0, capacity)
        self._pages: OrderedDict[int, bytes | bytearray] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def get(self, page: int) -> bytes | bytearray | None:
        pages = self._pages
        data = pages.get(page)
        if data is None:  # a miss without an exception (a bulk commit's cold pages miss often)
            self.misses += 1
            return None
        pages.move_to_end(page)
        self.hits += 1
        return data

    def put(self, page: int, data: bytes | bytearray) -> None:
        if self.capacity == 0:
            return
        self._pages[page] = data
        self._pages.move_to_end(page)
        while len(self._pages) > self.capacity:
            self._pages.popitem(last=False)

    def put_many(self, images: dict[int, bytes | bytearray]) -> None:
        """:meth:`put` of every item, in order (one C-level update, not a loop)."""
        if self.capacity == 0:
            return
        pages = self._pages
        # (a loop over the few images, not ``keys() &``: that copies every cached key)
        for page in [page for page in images if page in pages]:  # usually none: they were discarded
            del pages[page]  # re-inserted below, as the most recent
        pages.update(images)
        while len(pages) > self.capacity:
            pages.popitem(last=False)

    def discard(self, page: int) -> None:
        self._pages.pop(page, None)

    def discard_many(self, pages: Iterable[int]) -> None:
        """:meth:`discard` of each of ``pages`` (only those cached are looked at)."""
        cached = self._pages
        pop = cached.pop
        for page in pages:  # not ``cached.keys() & pages``: that copies every cached key
            pop(page, None)

    def clear(self) -> None:
        self._pages.clear()

    def items(self) -> list[tuple[int, bytes | bytearray]]:
        return list(self._pages.items())

    def __len__(self) -> int:
        return len(self._pages)
