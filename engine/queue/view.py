"""What the queue's helpers see of a queue and of its readers (protocols only).

:mod:`engine.queue.limits` (``max_items`` / ``max_size``) and
:mod:`engine.queue.pinning` (retiring files, pin warnings, ``reader_expiry``,
``stats()``) are handed the :class:`~engine.queue.queue.Queue` they serve and
work through these faces of it, so they import nothing of the queue's module
(no import cycle) and read none of its private state.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Protocol, TypedDict

from engine.fs import FileSystem
from engine.queue.config import QueueConfig
from engine.queue.segments import Segment


class ReaderStats(TypedDict, total=False):
    """One reader's figures (``Reader.stats()``; an entry of ``Queue.stats()["readers"]``).
    A figure only the process holding the reader knows is None from the files."""

    reader: str
    head: int
    items: int
    backlog_bytes: int
    open_reads: int | None
    done_out_of_order: int
    oldest_age_s: float | None
    last_checkpoint_ns: int | None
    expired: int | None
    discarded: int | None
    gets: int | None
    confirms: int | None
    aborts: int | None
    consumers: int | None
    pinned_files: int
    pinned_bytes: int


class QueueStats(TypedDict):
    """``Queue.stats()``: the queue's figures and one entry per reader on disk."""

    queue: str
    tail_id: int
    journal_files: int
    journal_bytes: int
    readers: list[ReaderStats]
    pin_warning: float | None
    reader_expiry_s: float | None
    readers_expired: int
    warnings: list[dict[str, object]]


class LiveReader(Protocol):
    """A reader open in the queue's process, as the helpers use it."""

    name: str
    path: str

    @property
    def durable_head(self) -> int: ...

    @property
    def closed(self) -> bool: ...

    def __len__(self) -> int: ...

    def stats(self) -> ReaderStats: ...

    def cursor_position(self) -> tuple[str | None, int, int]: ...

    def discard_oldest(self) -> bool: ...


class QueueView(Protocol):
    """A queue (a producer's ``Queue``), as the helpers use it."""

    fs: FileSystem
    directory: str
    name: str
    config: QueueConfig
    deleted_files: list[str]

    @property
    def clock(self) -> Callable[[], float]: ...

    @property
    def staged_bytes(self) -> int: ...

    @property
    def written_position(self) -> int: ...

    def now_ms(self) -> int: ...

    def current_tail(self) -> int: ...

    def files_now(self) -> tuple[list[Segment], int]: ...

    def live_readers(self) -> Mapping[str, LiveReader]: ...

    def forget_reader(self, name: str) -> None: ...

    def reader_names(self) -> list[str]: ...

    def journal_bytes(self) -> int: ...

    def flush(self) -> None: ...
