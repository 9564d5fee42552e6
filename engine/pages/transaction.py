"""A page store transaction, and the delta it hands the store when it commits.

A :class:`Transaction` keeps its changes in memory (page images plus the JRNL
ops that journal them) and, on commit, hands the store one
:class:`TransactionDelta`: the ops to journal, the new page images, the byte
ranges and whole pages written, the new page count and free-list head, and the
pages taken off or put on the free list.  The store journals and applies it
(``PageStore.apply_delta``).  The transaction sees the store only through the
narrow :class:`TransactionHost` interface: its state when the transaction began,
and the committed image of a page.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from types import TracebackType
from typing import Protocol

from engine.conventions import require_bytes
from engine.errors import ClosedError, CorruptFileError
from engine.pages import codec, store_codec
from engine.pages.storefile import PageError, check_live, slice_page

Image = bytes | bytearray


@dataclass(slots=True)
class TransactionDelta:
    """What one committed transaction changes, as the store applies it.

    ``ops`` are the JRNL ops (or pieces of ops) in order.  ``images`` holds the new
    image of every page the transaction changed (never mutated afterwards: the
    store keeps them as they are).  ``ranges`` are the store-file byte ranges
    changed in pages not rewritten whole (unmerged; the flush merges them);
    ``whole`` the pages rewritten whole.  ``allocated`` are the pages taken off the
    committed free list, ``freed`` the pages put on the free list and still free
    at the end, oldest first (the list is LIFO).
    """

    ops: list[bytes | bytearray | memoryview]
    images: dict[int, Image]
    ranges: list[tuple[int, int]]
    whole: list[int]
    page_count: int
    free_head: int
    allocated: set[int]
    freed: list[int]


class TransactionHost(Protocol):
    """What a transaction needs of its store (``PageStore`` implements it)."""

    path: str

    def begin_transaction(self) -> tuple[int, int, int, set[int], dict[int, Image]]:
        """Take the store's lock and check it can write; return its page size,
        page count, free-list head, free pages and unflushed page images (the
        last two are the store's own objects: read them, never change them)."""
        ...

    def end_transaction(self) -> None:
        """Release what :meth:`begin_transaction` took."""
        ...

    def committed_page(self, page: int) -> Image:
        """The committed image of ``page`` (read only)."""
        ...

    def apply_delta(self, delta: TransactionDelta) -> None:
        """Journal ``delta`` durably and make it the committed state."""
        ...


# A whole-page MODIFY op's fixed part (17 bytes): u8 type 0x02 | u32 data size |
# u64 page offset | u16 offset in page (0) | u16 image size (the page size).
_WHOLE_MODIFY = struct.Struct("<BIQHH")
assert _WHOLE_MODIFY.size == codec.OP_HEADER.size + codec.MODIFY_HEAD.size == 17


class Transaction:
    """A unit of work: allocations, writes and frees that commit all or nothing.

    Changes are kept in memory (whole page copies plus the journal ops) until
    :meth:`commit`; a rollback just drops them.  Reads see the transaction's own writes.
    """

    def __init__(self, host: TransactionHost) -> None:
        self._host = host
        self.path = host.path
        self.state = "new"

    def __enter__(self) -> Transaction:
        if self.state != "new":
            raise ClosedError(f"{self.path}: a transaction can be entered once")
        ps, page_count, free_head, free, unflushed = self._host.begin_transaction()
        # Page images as this transaction sees them: a bytearray once it was edited
        # in place, or the caller's bytes after a whole-page write (no copy).
        self.pages: dict[int, Image] = {}
        self.ops: list[bytes | bytearray | memoryview] = []
        self.ps = ps
        self.page_count = page_count
        self.free_head = free_head
        self.popped: set[int] = set()  # pages taken off the committed free list
        self.pushed: set[int] = set()  # pages this transaction freed and left free
        self.stack: list[int] = []  # the same pages, oldest first
        # Byte ranges written per page; a page rewritten whole has the one shared
        # list ``whole`` (no range list per page; _touch leaves it alone, and the
        # store writes them as whole pages without merging ranges).
        self.dirty: dict[int, list[tuple[int, int]]] = {}
        self.whole = [(0, ps)]
        self.whole_pages: list[int] = []
        # For write()'s fast path: the committed free set and unflushed images
        # (the store's, unchanged until this transaction commits), and whether a
        # whole page fits in one MODIFY op (65,536-byte pages are split).
        self.free_set = free
        self.unflushed = unflushed
        self.committed = self._host.committed_page
        self.whole_op_size = codec.MODIFY_HEAD.size + 2 * ps if ps <= codec.MAX_MODIFY else 0
        self.state = "open"
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            if exc_type is not None:
                self.rollback()
            elif self.state == "open":
                self.commit()
        finally:
            self._host.end_transaction()

    def _touch(self, page: int, start: int, end: int) -> None:
        ranges = self.dirty.get(page)
        if ranges is None:
            self.dirty[page] = [(start, end)]
        elif ranges is not self.whole:  # a whole page covers any range of it
            ranges.append((start, end))

    def _touch_whole(self, page: int) -> None:
        """Mark ``page`` rewritten whole (it was not touched before in this transaction)."""
        self.dirty[page] = self.whole
        self.whole_pages.append(page)

    # -- helpers -------------------------------------------------------------------------
    def _check_state(self) -> None:
        if self.state != "open":
            if self.state == "new":
                raise ClosedError(f"{self.path}: use the transaction in a with block")
            raise ClosedError(f"{self.path}: transaction already {self.state}")

    def _is_free(self, page: int) -> bool:
        return page in self.pushed or (page in self.free_set and page not in self.popped)

    def _check_live(self, page: object) -> None:
        check_live(self.path, page, self.page_count, isinstance(page, int) and self._is_free(page), self.ps)

    def _live(self, page: int) -> bytearray:
        self._check_state()
        self._check_live(page)
        return self._page(page)

    def _page(self, page: int) -> bytearray:
        """This transaction's image of ``page``, editable in place (copied on first use)."""
        buf = self.pages.get(page)
        if type(buf) is not bytearray:
            buf = bytearray(self.committed(page) if buf is None else buf)
            self.pages[page] = buf
        return buf

    # -- the API -------------------------------------------------------------------------
    def allocate(self) -> int:
        """A new zero-filled page: the free-list head if any, else appended at the end."""
        self._check_state()
        ps = self.ps
        head = self.free_head
        if head:
            page = head // ps
            buf = self._page(page)
            nxt = store_codec.decode_link(buf)
            if nxt % ps or (nxt and not 1 <= nxt // ps <= self.page_count):
                raise CorruptFileError(self.path, head, "a free page link inside the store", str(nxt))
            self.ops.append(codec.encode_alloc(head, head, nxt))
            self.free_head = nxt
            if self.stack:
                assert self.stack[-1] == page
                self.stack.pop()
                self.pushed.discard(page)
            else:
                self.popped.add(page)
            # Zero the reused page through the journal, so undo and redo both see it.
            if any(buf):
                # First and last nonzero byte, found in C (strip), not a Python loop.
                start = ps - len(buf.lstrip(b"\0"))
                end = len(buf.rstrip(b"\0"))
                self.ops.extend(codec.encode_modify(head, start, bytes(buf[start:end]), bytes(end - start)))
                buf[start:end] = bytes(end - start)
                self._touch(page, start, end)
        else:
            page = self.page_count + 1
            self.page_count = page
            self.ops.append(codec.encode_alloc(page * ps, 0, 0))
            self.pages[page] = bytearray(ps)
            self._touch_whole(page)  # redo zero-fills an appended page: write all of it
        return page

    def write(self, page: int, offset: int, data: bytes | bytearray | memoryview) -> None:
        """Write ``data`` at ``offset`` of a live page (must stay inside the page)."""
        buf = self.pages.get(page)
        if buf is None:
            # First touch of this page in the transaction.  The usual case (a
            # committed live page, open transaction) is checked inline; anything
            # else gets the full checks and their typed errors.
            if (
                self.state != "open"
                or type(page) is not int
                or not 0 < page <= self.page_count
                or page in self.pushed
                or (page in self.free_set and page not in self.popped)
            ):
                self._check_state()
                self._check_live(page)
            if offset == 0 and type(data) is bytes and len(data) == self.ps and self.whole_op_size:
                # A whole-page write (the bulk case), no copy at all: the committed
                # image (never mutated: new transactions copy it) is the before
                # image, the caller's immutable bytes become the new image.
                committed = self.unflushed.get(page)
                if committed is None:
                    committed = self.committed(page)
                if committed == data:
                    return
                ps = self.ps
                self.ops += (_WHOLE_MODIFY.pack(codec.OP_MODIFY, self.whole_op_size, page * ps, 0, ps), committed, data)
                self.pages[page] = data
                self.dirty[page] = self.whole  # _touch_whole, inlined on the bulk path
                self.whole_pages.append(page)
                return
        elif page in self.pushed or self.state != "open":
            self._check_state()
            check_live(self.path, page, self.page_count, True, self.ps)  # freed by this transaction
        ps = self.ps
        if type(data) is not bytes:
            require_bytes(data, "data", serializers=False)  # a str: say so (not "without an encoding")
        end = offset + len(data)
        if offset < 0 or end > ps:
            raise PageError(
                self.path, page, page * ps + max(offset, 0), f"write [{offset}:{end}] past the {ps}-byte page"
            )
        data = bytes(data)  # no copy for bytes; the caller may not change it under us
        if buf is None:
            committed = self.unflushed.get(page)
            if committed is None:
                committed = self.committed(page)
            if offset == 0 and end == ps:
                # A whole page that is not ``bytes`` or needs split ops.
                if committed == data:
                    return
                self.ops.extend(codec.modify_parts(page * ps, 0, committed, data))
                self.pages[page] = data
                self._touch_whole(page)
                return
            buf = bytearray(committed)
            self.pages[page] = buf
        elif type(buf) is not bytearray:
            buf = self._page(page)  # a whole-page image edited again: now copied
        with memoryview(buf) as view:
            # One copy, compared as bytes (memcmp; a memoryview's own comparison goes
            # item by item); the buffer changes below: the before-image must not.
            before = bytes(view[offset:end])
        if before == data:
            return
        self.ops.extend(codec.modify_parts(page * ps, offset, before, data))
        buf[offset:end] = data
        self._touch(page, offset, end)

    def image(self, page: int) -> Image:
        """This transaction's image of a live page, whole and not copied (unlike
        :meth:`read`): read only, and only until the next write to ``page``."""
        self._check_state()
        self._check_live(page)
        buf = self.pages.get(page)
        if buf is None:
            buf = self.unflushed.get(page)
            if buf is None:
                buf = self.committed(page)
        return buf

    def read(self, page: int, offset: int = 0, size: int | None = None) -> bytes:
        """Bytes of a live page as this transaction sees them."""
        buf = self.pages.get(page) if isinstance(page, int) else None
        if buf is None:
            buf = self._live(page)
        else:
            self._live(page)
        return slice_page(self.path, page, bytes(buf), offset, size, self.ps)

    def free(self, page: int) -> None:
        """Put a live page on the free list (its first 8 bytes become the link)."""
        buf = self._live(page)
        off = page * self.ps
        link = store_codec.encode_link(self.free_head)
        # The link overwrites the page's first bytes: journal that as a MODIFY too,
        # so undoing the removal can restore them (REMOVE alone records only the head).
        self.ops.extend(codec.encode_modify(off, 0, bytes(buf[:8]), link))
        buf[:8] = link
        self._touch(page, 0, 8)
        self.ops.append(codec.encode_remove(off, self.free_head))
        self.free_head = off
        self.pushed.add(page)
        self.stack.append(page)

    def delta(self) -> TransactionDelta:
        """What this transaction changes, for the store to journal and apply."""
        pages, dirty, ps = self.pages, self.dirty, self.ps
        # ``pages`` holds the touched pages plus any only read; with none of those,
        # it is the images as it is (no copy).
        images = pages if len(pages) == len(dirty) else {page: pages[page] for page in dirty}
        whole = self.whole_pages
        if len(whole) == len(dirty):
            ranges: list[tuple[int, int]] = []
        elif len(dirty) == 1:  # the common small transaction: writes to one page
            ((page, spans),) = dirty.items()
            base = page * ps
            ranges = [(base + a, base + b) for a, b in spans]
        else:
            wr = self.whole
            ranges = [(p * ps + a, p * ps + b) for p, spans in dirty.items() if spans is not wr for a, b in spans]
        return TransactionDelta(
            self.ops, images, ranges, whole, self.page_count, self.free_head, self.popped, self.stack
        )

    def commit(self) -> None:
        """Make the transaction durable (returns after the journal's sync)."""
        self._check_state()
        if self.ops:
            try:
                self._host.apply_delta(self.delta())
            except BaseException:
                self.state = "failed"  # maybe in the journal: reopen and recovery decides
                raise
        self.state = "committed"

    def rollback(self) -> None:
        """Drop every change (nothing reached a file)."""
        if self.state == "open":
            self.state = "rolled back"
            self.pages.clear()
            self.ops.clear()
