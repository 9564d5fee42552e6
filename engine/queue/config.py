"""Queue configuration: Kestrel's per-queue knobs, with its defaults where it had them."""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass, fields
from typing import Any

from engine.conventions import Serializer, duration_seconds
from engine.conventions import serializer as parse_serializer
from engine.errors import ConfigError
from engine.fs import SyncPolicy
from engine.queue import naming
from engine.queue.codec import DEFAULT_MAX_ITEM_SIZE, LARGEST_ITEM


@dataclass(frozen=True)
class QueueConfig:
    """All knobs of a queue.  Sizes in bytes; durations are a ``datetime.timedelta``
    or seconds (stored as float seconds, see :mod:`engine.conventions`).

    ``sync``: "always" (put returns once durable; concurrent puts share fsyncs),
    a period (seconds or timedelta: background fsync), or "never".
    ``serializer``: None (bytes), "pickle", "json" or a (dumps, loads) pair.
    ``expired``: "drop" or the name of a queue in the same directory to move them to.
    ``error_queue`` + ``max_errors``: an item aborted ``max_errors`` times moves there.
    ``pin_warning``: warn (``engine.queue`` logger, ``stats()["warnings"]``) when one
    reader pins more than this share of the journal's bytes (None: never).
    ``reader_expiry``: retire a reader nobody holds that has not checkpointed for
    this long and has items waiting longer (None, the default: never).  See
    :mod:`engine.queue.pinning`.
    """

    journal_size: int = 16 * 1024 * 1024
    sync: Any = "always"
    checkpoint_interval: float = 1.0
    max_items: int | None = None
    max_size: int | None = None
    max_item_size: int = DEFAULT_MAX_ITEM_SIZE
    max_age: float | None = None
    discard_old_when_full: bool = False
    open_read_timeout: float | None = None
    max_errors: int | None = None
    error_queue: str | None = None
    expired: str = "drop"
    archive_dir: str | None = None
    poll_interval: float = 0.005  # cross-process readers: how often to look for new data
    group_commit_delay: float = 0.0
    serializer: Any = None
    pin_warning: float | None = 0.5
    reader_expiry: float | None = None

    @property
    def sync_policy(self) -> SyncPolicy:
        return SyncPolicy.parse(self.sync)

    @property
    def payload_serializer(self) -> Serializer | None:
        """The parsed ``serializer`` (None: payloads are bytes)."""
        return parse_serializer(self.serializer)

    def __post_init__(self) -> None:
        # Durations: timedelta or seconds, normalized to float seconds (messages
        # name the option as the user typed it).
        if isinstance(self.sync, _dt.timedelta):
            object.__setattr__(self, "sync", duration_seconds(self.sync, "sync"))
        for name in ("checkpoint_interval", "poll_interval"):
            object.__setattr__(self, name, duration_seconds(getattr(self, name), name))
        for name in ("max_age", "open_read_timeout", "reader_expiry"):
            object.__setattr__(self, name, duration_seconds(getattr(self, name), name, allow_none=True))
        object.__setattr__(
            self, "group_commit_delay", duration_seconds(self.group_commit_delay, "group_commit_delay", allow_zero=True)
        )
        share = self.pin_warning
        if share is not None and (isinstance(share, bool) or not isinstance(share, (int, float)) or not 0 < share <= 1):
            raise ConfigError(f"pin_warning must be a share of the journal in (0, 1] or None, not {share!r}")
        parse_serializer(self.serializer)  # raises ConfigError / TypeError
        SyncPolicy.parse(self.sync)  # raises ConfigError
        if self.journal_size < 64:
            raise ConfigError("journal_size must be at least 64 bytes")
        if isinstance(self.max_item_size, bool) or not isinstance(self.max_item_size, int) or self.max_item_size <= 0:
            raise ConfigError(f"max_item_size must be a number of bytes >= 1, not {self.max_item_size!r}")
        if self.max_item_size > LARGEST_ITEM:
            raise ConfigError(
                f"max_item_size {self.max_item_size} is over {LARGEST_ITEM} bytes (16 MiB), the largest item "
                "libkestrel's readers accept: a bigger one makes them report 'item too large' and erase the "
                "file it is in, so no queue of this format may hold one"
            )
        for name in ("max_items", "max_size", "max_errors"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ConfigError(f"{name} must be positive")
        if self.max_errors is not None and self.error_queue is None:
            pass  # items over max_errors are dropped (logged)

    def check_names(self, queue: str) -> None:
        """ConfigError unless ``queue`` is a valid queue name (no collision with
        another queue's files, short enough) and the ``expired`` / ``error_queue``
        targets are valid too and not ``queue`` itself."""
        naming.check_queue_name(queue)
        naming.check_target(queue, "expired", self.expired)
        naming.check_target(queue, "error_queue", self.error_queue)

    @classmethod
    def from_kwargs(cls, **kwargs: Any) -> QueueConfig:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(kwargs) - known)
        if unknown:
            raise ConfigError(f"unknown queue option(s): {', '.join(unknown)}")
        return cls(**kwargs)
